"""A busy table (another job holds its lock) or a writer that won a commit conflict is not a
failure of the job that met it.

Driven through the real ``JobRunner`` (the executor's code path) against real Postgres: the job
is claimed, its lock attempt collides with another job's lock, and the runner hands it back.
No Spark statement is reached: the collision happens before the engine is first used.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import structlog

from icepack_core.errors import CommitConflict
from icepack_core.execution.job_runner import JobRunner
from icepack_core.intents import RewriteDataFiles, RewriteManifests
from icepack_core.queue.budgets import list_budgets, set_budget
from icepack_core.queue.deferrals import DEFER_BASE, clear_conflicts
from icepack_core.queue.jobs import JobQueue
from icepack_core.queue.locks import TableLocks
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.types import JobState
from tests.planning.test_planner import add_table, status

BYTES = 1_000_000


async def charges(db: asyncpg.Pool, job_id: int) -> list[int]:
    rows = await db.fetch(
        "SELECT attempt FROM icepack.budget_charges WHERE job_id = $1 ORDER BY attempt", job_id
    )
    return [r["attempt"] for r in rows]


async def test_lock_collisions_spend_no_attempt_and_no_budget(
    db: asyncpg.Pool, settings: Settings
) -> None:
    queue = JobQueue(db)
    table_id = await add_table(db, "busy", status(small_file_count=30))
    await set_budget(db, "cat", None, rewrite_bytes_per_hour=10 * BYTES, max_running=None)
    job = (
        await queue.enqueue(table_id, [RewriteDataFiles()], rewrite_bytes=BYTES, max_attempts=3)
    ).job
    # Another job (an operator's CLI run, say) holds the table for the whole test.
    holder = await TableLocks(db).acquire(table_id, "cli@elsewhere", 0, 3600)
    runner = JobRunner(db, settings, queue, LocalEngine(settings), "executor@test")

    t = datetime.now(UTC)
    for collision in range(1, 6):  # more collisions than max_attempts
        t += timedelta(hours=2)  # past any backoff
        claimed = await queue.claim("executor@test", 60, now=t)
        assert claimed is not None and claimed.id == job.id
        assert claimed.attempts == 1
        before = datetime.now(UTC)
        run = await runner.run(claimed)
        assert run.lock_held and run.job is not None
        back = run.job
        assert back.state is JobState.QUEUED, back.error
        assert back.attempts == 0 and back.lock_waits == collision
        assert "locked" in (back.error or "")
        assert await charges(db, job.id) == []  # the claim's charge was refunded
        assert back.not_before >= before + timedelta(seconds=7)  # backoff, never at once
    (budget,) = await list_budgets(db)
    assert budget.charged_bytes == 0

    await TableLocks(db).release(holder)
    claimed = await queue.claim("executor@test", 60, now=t + timedelta(hours=2))
    assert claimed is not None and claimed.attempts == 1
    assert await charges(db, job.id) == [1]  # the run that gets the table is charged once


async def test_lock_backoff_grows_with_the_collisions(db: asyncpg.Pool, settings: Settings) -> None:
    queue = JobQueue(db)
    table_id = await add_table(db, "busy2", status(small_file_count=30))
    job = (await queue.enqueue(table_id, [RewriteDataFiles()])).job
    t = datetime(2030, 1, 1, tzinfo=UTC)
    for waits in range(0, 8):
        claimed = await queue.claim("e", 60, now=t + timedelta(days=waits))
        assert claimed is not None and claimed.id == job.id
        back = await queue.give_back(claimed, "lock", "busy", now=t + timedelta(days=waits))
        wait = (back.not_before - (t + timedelta(days=waits))).total_seconds()
        ceiling = min(600.0, 15.0 * 2**waits)
        assert 0.5 * ceiling - 1e-3 <= wait <= ceiling + 1e-3
        assert back.lock_waits == waits + 1 and back.conflicts == 0


async def test_conflict_backoff_without_a_streak_grows_with_the_jobs_conflicts(
    db: asyncpg.Pool, settings: Settings
) -> None:
    """``give_back(job, "conflict")`` without ``streak`` backs off over the job's own earlier
    conflicts (Postgres' ``greatest`` ignores NULL, so a NULL streak must not read as 0)."""
    queue = JobQueue(db)
    table_id = await add_table(db, "conflicted", status(small_file_count=30))
    job = (await queue.enqueue(table_id, [RewriteDataFiles()])).job
    t = datetime(2030, 1, 1, tzinfo=UTC)
    for earlier in range(0, 6):
        claimed = await queue.claim("e", 60, now=t + timedelta(days=earlier))
        assert claimed is not None and claimed.id == job.id
        at = t + timedelta(days=earlier)
        back = await queue.give_back(claimed, "conflict", "writer won", now=at)
        wait = (back.not_before - at).total_seconds()
        ceiling = min(1800.0, 30.0 * 2**earlier)
        assert 0.5 * ceiling - 1e-3 <= wait <= ceiling + 1e-3, (earlier, wait)
        assert back.conflicts == earlier + 1 and back.lock_waits == 0


async def test_repeated_conflicts_hold_the_job_back_until_the_deferral_ends(
    db: asyncpg.Pool, settings: Settings
) -> None:
    """What ``JobRunner`` does when a writer wins (``_conflicted``; the Spark side is in
    ``test_commit_conflicts``): each conflict gives the claim back; from the third in a row the
    job is not due before the action's deferral on the table ends, and it never fails."""
    queue = JobQueue(db)
    table_id = await add_table(db, "hot", status(small_file_count=30))
    job = (await queue.enqueue(table_id, [RewriteManifests()], max_attempts=3)).job
    runner = JobRunner(db, settings, queue, LocalEngine(settings), "executor@test")
    log = structlog.get_logger("test")
    t = datetime.now(UTC)
    for n in range(1, 6):
        t += timedelta(days=1)
        claimed = await queue.claim("executor@test", 60, now=t)
        assert claimed is not None and claimed.id == job.id
        conflict = CommitConflict("rewrite_manifests", "ValidationException: Deleted manifest")
        before = datetime.now(UTC)
        run = await runner._conflicted(claimed, conflict, log)
        back = run.job
        assert back is not None and back.state is JobState.QUEUED
        assert back.attempts == 0 and back.conflicts == n
        deferral = await db.fetchrow(
            "SELECT conflicts, deferred_until, reason FROM icepack.maintenance_deferrals "
            "WHERE table_id = $1",
            table_id,
        )
        assert deferral is not None
        assert deferral["conflicts"] == n
        if n < 3:
            assert deferral["deferred_until"] is None
            assert back.not_before < before + timedelta(minutes=31)  # the conflict backoff
        else:
            assert deferral["deferred_until"] >= before + timedelta(minutes=15)
            assert back.not_before >= deferral["deferred_until"]
            assert back.error == deferral["reason"] and "deferred" in (back.error or "")


async def test_a_conflict_after_progress_waits_the_base_backoff_however_often_the_job_lost(
    db: asyncpg.Pool, settings: Settings
) -> None:
    """A compaction racing a writer on a table every commit touches commits most of its file
    groups and loses a few, attempt after attempt. Each attempt that committed restarts the
    conflicts in a row (``clear_conflicts``, what the executor does on progress), so each retry
    waits the base conflict backoff (15-30 s), not 30 s doubling per conflict of the job (8
    minutes by its fifth, while it held the table's dedupe slot). Conflicts without progress
    still back off further each time."""
    queue = JobQueue(db)
    table_id = await add_table(db, "streamed", status(small_file_count=300))
    job = (await queue.enqueue(table_id, [RewriteDataFiles()])).job
    runner = JobRunner(db, settings, queue, LocalEngine(settings), "executor@test")
    log = structlog.get_logger("test")
    conflict = CommitConflict("rewrite_data_files", "partial progress: 4 of 16 lost")
    t = datetime.now(UTC)

    async def lose_a_part(progress: bool) -> float:
        claimed = await queue.claim("executor@test", 60, now=t + timedelta(days=30))
        assert claimed is not None and claimed.id == job.id
        if progress:
            await clear_conflicts(db, table_id, "rewrite_data_files")
        before = datetime.now(UTC)
        back = (await runner._conflicted(claimed, conflict, log)).job
        assert back is not None and back.state is JobState.QUEUED and back.attempts == 0
        return (back.not_before - before).total_seconds()

    for n in range(1, 7):
        wait = await lose_a_part(progress=True)
        assert 15.0 - 1 <= wait <= 30.0 + 1, (n, wait)
    assert (await queue.get(job.id)).conflicts == 6
    # Without progress in between, the streak grows: the second in a row waits up to 60 s,
    # the third (DEFER_AFTER) until the action's deferral on the table ends.
    second = await lose_a_part(progress=False)
    assert 30.0 - 1 <= second <= 60.0 + 1, second
    third = await lose_a_part(progress=False)
    assert third >= DEFER_BASE.total_seconds() - 1, third
