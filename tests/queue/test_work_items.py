"""The coalescing per-service work queue."""

import asyncio
from collections import Counter
from datetime import timedelta

import asyncpg

from icepack_core.queue.work_items import WorkItem, WorkQueue
from tests.support.waiting import eventually


async def make_tables(db: asyncpg.Pool, n: int) -> list[int]:
    rows = await db.fetch(
        "INSERT INTO icepack.tables (catalog, namespace, name) "
        "SELECT 'c', 'ns', 't' || g FROM generate_series(1, $1) g RETURNING id",
        n,
    )
    return [r["id"] for r in rows]


async def request(
    db: asyncpg.Pool, queue: WorkQueue, table_id: int, reason: str = "table.changed"
) -> int:
    async with db.acquire() as conn, conn.transaction():
        return await queue.request(conn, table_id, reason)


async def test_a_burst_of_requests_becomes_one_item(db: asyncpg.Pool) -> None:
    (table,) = await make_tables(db, 1)
    queue = WorkQueue(db, "inspector", "w1")
    for _ in range(10):
        await request(db, queue, table)
    items = await queue.claim(10)
    assert [i.table_id for i in items] == [table] and items[0].generation == 10
    assert await queue.complete(items[0])
    assert await queue.pending() == 0


async def test_replicas_never_hold_the_same_table(db: asyncpg.Pool) -> None:
    tables = await make_tables(db, 60)
    producer = WorkQueue(db, "inspector", "producer")
    for t in tables:
        await request(db, producer, t)
    replicas = [WorkQueue(db, "inspector", f"r{i}") for i in range(4)]
    done = []

    async def work(q: WorkQueue) -> None:
        while items := await q.claim(3):
            for item in items:
                done.append(item.table_id)
                await asyncio.sleep(0)
                assert await q.complete(item)

    await asyncio.gather(*(work(q) for q in replicas))
    assert Counter(done) == Counter(tables)


async def test_rerequest_while_working_hands_the_item_back(db: asyncpg.Pool) -> None:
    (table,) = await make_tables(db, 1)
    queue = WorkQueue(db, "inspector", "w1")
    await request(db, queue, table)
    (item,) = await queue.claim()
    await request(db, queue, table)  # a new commit landed while we inspected
    assert await queue.claim() == []  # still ours: nobody else may work on it
    assert not await queue.complete(item)  # handed back, not deleted
    (again,) = await queue.claim()
    assert again.generation == item.generation + 1
    assert await queue.complete(again)


async def test_a_request_committing_while_the_item_completes_hands_it_back(
    db: asyncpg.Pool,
) -> None:
    """The request's transaction holds the item's row (generation bumped, not yet committed)
    when the worker completes it: the completion waits for the row, then must see the new
    generation and hand the item back. It used to do neither (its delete re-checked the new
    row, its hand-back read the old one), leaving the item claimed by a worker that had
    finished with it: nobody inspected or planned the table until the lease expired (5 min),
    the gaps seen in bench.stream under one commit a second."""
    (table,) = await make_tables(db, 1)
    queue = WorkQueue(db, "inspector", "w1")
    await request(db, queue, table)
    (item,) = await queue.claim()
    async with db.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await queue.request(conn, table, "table.changed")  # a commit landed; not committed yet
        completing = asyncio.ensure_future(queue.complete(item))

        async def completion_waits_for_the_row() -> bool:
            waiting = await db.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND query LIKE '%DELETE FROM icepack.work_items%'"
            )
            return bool(waiting)

        await eventually(completion_waits_for_the_row, what="the completion waiting")
        assert not completing.done()
        await tx.commit()
    assert await completing is False  # handed back, not deleted
    (again,) = await queue.claim()  # claimable at once, not after the lease
    assert again.generation == item.generation + 1
    assert await queue.complete(again)
    assert await queue.pending() == 0


async def test_services_have_separate_queues(db: asyncpg.Pool) -> None:
    (table,) = await make_tables(db, 1)
    await request(db, WorkQueue(db, "inspector", "i"), table)
    assert await WorkQueue(db, "planner", "p").claim() == []


