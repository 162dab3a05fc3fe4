"""The job queue on a real Postgres: one test per transition, fences, reaper, dedupe."""

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from icepack_core.errors import JobNotFound, StaleFence
from icepack_core.intents import RewriteDataFiles, RewriteManifests, intents_json, parse_intents
from icepack_core.queue.jobs import Backoff, JobQueue
from icepack_core.types import JobState, JobTrigger
from tests.support.stored_jobs import enqueue_hand_written

ACTIONS = [{"action": "rewrite_manifests", "params": {"use_caching": True}, "reason": ""}]
INTENTS = parse_intents(ACTIONS)


@pytest.fixture
def queue(db: asyncpg.Pool) -> JobQueue:
    return JobQueue(db, Backoff(base_seconds=10, cap_seconds=100))


async def db_now(db: asyncpg.Pool) -> datetime:
    """The database's clock (``now()`` of a transaction of its own)."""
    now: datetime = await db.fetchval("SELECT now()")
    return now


async def topics(db: asyncpg.Pool) -> list[str]:
    return [r["topic"] for r in await db.fetch("SELECT topic FROM icepack.events ORDER BY id")]


async def test_enqueue_creates_a_queued_job_and_announces_it(
    db: asyncpg.Pool, queue: JobQueue
) -> None:
    result = await queue.enqueue(None, INTENTS, dedupe_key="t1", trigger=JobTrigger.CLI)
    assert result.created
    assert result.job.state is JobState.QUEUED and result.job.fence == 0
    assert result.job.trigger is JobTrigger.CLI
    assert await topics(db) == ["job.enqueued"]


async def test_second_enqueue_for_the_same_key_returns_the_existing_job(
    db: asyncpg.Pool, queue: JobQueue
) -> None:
    first = await queue.enqueue(None, INTENTS, dedupe_key="table:1")
    again = await queue.enqueue(None, [RewriteDataFiles()], dedupe_key="table:1")
    assert not again.created and again.job.id == first.job.id
    assert intents_json(again.job.actions) == ACTIONS  # the no-op changed nothing
    assert await db.fetchval("SELECT count(*) FROM icepack.jobs") == 1
    assert await topics(db) == ["job.enqueued"]


async def test_a_job_is_read_with_its_actions_parsed_into_intents_once(queue: JobQueue) -> None:
    """``Job.actions`` are intents; stored actions that are not (a row bypassing validation)
    read as none, with the reason the executor fails the job with."""
    job = (await queue.enqueue(None, INTENTS)).job
    assert [a.kind.value for a in job.actions] == ["rewrite_manifests"]
    assert isinstance(job.actions[0], RewriteManifests)
    assert job.actions[0].params.use_caching and job.actions_error is None
    bad = await enqueue_hand_written(queue.pool, None, [{"action": "noop"}])
    assert bad.actions == [] and "unknown action 'noop'" in str(bad.actions_error)
    assert (await queue.get(bad.id)).actions_error is not None


async def test_dedupe_holds_while_running_and_frees_after_finish(queue: JobQueue) -> None:
    first = await queue.enqueue(None, INTENTS, dedupe_key="k")
    job = await queue.claim("w1", 60)
    assert job is not None
    assert job.id == first.job.id
    assert not (await queue.enqueue(None, INTENTS, dedupe_key="k")).created
    await queue.complete(job)
    assert (await queue.enqueue(None, INTENTS, dedupe_key="k")).created


async def test_claim_moves_queued_to_running_with_a_new_fence(
    db: asyncpg.Pool, queue: JobQueue
) -> None:
    await queue.enqueue(None, INTENTS)
    job = await queue.claim("w1", 60)
    assert job is not None
    assert job.state is JobState.RUNNING
    assert job.fence == 1 and job.attempts == 1 and job.lease_owner == "w1"
    assert job.lease_until is not None and job.started_at is not None
    assert job.lease_until - job.started_at == timedelta(seconds=60)  # one clock reading
    assert await topics(db) == ["job.enqueued", "job.started"]


async def test_claim_returns_none_when_nothing_is_due(queue: JobQueue) -> None:
    await queue.enqueue(None, INTENTS, not_before=datetime.now(UTC) + timedelta(hours=1))
    assert await queue.claim("w1", 60) is None
    assert await queue.claimable_count() == 0


