"""Maintenance budgets enforced at claim time, on real Postgres: limits, claim order, oversized
jobs, concurrent executors, and KEDA parity (the trigger's count equals the claims in a row)."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icepack_core.db.pool import create_pool
from icepack_core.errors import BudgetInvalid, BudgetNotFound
from icepack_core.intents import RewriteDataFiles
from icepack_core.queue.budgets import clear_budget, list_budgets, set_budget
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import Settings


async def table(pool: asyncpg.Pool, catalog: str, namespace: str, name: str = "t") -> int:
    table_id: int = await pool.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ($1, $2, $3) RETURNING id",
        catalog,
        namespace,
        name,
    )
    return table_id


async def job(
    queue: JobQueue,
    table_id: int | None,
    rewrite_bytes: int,
    *,
    benefit: float = 0.0,
    health: float | None = None,
    priority: int = 100,
    not_before: datetime | None = None,
) -> int:
    done = await queue.enqueue(
        table_id,
        [RewriteDataFiles()],
        rewrite_bytes=rewrite_bytes,
        benefit=benefit,
        health_score=health,
        priority=priority,
        not_before=not_before,
    )
    return done.job.id


async def test_max_running_caps_claims_until_a_job_finishes(db: asyncpg.Pool) -> None:
    queue = JobQueue(db)
    a, other = await table(db, "a", "ns"), await table(db, "b", "ns")
    for _ in range(4):
        await job(queue, a, 0)
    free = await job(queue, other, 0)
    await set_budget(db, "a", None, rewrite_bytes_per_hour=None, max_running=2)
    first, second = await queue.claim("e1", 60), await queue.claim("e2", 60)
    assert first is not None and second is not None and first.table_id == second.table_id == a
    third = await queue.claim("e3", 60)
    assert third is not None and third.id == free  # catalog b has no budget
    assert await queue.claim("e4", 60) is None
    assert await queue.claimable_count() == 0
    await queue.complete(first)
    assert await queue.claimable_count() == 1
    again = await queue.claim("e4", 60)
    assert again is not None and again.table_id == a


async def test_hourly_bytes_slide_with_the_hour_and_retries_are_charged_again(
    db: asyncpg.Pool,
) -> None:
    queue = JobQueue(db)
    a = await table(db, "a", "ns")
    big = await job(queue, a, 60, benefit=600)  # 10 per byte: first
    mid = await job(queue, a, 50, benefit=250)  # 5 per byte
    small = await job(queue, a, 40, benefit=40)  # 1 per byte
    await set_budget(db, "a", None, rewrite_bytes_per_hour=100, max_running=None)
    t0 = datetime.now(UTC) + timedelta(minutes=1)  # a pinned clock after the jobs are due
    got = await queue.claim("e", 600, now=t0)
    assert got is not None and got.id == big
    # 60 + 50 > 100: the better job waits, the one that still fits runs.
    got2 = await queue.claim("e", 600, now=t0 + timedelta(minutes=1))
    assert got2 is not None and got2.id == small
    assert await queue.claim("e", 600, now=t0 + timedelta(minutes=59)) is None
    await queue.fail(got, "transient", retryable=True, now=t0 + timedelta(minutes=2))
    await db.execute("UPDATE icepack.jobs SET not_before = $1 WHERE id = $2", t0, big)
    # One hour after the first claim its 60 bytes leave the window: the retry of `big` (60) and
    # `mid` (50) compete; `big` comes first and is charged again.
    assert await queue.claim("e", 600, now=t0 + timedelta(minutes=60, seconds=1)) is not None
    assert await queue.claim("e", 600, now=t0 + timedelta(minutes=60, seconds=2)) is None
    charges = await db.fetch(
        "SELECT job_id, attempt, bytes FROM icepack.budget_charges ORDER BY id"
    )
    assert [tuple(c) for c in charges] == [(big, 1, 60), (small, 1, 40), (big, 2, 60)]
    assert (await queue.get(mid)).state == "queued"


async def test_namespace_and_catalog_budgets_both_apply(db: asyncpg.Pool) -> None:
    queue = JobQueue(db)
    sales, web = await table(db, "a", "sales"), await table(db, "a", "web")
    for _ in range(3):
        await job(queue, sales, 10)
        await job(queue, web, 10)
    await set_budget(db, "a", None, rewrite_bytes_per_hour=None, max_running=3)
    await set_budget(db, "a", "sales", rewrite_bytes_per_hour=None, max_running=1)
    claimed = [await queue.claim(f"e{i}", 60) for i in range(5)]
    tables = [c.table_id for c in claimed if c is not None and c.table_id is not None]
    assert sorted(tables) == sorted([sales, web, web])  # sales capped at 1, catalog at 3
    use = {(b.catalog, b.namespace): b for b in await list_budgets(db)}
    assert use[("a", None)].running == 3 and use[("a", "sales")].running == 1
    assert use[("a", None)].charged_bytes == 30 and use[("a", "sales")].charged_bytes == 10


async def test_claim_order_is_priority_then_benefit_per_byte_then_worst_health(
    db: asyncpg.Pool,
) -> None:
    queue = JobQueue(db)
    a = await table(db, "a", "ns")
    ids = {
        "cheap_good": await job(queue, a, 100, benefit=1000),  # 10 per byte
        "late_priority": await job(queue, a, 1, benefit=10**6, priority=200),
        "sick": await job(queue, a, 100, benefit=500, health=0.2),  # 5/byte, worse health
        "healthy": await job(queue, a, 100, benefit=500, health=0.9),
        "unknown_health": await job(queue, a, 100, benefit=500),
        "older_tie": await job(queue, a, 0, benefit=0),  # 0 bytes count as 1: 0 per byte
        "newer_tie": await job(queue, a, 0, benefit=0),
    }
    order = []
    while (got := await queue.claim("e", 60)) is not None:
        order.append(got.id)
    by_id = {v: k for k, v in ids.items()}
    assert [by_id[i] for i in order] == [
        "cheap_good",
        "sick",
        "healthy",
        "unknown_health",
        "older_tie",
        "newer_tie",
        "late_priority",
    ]
    plan = await db.fetch(
        "EXPLAIN SELECT id FROM icepack.jobs WHERE state = 'queued' ORDER BY priority, "
        "benefit / greatest(rewrite_bytes, 1) DESC, health_score ASC NULLS LAST, id LIMIT 1"
    )
    assert "jobs_claim_order" in " ".join(r[0] for r in plan)


async def test_a_job_bigger_than_its_hourly_budget_is_reported_and_never_claimed(
    db: asyncpg.Pool,
) -> None:
    queue = JobQueue(db)
    a = await table(db, "a", "ns")
    huge = await job(queue, a, 1000, benefit=10**9)
    fits = await job(queue, a, 10)
    await set_budget(db, "a", "ns", rewrite_bytes_per_hour=500, max_running=None)
    (use,) = await list_budgets(db)
    assert use.oversized_jobs == [huge]
    assert await queue.claimable_count() == 1
    got = await queue.claim("e", 60)
    assert got is not None and got.id == fits
    assert await queue.claim("e", 60) is None
    view = await db.fetchrow("SELECT * FROM icepack.v_queue WHERE state = 'queued'")
    assert view is not None
    assert (view["jobs"], view["claimable"]) == (1, 0)


async def test_budget_crud_and_bad_input_name_the_value(db: asyncpg.Pool) -> None:
    use = await set_budget(db, "a", None, rewrite_bytes_per_hour=10, max_running=None)
    assert (use.rewrite_bytes_per_hour, use.max_running, use.running) == (10, None, 0)
    use = await set_budget(db, "a", None, rewrite_bytes_per_hour=None, max_running=4)
    assert (use.rewrite_bytes_per_hour, use.max_running) == (None, 4)  # replaced, one row
    await set_budget(db, "a", "ns", rewrite_bytes_per_hour=5, max_running=1)
    assert [(b.catalog, b.namespace) for b in await list_budgets(db)] == [("a", None), ("a", "ns")]
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"rewrite_bytes_per_hour": 0, "max_running": None}, "rewrite_bytes_per_hour", "0"),
        ({"rewrite_bytes_per_hour": None, "max_running": -2}, "max_running", "-2"),
        ({"rewrite_bytes_per_hour": 2**63, "max_running": None}, "rewrite_bytes_per_hour", ""),
        ({"rewrite_bytes_per_hour": None, "max_running": None}, "rewrite_bytes_per_hour", ""),
    ]
    for kwargs, field, value in cases:
        with pytest.raises(BudgetInvalid, match=f"{field}: {value}") as info:
            await set_budget(db, "a", "other", **kwargs)
        assert info.value.field == field
    with pytest.raises(BudgetInvalid, match="namespace: '' is empty"):
        await set_budget(db, "a", "", rewrite_bytes_per_hour=1, max_running=None)
    assert len(await list_budgets(db)) == 2  # nothing half-written
    await clear_budget(db, "a", "ns")
    with pytest.raises(BudgetNotFound, match="namespace 'ns'"):
        await clear_budget(db, "a", "ns")
    assert [(b.catalog, b.namespace) for b in await list_budgets(db)] == [("a", None)]
    # The schema refuses what the API refuses, whoever writes.
    with pytest.raises(asyncpg.CheckViolationError):
        await db.execute("INSERT INTO icepack.budgets (catalog, max_running) VALUES ('z', 0)")
    with pytest.raises(asyncpg.UniqueViolationError):
        await db.execute("INSERT INTO icepack.budgets (catalog, max_running) VALUES ('a', 1)")


MAX_RUNNING = {"a": 2, "b": 1}
BYTES_PER_HOUR = {"a": 5_000, "b": 3_000}


async def test_three_executors_never_exceed_running_or_byte_budgets(
    settings: Settings, db: asyncpg.Pool
) -> None:
    """Three executors, each on its own connection, claim, hold and complete jobs of two budgeted
    catalogs. At every claim the claimer reads the budgets' use in one snapshot and records it;
    no record may exceed a limit, and the bytes charged (all within this hour) stay within the
    hourly budget even though the queue holds far more."""
    queue = JobQueue(db)
    tables = {c: await table(db, c, "ns") for c in MAX_RUNNING}
    rng = random.Random(20261122)
    for i in range(60):
        catalog = "a" if i % 2 else "b"
        await job(queue, tables[catalog], rng.randint(50, 400), benefit=rng.random() * 100)
    for catalog in MAX_RUNNING:
        await set_budget(
            db,
            catalog,
            None,
            rewrite_bytes_per_hour=BYTES_PER_HOUR[catalog],
            max_running=MAX_RUNNING[catalog],
        )
    records: list[tuple[str, int, int]] = []
    claims: list[int] = []

    async def executor(name: str) -> None:
        pool = await create_pool(settings.model_copy(update={"db_pool_max": 2}), name)
        try:
            own = JobQueue(pool)
            idle = 0
            while idle < 3:  # stop after three empty claims in a row with nothing running
                got = await own.claim(name, 60)
                if got is None:
                    running = await pool.fetchval(
                        "SELECT count(*) FROM icepack.jobs WHERE state = 'running'"
                    )
                    idle = idle + 1 if running == 0 else 0
                    await asyncio.sleep(0.01)
                    continue
                idle = 0
                claims.append(got.id)
                for row in await pool.fetch(
                    "SELECT catalog, running, charged_bytes FROM icepack.budget_use(now())"
                ):
                    records.append((row["catalog"], row["running"], row["charged_bytes"]))
                for _ in range(rng.randint(1, 5)):  # hold it for a while
                    await asyncio.sleep(0)
                await pool.fetchval("SELECT pg_sleep(0.005)")
                await own.complete(got)
        finally:
            await pool.close()

    await asyncio.wait_for(asyncio.gather(*(executor(f"x{i}") for i in range(3))), 120)
    assert claims and len(claims) == len(set(claims))
    assert {c for c, _, _ in records} == {"a", "b"}
    for catalog, running, charged in records:
        assert running <= MAX_RUNNING[catalog], (catalog, running)
        assert charged <= BYTES_PER_HOUR[catalog], (catalog, charged)
    totals: dict[str, int] = {
        r[0]: r[1]
        for r in await db.fetch(
            "SELECT catalog, sum(bytes) FROM icepack.budget_charges GROUP BY catalog"
        )
    }
    for catalog, total in totals.items():
        assert total <= BYTES_PER_HOUR[catalog]
    # The budgets, not the queue, ended it: each catalog still has queued jobs that do not fit.
    assert await db.fetchval("SELECT count(*) FROM icepack.jobs WHERE state = 'queued'") > 0
    assert await queue.claimable_count() == 0


# -- KEDA parity ---------------------------------------------------------------------------

SCOPES = [("a", None), ("a", "x"), ("a", "y"), ("b", None), ("b", "x")]
limits = st.one_of(st.none(), st.integers(1, 4))
byte_limits = st.one_of(st.none(), st.integers(1, 600))
budgets_st = st.dictionaries(
    st.sampled_from(SCOPES),
    st.tuples(byte_limits, limits).filter(lambda b: b != (None, None)),
    max_size=4,
)
jobs_st = st.lists(
    st.tuples(
        st.sampled_from([("a", "x"), ("a", "y"), ("b", "x"), None]),  # None: no table
        st.sampled_from(["queued", "queued", "queued", "running", "future"]),
        st.integers(0, 300),  # rewrite_bytes
        st.integers(0, 5),  # benefit
        st.one_of(st.none(), st.integers(0, 3)),  # health
        st.integers(1, 2),  # priority
    ),
    max_size=14,
)
# Charges already made, minutes ago: inside the hour or outside it, never near its edge (the
# claims that follow run a little later than the count).
charges_st = st.lists(
    st.tuples(
        st.sampled_from([("a", "x"), ("a", "y"), ("b", "x")]),
        st.integers(1, 300),
        st.one_of(st.integers(5, 50), st.integers(70, 120)),
    ),
    max_size=5,
)


@pytest.mark.slow
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(budgets=budgets_st, jobs=jobs_st, charges=charges_st)
async def test_keda_count_equals_claims_in_a_row(
    db: asyncpg.Pool,
    budgets: dict[tuple[str, str | None], tuple[int | None, int | None]],
    jobs: list[tuple[Any, ...]],
    charges: list[tuple[Any, ...]],
) -> None:
    await db.execute(
        "TRUNCATE icepack.jobs, icepack.budgets, icepack.budget_charges, icepack.tables,"
        " icepack.events CASCADE"
    )
    queue = JobQueue(db)
    ids = {s: await table(db, *s) for s in [("a", "x"), ("a", "y"), ("b", "x")]}
    running = []
    for scope, state, size, benefit, health, priority in jobs:
        later = datetime.now(UTC) + timedelta(hours=1) if state == "future" else None
        job_id = await job(
            queue,
            None if scope is None else ids[scope],
            size,
            benefit=benefit,
            health=health,
            priority=priority,
            not_before=later,
        )
        if state == "running":
            running.append(job_id)
    for job_id in running:
        await queue.claim_id(job_id, "busy", 600)
    for (catalog, namespace), (size, minutes) in [((s[0], s[1]), (b, m)) for s, b, m in charges]:
        await db.execute(
            "INSERT INTO icepack.budget_charges (job_id, attempt, catalog, namespace, bytes,"
            " charged_at) SELECT min(id), 1, $1, $2, $3, now() - make_interval(mins => $4)"
            " FROM icepack.jobs HAVING min(id) IS NOT NULL",
            catalog,
            namespace,
            size,
            minutes,
        )
    for (catalog, namespace), (per_hour, max_running) in budgets.items():
        await set_budget(
            db, catalog, namespace, rewrite_bytes_per_hour=per_hour, max_running=max_running
        )
    count = await queue.claimable_count()
    expected = [
        r["job_id"] for r in await db.fetch("SELECT job_id FROM icepack.claimable_jobs(now())")
    ]
    taken = []
    while (got := await queue.claim("keda", 600)) is not None:
        taken.append(got.id)
    assert count == len(taken)
    assert taken == expected  # and the same jobs, in the same order
