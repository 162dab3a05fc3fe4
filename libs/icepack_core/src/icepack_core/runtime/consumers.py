"""The common shape of an event-driven service: events in, coalesced work items out, workers.

``EventToWork`` turns the topics a service cares about into ``work_items`` (in the consumer's
transaction); ``run_workers`` claims those items and calls the service's ``process`` for each,
completing, retrying with backoff, or releasing them on shutdown. A Postgres outage stops no
worker: claims and outcomes are retried until the database answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable

from opentelemetry.trace import SpanKind

from icepack_core.db.pool import Conn
from icepack_core.db.resilience import is_transient, retry_db, survive
from icepack_core.queue.events import Event, EventConsumer, run_consumer, wait_for_wake
from icepack_core.queue.work_items import DeadHolder, WorkItem, WorkQueue
from icepack_core.runtime.service import ServiceContext
from icepack_core.telemetry.logs import redact_text
from icepack_core.telemetry.tracing import parent_context, tracer

Process = Callable[[WorkItem], Awaitable[None]]
# Told of each item parked because its holders kept dying (records the reason for the table).
OnParked = Callable[[DeadHolder], Awaitable[None]]


def service_queue(ctx: ServiceContext) -> WorkQueue:
    """The service's work queue as the settings configure it (lease, death limit, backoff)."""
    s = ctx.settings
    return WorkQueue(
        ctx.pool,
        ctx.service,
        ctx.worker_id,
        s.work_lease_seconds,
        max_deaths=s.work_max_deaths,
        death_backoff_seconds=s.work_death_backoff_seconds,
    )


def event_to_work_consumer(
    ctx: ServiceContext, queue: WorkQueue, topics: Iterable[str]
) -> EventConsumer:
    """A consumer named after the service that requests work for each event's table."""

    async def handle(conn: Conn, event: Event) -> None:
        if event.table_id is not None:
            await queue.request(conn, event.table_id, event.topic, traceparent=event.traceparent)

    return EventConsumer(ctx.pool, ctx.service, handle, topics=topics)


async def run_workers(
    ctx: ServiceContext,
    queue: WorkQueue,
    process: Process,
    *,
    concurrency: int = 2,
    retry_seconds: float = 30.0,
    on_parked: OnParked | None = None,
) -> None:
    """Claim and process work items until ``ctx.stop``; release held items on the way out.
    Items whose holder died are handed back first (``WorkQueue.reap``); ``on_parked`` is told
    of each one parked."""
    wake = ctx.listener.subscribe()  # any event may have created work

    async def one_round() -> None:
        # A database outage is waited out (retry with backoff), never fatal.
        dead = await retry_db(lambda: queue.reap(), ctx.stop, ctx.log, f"{ctx.service}.reap")
        await _report_dead(ctx, dead, on_parked)
        items = await retry_db(
            lambda: queue.claim(1), ctx.stop, ctx.log, f"{ctx.service}.work_claim"
        )
        if not items:
            if not ctx.stop.is_set():
                await wait_for_wake(wake, ctx.stop, ctx.settings.poll_interval_seconds)
            return
        item = items[0]
        with tracer().start_as_current_span(
            f"{ctx.service} table",
            context=parent_context(item.traceparent),
            kind=SpanKind.CONSUMER,
            attributes={"icepack.table_id": item.table_id, "icepack.reason": item.reason},
        ):
            await _process_one(ctx, queue, process, item, retry_seconds)

    async def worker() -> None:
        while not ctx.stop.is_set():
            # Whatever one round raises, the worker goes on; an item it could not finish is
            # claimed again when its lease expires.
            await survive(one_round, ctx.stop, ctx.log, f"{ctx.service}.worker")

    workers = [
        asyncio.create_task(worker(), name=f"{ctx.service}.worker{i}") for i in range(concurrency)
    ]
    try:
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()
        with contextlib.suppress(Exception):
            await queue.release_all()


async def _process_one(
    ctx: ServiceContext, queue: WorkQueue, process: Process, item: WorkItem, retry_seconds: float
) -> None:
    """Process one claimed item and record the outcome. One table's failure never stops the
    service: it is recorded on the item, which is retried after ``retry_backoff`` of its
    attempts (after 1 s when the database was only unreachable). The item's lease is renewed
    while it is processed, so a long one is not claimed a second time."""
    beat = asyncio.create_task(_keep_claimed(queue, item), name=f"work{item.table_id}.lease")
    try:
        await process(item)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        transient = is_transient(exc)
        if transient:
            ctx.log.warning("work.db_unavailable", table_id=item.table_id, error=str(exc))
        else:
            ctx.log.exception("work.failed", table_id=item.table_id, error=str(exc))
        error = redact_text(f"{type(exc).__name__}: {exc}")[:2000]
        delay = 1.0 if transient else retry_backoff(item.attempts, retry_seconds)
        await retry_db(
            lambda: queue.fail(item, error, delay),
            ctx.stop,
            ctx.log,
            f"{ctx.service}.work_fail",
        )
    else:
        await retry_db(
            lambda: queue.complete(item), ctx.stop, ctx.log, f"{ctx.service}.work_complete"
        )
    finally:
        beat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beat


async def _report_dead(
    ctx: ServiceContext, dead: list[DeadHolder] | None, on_parked: OnParked | None
) -> None:
    for d in dead or []:
        ctx.log.error("work.holder_died", table_id=d.table_id, deaths=d.deaths, parked=d.parked)
        if d.parked and on_parked is not None:
            await on_parked(d)


# The longest wait between two attempts at a failing item: an item that fails for good (a
# table Icepack cannot handle) costs one attempt an hour, not one every 30 s.
MAX_RETRY_SECONDS = 3600.0


def retry_backoff(attempts: int, base: float) -> float:
    """Seconds before the next attempt of an item that failed its ``attempts``-th attempt:
    ``base`` doubled per attempt, at most ``MAX_RETRY_SECONDS``."""
    return float(min(base * 2 ** min(max(attempts - 1, 0), 20), MAX_RETRY_SECONDS))


async def _keep_claimed(queue: WorkQueue, item: WorkItem) -> None:
    """Renew ``item``'s lease every third of it until cancelled or the item is no longer ours.
    A failed renewal is only a risk of the item being processed twice, never a loss."""
    while True:
        await asyncio.sleep(queue.lease_seconds / 3)
        try:
            if not await queue.heartbeat(item):
                return
        except Exception:  # noqa: S112 - the next beat tries again
            continue


async def run_event_service(
    ctx: ServiceContext,
    topics: Iterable[str],
    process: Process,
    concurrency: int = 2,
    on_parked: OnParked | None = None,
) -> None:
    """Consumer and workers of one event-driven service, until ``ctx.stop``."""
    queue = service_queue(ctx)
    consumer = event_to_work_consumer(ctx, queue, topics)
    await asyncio.gather(
        run_consumer(consumer, ctx.listener, ctx.stop, ctx.settings.poll_interval_seconds),
        run_workers(ctx, queue, process, concurrency=concurrency, on_parked=on_parked),
    )
