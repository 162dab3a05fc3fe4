"""The tiny HTTP app every service serves: ``/healthz`` (alive) and ``/readyz`` (can work).

``/readyz`` runs ``SELECT 1`` on the service's pool and the service's own readiness check, and
answers 503 with the reason when either fails. The gateway mounts the same routes in its app.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Generator

import asyncpg
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

ReadyCheck = Callable[[], Awaitable[str | None]]  # None when ready, else the reason


def health_routes(
    service: str, pool: asyncpg.Pool, ready: ReadyCheck | None = None
) -> list[BaseRoute]:
    async def healthz(_request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "service": service})

    async def readyz(_request: Request) -> JSONResponse:
        reason: str | None = None
        try:
            await asyncio.wait_for(pool.fetchval("SELECT 1"), timeout=2)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            reason = f"database unreachable: {type(exc).__name__}"
        if reason is None and ready is not None:
            reason = await ready()
        if reason is not None:
            return JSONResponse(
                {"status": "unavailable", "service": service, "reason": reason}, status_code=503
            )
        return JSONResponse({"status": "ready", "service": service})

    return [Route("/healthz", healthz), Route("/readyz", readyz)]


async def prometheus_metrics(_request: Request) -> Response:
    """This process's OpenTelemetry metrics in Prometheus text format."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


class EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handling: the service runner owns SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def make_server(app: Starlette, host: str, port: int) -> EmbeddedServer:
    config = uvicorn.Config(
        app, host=host, port=port, log_config=None, access_log=False, lifespan="off"
    )
    return EmbeddedServer(config)
