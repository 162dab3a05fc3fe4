"""The executor service: claim a job, lock its table, run its actions under a lease, finish it.

``--once`` (KEDA ScaledJob): claim one job, run it, exit 0; exit 0 at once when none is
claimable. Loop mode (``icepack up``): claim jobs until stopped. On SIGTERM the current job
finishes first; if the process is killed instead, the lease expires and the planner's reaper
returns the job to the queue.
"""

from __future__ import annotations

from icepack_core.events import wait_for_wake
from icepack_core.job_runner import JobRunner
from icepack_core.jobs import Backoff, JobQueue
from icepack_core.runner import Service, ServiceContext
from icepack_core.spark.engine import engine_for
from icepack_core.types import Topic


class ExecutorService(Service):
    name = "executor"

    def __init__(self, once: bool = False) -> None:
        self.once = once

    async def run(self, ctx: ServiceContext) -> int:
        s = ctx.settings
        queue = JobQueue(ctx.pool, Backoff(s.job_backoff_base_seconds, s.job_backoff_cap_seconds))
        engine = engine_for(s)  # opens nothing until the first statement
        runner = JobRunner(ctx.pool, s, queue, engine, ctx.worker_id)
        wake = ctx.listener.subscribe([Topic.JOB_ENQUEUED, Topic.JOB_FINISHED])
        try:
            while not ctx.stop.is_set():
                job = await queue.claim(ctx.worker_id, s.job_lease_seconds)
                if job is None:
                    if self.once:
                        ctx.log.info("executor.no_job")
                        return 0
                    await wait_for_wake(wake, ctx.stop, s.poll_interval_seconds)
                    continue
                await runner.run(job)  # on SIGTERM the current job finishes first
                if self.once:
                    return 0
            return 0
        finally:
            await engine.close()
