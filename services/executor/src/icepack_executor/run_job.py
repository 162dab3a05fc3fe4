"""Running one claimed job: table lock, lease heartbeat, actions in order, fenced finish."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from icepack_core.actions import ActionError, run_action
from icepack_core.errors import LockHeld, StaleFence
from icepack_core.jobs import Job, JobQueue
from icepack_core.lease import CancelRequested, JobLease, LeaseLost
from icepack_core.locks import TableLocks
from icepack_core.runner import ServiceContext

LOCK_RETRY_SECONDS = 60.0


class JobRunner:
    def __init__(self, ctx: ServiceContext, queue: JobQueue) -> None:
        self.ctx = ctx
        self.queue = queue
        self.locks = TableLocks(ctx.pool)

    async def run(self, job: Job) -> None:
        """Run ``job`` to a terminal or re-queued state; never raises for job failures."""
        log = self.ctx.log.bind(job_id=job.id, table_id=job.table_id, fence=job.fence)
        lease_seconds = self.ctx.settings.job_lease_seconds
        lock = None
        try:
            if job.table_id is not None:
                lock = await self.locks.acquire(
                    job.table_id, self.ctx.worker_id, job.fence, lease_seconds, job_id=job.id
                )
            lease = JobLease(self.queue, job, lease_seconds, self.locks, lock)
            results = await lease.run(self._actions(job))
            await self.queue.complete(job, {"actions": results})
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

    async def _actions(self, job: Job) -> list[dict[str, Any]]:
        results = []
        for action in job.actions:
            started = datetime.now(UTC)
            name = str(action.get("action", ""))
            try:
                output = await run_action(self.ctx.settings, job, action)
            except ActionError as exc:
                await self.queue.record_action(
                    job, action=name, state="failed", started_at=started,
                    finished_at=datetime.now(UTC), error=str(exc),
                )
                raise
            await self.queue.record_action(
                job, action=name, state="succeeded", started_at=started,
                finished_at=datetime.now(UTC), procedure=output.get("procedure"),
                sql_text=output.get("sql"), output=output.get("output", {}),
                impact=output.get("impact", {}),
            )
            results.append({"action": name, **output.get("output", {})})
        return results
