"""Reading the deletion ledger in bounded pieces: a job's rows a page at a time, its totals
computed by Postgres, and the live table a restore of its quarantined files acts on.

A job's ledger can hold a million rows (an expiry of a million files): nothing here reads them
all. Pages are keyset pages by row id (``deletion_page_job``); totals are ``GROUP BY state``
(``deletion_job_states``); the restore target is the one table of the job's quarantined rows,
followed through a rename (``icepack.live_table_at``, migration 0017).
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from icepack_core.db.queries import load_query
from icepack_core.errors import JobNotFound


@dataclass(frozen=True)
class StateTotal:
    """Files and bytes of a job's ledger rows in one state."""

    files: int
    bytes: int


@dataclass(frozen=True)
class LedgerPage:
    """One page of a job's ledger rows (oldest first) and the job's totals per state.

    ``last_id`` is the id of the page's last row when a next page may exist (the page is full),
    else None.
    """

    rows: list[asyncpg.Record]
    by_state: dict[str, StateTotal]
    last_id: int | None

    @property
    def files(self) -> int:
        return sum(t.files for t in self.by_state.values())

    @property
    def bytes(self) -> int:
        return sum(t.bytes for t in self.by_state.values())


async def job_states(pool: asyncpg.Pool, job_id: int) -> dict[str, StateTotal]:
    """Files and bytes of job ``job_id``'s ledger rows per state (computed by Postgres)."""
    return {
        r["state"]: StateTotal(int(r["files"]), int(r["bytes"]))
        for r in await pool.fetch(load_query("deletion_job_states"), job_id)
    }


async def _known(pool: asyncpg.Pool, job_id: int, states: dict[str, StateTotal]) -> None:
    if not states and await pool.fetchrow(load_query("job_detail"), job_id) is None:
        raise JobNotFound(job_id)  # the ledger outlives pruned jobs: either one will do


async def job_page(pool: asyncpg.Pool, job_id: int, after: int | None, limit: int) -> LedgerPage:
    """The rows of job ``job_id`` after row id ``after`` (None: from the first), at most
    ``limit``, with the job's totals.

    Raises:
        JobNotFound: no such job and no ledger rows of that id.
    """
    states = await job_states(pool, job_id)
    await _known(pool, job_id, states)
    rows = await pool.fetch(load_query("deletion_page_job"), job_id, after, limit)
    last = int(rows[-1]["id"]) if len(rows) == limit else None
    return LedgerPage(list(rows), states, last)


@dataclass(frozen=True)
class RestoreTarget:
    """The live table a restore of a job's quarantined files runs on, or why there is none.

    ``table`` is the ``table_get`` row (None when ``refusal`` says why not); ``states`` the
    job's ledger counts per state.
    """

    table: asyncpg.Record | None
    refusal: str | None
    states: dict[str, StateTotal]


def _nothing_restorable(job_id: int, states: dict[str, StateTotal]) -> str:
    if not states:
        return f"job {job_id} recorded no deletions; nothing to restore"
    counts = ", ".join(f"{t.files} {state}" for state, t in sorted(states.items()))
    return f"job {job_id} has no quarantined files ({counts}); nothing to restore"


async def restore_target(pool: asyncpg.Pool, job_id: int) -> RestoreTarget:
    """The live table holding job ``job_id``'s quarantined files: the table they were
    quarantined from, or the table it was renamed to (``icepack.live_table_at``).

    Raises:
        JobNotFound: no such job and no ledger rows of that id.
    """
    states = await job_states(pool, job_id)
    await _known(pool, job_id, states)
    tables = await pool.fetch(load_query("deletion_job_quarantined_tables"), job_id)
    if not tables:
        return RestoreTarget(None, _nothing_restorable(job_id, states), states)
    if len(tables) > 1 or tables[0]["table_id"] is None:
        refusal = f"job {job_id}'s quarantined files belong to no single live table"
        return RestoreTarget(None, refusal, states)
    table_id, live_id = tables[0]["table_id"], tables[0]["live_id"]
    table = None if live_id is None else await pool.fetchrow(load_query("table_get"), live_id)
    if table is None or table["dropped_at"] is not None:
        refusal = f"job {job_id}'s table {table_id} was dropped (and no live table took its place)"
        return RestoreTarget(None, refusal, states)
    return RestoreTarget(table, None, states)


async def table_lineage(pool: asyncpg.Pool, table_id: int) -> list[int]:
    """``table_id`` and the dropped tables it succeeded by a rename (``table_lineage``)."""
    return sorted(int(r["id"]) for r in await pool.fetch(load_query("table_lineage"), table_id))
