"""JobLease: heartbeats while work runs; stops the work (and Spark, via on_stop) when the fence is
lost or the operator cancels."""

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from icepack_core.errors import CancelRequested, LeaseLost
from icepack_core.queue.jobs import Heartbeat, Job, JobQueue
from icepack_core.queue.lease import JobLease
from tests.support.waiting import eventually

# Only a guard against a hang: the lease must stop the work long before this (it checks every
# lease/3 seconds); the work itself never ends on its own.
STOP_DEADLINE_S = 60.0


async def never_ends() -> None:
    """Work that only stops when it is cancelled."""
    await asyncio.Event().wait()


class StopRecorder:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1


async def test_work_that_outlives_a_lease_period_keeps_its_lease(db: asyncpg.Pool) -> None:
    queue = JobQueue(db)
    await queue.enqueue(None, [])
    job = await queue.claim("w", 0.6)
    assert job is not None
    lease = JobLease(queue, job, 0.6)

    async def outlived() -> bool:
        # The claim's own lease has run out by the database's clock, and heartbeats renewed it.
        expired = await db.fetchval("SELECT now() > $1", job.lease_until)
        return expired and lease.renewals >= 3

    async def work() -> str:
        # Runs until the condition holds, however slowly the machine runs the heartbeats.
        await eventually(outlived, timeout=60, what="the work to outlive its first lease")
        return "done"

    assert await lease.run(work()) == "done"
    assert not lease.lost.is_set()
    renewed = await db.fetchval("SELECT lease_until FROM icepack.jobs WHERE id = $1", job.id)
    assert renewed > job.lease_until  # the heartbeats moved the lease on
    assert (await queue.complete(job)).state.value == "succeeded"


async def test_lost_fence_stops_the_work_and_spark(db: asyncpg.Pool) -> None:
    queue = JobQueue(db)
    await queue.enqueue(None, [])
    job = await queue.claim("stale", 0.9)
    assert job is not None
    stopped = StopRecorder()
    lease = JobLease(queue, job, 0.9, on_stop=stopped)

    async def take_over() -> None:
        # Another executor gets the job: reaped (as if expired) and claimed with a new fence.
        later = datetime.now(UTC) + timedelta(minutes=5)
        await queue.reap(now=later)
        await queue.claim("fresh", 60, now=later + timedelta(hours=1))

    taker = asyncio.create_task(take_over())
    # The work never ends by itself: only the lease's heartbeat, finding the fence gone, can
    # stop it (the deadline only turns a hang into a failure).
    with pytest.raises(LeaseLost):
        await asyncio.wait_for(lease.run(never_ends()), STOP_DEADLINE_S)
    await taker
    assert lease.lost.is_set() and stopped.calls == 1


async def test_operator_cancel_stops_the_work(db: asyncpg.Pool) -> None:
    queue = JobQueue(db)
    await queue.enqueue(None, [])
    job = await queue.claim("w", 0.6)
    assert job is not None
    stopped = StopRecorder()
    lease = JobLease(queue, job, 0.6, on_stop=stopped)
    canceller = asyncio.create_task(queue.cancel(job.id))
    with pytest.raises(CancelRequested):
        await asyncio.wait_for(lease.run(never_ends()), STOP_DEADLINE_S)
    await canceller
    assert stopped.calls == 1
    assert (await queue.finish_cancelled(job)).state.value == "cancelled"


async def test_a_heartbeat_that_hangs_stops_the_work_before_the_lease_expires(
    db: asyncpg.Pool,
) -> None:
    """A renewal blocked in the database (here: another session holds the job's row lock, as a
    half-open connection would leave it waiting) must not keep the work running past its lease:
    once the lease expires another executor may take the job."""
    queue = JobQueue(db)
    await queue.enqueue(None, [])
    lease_seconds = 1.5
    job = await queue.claim("w", lease_seconds)
    assert job is not None
    stopped = StopRecorder()
    lease = JobLease(queue, job, lease_seconds, on_stop=stopped)
    async with db.acquire() as blocker, blocker.transaction():
        await blocker.execute("SELECT 1 FROM icepack.jobs WHERE id = $1 FOR UPDATE", job.id)
        # Before the fix the renewal waited on the lock for as long as it was held, and the
        # work ran on: this deadline (not the lease) ended it, with a TimeoutError.
        with pytest.raises(LeaseLost):
            await asyncio.wait_for(lease.run(never_ends()), STOP_DEADLINE_S)
    assert lease.lost.is_set() and stopped.calls == 1 and lease.renewals == 0


class FailingRenewals(JobQueue):
    """The real queue, except that its first ``failures`` heartbeats raise asyncpg's
    ``InternalClientError`` -- what asyncpg raises for a pooled connection a failed-over server
    left mid-protocol. No real component here can produce that error on demand, so it is
    injected; everything else is the real queue on the real database."""

    def __init__(self, pool: asyncpg.Pool, failures: float) -> None:
        super().__init__(pool)
        self.failures = failures
        self.failed = 0

    async def heartbeat(
        self, job: Job, lease_seconds: float, now: datetime | None = None
    ) -> Heartbeat:
        if self.failed < self.failures:
            self.failed += 1
            raise asyncpg.InternalClientError("unexpected message in the protocol state")
        return await super().heartbeat(job, lease_seconds, now)


async def test_a_renewal_error_outside_postgres_errors_keeps_the_heartbeat_alive(
    db: asyncpg.Pool,
) -> None:
    """``InternalClientError`` is neither a ``PostgresError`` nor an ``InterfaceError``. Before
    the fix it ended the heartbeat task: nothing renewed the lease while the work ran on, and
    another executor could take the job and its table."""
    queue = FailingRenewals(db, failures=1)
    await queue.enqueue(None, [])
    lease_seconds = 6.0  # renewals every 2 s: one failed, the next renews well before expiry
    job = await queue.claim("w", lease_seconds)
    assert job is not None
    lease = JobLease(queue, job, lease_seconds)

    async def renewed_after_the_failure() -> bool:
        return queue.failed == 1 and lease.renewals >= 1

    async def work() -> str:
        await eventually(renewed_after_the_failure, timeout=60, what="a renewal after the error")
        return "done"

    assert await lease.run(work()) == "done"
    assert not lease.lost.is_set()


async def test_renewals_that_keep_failing_stop_the_work_before_the_lease_expires(
    db: asyncpg.Pool,
) -> None:
    queue = FailingRenewals(db, failures=float("inf"))
    await queue.enqueue(None, [])
    lease_seconds = 1.5
    job = await queue.claim("w", lease_seconds)
    assert job is not None
    stopped = StopRecorder()
    lease = JobLease(queue, job, lease_seconds, on_stop=stopped)
    # Before the fix the first error ended the heartbeat and only this deadline stopped the
    # work (a TimeoutError), not the lease.
    with pytest.raises(LeaseLost):
        await asyncio.wait_for(lease.run(never_ends()), STOP_DEADLINE_S)
    assert lease.lost.is_set() and stopped.calls == 1 and lease.renewals == 0
    assert queue.failed >= 1
