"""The event bus: an outbox table in Postgres plus ``LISTEN/NOTIFY`` wake-ups.

Delivery rules (docs/architecture.md, "Events"):

* ``publish`` writes in the caller's transaction, so an event exists iff its state change does.
* A consumer reads events after its ``(xid, id)`` cursor and only those whose writing
  transaction is older than the oldest one still running (``pg_snapshot_xmin``). An event whose
  transaction commits late therefore shows up late, but is never skipped.
* The consumer's handler runs in the same transaction that advances its cursor: the handler's
  writes and the offset commit together (at-least-once, and exactly-once for Postgres effects).
* NOTIFY only wakes consumers; they also poll, and after a lost connection re-LISTEN and catch
  up from their cursor.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
import structlog
from opentelemetry.trace import SpanKind

from icepack_core.db.pool import Conn
from icepack_core.db.queries import load_query
from icepack_core.telemetry.logs import redact
from icepack_core.telemetry.tracing import current_traceparent, parent_context, tracer
from icepack_core.types import JSONObject

CHANNEL = "icepack_events"
# A payload as a producer writes it: a JSON object, each topic's keys documented with the topic
# (docs/architecture.md, "Events"); consumers read it back as ``Event.payload``.
Payload = Mapping[str, object]
log = structlog.get_logger("icepack.events")


@dataclass(frozen=True, slots=True)
class Event:
    """One row of the outbox."""

    id: int
    topic: str
    table_id: int | None
    payload: JSONObject  # each topic's own JSON, read back as written
    traceparent: str | None
    created_at: datetime
    xid: int

    @classmethod
    def from_record(cls, row: asyncpg.Record) -> Event:
        return cls(
            id=row["id"],
            topic=row["topic"],
            table_id=row["table_id"],
            payload=row["payload"],
            traceparent=row["traceparent"],
            created_at=row["created_at"],
            xid=row["xid"],
        )


async def publish(
    conn: Conn,
    topic: str,
    *,
    table_id: int | None = None,
    payload: Payload | None = None,
    traceparent: str | None = None,
) -> int:
    """Append an event inside the caller's transaction; returns its id.

    ``traceparent`` defaults to the active span's, so the consumer's span becomes its child.
    """
    event_id: int = await conn.fetchval(
        load_query("event_publish"),
        topic,
        table_id,
        redact(payload or {}),  # payloads carry error texts; secrets never reach the outbox
        traceparent or current_traceparent(),
    )
    return event_id


async def publish_many(
    conn: Conn, topic: str, events: Sequence[tuple[int | None, Payload, str | None]]
) -> None:
    """Append one ``topic`` event per (table id, payload, traceparent), in that order, with one
    statement inside the caller's transaction (payloads redacted as in ``publish``)."""
    if not events:
        return
    await conn.execute(
        load_query("event_publish_many"),
        topic,
        [table_id for table_id, _, _ in events],
        [json.dumps(redact(payload)) for _, payload, _ in events],
        [traceparent for _, _, traceparent in events],
    )


Handler = Callable[[Conn, Event], Awaitable[None]]


