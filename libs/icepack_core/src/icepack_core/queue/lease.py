"""Keeping a claimed job: heartbeat its lease (and its table lock) until the work is done.

``JobLease`` runs a heartbeat task beside the work. When the fence is lost (``StaleFence``), a
cancel is requested, or the lease cannot be renewed before it would expire, it sets ``lost`` /
``cancel_requested`` and cancels the work task, so a stale executor stops its Spark work itself
(docs/architecture.md, "Jobs, leases, fences, locks"): Postgres cannot fence Spark's own commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog

from icepack_core.errors import CancelRequested, LeaseLost, StaleFence
from icepack_core.queue.jobs import Heartbeat, Job, JobQueue
from icepack_core.queue.locks import TableLock, TableLocks

T = TypeVar("T")
log = structlog.get_logger("icepack.lease")


class JobLease:
    """Heartbeat ``job`` (and ``lock``) every ``lease_seconds / 3`` while work runs."""

    def __init__(
        self,
        queue: JobQueue,
        job: Job,
        lease_seconds: float,
        locks: TableLocks | None = None,
        lock: TableLock | None = None,
        on_stop: Callable[[], Awaitable[None]] | None = None,
        *,
        honour_cancel: bool = True,
    ) -> None:
        self.queue = queue
        self.job = job
        self.lease_seconds = lease_seconds
        self.locks = locks
        self.lock = lock
        self.lost = asyncio.Event()
        self.cancel_requested = asyncio.Event()
        self.renewals = 0
        # Called when the work must stop (lease lost, cancel requested): cancelling the asyncio
        # task cannot stop a statement already running in Spark, this can (e.g. cancelAllJobs).
        self.on_stop = on_stop
        # False for work that must finish even for a cancelled job (verifying what the
        # cancelled rewrite committed): only a lost lease stops it.
        self.honour_cancel = honour_cancel

    async def run(self, work: Awaitable[T]) -> T:
        """Await ``work`` under the lease.

        Raises:
            LeaseLost: the lease or fence was lost; the work was cancelled.
            CancelRequested: an operator cancelled the job; the work was cancelled.
        """
        work_task: asyncio.Task[T] = asyncio.ensure_future(work)
        beat = asyncio.create_task(self._heartbeat(work_task), name=f"job{self.job.id}.lease")
        try:
            return await work_task
        except asyncio.CancelledError:
            if self.lost.is_set():
                raise LeaseLost(f"job {self.job.id}: lease lost, work stopped") from None
            if self.cancel_requested.is_set():
                raise CancelRequested(f"job {self.job.id}: cancelled by operator") from None
            raise
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat

    async def _heartbeat(self, work: asyncio.Task[Any]) -> None:
        interval = self.lease_seconds / 3
        deadline = time.monotonic() + self.lease_seconds
        while not work.done():
            await asyncio.sleep(interval)
            try:
                # A renewal that hangs (a half-open connection, a locked row) must not outlive
                # the lease: after it expires another executor may take the job and the table,
                # and this one would run on beside it. A timeout counts as a failed renewal.
                left = max(deadline - time.monotonic(), 0.001)
                beat = await asyncio.wait_for(self._renew(), timeout=left)
                deadline = time.monotonic() + self.lease_seconds
                self.renewals += 1
                if beat.cancel_requested and self.honour_cancel:
                    self.cancel_requested.set()
                    await self._stop(work)
                    return
            except StaleFence as exc:
                log.warning("job.lease_lost", job_id=self.job.id, error=str(exc))
                self.lost.set()
                await self._stop(work)
                return
            except Exception as exc:
                # A renewal that failed for any reason -- the database unreachable (a renewal
                # that timed out is an OSError), asyncpg's InternalClientError after a
                # failover, anything else -- did not renew: keep trying until the lease would
                # expire, then stop the work ourselves, since another executor may take the job
                # after that. The heartbeat itself must never end while the work runs.
                if time.monotonic() + interval >= deadline:
                    log.error("job.lease_expiring", job_id=self.job.id, error=str(exc))
                    self.lost.set()
                    await self._stop(work)
                    return
                log.warning("job.heartbeat_failed", job_id=self.job.id, error=str(exc))

    async def _renew(self) -> Heartbeat:
        beat = await self.queue.heartbeat(self.job, self.lease_seconds)
        if self.locks is not None and self.lock is not None:
            self.lock = await self.locks.renew(self.lock, self.lease_seconds)
        return beat

    async def _stop(self, work: asyncio.Task[Any]) -> None:
        work.cancel()
        if self.on_stop is not None:
            try:
                await self.on_stop()
            except Exception as exc:  # stopping is best effort; Iceberg's commit check remains
                log.warning("job.stop_failed", job_id=self.job.id, error=str(exc))
