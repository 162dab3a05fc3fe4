"""The executor service: wiring for ``icepack_core.execution`` (``job_runner``).

It claims a job, locks its table, runs its actions under a lease and finishes it.

``--once`` (KEDA ScaledJob): claim one job, run it, exit 0; exit 0 at once when none is
claimable. Loop mode (``icepack up``): claim jobs until stopped. On SIGTERM the current job
finishes first; if the process is killed instead, the lease expires and the planner's reaper
returns the job to the queue.

No single job can end the process: whatever one job raises, that job alone fails (permanently,
fenced, with the redacted error) and the loop claims the next. A database outage is waited out
(``resilience.retry_db``): the claim is retried with backoff until Postgres answers again.
"""

from __future__ import annotations

import asyncio
from typing import Any

from icepack_core.db.resilience import is_transient, pause, retry_db
from icepack_core.errors import StaleFence
from icepack_core.execution.job_runner import JobRunner
from icepack_core.queue.events import wait_for_wake
from icepack_core.queue.jobs import Backoff, Job, JobQueue
from icepack_core.runtime.service import Service, ServiceContext
from icepack_core.spark.engine import engine_for
from icepack_core.telemetry.logs import redact_text
from icepack_core.types import Topic


async def fail_alone(
    queue: JobQueue, job: Job, exc: BaseException, stop: asyncio.Event, log: Any
) -> None:
    """Fail ``job`` for ``exc`` with a fenced write: permanently, unless the database was
    unreachable (then the job is retried later). Never raises; a job whose fence moved on
    belongs to another executor, and one we cannot reach the database for is reaped later."""
    error = redact_text(f"executor error: {type(exc).__name__}: {exc}")[:4000]
    log.error("executor.job_crashed", job_id=job.id, table_id=job.table_id, error=error)
    try:
        await retry_db(
            lambda: queue.fail(job, error, retryable=is_transient(exc)), stop, log, "executor.fail"
        )
    except StaleFence:
        log.info("executor.job_taken_over", job_id=job.id)
    except Exception as again:  # the lease expires and the reaper hands the job back
        log.error(
            "executor.fail_failed",
            job_id=job.id,
            error=redact_text(f"{type(again).__name__}: {again}"),
        )


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
                try:
                    job = await retry_db(
                        lambda: queue.claim(ctx.worker_id, s.job_lease_seconds),
                        ctx.stop,
                        ctx.log,
                        "executor.claim",
                    )
                except Exception as exc:  # not an outage, but no reason to end the process
                    ctx.log.exception("executor.claim_failed", error=f"{type(exc).__name__}: {exc}")
                    await pause(ctx.stop, 1.0)
                    continue
                if job is None:
                    if ctx.stop.is_set():
                        return 0
                    if self.once:
                        ctx.log.info("executor.no_job")
                        return 0
                    await wait_for_wake(wake, ctx.stop, s.poll_interval_seconds)
                    continue
                try:
                    await runner.run(job)  # on SIGTERM the current job finishes first
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the last line of defence: this job fails alone
                    await fail_alone(queue, job, exc, ctx.stop, ctx.log)
                if self.once:
                    return 0
            return 0
        finally:
            await engine.close()
