"""Running one claimed job: table lock, lease heartbeat, actions in order, fenced finish."""

from __future__ import annotations

import asyncio

from opentelemetry.trace import SpanKind

from icepack_core.actions import ActionError
from icepack_core.errors import LockHeld, StaleFence
from icepack_core.inspect import Inspector
from icepack_core.inspect.store import ManifestStatsStore
from icepack_core.job_execution import ActionRecord, JobExecution
from icepack_core.jobs import Job, JobQueue
from icepack_core.lease import CancelRequested, JobLease, LeaseLost
from icepack_core.locks import TableLocks
from icepack_core.runner import ServiceContext
from icepack_core.service_metrics import JOBS_FINISHED
from icepack_core.spark.engine import SparkEngine
from icepack_core.telemetry import parent_context, tracer


class JobRunner:
    """Runs claimed jobs with one Spark engine (opened on first use, reused across jobs)."""

    def __init__(self, ctx: ServiceContext, queue: JobQueue, engine: SparkEngine) -> None:
        self.ctx = ctx
        self.queue = queue
        self.locks = TableLocks(ctx.pool)
        self.engine = engine
        self.execution = JobExecution(
            ctx.pool, engine, Inspector(ctx.settings, cache=ManifestStatsStore(ctx.pool)))

    async def run(self, job: Job) -> None:
        """Run ``job`` to a terminal or re-queued state; never raises for job failures.

        Its span continues the trace of whoever enqueued it (the planner's, for planned jobs).
        """
        with tracer().start_as_current_span(
            "executor job", context=parent_context(job.traceparent), kind=SpanKind.CONSUMER,
            attributes={"icepack.job_id": job.id, "icepack.table_id": job.table_id or 0,
                        "icepack.fence": job.fence},
        ):
            await self._run(job)

    async def _run(self, job: Job) -> None:
        log = self.ctx.log.bind(job_id=job.id, table_id=job.table_id, fence=job.fence)
        lease_seconds = self.ctx.settings.job_lease_seconds
        lock = None
        try:
            if job.table_id is None:
                raise ActionError("job names no table", retryable=False)
            lock = await self.locks.acquire(
                job.table_id, self.ctx.worker_id, job.fence, lease_seconds, job_id=job.id
            )
            lease = JobLease(self.queue, job, lease_seconds, self.locks, lock,
                             on_stop=self.engine.interrupt)

            async def record(action: ActionRecord) -> None:
                await self.queue.record_action(
                    job, action=action.action, state=action.state,
                    started_at=action.started_at, finished_at=action.finished_at,
                    procedure=action.procedure, sql_text=action.sql_text,
                    output=action.output, impact=action.impact, error=action.error)

            results = await lease.run(self.execution.run(job.table_id, job.actions, record))
            await self.queue.complete(job, {"actions": results})
            JOBS_FINISHED.add(1, {"outcome": "succeeded"})
            log.info("job.succeeded", actions=len(results))
        except LockHeld as exc:
            await self.queue.fail(job, str(exc), retryable=True)
            log.info("job.table_busy")
        except CancelRequested:
            await self.queue.finish_cancelled(job)
            log.info("job.cancelled")
        except (LeaseLost, StaleFence) as exc:
            log.warning("job.abandoned", error=str(exc))  # someone else owns it now
            return
        except ActionError as exc:
            done = await self.queue.fail(job, str(exc), retryable=exc.retryable)
            JOBS_FINISHED.add(1, {"outcome": done.state.value})
            log.warning("job.failed", error=str(exc), state=done.state.value)
        except asyncio.CancelledError:
            # Shutdown: hand the job back so another executor can run it.
            await asyncio.shield(self.queue.fail(job, "executor stopped", retryable=True))
            raise
        finally:
            if lock is not None:
                try:
                    await self.locks.release(lock)
                except StaleFence:
                    log.info("job.lock_already_taken_over")
