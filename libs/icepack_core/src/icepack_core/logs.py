"""structlog set-up: JSON lines (or console), trace ids attached, secrets redacted.

Every log event carries a stable ``event`` key (``job.claimed``, ``events.consumed``...) plus
service/table/job context bound by the caller.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog
from opentelemetry import trace

_SECRET_KEY = re.compile(
    r"pass(word)?|secret|token|credential|authorization|api[_-]?key|dsn|database_url", re.I
)
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]+:)(?P<pw>[^@\s]+)(?=@)", re.I)
REDACTED = "***"


def redact_text(text: str) -> str:
    """``text`` with any ``scheme://user:password@`` password replaced."""
    return _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED, text)


def _redact(value: Any, key: str = "") -> Any:
    if key and _SECRET_KEY.search(key):
        return REDACTED
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: _redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact(v) for v in value]
    return value


def redact_secrets(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: mask values under secret-looking keys and passwords in URLs."""
    for key in list(event_dict):
        event_dict[key] = _redact(event_dict[key], key)
    return event_dict


def add_trace_ids(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    span = trace.get_current_span().get_span_context()
    if span.is_valid:
        event_dict["trace_id"] = format(span.trace_id, "032x")
        event_dict["span_id"] = format(span.span_id, "016x")
    return event_dict


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the time of the write, not at set-up: test
    runners and CLI runners swap and close their captured streams."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def setup_logging(service: str, level: str = "info", fmt: str = "json") -> None:
    """Configure structlog (and the stdlib root logger) for one process."""
    log_level = getattr(logging, level.upper())
    handler = logging.StreamHandler(_CurrentStderr())
    logging.basicConfig(handlers=[handler], level=log_level, format="%(message)s", force=True)
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            add_trace_ids,
            structlog.processors.format_exc_info,
            redact_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(log_level),
        logger_factory=structlog.PrintLoggerFactory(_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.bind_contextvars(service=service)
