"""JobLease: heartbeats while work runs; stops the work (and Spark, via on_stop) when the fence is
lost or the operator cancels."""

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest

from icepack_core.jobs import JobQueue
from icepack_core.lease import CancelRequested, JobLease, LeaseLost


class StopRecorder:
    def __init__(self):
        self.calls = 0

    async def __call__(self):
        self.calls += 1


async def test_work_that_outlives_a_lease_period_keeps_its_lease(db):
    queue = JobQueue(db)
    await queue.enqueue(None, [])
    job = await queue.claim("w", 0.6)
    lease = JobLease(queue, job, 0.6)

    async def work():
        await asyncio.sleep(1.5)  # longer than the lease itself
        return "done"

    assert await lease.run(work()) == "done"
    assert lease.renewals >= 3
    assert (await queue.complete(job)).state.value == "succeeded"


async def test_lost_fence_stops_the_work_and_spark(db):
    queue = JobQueue(db)
    await queue.enqueue(None, [])
    job = await queue.claim("stale", 0.9)
    stopped = StopRecorder()
    lease = JobLease(queue, job, 0.9, on_stop=stopped)

    async def take_over():
        # Another executor gets the job: reaped (as if expired) and claimed with a new fence.
        later = datetime.now(UTC) + timedelta(minutes=5)
        await queue.reap(now=later)
        await queue.claim("fresh", 60, now=later + timedelta(hours=1))

    started = time.monotonic()
    taker = asyncio.create_task(take_over())
    with pytest.raises(LeaseLost):
        await lease.run(asyncio.sleep(30))
    await taker
    assert time.monotonic() - started < 5  # stopped within about one heartbeat
    assert lease.lost.is_set() and stopped.calls == 1


async def test_operator_cancel_stops_the_work(db):
    queue = JobQueue(db)
    await queue.enqueue(None, [])
    job = await queue.claim("w", 0.6)
    stopped = StopRecorder()
    lease = JobLease(queue, job, 0.6, on_stop=stopped)
    canceller = asyncio.create_task(queue.cancel(job.id))
    with pytest.raises(CancelRequested):
        await lease.run(asyncio.sleep(30))
    await canceller
    assert stopped.calls == 1
    assert (await queue.finish_cancelled(job)).state.value == "cancelled"
