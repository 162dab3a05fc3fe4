"""A table whose jobs fail permanently is not re-planned at once: each action rests,
exponentially (15 min doubling to a day), computed from the job history in Postgres.

Driven through the real ``Planner.plan`` and ``JobQueue`` (claim, then ``fail`` with
``retryable=False`` as the executor does for a permanent error), simulating time by passing
``now`` to both.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
from hypothesis import given
from hypothesis import strategies as st

from icepack_core.intents import RewriteDataFiles
from icepack_core.planning.planner import Planner
from icepack_core.planning.recommendation import failure_backoff
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import Settings
from tests.planning.test_planner import add_table, status

ERROR = "rewrite_data_files failed: AnalysisException: " + "x" * 300
STEP = timedelta(minutes=5)  # how often something (an event, the replan timer) plans the table


async def test_a_permanently_failing_table_gets_at_most_max_attempts_jobs_per_window(
    db: asyncpg.Pool, settings: Settings
) -> None:
    queue = JobQueue(db)
    planner = Planner(settings, db, queue)
    table_id = await add_table(db, "broken", status(small_file_count=30, small_file_bytes=30))
    start = datetime.now(UTC) + timedelta(minutes=1)  # simulated time runs ahead of the real one
    base = timedelta(seconds=settings.failure_backoff_base_seconds)
    assert base == timedelta(minutes=15)
    created: list[datetime] = []
    t = start
    while t < start + timedelta(hours=6):
        outcome = await planner.plan(table_id, now=t)
        if outcome.job_created:
            created.append(t)
            job = await queue.claim("executor@test", 60)
            assert job is not None and job.id == outcome.job_id
            failed = await queue.fail(job, ERROR, retryable=False, now=t)
            assert failed.state.value == "failed"
            # job.finished re-plans the table at once: no new job, a reason instead.
            again = await planner.plan(table_id, now=t)
            assert again.job_id is None
            assert again.recommendation is not None
            (skip,) = [s for s in again.recommendation.skipped if s.action == "rewrite_data_files"]
            n = len(created)
            retry = t + failure_backoff(
                n, settings.failure_backoff_base_seconds, settings.failure_backoff_cap_seconds
            )
            assert skip.reason == (
                f"{n} failures, last: {ERROR[:200]}; retry after "
                f"{retry.strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]}"
            )
        t += STEP
    # Failures at 0, 15, 45, 105 and 225 min: each rest twice the one before.
    assert [int((c - start) / timedelta(minutes=1)) for c in created] == [0, 15, 45, 105, 225]
    for k, at in enumerate(created, start=1):
        window = failure_backoff(
            k, settings.failure_backoff_base_seconds, settings.failure_backoff_cap_seconds
        )
        in_window = [c for c in created if at <= c < at + window]
        assert len(in_window) <= settings.job_max_attempts
    stored = await db.fetchval(
        "SELECT actions FROM icepack.recommendations ORDER BY id DESC LIMIT 1"
    )
    assert any(s["reason"].startswith("5 failures, last: ") for s in stored["skipped"])


async def test_a_success_ends_the_backoff(db: asyncpg.Pool, settings: Settings) -> None:
    queue = JobQueue(db)
    planner = Planner(settings, db, queue)
    table_id = await add_table(db, "recovers", status(small_file_count=30, small_file_bytes=30))
    t = datetime.now(UTC) + timedelta(minutes=1)
    assert (await planner.plan(table_id, now=t)).job_created
    job = await queue.claim("executor@test", 60)
    assert job is not None
    await queue.fail(job, ERROR, retryable=False, now=t)
    assert (await planner.plan(table_id, now=t + timedelta(minutes=1))).job_id is None
    # An operator fixed the table and ran the action by hand: it succeeded after the failure.
    enqueued = (await queue.enqueue(table_id, [RewriteDataFiles()])).job
    manual = await queue.claim("cli@test", 60)
    assert manual is not None and manual.id == enqueued.id
    await queue.record_action(
        manual,
        action="rewrite_data_files",
        state="succeeded",
        started_at=t + timedelta(minutes=2),
        finished_at=t + timedelta(minutes=2),
    )
    await queue.complete(manual)
    # Past the cadence, the action is proposed again at once: the streak was reset.
    later = t + timedelta(hours=25)
    outcome = await planner.plan(table_id, now=later)
    assert outcome.recommendation is not None
    assert outcome.job_created, outcome.recommendation.skipped


async def test_malformed_job_history_does_not_break_planning(
    db: asyncpg.Pool, settings: Settings
) -> None:
    queue = JobQueue(db)
    planner = Planner(settings, db, queue)
    table_id = await add_table(db, "odd", status(small_file_count=30, small_file_bytes=30))
    malformed: tuple[object, ...] = (["actions", "skipped"], {"action": "x"}, [{"params": []}])
    for actions in malformed:
        await db.execute(
            "INSERT INTO icepack.jobs (table_id, state, actions, finished_at, error) "
            "VALUES ($1, 'failed', $2::jsonb, now(), 'poison')",
            table_id,
            actions,
        )
    outcome = await planner.plan(table_id, now=datetime.now(UTC) + timedelta(minutes=1))
    assert outcome.job_created


@given(
    st.integers(min_value=1, max_value=10_000),
    st.floats(min_value=0, max_value=1e6),
    st.floats(min_value=0, max_value=1e7),
)
def test_failure_backoff_doubles_within_its_cap(failures: int, base: float, cap: float) -> None:
    rest = failure_backoff(failures, base, cap).total_seconds()
    assert 0 <= rest <= cap + 1e-6
    assert (
        rest == min(cap, base * 2.0 ** min(failures - 1, 62))
        or abs(rest - min(cap, base * 2.0 ** min(failures - 1, 62))) < 1e-3
    )
    assert failure_backoff(failures + 1, base, cap) >= failure_backoff(failures, base, cap)
