"""The planner's upkeep queues one ``purge_quarantine`` job per table whose quarantined orphans
are due, never for a held or dropped table, and never twice while one is active."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import structlog

from icepack_core.queue.jobs import JobQueue
from icepack_core.queue.upkeep import QueueUpkeep
from icepack_core.queue.work_items import WorkQueue


async def table(db: asyncpg.Pool, name: str) -> int:
    table_id: int = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('c', 'ns', $1) RETURNING id",
        name,
    )
    return table_id


async def quarantined(db: asyncpg.Pool, table_id: int, path: str, due: datetime) -> None:
    await db.execute(
        "INSERT INTO icepack.deletions (job_id, table_id, action, path, kind, reason, state,"
        " quarantine_path, purge_after) VALUES (7, $1, 'remove_orphan_files', $2, 'orphan',"
        " 'test', 'quarantined', $2 || '.q', $3)",
        table_id,
        path,
        due,
    )


async def test_purge_jobs_are_queued_for_due_tables_only(db: asyncpg.Pool) -> None:
    now = datetime(2030, 1, 10, tzinfo=UTC)
    due, later, held, dropped = [await table(db, n) for n in ("due", "later", "held", "dropped")]
    await quarantined(db, due, "/w/due/a", now - timedelta(hours=1))
    await quarantined(db, due, "/w/due/b", now - timedelta(days=2))
    await quarantined(db, later, "/w/later/a", now + timedelta(hours=1))
    await quarantined(db, held, "/w/held/a", now - timedelta(days=1))
    await quarantined(db, dropped, "/w/dropped/a", now - timedelta(days=1))
    await db.execute(
        'UPDATE icepack.tables SET maintenance_hold = \'{"reason": "x"}\' WHERE id = $1', held
    )
    await db.execute("UPDATE icepack.tables SET dropped_at = now() WHERE id = $1", dropped)
    jobs = JobQueue(db)
    upkeep = QueueUpkeep(
        db, jobs, WorkQueue(db, "planner", "test"), 3600, 3600, structlog.get_logger("test")
    )

    (job_id,) = await upkeep.purge(now)
    job = await jobs.get(job_id)
    assert job.table_id == due and job.dedupe_key == f"purge:{due}"
    assert [a.kind.value for a in job.actions] == ["purge_quarantine"]
    assert await upkeep.purge(now) == [job_id]  # the queued one, not a second
    assert await db.fetchval("SELECT count(*) FROM icepack.jobs") == 1
