"""The gateway service: read APIs over the read models of ``icepack_core.db``, operator writes
through ``icepack_core.safety`` and ``queue``, the web UI and Prometheus metrics.

It has no loop of its own: it serves HTTP (through the runner's server) until asked to stop.
"""

from __future__ import annotations

from starlette.routing import BaseRoute, Mount

from icepack_core.runtime.service import Service, ServiceContext
from icepack_gateway.app import create_app


class GatewayService(Service):
    name = "gateway"

    def routes(self, ctx: ServiceContext) -> list[BaseRoute]:
        # Mounted at the root beside the runner's /healthz and /readyz, which match first.
        return [Mount("", app=create_app(ctx.pool, health=False, settings=ctx.settings))]

    async def run(self, ctx: ServiceContext) -> int:
        await ctx.stop.wait()
        return 0