async def test_claim_order_is_priority_then_age(queue: JobQueue) -> None:
    low = (await queue.enqueue(None, INTENTS, priority=200)).job
    first = (await queue.enqueue(None, INTENTS, priority=10)).job
    second = (await queue.enqueue(None, INTENTS, priority=10)).job
    claimed = [await queue.claim("w", 60) for _ in range(3)]
    order = [c.id for c in claimed if c is not None]
    assert order == [first.id, second.id, low.id]


async def test_complete_moves_running_to_succeeded(db: asyncpg.Pool, queue: JobQueue) -> None:
    await queue.enqueue(None, INTENTS)
    job = await queue.claim("w1", 60)
    assert job is not None
    done = await queue.complete(job, {"files": 3})
    assert done.state is JobState.SUCCEEDED and done.finished_at is not None
    assert done.result == {"files": 3}
    assert (await topics(db))[-1] == "job.finished"


async def test_retryable_failure_requeues_with_backoff(db: asyncpg.Pool, queue: JobQueue) -> None:
    await queue.enqueue(None, INTENTS, max_attempts=3)
    job = await queue.claim("w1", 60)
    assert job is not None
    # Bracket the failing transaction's now() with the database's own clock, so the check does
    # not depend on how long this test takes between the statements.
    before = await db_now(db)
    back = await queue.fail(job, "commit conflict", retryable=True)
    after = await db_now(db)
    assert back.state is JobState.QUEUED and back.error == "commit conflict"
    # base 10 s for attempt 1, jittered into [5, 10]
    assert before + timedelta(seconds=5) <= back.not_before <= after + timedelta(seconds=10)
    assert back.finished_at is None


async def test_permanent_failure_fails_at_once(queue: JobQueue) -> None:
    await queue.enqueue(None, INTENTS, max_attempts=5)
    job = await queue.claim("w1", 60)
    assert job is not None
    failed = await queue.fail(job, "no such table", retryable=False)
    assert failed.state is JobState.FAILED and failed.finished_at is not None


async def test_retryable_failure_on_the_last_attempt_fails(queue: JobQueue) -> None:
    await queue.enqueue(None, INTENTS, max_attempts=1)
    job = await queue.claim("w1", 60)
    assert job is not None
    assert (await queue.fail(job, "again", retryable=True)).state is JobState.FAILED


async def test_cancel_queued_job_is_immediate(queue: JobQueue) -> None:
    job = (await queue.enqueue(None, INTENTS)).job
    cancelled = await queue.cancel(job.id)
    assert cancelled.state is JobState.CANCELLED
    assert await queue.claim("w1", 60) is None


async def test_cancel_running_job_is_acknowledged_by_its_executor(queue: JobQueue) -> None:
    await queue.enqueue(None, INTENTS)
    job = await queue.claim("w1", 60)
    assert job is not None
    asked = await queue.cancel(job.id)
    assert asked.state is JobState.RUNNING and asked.cancel_requested_at is not None
    beat = await queue.heartbeat(job, 60)
    assert beat.cancel_requested
    assert (await queue.finish_cancelled(job)).state is JobState.CANCELLED


async def test_cancel_unknown_job_raises(queue: JobQueue) -> None:
    with pytest.raises(JobNotFound, match="no job with id 424242"):
        await queue.cancel(424242)


async def test_cancel_finished_job_changes_nothing(queue: JobQueue) -> None:
    await queue.enqueue(None, INTENTS)
    job = await queue.claim("w1", 60)
    assert job is not None
    await queue.complete(job)
    assert (await queue.cancel(job.id)).state is JobState.SUCCEEDED


async def test_stale_holder_cannot_heartbeat_finish_or_record(
    db: asyncpg.Pool, queue: JobQueue
) -> None:
    past = datetime.now(UTC) - timedelta(minutes=10)
    await queue.enqueue(None, INTENTS, max_attempts=3, not_before=past)
    stale = await queue.claim("old-executor", 60, now=past)  # lease ran out minutes ago
    assert stale is not None
    reaped = await queue.reap()
    assert [j.id for j in reaped] == [stale.id] and reaped[0].state is JobState.QUEUED
    fresh = await queue.claim("new-executor", 60, now=datetime.now(UTC) + timedelta(hours=2))
    assert fresh is not None
    assert fresh.id == stale.id and fresh.fence == stale.fence + 1

    for attempt in (
        lambda: queue.heartbeat(stale, 60),
        lambda: queue.complete(stale),
        lambda: queue.fail(stale, "x", retryable=True),
        lambda: queue.finish_cancelled(stale),
        lambda: queue.record_action(
            stale, action="noop", state="succeeded", started_at=past, finished_at=past
        ),
    ):
        with pytest.raises(StaleFence) as exc:
            await attempt()
        assert exc.value.job_id == stale.id and exc.value.fence == stale.fence
        assert "lease was lost" in str(exc.value)

    row = await db.fetchrow(
        "SELECT state, fence, lease_owner FROM icepack.jobs WHERE id=$1", stale.id
    )
    assert row is not None
    assert dict(row) == {"state": "running", "fence": fresh.fence, "lease_owner": "new-executor"}
    assert await db.fetchval("SELECT count(*) FROM icepack.job_actions") == 0
    assert (await queue.complete(fresh)).state is JobState.SUCCEEDED


