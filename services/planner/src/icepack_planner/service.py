"""The planner service: wiring for ``icepack_core.planning`` (and the queue's upkeep).

It turns ``status.updated`` / ``job.finished`` into recommendations and jobs
(``planning.planner.Planner``), and runs ``queue.upkeep.QueueUpkeep`` (reaper, pruners, timed
re-planning) because the planner always runs, while executors are scaled to zero by KEDA when
nothing is queued. For the same reason it sends the webhook notifications
(``notify.webhooks``) when ``ICEPACK_WEBHOOK_URL`` is set.
"""

from __future__ import annotations

import asyncio

from icepack_core.db.resilience import retry_db
from icepack_core.notify.webhooks import WebhookConfig, forget_consumer, run_webhooks
from icepack_core.planning.planner import Planner
from icepack_core.queue.jobs import Backoff, JobQueue
from icepack_core.queue.upkeep import QueueUpkeep
from icepack_core.queue.work_items import WorkItem, WorkQueue
from icepack_core.runtime.consumers import run_event_service
from icepack_core.runtime.service import Service, ServiceContext
from icepack_core.types import Topic

TOPICS = (Topic.STATUS_UPDATED, Topic.JOB_FINISHED)


class PlannerService(Service):
    name = "planner"

    async def run(self, ctx: ServiceContext) -> int:
        s = ctx.settings
        queue = JobQueue(ctx.pool, Backoff(s.job_backoff_base_seconds, s.job_backoff_cap_seconds))
        planner = Planner(s, ctx.pool, queue)
        work = WorkQueue(ctx.pool, ctx.service, ctx.worker_id, s.work_lease_seconds)
        upkeep = QueueUpkeep(
            ctx.pool,
            queue,
            work,
            s.job_retention_days * 86400,
            s.event_retention_hours * 3600,
            ctx.log,
        )

        async def plan(item: WorkItem) -> None:
            await planner.plan(item.table_id)

        loops = [
            run_event_service(
                ctx, [str(t) for t in TOPICS], plan, concurrency=s.worker_concurrency
            ),
            upkeep.run(ctx.stop),
        ]
        webhooks = WebhookConfig.from_settings(s)
        if webhooks is not None:
            loops.append(
                run_webhooks(ctx.pool, ctx.listener, webhooks, ctx.stop, s.poll_interval_seconds)
            )
        else:
            await retry_db(
                lambda: forget_consumer(ctx.pool), ctx.stop, ctx.log, "planner.webhooks_off"
            )
        await asyncio.gather(*loops)
        return 0
