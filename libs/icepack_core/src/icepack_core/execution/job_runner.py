"""Running one claimed job end to end; shared by the executor service and ``icepack maintain``.

Order: take the table lock under the job's fence, run the actions through ``JobExecution`` under
a ``JobLease`` (heartbeats; on a lost lease or a cancel it stops the Spark work itself), then
finish the job with a fenced write, and release the lock only if still ours. A rewrite's start
snapshot is recorded before its CALL; it is verified on success, after an error and after a
cancel (the lock is still ours); after a lost lease, a shutdown or a kill it is left for the next
job on the table, which verifies it first (``JobExecution.settle``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import asyncpg
import structlog
from opentelemetry.trace import SpanKind

from icepack_core.db.resilience import TRANSIENT_DB_ERRORS, is_transient
from icepack_core.errors import (
    CancelRequested,
    CommitConflict,
    LeaseLost,
    LockHeld,
    PermanentError,
    RetryableError,
    StaleFence,
)
from icepack_core.execution.job_execution import ActionRecord, JobExecution, Record
from icepack_core.inspection.inspector import Inspector
from icepack_core.inspection.store import ManifestStatsStore
from icepack_core.queue.deferrals import record_conflict
from icepack_core.queue.jobs import Job, JobQueue
from icepack_core.queue.lease import JobLease
from icepack_core.queue.locks import TableLock, TableLocks
from icepack_core.settings import Settings
from icepack_core.spark.engine import SparkEngine
from icepack_core.telemetry.logs import redact_text
from icepack_core.telemetry.metrics import COMMIT_CONFLICTS, JOBS_FINISHED
from icepack_core.telemetry.tracing import parent_context, tracer

log = structlog.get_logger("icepack.jobs")


@dataclass(frozen=True)
class JobRun:
    """How a run ended. ``job`` is the job after its last fenced write (None when the lease was
    lost and the job belongs to someone else now)."""

    job: Job | None
    lock_held: bool = False


@dataclass
class _Attempt:
    """One run of a job: its lock and lease once taken, and the ``record`` and ``guard`` the
    execution calls back."""

    runner: JobRunner
    job: Job
    on_record: Record | None
    lock: TableLock | None = None
    lease: JobLease | None = None

    async def record(self, action: ActionRecord) -> None:
        await self.runner.queue.record_action(self.job, **vars(action))
        if self.on_record is not None:
            await self.on_record(action)

    async def guard(self) -> None:
        # Before a rollback: the table lock is still ours under the job's fence.
        assert self.lease is not None and self.lease.lock is not None
        self.lease.lock = await self.runner.locks.renew(
            self.lease.lock, self.runner.settings.job_lease_seconds
        )


class JobRunner:
    """Runs claimed jobs as ``owner`` with one Spark engine (opened on first use)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        settings: Settings,
        queue: JobQueue,
        engine: SparkEngine,
        owner: str,
        *,
        retry_failures: bool = True,
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.queue = queue
        self.engine = engine
        self.owner = owner
        # The CLI has nobody to retry for it: its failures are final.
        self.retry_failures = retry_failures
        self.locks = TableLocks(pool)
        self.execution = JobExecution(
            pool,
            engine,
            Inspector(settings, cache=ManifestStatsStore(pool)),
            expiry_min_age_hours=settings.expiry_min_age_hours,
            default_cadence_hours=settings.maintenance_cadence_hours,
        )

    async def run(self, job: Job, on_record: Record | None = None) -> JobRun:
        """Run ``job`` to a terminal or re-queued state; never raises for job failures.

        Whatever the job raises, it is failed (permanently, fenced, with the redacted error),
        so no malformed job can stop the caller. Only a failure to write that outcome (the
        database unreachable) propagates.

        Its span continues the trace of whoever enqueued it (the planner's, for planned jobs).
        """
        with tracer().start_as_current_span(
            "executor job",
            context=parent_context(job.traceparent),
            kind=SpanKind.CONSUMER,
            attributes={
                "icepack.job_id": job.id,
                "icepack.table_id": job.table_id or 0,
                "icepack.fence": job.fence,
            },
        ):
            return await self._run(job, on_record)

    async def _run(self, job: Job, on_record: Record | None) -> JobRun:
        bound = log.bind(job_id=job.id, table_id=job.table_id, fence=job.fence)
        attempt = _Attempt(self, job, on_record)
        try:
            return await self._execute(attempt, bound)
        except LockHeld as exc:
            return await self._table_busy(job, exc, bound)
        except CancelRequested:
            return await self._cancelled(attempt, bound)
        except (LeaseLost, StaleFence) as exc:
            bound.warning("job.abandoned", error=str(exc))  # someone else owns it now
            return JobRun(None)
        except CommitConflict as exc:
            return await self._conflicted(job, exc, bound)
        except (RetryableError, PermanentError) as exc:
            retryable = isinstance(exc, RetryableError)
            done = await self.queue.fail(
                job, str(exc), retryable=retryable and self.retry_failures, code=exc.code
            )
            JOBS_FINISHED.add(1, {"outcome": done.state.value})
            bound.warning("job.failed", error=str(exc), state=done.state.value)
            return JobRun(done)
        except Exception as exc:
            return await self._crashed(job, exc, bound)
        except asyncio.CancelledError:
            # Shutdown or Ctrl-C: hand the job back (or, for the CLI, record why it stopped).
            await asyncio.shield(
                self.queue.fail(
                    job,
                    "stopped before it finished",
                    retryable=self.retry_failures,
                    code="STOPPED",
                )
            )
            raise
        finally:
            await self._release(attempt, bound)

    async def _execute(self, attempt: _Attempt, bound: Any) -> JobRun:
        """Lock the table, run the actions under the lease, complete the job (fenced)."""
        job = attempt.job
        if job.table_id is None:
            raise PermanentError("job names no table")
        lease_seconds = self.settings.job_lease_seconds
        attempt.lock = await self.locks.acquire(
            job.table_id, self.owner, job.fence, lease_seconds, job_id=job.id
        )
        attempt.lease = JobLease(
            self.queue, job, lease_seconds, self.locks, attempt.lock, on_stop=self.engine.interrupt
        )
        results = await attempt.lease.run(
            self.execution.run(
                job.table_id,
                job.actions_error or job.actions,
                attempt.record,
                job=job,
                guard=attempt.guard,
            )
        )
        done = await self.queue.complete(job, {"actions": results})
        JOBS_FINISHED.add(1, {"outcome": "succeeded"})
        bound.info("job.succeeded", actions=len(results))
        return JobRun(done)

    async def _table_busy(self, job: Job, exc: LockHeld, bound: Any) -> JobRun:
        """Another job is working on the table: not this job's failure. Its attempt and
        budget charge are given back and it waits its turn (the CLI has no turn to wait)."""
        if self.retry_failures:
            done = await self.queue.give_back(job, "lock", str(exc))
        else:
            done = await self.queue.fail(job, str(exc), retryable=False, code=exc.code)
        bound.info("job.table_busy", lock_waits=done.lock_waits)
        return JobRun(done, lock_held=True)

    async def _cancelled(self, attempt: _Attempt, bound: Any) -> JobRun:
        """The lock is still ours: whatever the cancelled rewrite committed is verified now
        (or the table held) before the job ends."""
        job = attempt.job
        bound.info("job.cancelled")
        assert job.table_id is not None and attempt.lease is not None
        settling = JobLease(
            self.queue,
            job,
            self.settings.job_lease_seconds,
            self.locks,
            attempt.lease.lock,
            on_stop=self.engine.interrupt,
            honour_cancel=False,
        )
        try:
            await settling.run(
                self.execution.settle(job, job.table_id, attempt.record, attempt.guard)
            )
        except PermanentError as exc:  # the table is on hold, with the evidence
            bound.warning("job.cancelled_rewrite_failed_verification", error=str(exc))
        except (LeaseLost, StaleFence) as exc:
            bound.warning("job.abandoned", error=str(exc))  # the next holder verifies
            return JobRun(None)
        return JobRun(await self.queue.finish_cancelled(job))

    async def _crashed(self, job: Job, exc: Exception, bound: Any) -> JobRun:
        """Anything else (a malformed job, a bug, the database going away): this job fails
        alone, with its reason, and the caller goes on to the next one. Permanently, unless
        the database was unreachable; if even this write fails, the caller's loop (or the
        lease reaper) deals with it."""
        error = redact_text(f"{type(exc).__name__}: {exc}")[:4000]
        bound.exception("job.crashed", error=error)
        try:
            done = await self.queue.fail(
                job,
                f"unexpected error: {error}",
                retryable=is_transient(exc) and self.retry_failures,
            )
        except StaleFence:
            bound.warning("job.abandoned", error=error)  # reaped meanwhile: not ours now
            return JobRun(None)
        JOBS_FINISHED.add(1, {"outcome": done.state.value})
        return JobRun(done)

    async def _release(self, attempt: _Attempt, bound: Any) -> None:
        """Release the table lock, only if still ours."""
        if attempt.lock is None:
            return
        try:
            await self.locks.release(attempt.lock)
        except StaleFence:
            bound.info("job.lock_already_taken_over")
        except TRANSIENT_DB_ERRORS as exc:  # its lease runs out by itself
            bound.warning("job.lock_release_failed", error=str(exc))

    async def _conflicted(self, job: Job, exc: CommitConflict, bound: Any) -> JobRun:
        """A writer won a commit conflict: count it for the (table, action), and give the
        claim back (no attempt, no budget spent) to try again after the conflict backoff over
        the conflicts in a row (an attempt that committed part of its work restarted them), or
        after the action's deferral on the table once conflicts keep coming. The CLI, which
        nobody retries for, ends the job failed (retryable in spirit: run it again)."""
        assert job.table_id is not None
        deferral = await record_conflict(self.pool, job.table_id, exc.action, exc.reason)
        deferred = deferral.deferred_until is not None
        COMMIT_CONFLICTS.add(1, {"action": exc.action, "deferred": deferred})
        if not self.retry_failures:
            done = await self.queue.fail(job, str(exc), retryable=False)
        else:
            reason = deferral.reason if deferred and deferral.reason else str(exc)
            done = await self.queue.give_back(
                job,
                "conflict",
                reason,
                not_before=deferral.deferred_until,
                streak=deferral.conflicts,
            )
        bound.info(
            "job.commit_conflict",
            action=exc.action,
            conflicts_in_a_row=deferral.conflicts,
            deferred_until=None if not deferred else str(deferral.deferred_until),
            state=done.state.value,
        )
        return JobRun(done)
