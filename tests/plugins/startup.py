"""Start-up times of the session's shared components, printed at the end of the run.

Fixtures call ``record_startup(section, name, seconds)``; the summary lists, per section, every
component a test started.
"""

from __future__ import annotations

import pytest

# section -> component -> seconds, for this session.
_STARTUP: dict[str, dict[str, float]] = {}


def record_startup(section: str, name: str, seconds: float) -> None:
    """Record that ``name`` (in ``section``, e.g. "spark start-up") took ``seconds`` to start."""
    _STARTUP.setdefault(section, {})[name] = seconds


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One section per kind of component: how long each took to start (only those used)."""
    for section, figures in sorted(_STARTUP.items()):
        terminalreporter.section(section)
        for name, seconds in figures.items():
            terminalreporter.write_line(f"{name}: {seconds:.1f} s")
