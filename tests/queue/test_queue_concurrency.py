"""Many claimers, one queue: every job is claimed exactly once (real commits, real locks)."""

import asyncio
import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icepack_core.errors import StaleFence
from icepack_core.intents import RewriteManifests
from icepack_core.queue.jobs import Backoff, JobQueue
from icepack_core.types import JobState


async def test_eight_claimers_claim_two_thousand_jobs_exactly_once(db: asyncpg.Pool) -> None:
    queue = JobQueue(db)
    await db.execute(
        "INSERT INTO icepack.jobs (actions, priority) "
        'SELECT \'[{"action": "noop"}]\'::jsonb, (random() * 5)::int '
        "FROM generate_series(1, 2000)"
    )
    claimed: list[int] = []
    rng = random.Random(20261121)  # a seeded, randomized schedule of yields between steps

    async def claimer(name: str) -> None:
        while (job := await queue.claim(name, 60)) is not None:
            claimed.append(job.id)
            for _ in range(rng.randint(0, 2)):
                await asyncio.sleep(0)
            await queue.complete(job)

    await asyncio.gather(*(claimer(f"w{i}") for i in range(8)))
    counts = Counter(claimed)
    assert len(counts) == 2000 and set(counts.values()) == {1}
    states = await db.fetch("SELECT state, count(*) AS n FROM icepack.jobs GROUP BY state")
    assert {r["state"]: r["n"] for r in states} == {"succeeded": 2000}
    assert await db.fetchval("SELECT max(fence) FROM icepack.jobs") == 1


# A random interleaving of operations by several executors, checked against invariants that
# must hold whatever happens: one active job per dedupe key, fences only grow, a stale holder
# never changes a job, and a job is never running without a lease.
operations = st.lists(
    st.tuples(
        st.sampled_from(["enqueue", "claim", "complete", "fail", "retry", "reap", "cancel"]),
        st.integers(0, 3),  # which dedupe key / which holder
    ),
    min_size=5,
    max_size=40,
)


@pytest.mark.slow
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=operations)
async def test_queue_invariants_under_random_interleavings(
    db: asyncpg.Pool, ops: list[tuple[str, int]]
) -> None:
    await db.execute("TRUNCATE icepack.jobs, icepack.events CASCADE")
    queue = JobQueue(db, Backoff(base_seconds=0, cap_seconds=0))
    clock = datetime.now(UTC)
    held = {}  # holder -> Job as that holder last saw it
    fences: dict[int, int] = {}
    for op, n in ops:
        if op == "enqueue":
            await queue.enqueue(
                None, [RewriteManifests()], dedupe_key=f"k{n}", max_attempts=2, not_before=clock
            )
        elif op == "claim":
            job = await queue.claim(f"h{n}", 10, now=clock)
            if job:
                assert job.fence > fences.get(job.id, 0)
                fences[job.id] = job.fence
                held[n] = job
        elif op in ("complete", "fail", "retry") and n in held:
            job = held.pop(n)
            try:
                if op == "complete":
                    await queue.complete(job)
                else:
                    await queue.fail(job, "x", retryable=op == "retry")
            except StaleFence:
                current = await queue.get(job.id)
                assert current.fence != job.fence or current.state is not JobState.RUNNING
        elif op == "reap":
            clock += timedelta(seconds=11)  # every lease so far has expired
            await queue.reap(now=clock)
        elif op == "cancel" and fences:
            await queue.cancel(sorted(fences)[n % len(fences)])

        active = await db.fetch(
            "SELECT dedupe_key, count(*) AS n FROM icepack.jobs "
            "WHERE state IN ('queued', 'running') GROUP BY dedupe_key"
        )
        assert all(r["n"] == 1 for r in active)
        assert (
            await db.fetchval(
                "SELECT count(*) FROM icepack.jobs WHERE state = 'running' "
                "AND (lease_until IS NULL OR lease_owner IS NULL)"
            )
            == 0
        )
        assert (
            await db.fetchval("SELECT count(*) FROM icepack.jobs WHERE attempts > max_attempts")
            == 0
        )
