"""A failing work item backs off (doubling, capped), and an item in progress keeps its lease:
what stops one table that always fails from costing an attempt every 30 s for ever, and a long
inspection from being claimed a second time."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import structlog

from icepack_core.db import pool as dbmod
from icepack_core.queue.events import Listener
from icepack_core.queue.work_items import WorkItem, WorkQueue
from icepack_core.runtime.consumers import MAX_RETRY_SECONDS, _process_one, retry_backoff
from icepack_core.runtime.service import ServiceContext
from icepack_core.settings import Settings
from tests.support.waiting import eventually


def context(db: asyncpg.Pool, settings: Settings) -> ServiceContext:
    listener = Listener(lambda: dbmod.connect(settings, "retries-listen"))
    return ServiceContext(
        "inspector",
        settings,
        db,
        listener,
        asyncio.Event(),
        "inspector@test",
        structlog.get_logger("t"),
    )


async def a_table(db: asyncpg.Pool) -> int:
    table_id: int = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('c', 'ns', 't') RETURNING id"
    )
    return table_id


def test_the_backoff_doubles_and_is_capped() -> None:
    assert [retry_backoff(n, 30.0) for n in (1, 2, 3, 4)] == [30.0, 60.0, 120.0, 240.0]
    assert retry_backoff(10_000, 30.0) == MAX_RETRY_SECONDS
    assert retry_backoff(0, 30.0) == 30.0


async def test_an_item_that_keeps_failing_waits_longer_each_time(
    db: asyncpg.Pool, settings: Settings
) -> None:
    ctx = context(db, settings)
    queue = WorkQueue(db, "inspector", ctx.worker_id, settings.work_lease_seconds)
    table_id = await a_table(db)
    async with db.acquire() as conn:
        await queue.request(conn, table_id, "table.changed")

    async def always_fails(_item: WorkItem) -> None:
        raise ValueError("a table Icepack cannot handle")

    waits = []
    clock = datetime.now(UTC)
    for _ in range(4):
        clock += timedelta(hours=2)  # past any wait so far: the item is due again
        (item,) = await queue.claim(1, now=clock)
        await _process_one(ctx, queue, always_fails, item, 30.0)
        row = await db.fetchrow(
            "SELECT extract(epoch FROM not_before - now()) AS wait, attempts, last_error "
            "FROM icepack.work_items WHERE table_id = $1",
            table_id,
        )
        assert row is not None
        assert row["last_error"] == "ValueError: a table Icepack cannot handle"
        waits.append((row["attempts"], float(row["wait"])))
    assert [a for a, _ in waits] == [1, 2, 3, 4]
    for (attempts, wait), expected in zip(waits, (30, 60, 120, 240), strict=True):
        assert expected - 10 < wait <= expected, (attempts, wait)


async def test_an_item_in_progress_keeps_its_lease(db: asyncpg.Pool, settings: Settings) -> None:
    """Processing outlives the claim's lease: the item's lease was renewed, so a second claim
    (another worker of the same process) finds nothing while the first is still at work."""
    ctx = context(db, settings)
    queue = WorkQueue(db, "inspector", ctx.worker_id, 1.5)
    table_id = await a_table(db)
    async with db.acquire() as conn:
        await queue.request(conn, table_id, "table.changed")
    (item,) = await queue.claim(1)
    first_lease = await db.fetchval(
        "SELECT lease_until FROM icepack.work_items WHERE table_id = $1", table_id
    )
    second_claims: list[list[WorkItem]] = []

    async def outlived_and_renewed() -> bool:
        # The claim's own lease is over by the database's clock, and a renewal holds it now.
        return bool(
            await db.fetchval(
                "SELECT now() > $2 AND lease_until > now() + interval '0.5 seconds' "
                "FROM icepack.work_items WHERE table_id = $1",
                table_id,
                first_lease,
            )
        )

    async def slow(_item: WorkItem) -> None:
        await eventually(outlived_and_renewed, timeout=60, what="the lease to be renewed")
        second_claims.append(await queue.claim(1))

    await _process_one(ctx, queue, slow, item, 30.0)
    assert second_claims == [[]]
    assert await db.fetchval("SELECT count(*) FROM icepack.work_items") == 0  # completed
