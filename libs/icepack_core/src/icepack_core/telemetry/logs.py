"""structlog set-up: JSON lines (or console), trace ids attached, secrets redacted.

Every log event carries a stable ``event`` key (``job.claimed``, ``events.consumed``...) plus
service/table/job context bound by the caller.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

import structlog
from opentelemetry import trace

# Keys whose values are secrets wherever they appear: structlog keys, JSON object keys, conf keys
# (``fs.azure.account.key.<account>``, ``s3.secret-access-key``, ``header.Authorization``).
_SECRET_KEY = re.compile(
    r"pass(word|wd)?|pwd|secret|token|credential|authorization|api[_-]?key|account[._-]key"
    r"|access[_-]?key|private[_-]?key|signature|\bsig\b|dsn|database_url",
    re.I,
)
# Keys that look secret but are not (a literal "token" field naming the token's id...).
_NOT_SECRET_KEY = re.compile(r"^(s3[._-])?access[_-]?key[_-]?id$|token_id$|key_id$", re.I)
# scheme://user:PASSWORD@host
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]+:)(?P<pw>[^@\s]+)(?=@)", re.I)
# Authorization header values: "Bearer abc", "Basic dXNlcjpwdw==".
_AUTH_SCHEME = re.compile(r"(?P<head>\b(?:Bearer|Basic)\s+)(?P<value>[A-Za-z0-9._~+/=-]{8,})", re.I)
# key=value, key: value in quotes, ?key=value&, ;key=value (Spark Connect's ;token=...).
_KEY_VALUE = re.compile(
    r"(?P<key>[A-Za-z0-9_.-]*(?:pass(?:word|wd)?|pwd|secret|token|credential|authorization"
    r"|api[_-]?key|account\.key[A-Za-z0-9_.-]*|access[_-]?key|private[_-]?key|signature)"
    r"[A-Za-z0-9_.-]*)"
    r"(?P<sep>\s*=\s*|[\"']\s*[:=]\s*[\"']?|\s*:\s*[\"'])"
    r"(?P<value>[^\s&;,'\"})\]]+)",
    re.I,
)
# A word every _KEY_VALUE key contains. _KEY_VALUE's leading character class backtracks over
# each run of name characters (about 1 ms for a 120-character path), so it only runs on text
# that has such a word; without one it cannot match.
_KEY_WORD = re.compile(
    r"pass|pwd|secret|token|credential|authorization|api[_-]?key|account\.key|access[_-]?key"
    r"|private[_-]?key|signature",
    re.I,
)
REDACTED = "***"
# Secret values from the configuration (``register_secrets``): masked wherever they appear,
# whatever text carries them (a driver's error message, a Spark exception, a span attribute).
_KNOWN: set[str] = set()
_MIN_SECRET = 6  # shorter values would mask ordinary words


def register_secrets(values: Iterable[str | None]) -> None:
    """Remember secret values so ``redact_text`` masks them anywhere (process-wide)."""
    for value in values:
        if value and len(value) >= _MIN_SECRET:
            _KNOWN.add(value)


def _mask_key_value(match: re.Match[str]) -> str:
    if _NOT_SECRET_KEY.search(match.group("key")) or match.group("value") == REDACTED:
        return match.group(0)
    return match.group("key") + match.group("sep") + REDACTED


def redact_text(text: str) -> str:
    """``text`` with secrets masked: configured secret values, URL passwords, ``?password=``/
    ``;token=`` style parameters, ``key=value``/``"key": "value"`` pairs whose key names a
    secret (account keys, S3 secret keys, credentials, tokens), and Authorization values.

    The one redaction every sink uses: log lines, job errors, action SQL and output, event
    payloads and span attributes.
    """
    # Shapes first: a configured secret that happens to be a word of a key ("secret" in
    # ``fs.s3a.secret.key=...``) must not hide the key from the key=value rule.
    if "@" in text:  # _URL_PASSWORD needs one (and backtracks like _KEY_VALUE)
        text = _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED, text)
    text = _AUTH_SCHEME.sub(lambda m: m.group("head") + REDACTED, text)
    if _KEY_WORD.search(text):
        text = _KEY_VALUE.sub(_mask_key_value, text)
    for secret in sorted(_KNOWN, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def secret_key(key: str) -> bool:
    """Whether a key (log field, JSON key, conf key, URL parameter) names a secret."""
    return bool(_SECRET_KEY.search(key)) and not _NOT_SECRET_KEY.search(key)


def redact(value: Any, key: str = "") -> Any:
    """``value`` (JSON-like: dicts, lists, strings, numbers) with every secret masked: values
    under secret-looking keys entirely, strings through ``redact_text``."""
    if (
        key
        and secret_key(key)
        and value not in (None, "", REDACTED)
        and not isinstance(value, bool | int | float)
    ):
        return REDACTED
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


def redact_secrets(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: ``redact`` every value of the event."""
    for key in list(event_dict):
        event_dict[key] = redact(event_dict[key], key)
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
