"""Start-up times of the session's shared components, printed at the end of the run.

Fixtures call ``record_startup(section, name, seconds)``. Under pytest-xdist each worker keeps
its own figures and hands them to the controller in ``workeroutput`` when it finishes, so the
summary lists every component that any worker started (once per worker that started it).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

# section -> component -> seconds, for this process's session.
_STARTUP: dict[str, dict[str, float]] = {}
_WORKER_KEY = "icepack_startup_seconds"


def record_startup(section: str, name: str, seconds: float) -> None:
    """Record that ``name`` (in ``section``, e.g. "spark start-up") took ``seconds`` to start."""
    _STARTUP.setdefault(section, {})[name] = seconds


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput: dict[str, Any] | None = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller prints
        workeroutput[_WORKER_KEY] = json.dumps(_STARTUP)


def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist controller: merge a finished worker's figures (named after the worker)."""
    output = getattr(node, "workeroutput", {}) or {}
    worker = getattr(getattr(node, "gateway", None), "id", "worker")
    for section, figures in json.loads(output.get(_WORKER_KEY, "{}")).items():
        for name, seconds in figures.items():
            record_startup(section, f"{name} ({worker})", seconds)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One section per kind of component: how long each took to start (only those used)."""
    for section, figures in sorted(_STARTUP.items()):
        terminalreporter.section(section)
        for name, seconds in figures.items():
            terminalreporter.write_line(f"{name}: {seconds:.1f} s")
