"""The gateway's ASGI app: routes, middleware and error handlers, wired and nothing else.

``create_app(pool)`` is given the pool and never closes it: the service runner (or a test)
opened it and closes it. Under the runner, ``/healthz`` and ``/readyz`` come from the runner's
own app and this one is mounted beside them (``health=False``).
"""

from __future__ import annotations

from pathlib import Path

import asyncpg
import structlog
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from icepack_core.access.tokens import TokenStore
from icepack_core.queue.jobs import JobQueue
from icepack_core.runtime.probes import ReadyCheck, health_routes
from icepack_core.settings import Settings, load_settings
from icepack_gateway import (
    api_budgets,
    api_deletions,
    api_events,
    api_holds,
    api_hooks,
    api_jobs,
    api_policies,
    api_tables,
    metrics,
    openapi,
)
from icepack_gateway.auth import BearerAuth
from icepack_gateway.body_limit import BodyLimit
from icepack_gateway.endpoint import (
    AnyEndpoint,
    AnyParams,
    Call,
    Endpoint,
    NoBody,
    NoParams,
    Reply,
    routes,
)
from icepack_gateway.errors import error_body, exception_handlers
from icepack_gateway.jsonutil import reply
from icepack_gateway.request_ids import RequestIds
from icepack_gateway.state import AlertInputs, GatewayState

UI_DIR = Path(__file__).parent / "ui"
log = structlog.get_logger("icepack.gateway")


async def to_ui(_call: Call[NoParams, AnyParams, NoBody]) -> Response:
    return RedirectResponse("/ui/", status_code=307)


# Every route of the gateway and its contract, in the order they match.
ENDPOINTS: list[AnyEndpoint] = [
    Endpoint(
        "GET",
        "/",
        to_ui,
        summary="Redirect to the web UI",
        query=AnyParams,
        responses={307: Reply("redirect to /ui/", media_type=None)},
    ),
    *openapi.endpoints,
    *metrics.endpoints,
    *api_tables.endpoints,
    *api_holds.endpoints,
    *api_jobs.endpoints,
    *api_budgets.endpoints,
    *api_deletions.endpoints,
    *api_events.endpoints,
    *api_policies.endpoints,
    *api_hooks.endpoints,
]
OPENAPI = openapi.build(ENDPOINTS)


async def internal_error(request: Request, exc: Exception) -> Response:
    log.error("gateway.unhandled", path=request.url.path, error=repr(exc))
    return reply(error_body("INTERNAL", "unexpected error; see the gateway log"), status_code=500)


def api_routes() -> list[BaseRoute]:
    """Every route of the gateway except the health probes."""
    return [*routes(ENDPOINTS), Mount("/ui", StaticFiles(directory=UI_DIR, html=True), name="ui")]


def create_app(
    pool: asyncpg.Pool,
    *,
    health: bool = True,
    ready: ReadyCheck | None = None,
    settings: Settings | None = None,
) -> Starlette:
    """The gateway app on ``pool``; with ``health`` it serves ``/healthz`` + ``/readyz`` too.

    ``settings`` gives the body limit and whether reads need a token; None reads them from the
    environment (``ICEPACK_GATEWAY_MAX_BODY_BYTES``, ``ICEPACK_GATEWAY_READ_AUTH``).
    """
    settings = settings or load_settings()
    tokens = TokenStore(pool)
    routes = [*(health_routes("gateway", pool, ready) if health else []), *api_routes()]
    app = Starlette(
        routes=routes,
        # Outermost first: ids, metrics, then the body cap before auth and any parsing.
        middleware=[
            Middleware(RequestIds),
            Middleware(metrics.RequestMetrics, methods=metrics.route_methods(routes)),
            Middleware(BodyLimit, max_bytes=settings.gateway_max_body_bytes),
            Middleware(BearerAuth, tokens=tokens, read_auth=settings.gateway_read_auth),
        ],
        exception_handlers={**exception_handlers(), Exception: internal_error},
    )
    app.state.openapi = OPENAPI
    app.state.gateway = GatewayState(
        pool=pool,
        jobs=JobQueue(pool),
        tokens=tokens,
        expiry_min_age_hours=settings.expiry_min_age_hours,
        cadence_hours=settings.maintenance_cadence_hours,
        hook_token=(
            settings.gateway_hook_token.get_secret_value()
            if settings.gateway_hook_token is not None
            else None
        ),
        catalogs=frozenset(c.name for c in settings.effective_catalogs()),
        alerting=AlertInputs(
            failure_backoff_base_seconds=settings.failure_backoff_base_seconds,
            failure_backoff_cap_seconds=settings.failure_backoff_cap_seconds,
            job_lease_seconds=settings.job_lease_seconds,
            discovery_interval_seconds=settings.discovery_interval_seconds,
        ),
    )
    return app
