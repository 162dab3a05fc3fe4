"""The common shape of an event-driven service: events in, coalesced work items out, workers.

``EventToWork`` turns the topics a service cares about into ``work_items`` (in the consumer's
transaction); ``run_workers`` claims those items and calls the service's ``process`` for each,
completing, retrying with backoff, or releasing them on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable

from opentelemetry.trace import SpanKind

from icepack_core.db import Conn
from icepack_core.events import Event, EventConsumer, run_consumer, wait_for_wake
from icepack_core.runner import ServiceContext
from icepack_core.telemetry import parent_context, tracer
from icepack_core.work_items import WorkItem, WorkQueue

Process = Callable[[WorkItem], Awaitable[None]]


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
) -> None:
    """Claim and process work items until ``ctx.stop``; release held items on the way out."""
    wake = ctx.listener.subscribe()  # any event may have created work

    async def worker() -> None:
        while not ctx.stop.is_set():
            items = await queue.claim(1)
            if not items:
                await wait_for_wake(wake, ctx.stop, ctx.settings.poll_interval_seconds)
                continue
            item = items[0]
            with tracer().start_as_current_span(
                f"{ctx.service} table",
                context=parent_context(item.traceparent),
                kind=SpanKind.CONSUMER,
                attributes={"icepack.table_id": item.table_id, "icepack.reason": item.reason},
            ):
                try:
                    await process(item)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # one table's failure never stops the service
                    ctx.log.exception("work.failed", table_id=item.table_id, error=str(exc))
                    await queue.fail(item, f"{type(exc).__name__}: {exc}", retry_seconds)
                else:
                    await queue.complete(item)

    workers = [asyncio.create_task(worker(), name=f"{ctx.service}.worker{i}")
               for i in range(concurrency)]
    try:
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()
        with contextlib.suppress(Exception):
            await queue.release_all()


async def run_event_service(
    ctx: ServiceContext, topics: Iterable[str], process: Process, concurrency: int = 2
) -> None:
    """Consumer and workers of one event-driven service, until ``ctx.stop``."""
    queue = WorkQueue(ctx.pool, ctx.service, ctx.worker_id, ctx.settings.work_lease_seconds)
    consumer = event_to_work_consumer(ctx, queue, topics)
    await asyncio.gather(
        run_consumer(consumer, ctx.listener, ctx.stop, ctx.settings.poll_interval_seconds),
        run_workers(ctx, queue, process, concurrency=concurrency),
    )