async def test_reaper_requeues_with_backoff_then_fails_after_max_attempts(
    db: asyncpg.Pool, queue: JobQueue
) -> None:
    clock = datetime.now(UTC)
    job = (await queue.enqueue(None, INTENTS, max_attempts=2, not_before=clock)).job
    assert job is not None
    delays = []
    for attempt in (1, 2):
        claimed = await queue.claim("dies", 30, now=clock)
        assert claimed is not None
        assert claimed.id == job.id and claimed.attempts == attempt
        clock += timedelta(seconds=31)
        (reaped,) = await queue.reap(now=clock)
        if attempt == 1:
            assert reaped.state is JobState.QUEUED
            delays.append((reaped.not_before - clock).total_seconds())
            assert "lease of dies expired" in (reaped.error or "")
            clock = reaped.not_before
        else:
            assert reaped.state is JobState.FAILED and reaped.finished_at is not None
    assert 5 <= delays[0] <= 10
    assert await queue.reap(now=clock + timedelta(hours=1)) == []
    finished = await db.fetch("SELECT payload FROM icepack.events WHERE topic = 'job.finished'")
    assert [r["payload"]["state"] for r in finished] == ["failed"]


async def test_reaper_leaves_live_leases_alone(queue: JobQueue) -> None:
    await queue.enqueue(None, INTENTS)
    await queue.claim("alive", 60)
    assert await queue.reap() == []


async def test_reaper_finishes_a_cancelled_job_whose_executor_died(queue: JobQueue) -> None:
    past = datetime.now(UTC) - timedelta(minutes=1)
    await queue.enqueue(None, INTENTS, not_before=past)
    job = await queue.claim("dies", 1, now=past)
    assert job is not None
    await queue.cancel(job.id)
    (reaped,) = await queue.reap()
    assert reaped.state is JobState.CANCELLED


async def test_backoff_is_capped(db: asyncpg.Pool, queue: JobQueue) -> None:
    job = (await queue.enqueue(None, INTENTS, max_attempts=20)).job
    await queue.pool.execute("UPDATE icepack.jobs SET attempts = 15 WHERE id = $1", job.id)
    claimed = await queue.claim("w", 60)
    assert claimed is not None
    before = await db_now(db)
    back = await queue.fail(claimed, "x", retryable=True)
    after = await db_now(db)
    # cap 100 s whatever 2^15 says, jittered into [50, 100]
    assert before + timedelta(seconds=50) <= back.not_before <= after + timedelta(seconds=100)


async def test_prune_deletes_only_old_finished_jobs(queue: JobQueue) -> None:
    await queue.enqueue(None, INTENTS)
    job = await queue.claim("w", 60)
    assert job is not None
    await queue.complete(job)
    await queue.enqueue(None, INTENTS)  # still queued: never pruned
    assert await queue.prune(3600) == 0
    assert await queue.prune(3600, now=datetime.now(UTC) + timedelta(hours=2)) == 1
    assert await queue.pool.fetchval("SELECT count(*) FROM icepack.jobs") == 1


async def test_schema_refuses_a_terminal_job_without_finished_at(db: asyncpg.Pool) -> None:
    import asyncpg

    with pytest.raises(asyncpg.CheckViolationError, match="jobs_finished_iff_terminal"):
        await db.execute("INSERT INTO icepack.jobs (state) VALUES ('succeeded')")


async def test_an_error_text_postgres_cannot_store_is_stored_escaped(queue: JobQueue) -> None:
    """A NUL byte or a lone surrogate in an error (a catalog's or Spark's message) must not make
    the failure itself fail to record: the job would be reaped and run again."""
    await queue.enqueue(None, INTENTS, max_attempts=1)
    job = await queue.claim("w1", 60)
    assert job is not None
    failed = await queue.fail(job, "bad \x00 name \ud800 here", retryable=False)
    assert failed.state is JobState.FAILED
    assert failed.error == "bad \\x00 name \\ud800 here"
