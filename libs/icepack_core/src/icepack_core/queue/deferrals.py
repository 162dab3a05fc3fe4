"""Deferring an action on a table where writers keep winning its commits.

Per (table, action), ``maintenance_deferrals`` counts the commit conflicts in a row
(``execution.conflicts`` tells a conflict from a failure); a run of the action that commits
without a conflict resets it. From ``DEFER_AFTER`` conflicts in a row, the action is deferred
on that table (``deferred_until``, growing from ``DEFER_BASE`` to ``DEFER_CAP``) with a reason
an operator and the planner see: the job that lost waits until then, and
``active_deferrals`` is the planner's hook to propose nothing of it meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from icepack_core.db.queries import load_query
from icepack_core.db.text import storable

MAX_ERROR = 500
# After this many conflicts in a row on one (table, action), the action is deferred there.
DEFER_AFTER = 3
DEFER_BASE = timedelta(minutes=15)
DEFER_CAP = timedelta(hours=6)


def defer_for(conflicts: int) -> timedelta | None:
    """How long an action is deferred on a table after ``conflicts`` conflicts in a row: none
    before ``DEFER_AFTER``, then ``DEFER_BASE`` doubling up to ``DEFER_CAP``."""
    if conflicts < DEFER_AFTER:
        return None
    factor: int = 2 ** min(conflicts - DEFER_AFTER, 16)
    return min(DEFER_CAP, DEFER_BASE * factor)


@dataclass(frozen=True, slots=True)
class Deferral:
    """One (table, action)'s conflict record: ``deferred_until`` None while not deferred."""

    table_id: int
    action: str
    conflicts: int
    last_error: str | None
    deferred_until: datetime | None
    reason: str | None

    @classmethod
    def from_record(cls, row: asyncpg.Record) -> Deferral:
        return cls(
            row["table_id"],
            row["action"],
            row["conflicts"],
            row["last_error"],
            row["deferred_until"],
            row["reason"],
        )


async def record_conflict(
    pool: asyncpg.Pool, table_id: int, action: str, error: str, now: datetime | None = None
) -> Deferral:
    """Count one more conflict in a row for (table, action); from ``DEFER_AFTER`` on, defer the
    action there (``deferred_until``, with the reason an operator and the planner see)."""
    row = await pool.fetchrow(
        load_query("deferral_conflict"), table_id, action, storable(error)[:MAX_ERROR], now
    )
    assert row is not None  # an upsert always returns its row
    wait = defer_for(int(row["conflicts"]))
    if wait is None:
        return Deferral.from_record(row)
    reason = (
        f"{action} deferred: {row['conflicts']} commit conflicts in a row with the table's "
        f"writers (last: {row['last_error'][:200]}); waiting for a quieter moment"
    )
    row = await pool.fetchrow(
        load_query("deferral_defer"), table_id, action, wait.total_seconds(), reason, now
    )
    assert row is not None
    return Deferral.from_record(row)


async def clear_conflicts(pool: asyncpg.Pool, table_id: int, action: str) -> None:
    """The action committed without a conflict on the table: its record starts over."""
    await pool.execute(load_query("deferral_clear"), table_id, action)


async def active_deferrals(
    pool: asyncpg.Pool | asyncpg.Connection, table_id: int, now: datetime | None = None
) -> dict[str, Deferral]:
    """The hook for planning: per action, the table's deferral in force at ``now`` (actions
    not deferred are absent). The planner should propose none of these before
    ``deferred_until`` and show ``reason`` instead."""
    rows = await pool.fetch(load_query("deferral_active"), table_id, now)
    return {r["action"]: Deferral.from_record(r) for r in rows}


@dataclass(frozen=True, slots=True)
class ConflictFigures:
    """The conflict figures: jobs that were conflict-retried, conflicts in all, those of them
    that failed anyway (for another reason), and the (table, action) pairs deferred now."""

    conflict_retried_jobs: int
    conflicts: int
    conflict_jobs_failed: int
    deferred: int


async def conflict_figures(pool: asyncpg.Pool, now: datetime | None = None) -> ConflictFigures:
    """The figures over the jobs still kept (``job_conflict_figures``)."""
    row = await pool.fetchrow(load_query("job_conflict_figures"), now)
    assert row is not None
    return ConflictFigures(**{k: int(v) for k, v in dict(row).items()})