async def claimed_one(db: asyncpg.Pool) -> tuple[WorkQueue, WorkItem]:
    """A queue of one table's requested item, and that item, claimed."""
    (table,) = await make_tables(db, 1)
    queue = WorkQueue(db, "inspector", "w1")
    await request(db, queue, table)
    (item,) = await queue.claim()
    return queue, item


async def test_failed_item_waits_before_retry(db: asyncpg.Pool) -> None:
    queue, item = await claimed_one(db)
    await queue.fail(item, "catalog timeout", retry_in=3600)
    assert await queue.claim() == []
    row = await db.fetchrow("SELECT last_error, claimed_by FROM icepack.work_items")
    assert row is not None
    assert dict(row) == {"last_error": "catalog timeout", "claimed_by": None}


async def test_expired_lease_lets_another_replica_claim(db: asyncpg.Pool) -> None:
    (table,) = await make_tables(db, 1)
    dead = WorkQueue(db, "inspector", "dead", lease_seconds=60)
    await request(db, dead, table)
    (item,) = await dead.claim()
    await db.execute("UPDATE icepack.work_items SET lease_until = now() - interval '1 s'")
    alive = WorkQueue(db, "inspector", "alive", death_backoff_seconds=0)
    assert await alive.claim() == []  # a dead holder's item is reaped first, never just taken
    (reaped,) = await alive.reap()
    assert (reaped.table_id, reaped.deaths, reaped.parked) == (table, 1, False)
    (taken,) = await alive.claim()
    assert taken.table_id == table
    assert not await dead.heartbeat(item)  # the dead one learns it lost the item
    assert not await dead.complete(item) and await alive.complete(taken)


async def test_release_all_hands_back_what_a_stopping_worker_holds(db: asyncpg.Pool) -> None:
    tables = await make_tables(db, 3)
    queue = WorkQueue(db, "inspector", "stopping")
    for t in tables:
        await request(db, queue, t)
    assert len(await queue.claim(3)) == 3
    await queue.release_all()
    assert len(await WorkQueue(db, "inspector", "next").claim(3)) == 3


async def test_an_error_text_postgres_cannot_store_is_stored_escaped(db: asyncpg.Pool) -> None:
    queue, item = await claimed_one(db)
    await queue.fail(item, "catalog said \x00", retry_in=3600)
    assert await db.fetchval("SELECT last_error FROM icepack.work_items") == "catalog said \\x00"


async def test_an_item_whose_holder_keeps_dying_backs_off_then_is_parked(db: asyncpg.Pool) -> None:
    """Each death (lease expired) is counted and waited out (60 s, then 120 s); the third
    parks the item with the reason; a new request gives it one more try, and one more death
    parks it again (not three more)."""
    (table,) = await make_tables(db, 1)
    q = WorkQueue(db, "inspector", "w", lease_seconds=10, max_deaths=3, death_backoff_seconds=60)
    await request(db, q, table)
    t = await db.fetchval("SELECT now()")
    waits = []
    for death in (1, 2, 3):
        (item,) = await q.claim(now=t)
        assert item.table_id == table
        t += timedelta(seconds=11)  # the holder never renewed: its lease expired
        (dead,) = await q.reap(now=t)
        assert (dead.deaths, dead.parked) == (death, death == 3)
        not_before = await db.fetchval("SELECT not_before FROM icepack.work_items")
        waits.append((not_before - t).total_seconds())
        assert await q.claim(now=t) == []  # not handed straight back
        t = max(t, not_before)
    assert waits[:2] == [60.0, 120.0]
    row = await db.fetchrow("SELECT parked_at, deaths, last_error FROM icepack.work_items")
    assert row is not None
    assert row["parked_at"] is not None and row["deaths"] == 3
    assert "stopped renewing its lease" in row["last_error"]
    assert await q.claim(now=t + timedelta(days=30)) == []  # parked: never claimed

    await request(db, q, table)  # the table changed: one more try
    (item,) = await q.claim(now=t + timedelta(days=30))
    (dead,) = await q.reap(now=t + timedelta(days=31))
    assert (dead.deaths, dead.parked) == (3, True)

    await request(db, q, table)
    (item,) = await q.claim(now=t + timedelta(days=32))
    assert await q.complete(item)  # done at last: the row (and its deaths) is gone
    assert await q.pending() == 0
