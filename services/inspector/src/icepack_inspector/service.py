"""The inspector service: wiring for ``icepack_core.inspection`` (``process``).

It turns ``table.*`` and ``job.finished`` events into table inspections, and re-assesses tables
whose health has aged (``ICEPACK_INSPECTOR_REFRESH_SECONDS``).
"""

from __future__ import annotations

import asyncio

from icepack_core.db.resilience import loop_every
from icepack_core.execution.verification.first_sight import FirstSight
from icepack_core.inspection.health import Thresholds
from icepack_core.inspection.process import TableInspections
from icepack_core.runtime.consumers import run_event_service, service_queue
from icepack_core.runtime.service import Service, ServiceContext
from icepack_core.types import Topic

# table.dropped is not here: a dropped table needs no inspection (its work item is skipped).
TOPICS = (Topic.TABLE_DISCOVERED, Topic.TABLE_CHANGED, Topic.JOB_FINISHED)


class InspectorService(Service):
    name = "inspector"

    def __init__(self, thresholds: Thresholds | None = None) -> None:
        self.thresholds = thresholds

    async def run(self, ctx: ServiceContext) -> int:
        # Each full inspection ends with a first-sight pass over the table's new small files.
        sight = FirstSight(ctx.pool)
        inspections = TableInspections(ctx.settings, ctx.pool, self.thresholds, first_sight=sight)
        queue = service_queue(ctx)
        max_age = ctx.settings.inspector_refresh_seconds
        # Check for aged tables a few times per refresh window, at least every 5 minutes.
        check_every = min(max(max_age / 4, 1.0), 300.0)

        async def refresh() -> None:
            queued = await inspections.request_refresh(queue, max_age)
            if queued:
                ctx.log.info("inspector.refresh_queued", tables=queued)

        await asyncio.gather(
            run_event_service(
                ctx,
                [str(t) for t in TOPICS],
                inspections.process,
                concurrency=ctx.settings.worker_concurrency,
                on_parked=inspections.parked,
            ),
            loop_every(check_every, ctx.stop, refresh, ctx.log, "inspector.refresh"),
        )
        return 0
