"""The event bus on real commits: ordering, late commits, atomic offsets, reconnects, traces."""

import asyncio
from typing import Any

import asyncpg
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from icepack_core.db import pool as icedb
from icepack_core.db.pool import Conn
from icepack_core.queue import events
from icepack_core.queue.events import Event, EventConsumer, Listener, prune_events, run_consumer
from icepack_core.settings import Settings
from icepack_core.telemetry.tracing import tracer
from tests.support.waiting import eventually


async def make_table(db: asyncpg.Pool, name: str = "t") -> int:
    table_id: int = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('c', 'ns', $1) RETURNING id",
        name,
    )
    return table_id


async def publish(conn: asyncpg.Pool | Conn, topic: str, **kwargs: Any) -> int:
    """``events.publish`` on a connection of the pool (it takes one connection: a producer
    publishes inside its own transaction)."""
    if not isinstance(conn, asyncpg.Pool):
        return await events.publish(conn, topic, **kwargs)
    async with conn.acquire() as pooled:
        return await events.publish(pooled, topic, **kwargs)


async def readable(db: asyncpg.Pool) -> None:
    """Wait until every event in the outbox is below the xmin horizon, i.e. readable.

    Consumers only read events older than the oldest transaction still running anywhere on the
    server (``pg_snapshot_xmin``); any transaction of another session (autovacuum's ANALYZE,
    another test database on a shared server) holds that horizon back for a moment. Once an
    event is below it, it stays below, so a drain after this reads every event published so far.
    """

    async def below_horizon() -> bool:
        below: bool = await db.fetchval(
            "SELECT coalesce(bool_and(xid < pg_snapshot_xmin(pg_current_snapshot())), true) "
            "FROM icepack.events"
        )
        return below

    await eventually(below_horizon, timeout=30, what="every event below the xmin horizon")


class Recorder:
    def __init__(self) -> None:
        self.seen: list[int] = []

    async def __call__(self, conn: Conn, event: Event) -> None:
        self.seen.append(event.id)


async def test_late_commit_is_delivered_in_order_exactly_once(
    db: asyncpg.Pool, settings: Settings
) -> None:
    early = await icedb.connect(settings, "writer-early")
    try:
        tx = early.transaction()
        await tx.start()
        low_id = await publish(early, "table.changed", payload={"n": 1})  # lower id, open tx
        high_id = await publish(db, "table.changed", payload={"n": 2})  # committed first
        assert low_id < high_id

        consumers = [Recorder(), Recorder()]
        readers = [EventConsumer(db, f"c{i}", r) for i, r in enumerate(consumers)]
        for reader in readers:
            await reader.drain()
        # The higher id committed, but the lower one's transaction is still open: nothing may be
        # read past it, or the lower id would be skipped forever.
        assert [r.seen for r in consumers] == [[], []]

        await tx.commit()
        await readable(db)
        for reader in readers:
            await reader.drain()
            await reader.drain()  # a second pass reads nothing new
        assert [r.seen for r in consumers] == [[low_id, high_id], [low_id, high_id]]
    finally:
        await early.close()


async def test_rolled_back_event_is_never_seen(db: asyncpg.Pool, settings: Settings) -> None:
    conn = await icedb.connect(settings, "writer")
    try:
        async with conn.transaction():
            await publish(conn, "table.changed")
            raise_in_tx = True
            if raise_in_tx:
                await conn.execute("SELECT 1/0")
    except asyncpg.DivisionByZeroError:
        pass
    finally:
        await conn.close()
    kept = await publish(db, "table.changed")
    await readable(db)
    recorder = Recorder()
    await EventConsumer(db, "c", recorder).drain()
    assert recorder.seen == [kept]


async def test_handler_writes_and_offset_commit_together(db: asyncpg.Pool) -> None:
    table_id = await make_table(db)
    first = await publish(db, "table.changed", table_id=table_id)
    second = await publish(db, "table.changed", table_id=table_id)
    await readable(db)  # the crashing batch must hold both events
    calls = []

    async def handler(conn: Conn, event: Event) -> None:
        calls.append(event.id)
        await conn.execute(
            "INSERT INTO icepack.work_items (service, table_id, reason) VALUES ('s', $1, $2) "
            "ON CONFLICT DO NOTHING",
            event.table_id,
            f"event {event.id}",
        )
        if event.id == second and len(calls) < 3:
            raise RuntimeError("handler crashed")

    consumer = EventConsumer(db, "atomic", handler)
    with pytest.raises(RuntimeError):
        await consumer.consume_once()
    # Nothing of the failed batch is visible: not the handler's write, not the offset.
    assert await db.fetchval("SELECT count(*) FROM icepack.work_items") == 0
    assert (
        await db.fetchval(
            "SELECT last_event_id FROM icepack.consumer_offsets WHERE consumer = 'atomic'"
        )
        == 0
    )
    await consumer.drain()  # redelivered (at least once) and now committed
    assert calls == [first, second, first, second]
    assert await db.fetchval("SELECT count(*) FROM icepack.work_items") == 1
    assert (
        await db.fetchval(
            "SELECT last_event_id FROM icepack.consumer_offsets WHERE consumer = 'atomic'"
        )
        == second
    )


