"""A service's workers wake when work is requested, not only when an event arrives.

The workers subscribe to every event, and so does the consumer that turns those events into work
items; a worker that claims before the consumer's transaction commits finds nothing. The request
itself must wake it, or it sleeps until its poll timer (5 s by default: the p99 of push reaction).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import datetime

import asyncpg
import structlog

from icepack_core.db import pool as dbmod
from icepack_core.queue.events import Listener
from icepack_core.queue.work_items import WorkItem, WorkQueue
from icepack_core.runtime.consumers import run_workers
from icepack_core.runtime.service import ServiceContext
from icepack_core.settings import Settings
from tests.support.waiting import eventually

POLL_NEVER = 3600.0  # only a notification can wake the workers within the test's deadline


async def test_a_work_request_wakes_idle_workers(db: asyncpg.Pool, settings: Settings) -> None:
    settings = settings.model_copy(update={"poll_interval_seconds": POLL_NEVER})
    (table_id,) = [
        r["id"]
        for r in await db.fetch(
            "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('c', 'ns', 't') "
            "RETURNING id"
        )
    ]
    stop = asyncio.Event()
    listener = Listener(lambda: dbmod.connect(settings, "wakeup-listen"))
    ctx = ServiceContext(
        "inspector", settings, db, listener, stop, "inspector@test", structlog.get_logger("t")
    )
    queue = WorkQueue(db, "inspector", ctx.worker_id, settings.work_lease_seconds)
    claims_before = 0
    processed: list[tuple[int, float]] = []

    async def process(item: WorkItem) -> None:
        processed.append((item.table_id, time.monotonic()))

    original_claim = queue.claim

    async def counting_claim(limit: int = 1, now: datetime | None = None) -> list[WorkItem]:
        nonlocal claims_before
        claims_before += 1
        return await original_claim(limit, now)

    queue.claim = counting_claim  # type: ignore[method-assign]
    tasks = [
        asyncio.create_task(listener.run(stop)),
        asyncio.create_task(run_workers(ctx, queue, process, concurrency=2)),
    ]
    try:
        await asyncio.wait_for(listener.connected.wait(), timeout=30)

        async def both_idle() -> bool:  # each worker claimed and found nothing
            return claims_before >= 2

        await eventually(both_idle, timeout=30, what="both workers to find no work")
        await asyncio.sleep(0.2)  # let them reach their wait (a claim in flight would also find it)
        requested = time.monotonic()
        async with db.acquire() as conn, conn.transaction():  # no event: only the request
            await WorkQueue(db, "inspector", "producer").request(conn, table_id, "table.changed")

        async def done() -> bool:
            return bool(processed)

        await eventually(done, timeout=20, what="an idle worker to take the requested work")
        assert processed[0][0] == table_id
        assert processed[0][1] - requested < 20 < POLL_NEVER
    finally:
        stop.set()
        for task in tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, timeout=30)
