"""The planner service: keeps the job queue healthy (reaper, pruners).

The queue's maintenance loops live here because the planner always runs, while executors are
scaled to zero by KEDA when nothing is queued.
"""

from __future__ import annotations

import asyncio

from icepack_core.events import prune_events
from icepack_core.jobs import Backoff, JobQueue
from icepack_core.runner import Service, ServiceContext, loop_every

REAP_INTERVAL_SECONDS = 5.0  # an expired lease is noticed within seconds
PRUNE_INTERVAL_SECONDS = 600.0  # pruning is cheap but need not be frequent


class PlannerService(Service):
    name = "planner"

    async def run(self, ctx: ServiceContext) -> int:
        s = ctx.settings
        queue = JobQueue(ctx.pool, Backoff(s.job_backoff_base_seconds, s.job_backoff_cap_seconds))

        async def reap() -> None:
            for job in await queue.reap():
                ctx.log.warning("job.reaped", job_id=job.id, state=job.state.value,
                                attempts=job.attempts, error=job.error)

        async def prune() -> None:
            jobs = await queue.prune(s.job_retention_days * 86400)
            events = await prune_events(ctx.pool, s.event_retention_hours * 3600)
            if jobs or events:
                ctx.log.info("queue.pruned", jobs=jobs, events=events)

        await asyncio.gather(
            loop_every(REAP_INTERVAL_SECONDS, ctx.stop, reap, ctx.log, "job.reap"),
            loop_every(PRUNE_INTERVAL_SECONDS, ctx.stop, prune, ctx.log, "queue.prune"),
        )
        return 0