class EventConsumer:
    """A named, checkpointed reader of the outbox.

    Several processes may run a consumer with the same name; one at a time holds the offset row
    (``FOR UPDATE SKIP LOCKED``), the others find nothing to do and wait for the next wake-up.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        name: str,
        handler: Handler,
        topics: Iterable[str] | None = None,
        batch_size: int = 500,
    ) -> None:
        self.pool = pool
        self.name = name
        self.handler = handler
        self.topics = frozenset(topics) if topics is not None else None
        self.batch_size = batch_size
        self._ensured = False

    def wants(self, topic: str) -> bool:
        return self.topics is None or topic in self.topics

    async def consume_once(self) -> int:
        """Handle one batch; returns how many events were read (0: caught up or locked)."""
        async with self.pool.acquire() as conn:
            if not self._ensured:
                await conn.execute(load_query("consumer_offset_ensure"), self.name)
                self._ensured = True
            async with conn.transaction():
                offset = await conn.fetchrow(load_query("consumer_offset_lock"), self.name)
                if offset is None:
                    return 0  # a replica holds the offset right now
                rows = await conn.fetch(
                    load_query("event_read_after"),
                    offset["last_xid"],
                    offset["last_event_id"],
                    self.batch_size,
                )
                if not rows:
                    return 0
                for row in rows:
                    event = Event.from_record(row)
                    if self.wants(event.topic):
                        await self._handle(conn, event)
                last = rows[-1]
                await conn.execute(
                    load_query("consumer_offset_advance"), self.name, last["xid"], last["id"]
                )
                return len(rows)

    async def _handle(self, conn: Conn, event: Event) -> None:
        with tracer().start_as_current_span(
            f"consume {event.topic}",
            context=parent_context(event.traceparent),
            kind=SpanKind.CONSUMER,
            attributes={
                "icepack.consumer": self.name,
                "icepack.event_id": event.id,
                "icepack.table_id": event.table_id or 0,
            },
        ):
            await self.handler(conn, event)

    async def drain(self) -> int:
        """Consume until caught up; returns the number of events read."""
        total = 0
        while (n := await self.consume_once()) > 0:
            total += n
        return total


class Listener:
    """A dedicated ``LISTEN`` connection (``icepack_events`` unless ``channel`` says otherwise)
    that wakes subscribers.

    It checks the connection when quiet, reconnects after a drop with capped backoff, and wakes
    every subscriber after each (re)connect so they catch up from their offsets. ``on_payload``,
    when given, receives every notification's payload before subscribers are woken.
    """

    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        liveness_interval: float = 5.0,
        channel: str = CHANNEL,
        on_payload: Callable[[str], None] | None = None,
    ) -> None:
        self._connect = connect
        self.liveness_interval = liveness_interval
        self.channel = channel
        self._on_payload = on_payload
        self._subscribers: list[tuple[frozenset[str] | None, asyncio.Event]] = []
        self._lost = asyncio.Event()
        self.connected = asyncio.Event()
        self.reconnects = 0
        self.connections = 0  # successful connects so far (a subscriber sees each one)

    def subscribe(self, topics: Iterable[str] | None = None) -> asyncio.Event:
        """An ``asyncio.Event`` set whenever one of ``topics`` (default: any) is notified."""
        wake = asyncio.Event()
        self._subscribers.append((frozenset(topics) if topics is not None else None, wake))
        return wake

    def _wake(self, topic: str | None) -> None:
        for topics, wake in self._subscribers:
            if topic is None or topics is None or topic in topics:
                wake.set()

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        if self._on_payload is not None:
            self._on_payload(str(payload))
        self._wake(str(payload))

    def _on_terminate(self, _conn: Any) -> None:
        self._lost.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Keep listening until ``stop`` is set."""
        backoff = 0.1
        while not stop.is_set():
            conn: Conn | None = None
            try:
                conn = await self._connect()
                self._lost.clear()
                conn.add_termination_listener(self._on_terminate)
                await conn.add_listener(self.channel, self._on_notify)
                self.connections += 1
                self.connected.set()
                self._wake(None)  # catch up on anything sent while we were away
                backoff = 0.1
                await self._watch(conn, stop)
            except Exception as exc:  # any failed connect or watch: reconnect, never stop listening
                log.warning(
                    "events.listen_lost", channel=self.channel, error=str(exc), retry_in=backoff
                )
            finally:
                self.connected.clear()
                if conn is not None and not conn.is_closed():
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(conn.close(), timeout=2)
            if not stop.is_set():
                self.reconnects += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=backoff)
                backoff = min(backoff * 2, 5.0)

    async def _watch(self, conn: Conn, stop: asyncio.Event) -> None:
        stop_wait = asyncio.ensure_future(stop.wait())
        lost_wait = asyncio.ensure_future(self._lost.wait())
        try:
            while not stop.is_set():
                done, _ = await asyncio.wait(
                    {stop_wait, lost_wait},
                    timeout=self.liveness_interval,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if lost_wait in done:
                    raise asyncpg.InterfaceError("LISTEN connection closed")
                if not done:
                    await asyncio.wait_for(conn.execute("SELECT 1"), timeout=5)
        finally:
            stop_wait.cancel()
            lost_wait.cancel()


async def wait_for_wake(wake: asyncio.Event, stop: asyncio.Event, max_wait: float) -> None:
    """Return on a wake-up, on ``stop`` or after ``max_wait`` seconds, whichever comes first."""
    waiters = {asyncio.ensure_future(wake.wait()), asyncio.ensure_future(stop.wait())}
    try:
        await asyncio.wait(waiters, timeout=max_wait, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    wake.clear()


async def run_consumer(
    consumer: EventConsumer,
    listener: Listener,
    stop: asyncio.Event,
    poll_interval: float,
) -> None:
    """The consumer loop: drain, then wait for a notification, the poll timer or ``stop``."""
    wake = listener.subscribe(consumer.topics)
    while not stop.is_set():
        try:
            await consumer.drain()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the batch rolled back: retried from the same offset
            log.warning(
                "events.consume_failed",
                consumer=consumer.name,
                error=f"{type(exc).__name__}: {exc}",
            )
        await wait_for_wake(wake, stop, poll_interval)


async def prune_events(
    pool: asyncpg.Pool, retention_seconds: float, now: datetime | None = None
) -> int:
    """Delete events every consumer has read and that are older than the retention window."""
    status = await pool.execute(load_query("event_prune"), retention_seconds, now)
    return int(status.split()[-1])