async def test_replicas_of_one_consumer_never_handle_an_event_twice(db: asyncpg.Pool) -> None:
    ids = [await publish(db, "table.changed", payload={"i": i}) for i in range(300)]
    await readable(db)
    seen = []

    async def handler(conn: Conn, event: Event) -> None:
        seen.append(event.id)
        await asyncio.sleep(0)

    replicas = [EventConsumer(db, "shared", handler, batch_size=20) for _ in range(4)]
    for _ in range(3):
        await asyncio.gather(*(r.drain() for r in replicas))
    assert sorted(seen) == ids


async def test_topic_filter_skips_but_advances(db: asyncpg.Pool) -> None:
    wanted = await publish(db, "status.updated")
    await publish(db, "table.changed")
    await readable(db)
    recorder = Recorder()
    consumer = EventConsumer(db, "planner", recorder, topics=["status.updated"])
    assert await consumer.drain() == 2
    assert recorder.seen == [wanted]


async def test_listener_reconnects_after_its_backend_is_killed_and_nothing_is_lost(
    db: asyncpg.Pool, settings: Settings
) -> None:
    stop = asyncio.Event()
    listener = Listener(lambda: icedb.connect(settings, "test-listen"), liveness_interval=0.5)
    recorder = Recorder()
    consumer = EventConsumer(db, "reconnecting", recorder)
    # A long poll interval: delivery within the deadlines below comes from NOTIFY wake-ups
    # (and the catch-up after reconnecting), not from polling.
    tasks = [
        asyncio.create_task(listener.run(stop)),
        asyncio.create_task(run_consumer(consumer, listener, stop, poll_interval=60)),
    ]
    try:
        await asyncio.wait_for(listener.connected.wait(), 10)
        before = [await publish(db, "table.changed") for _ in range(3)]
        await eventually(lambda: _has(recorder, before), timeout=5, what="first events")

        killed = await db.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = 'icepack-test-listen'"
        )
        assert killed == 1
        # Published while the listener is down or reconnecting.
        during = [await publish(db, "table.changed") for _ in range(3)]
        await eventually(lambda: _reconnected(listener), timeout=10, what="reconnect")
        after = [await publish(db, "table.changed") for _ in range(3)]
        await eventually(
            lambda: _has(recorder, before + during + after),
            timeout=5,
            what="all events after reconnect",
        )
        assert recorder.seen == before + during + after  # in order, each once
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def _has(recorder: Recorder, ids: list[int]) -> bool:
    return recorder.seen[: len(ids)] == ids


async def _reconnected(listener: Listener) -> bool:
    return listener.reconnects >= 1 and listener.connected.is_set()


async def test_consumer_span_is_a_child_of_the_producer_span(
    db: asyncpg.Pool, spans: InMemorySpanExporter
) -> None:
    with tracer().start_as_current_span("discovery.produce") as producer:
        await publish(db, "table.discovered")
    await readable(db)
    parent = producer.get_span_context()
    assert parent is not None

    async def handler(conn: Conn, event: Event) -> None:
        with tracer().start_as_current_span("inspector.handle"):
            pass

    await EventConsumer(db, "traced", handler).drain()
    finished = {s.name: s for s in spans.get_finished_spans()}
    consume = finished["consume table.discovered"]
    assert consume.context.trace_id == parent.trace_id
    assert consume.parent is not None and consume.parent.span_id == parent.span_id
    assert finished["inspector.handle"].context.trace_id == parent.trace_id


async def test_prune_keeps_events_a_consumer_has_not_read(db: asyncpg.Pool) -> None:
    old = [await publish(db, "table.changed") for _ in range(3)]
    await db.execute("UPDATE icepack.events SET created_at = now() - interval '30 days'")
    await readable(db)
    slow, fast = Recorder(), Recorder()
    await EventConsumer(db, "fast", fast).drain()
    slow_consumer = EventConsumer(db, "slow", slow, batch_size=1)
    await slow_consumer.consume_once()  # read only the first event
    assert await prune_events(db, retention_seconds=86400) == 1
    remaining = [r["id"] for r in await db.fetch("SELECT id FROM icepack.events ORDER BY id")]
    assert remaining == old[1:]
    await slow_consumer.drain()
    assert slow.seen == old  # nothing the slow consumer needed was pruned


async def test_listener_survives_a_connect_error_outside_asyncpgs_classes(
    db: asyncpg.Pool, settings: Settings
) -> None:
    """A ``connect`` can raise anything: discovery's push watcher builds a catalog on connect
    (SQLAlchemy errors), and asyncpg raises ``InternalClientError`` for a connection a lost
    server left mid-protocol. Before the fix such an error ended ``run``: the listener stopped
    for good (and a service's main listener took the process down). The first connect here
    fails with a plain ``RuntimeError``, injected because no real catalog fails on demand; the
    second is the real connection."""
    attempts = 0

    async def connect() -> asyncpg.Connection:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise RuntimeError("catalog connect failed: too many clients")
        return await icedb.connect(settings, "test-listen-retry")

    stop = asyncio.Event()
    listener = Listener(connect, liveness_interval=0.5)
    wake = listener.subscribe(["table.changed"])
    task = asyncio.create_task(listener.run(stop))
    try:
        await eventually(lambda: _reconnected(listener), timeout=30, what="a connection")
        assert not task.done()
        wake.clear()
        await publish(db, "table.changed")
        await asyncio.wait_for(wake.wait(), 10)  # it listens: the notification arrives
        assert attempts == 2
    finally:
        stop.set()
        await task
