"""The inspector service: turn ``table.*`` and ``job.finished`` events into table inspections."""

from __future__ import annotations

from icepack_core.runner import Service, ServiceContext


class InspectorService(Service):
    name = "inspector"

    async def run(self, ctx: ServiceContext) -> int:
        await ctx.stop.wait()
        return 0
