"""The discovery service: wiring for ``icepack_core.discovery`` (``refresh.Discovery``).

It lists every configured catalog on a timer and refreshes ``tables``.
"""

from __future__ import annotations

from icepack_core.db.resilience import loop_every
from icepack_core.discovery.refresh import Discovery, DiscoveryResult
from icepack_core.runtime.service import Service, ServiceContext


class DiscoveryService(Service):
    name = "discovery"

    async def run(self, ctx: ServiceContext) -> int:
        discovery = Discovery(ctx.settings, ctx.pool)

        async def once() -> DiscoveryResult:
            result = await discovery.run_once()
            ctx.log.info("discovery.pass", discovered=result.discovered, changed=result.changed,
                         dropped=result.dropped, failed=sorted(result.errors))
            return result

        await loop_every(ctx.settings.discovery_interval_seconds, ctx.stop, once, ctx.log,
                         "discovery")
        return 0
