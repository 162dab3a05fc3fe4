"""Keeping the queue healthy: reap expired leases, prune old jobs and events, re-plan stale tables,
and queue a ``purge_quarantine`` job for each table whose quarantined orphans are due.

These loops belong to the queue, not to any one domain; the planner service runs them because
the planner always runs, while executors are scaled to zero by KEDA when nothing is queued
(docs/architecture.md, "Jobs, leases, fences, locks").
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg
import structlog

from icepack_core.db.queries import load_query
from icepack_core.db.resilience import loop_every
from icepack_core.intents import PurgeQuarantine
from icepack_core.queue.events import prune_events
from icepack_core.queue.jobs import JobQueue
from icepack_core.queue.work_items import WorkQueue
from icepack_core.types import JobTrigger

REAP_INTERVAL_SECONDS = 5.0  # an expired lease is noticed within seconds
PRUNE_INTERVAL_SECONDS = 600.0  # pruning is cheap but need not be frequent
REPLAN_INTERVAL_SECONDS = 900.0  # snapshot age moves slowly; a quarter hour is plenty
REPLAN_BATCH = 1000
# Re-plans a planning asked for (``planner_replans``, a minimum interval ending) are due within
# this of their time: the interval is minutes, so a few seconds late is on time.
REPLAN_DUE_INTERVAL_SECONDS = 10.0
PURGE_INTERVAL_SECONDS = 3600.0  # quarantine windows are days long
PURGE_BATCH = 1000


@dataclass
class QueueUpkeep:
    """The queue's periodic maintenance over ``pool``; ``run`` loops until ``stop`` is set.

    ``work`` is the planner's work queue: ``replan`` asks it to re-plan every table whose
    recommendation is older than ``REPLAN_INTERVAL_SECONDS`` (time-based actions such as
    snapshot expiry fall due without any event), and ``replan_due`` every table a planning
    asked to see again at a time now past (``planner_replans``: its minimum interval ended).
    """

    pool: asyncpg.Pool
    jobs: JobQueue
    work: WorkQueue
    job_retention_seconds: float
    event_retention_seconds: float
    log: structlog.stdlib.BoundLogger

    async def reap(self) -> None:
        """Requeue (with backoff) or fail every job whose lease expired."""
        for job in await self.jobs.reap():
            self.log.warning(
                "job.reaped",
                job_id=job.id,
                state=job.state.value,
                attempts=job.attempts,
                error=job.error,
            )

    async def prune(self) -> None:
        """Delete finished jobs and consumed events past their retention."""
        jobs = await self.jobs.prune(self.job_retention_seconds)
        pruned = await prune_events(self.pool, self.event_retention_seconds)
        if jobs or pruned:
            self.log.info("queue.pruned", jobs=jobs, events=pruned)

    async def replan(self) -> None:
        """Request a ``replan`` work item for each table whose recommendation went stale."""
        rows = await self.pool.fetch(
            load_query("recommendation_stale_tables"), REPLAN_INTERVAL_SECONDS, None, REPLAN_BATCH
        )
        async with self.pool.acquire() as conn, conn.transaction():
            for row in rows:
                await self.work.request(conn, row["id"], "replan")

    async def replan_due(self, now: datetime | None = None) -> list[int]:
        """Turn the re-plans that plannings asked for and that are due (``planner_replans``)
        into ``replan`` work items, in one transaction; returns the table ids."""
        async with self.pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                load_query("recommendation_replans_take_due"), now, REPLAN_BATCH
            )
            for row in rows:
                await self.work.request(conn, row["table_id"], "replan")
        return [row["table_id"] for row in rows]

    async def _replan_due(self) -> None:
        await self.replan_due()

    async def purge(self, now: datetime | None = None) -> list[int]:
        """Queue one ``purge_quarantine`` job per live, not held table with quarantined files
        due (``deletion_purge_due_tables``), deduplicated per table; returns the job ids. The
        executor deletes the files (it has the table's FileIO), admitted like any action."""
        due = await self.pool.fetch(
            load_query("deletion_purge_due_tables"), now or datetime.now(UTC), PURGE_BATCH
        )
        ids = []
        for row in due:
            enqueued = await self.jobs.enqueue(
                row["table_id"],
                [PurgeQuarantine(reason="quarantined orphan files past their retention window")],
                dedupe_key=f"purge:{row['table_id']}",
                trigger=JobTrigger.PLANNER,
            )
            ids.append(enqueued.job.id)
        if ids:
            self.log.info("quarantine.purge_queued", jobs=len(ids))
        return ids

    async def _purge(self) -> None:
        await self.purge()

    async def run(self, stop: asyncio.Event) -> None:
        """Run the five loops until ``stop``; a failing pass is logged and retried next tick."""
        await asyncio.gather(
            loop_every(PURGE_INTERVAL_SECONDS, stop, self._purge, self.log, "quarantine.purge"),
            loop_every(REPLAN_INTERVAL_SECONDS, stop, self.replan, self.log, "planner.replan"),
            loop_every(
                REPLAN_DUE_INTERVAL_SECONDS, stop, self._replan_due, self.log, "planner.replan_due"
            ),
            loop_every(REAP_INTERVAL_SECONDS, stop, self.reap, self.log, "job.reap"),
            loop_every(PRUNE_INTERVAL_SECONDS, stop, self.prune, self.log, "queue.prune"),
        )
