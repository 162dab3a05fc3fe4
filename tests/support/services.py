"""Run real services in-process (their real ``run`` loops, listeners and pools), so a test can
watch them through Postgres and collect their spans with the in-memory exporter."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Sequence

import structlog

from icepack_core.db import pool as icedb
from icepack_core.queue.events import Listener
from icepack_core.runtime.service import Service, ServiceContext
from icepack_core.settings import Settings


@contextlib.asynccontextmanager
async def running(
    services: Sequence[Service], settings: Settings
) -> AsyncIterator[list[asyncio.Task[object]]]:
    """Start each service with its own pool and LISTEN connection; stop them all on exit.

    Yields the tasks (per service: its listener, then its main loop), so a test can check that
    they are still running."""
    stop = asyncio.Event()
    pools = []
    tasks: list[asyncio.Task[object]] = []
    try:
        for service in services:
            pool = await icedb.create_pool(settings, service.name)
            pools.append(pool)
            listener = Listener(
                functools.partial(icedb.connect, settings, f"{service.name}-listen")
            )
            ctx = ServiceContext(
                service.name,
                settings,
                pool,
                listener,
                stop,
                f"{service.name}@test",
                structlog.get_logger(service.name),
            )
            tasks.append(asyncio.create_task(listener.run(stop), name=f"{service.name}.listen"))
            tasks.append(asyncio.create_task(service.run(ctx), name=f"{service.name}.main"))
        yield tasks
        failed = [t for t in tasks if t.done() and not t.cancelled() and t.exception()]
        assert not failed, [repr(t.exception()) for t in failed]
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=120)
        for pool in pools:
            await pool.close()
