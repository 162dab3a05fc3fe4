"""The planner service: turn ``status.updated`` / ``job.finished`` into recommendations and jobs,
re-plan on a timer for time-based actions (snapshot age), and keep the job queue healthy (reaper,
pruners). The queue's maintenance loops live here because the planner always runs, while
executors are scaled to zero by KEDA when nothing is queued.
"""

from __future__ import annotations

import asyncio

from icepack_core.db.queries import load_query
from icepack_core.planning.planner import Planner
from icepack_core.queue.events import prune_events
from icepack_core.queue.jobs import Backoff, JobQueue
from icepack_core.queue.work_items import WorkItem, WorkQueue
from icepack_core.runtime.consumers import run_event_service
from icepack_core.runtime.service import Service, ServiceContext, loop_every
from icepack_core.types import Topic

REAP_INTERVAL_SECONDS = 5.0  # an expired lease is noticed within seconds
PRUNE_INTERVAL_SECONDS = 600.0  # pruning is cheap but need not be frequent
REPLAN_INTERVAL_SECONDS = 900.0  # snapshot age moves slowly; a quarter hour is plenty
REPLAN_BATCH = 1000
TOPICS = (Topic.STATUS_UPDATED, Topic.JOB_FINISHED)


class PlannerService(Service):
    name = "planner"

    async def run(self, ctx: ServiceContext) -> int:
        s = ctx.settings
        queue = JobQueue(ctx.pool, Backoff(s.job_backoff_base_seconds, s.job_backoff_cap_seconds))
        planner = Planner(s, ctx.pool, queue)
        work = WorkQueue(ctx.pool, ctx.service, ctx.worker_id, s.work_lease_seconds)

        async def plan(item: WorkItem) -> None:
            await planner.plan(item.table_id)

        async def replan() -> None:
            rows = await ctx.pool.fetch(load_query("recommendation_stale_tables"),
                                        REPLAN_INTERVAL_SECONDS, None, REPLAN_BATCH)
            async with ctx.pool.acquire() as conn, conn.transaction():
                for row in rows:
                    await work.request(conn, row["id"], "replan")

        async def reap() -> None:
            for job in await queue.reap():
                ctx.log.warning("job.reaped", job_id=job.id, state=job.state.value,
                                attempts=job.attempts, error=job.error)

        async def prune() -> None:
            jobs = await queue.prune(s.job_retention_days * 86400)
            pruned = await prune_events(ctx.pool, s.event_retention_hours * 3600)
            if jobs or pruned:
                ctx.log.info("queue.pruned", jobs=jobs, events=pruned)

        await asyncio.gather(
            run_event_service(ctx, [str(t) for t in TOPICS], plan),
            loop_every(REPLAN_INTERVAL_SECONDS, ctx.stop, replan, ctx.log, "planner.replan"),
            loop_every(REAP_INTERVAL_SECONDS, ctx.stop, reap, ctx.log, "job.reap"),
            loop_every(PRUNE_INTERVAL_SECONDS, ctx.stop, prune, ctx.log, "queue.prune"),
        )
        return 0
