"""The gateway service: read APIs, operator writes, the web UI and Prometheus metrics."""

from __future__ import annotations

from icepack_core.runner import Service, ServiceContext
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route


async def metrics(_request: Request) -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


class GatewayService(Service):
    name = "gateway"

    def routes(self, ctx: ServiceContext) -> list[BaseRoute]:
        return [Route("/metrics", metrics)]

    async def run(self, ctx: ServiceContext) -> int:
        await ctx.stop.wait()
        return 0
