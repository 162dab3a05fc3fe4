"""The demo's live summary stays readable at 80 columns: no job row is wrapped, whatever the
widest values (a two-digit job id, the longest table and action names), and the outcome and
quarantine lines say what the demo shows."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from rich.console import Console

from icepack_core.local.demo_lake import STRAY_FILES, DemoState, render_state


def rendered(state: DemoState) -> str:
    console = Console(width=80, force_terminal=False, record=True)
    console.print(render_state(state, 82))
    return console.export_text()


def state(**overrides: Any) -> DemoState:
    jobs = (
        (
            12,
            "customers",
            "succeeded",
            "planner",
            "remove_orphan_files",
            "1->1",
            "1->1",
            "0->0",
            "",
        ),
        (
            13,
            "orders",
            "succeeded",
            "planner",
            "rewrite_data_files + rewrite_position_delete_files",
            "16->1",
            "10->12",
            "16->0",
            "",
        ),
    )
    values: dict[str, Any] = {
        "tables": (("customers", "healthy", 99, "", 1, 0, 1, 0),),
        "jobs": jobs,
        "queue": (("succeeded", 2),),
        "outcomes": ((13, "orders", 30.0, 39.0), (12, "customers", 0.0, 0.0)),
        "ledger": (
            (
                12,
                "customers",
                "remove_orphan_files",
                "quarantined",
                2,
                128,
                datetime(2026, 11, 29, 20, 34, tzinfo=UTC),
            ),
        ),
    }
    values.update(overrides)
    return DemoState(**values)


def test_job_rows_fit_80_columns_unwrapped() -> None:
    text = rendered(state())
    assert all(len(line) <= 80 for line in text.splitlines())
    assert re.search(
        r"^ *12 customers +succeeded +remove_orphan_files +1->1 +1->1 +0->0 *$", text, re.MULTILINE
    ), text
    assert re.search(
        r"^ *13 orders +succeeded +rewrite_data_files +16->1 +10->12 +16->0 *$", text, re.MULTILINE
    ), text


def test_outcome_and_quarantine_lines() -> None:
    text = rendered(state())
    assert "outcome of job 13 (orders): benefit predicted 30, measured 39 (130%)" in text
    assert "outcome of job 12 (customers): benefit predicted 0, measured 0" in text
    assert "quarantined by job 12 (customers): 2 files, 128 B" in text
    assert "until 2026-11-29 20:34; undo: icepack restore 12" in text


def test_healthy_waits_for_the_quarantine() -> None:
    healthy_tables = tuple(
        (name, "healthy", 99, "", 1, 0, 1, 0)
        for name in ("clicks", "customers", "events", "orders")
    )
    waiting = state(tables=healthy_tables, ledger=())
    assert not waiting.healthy
    partial = state(
        tables=healthy_tables,
        ledger=((12, "customers", "remove_orphan_files", "quarantined", 1, 64, None),),
    )
    assert not partial.healthy
    done = state(
        tables=healthy_tables,
        ledger=(
            (12, "customers", "remove_orphan_files", "quarantined", len(STRAY_FILES), 128, None),
        ),
    )
    assert done.healthy
