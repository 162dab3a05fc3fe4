"""The discovery service: list every configured catalog on a timer and refresh ``tables``."""

from __future__ import annotations

from icepack_core.runner import Service, ServiceContext


class DiscoveryService(Service):
    name = "discovery"

    async def run(self, ctx: ServiceContext) -> int:
        await ctx.stop.wait()
        return 0
