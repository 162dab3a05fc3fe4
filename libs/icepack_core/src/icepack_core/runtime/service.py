"""The shared service runner: one lifespan that owns every resource of a service process.

``run_service`` sets up logging and telemetry, migrates (advisory-locked), opens the pool and the
LISTEN connection (waiting with backoff while the database does not answer), serves
``/healthz`` + ``/readyz``, runs the service's loop, and on SIGTERM or
SIGINT sets ``stop`` so the loop finishes or releases its current item; then it closes what it
opened. Side tasks (listener, HTTP server) are supervised: if one dies, the service stops instead
of running on blind.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
import signal
import socket
from dataclasses import dataclass
from typing import Any

import asyncpg
import structlog
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Route

from icepack_core.db import pool as db
from icepack_core.db.migrate import migrate
from icepack_core.db.resilience import retry_db
from icepack_core.queue.events import Listener
from icepack_core.runtime.probes import (
    EmbeddedServer,
    ReadyCheck,
    health_routes,
    make_server,
    prometheus_metrics,
)
from icepack_core.settings import Settings
from icepack_core.telemetry.logs import setup_logging
from icepack_core.telemetry.tracing import setup_telemetry

# Where each service listens by default: BASE_PORT plus its offset, so `icepack up` can run all
# five on one machine (in Kubernetes every pod sets ICEPACK_HTTP_PORT=8080).
BASE_PORT = 8080
PORT_OFFSETS = {"gateway": 0, "discovery": 1, "inspector": 2, "planner": 3, "executor": 4}


@dataclass
class ServiceContext:
    """What a service's loop gets from the runner."""

    service: str
    settings: Settings
    pool: asyncpg.Pool
    listener: Listener
    stop: asyncio.Event
    worker_id: str
    log: Any


class Service(abc.ABC):
    """A service: a name, its loop, and optionally HTTP routes and a readiness check."""

    name: str = "service"

    @abc.abstractmethod
    async def run(self, ctx: ServiceContext) -> int:
        """Run until ``ctx.stop`` is set (or the work is done, in one-shot modes).

        Returns:
            The process exit code.
        """

    def routes(self, ctx: ServiceContext) -> list[BaseRoute]:
        """Extra HTTP routes beside ``/healthz`` and ``/readyz`` (the gateway's API)."""
        return []

    async def ready(self, ctx: ServiceContext) -> str | None:
        """None when ready, otherwise why not."""
        return None


def worker_id(service: str) -> str:
    """A unique, readable id for this process: ``service@host:pid``."""
    return f"{service}@{socket.gethostname()}:{os.getpid()}"


async def run_service(service: Service, settings: Settings, *, serve_http: bool = True) -> int:
    """Run one service process to completion; returns its exit code."""
    setup_logging(service.name, settings.log_level, settings.log_format)
    log = structlog.get_logger(f"icepack.{service.name}")
    telemetry = setup_telemetry(service.name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _request_stop, stop, log, sig)

    async def migrated() -> None:
        conn = await db.connect(settings, f"{service.name}-migrate")
        try:
            await migrate(conn)
        finally:
            await conn.close()

    # A database that is not up yet (or restarting) is waited for, not a reason to exit.
    await retry_db(migrated, stop, log, "service.migrate")
    pool = await retry_db(lambda: db.create_pool(settings, service.name), stop, log, "service.pool")
    if pool is None:  # stopped before the database ever answered
        log.info("service.stopped", exit_code=0)
        return 0
    listener = Listener(lambda: db.connect(settings, f"{service.name}-listen"))
    ctx = ServiceContext(service.name, settings, pool, listener, stop, worker_id(service.name), log)
    side_tasks: list[asyncio.Task[Any]] = [
        asyncio.create_task(listener.run(stop), name=f"{service.name}.listener")
    ]
    server = _http_server(service, ctx) if serve_http else None
    if server is not None:
        side_tasks.append(asyncio.create_task(server.serve(), name=f"{service.name}.http"))
    log.info("service.started", worker=ctx.worker_id, database=settings.masked_dsn)
    main = asyncio.create_task(service.run(ctx), name=f"{service.name}.main")
    code = 1
    try:
        code = await _supervise(main, side_tasks, stop, log)
    finally:
        stop.set()
        if server is not None:
            server.should_exit = True
        for task in side_tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, timeout=5)
        await pool.close()
        telemetry.shutdown()
        log.info("service.stopped", exit_code=code)
    return code


def _http_server(service: Service, ctx: ServiceContext) -> EmbeddedServer:
    """The service's HTTP server (health, its own routes, ``/metrics``) on its port."""
    # /metrics last: a service that serves its own (the gateway's fleet view) wins.
    app = Starlette(
        routes=[
            *health_routes(service.name, ctx.pool, _ready(service, ctx)),
            *service.routes(ctx),
            Route("/metrics", prometheus_metrics),
        ]
    )
    port = ctx.settings.http_port
    if port is None:
        port = BASE_PORT + PORT_OFFSETS.get(service.name, 0)
    return make_server(app, ctx.settings.http_host, port)


def _ready(service: Service, ctx: ServiceContext) -> ReadyCheck:
    async def check() -> str | None:
        if not ctx.listener.connected.is_set():
            return "event listener not connected"
        return await service.ready(ctx)

    return check


def _request_stop(stop: asyncio.Event, log: Any, sig: signal.Signals) -> None:
    log.info("service.stopping", signal=sig.name)
    stop.set()


async def _supervise(
    main: asyncio.Task[int], side: list[asyncio.Task[Any]], stop: asyncio.Event, log: Any
) -> int:
    """Wait for the main loop; if a side task dies first, stop and report failure.

    Side tasks ending after ``stop`` was set are shutting down, not dying.
    """
    done, _ = await asyncio.wait([main, *side], return_when=asyncio.FIRST_COMPLETED)
    if main in done:
        return main.result()
    died = [t for t in done if t.cancelled() or t.exception() is not None or not stop.is_set()]
    for task in died:
        exc = task.exception() if not task.cancelled() else None
        log.error(
            "service.side_task_died", task=task.get_name(), error=repr(exc) if exc else "exited"
        )
    stop.set()
    try:
        code = await asyncio.wait_for(main, timeout=30)
    except Exception:
        return 1
    return 1 if died else code
