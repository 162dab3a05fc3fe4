"""Per-service coalescing work queue (``icepack.work_items``).

Events become work items keyed by ``(service, table_id)``: ten ``table.changed`` events for one
table are one inspection. Replicas claim items with ``FOR UPDATE SKIP LOCKED`` and a lease, so two
replicas never work on the same table at once; an item re-requested while it is being worked on
is handed back on completion (its generation moved) and done once more.

An item whose holder died (its lease expired: OOM-killed, crashed, node lost) is handed back by
``reap``, not straight to the next claim: each death is counted and waited out with backoff,
and after ``max_deaths`` the item is parked, so one table that kills its worker costs a few
restarts, not a crash loop. A new request for the table (a change, an operator's ask) gives a
parked item one more try.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from icepack_core.db.pool import Conn
from icepack_core.db.queries import load_query
from icepack_core.db.text import storable
from icepack_core.telemetry.tracing import current_traceparent


@dataclass(frozen=True, slots=True)
class WorkItem:
    """A claimed item: the table to work on and the generation the claim saw."""

    service: str
    table_id: int
    generation: int
    reason: str
    traceparent: str | None
    attempts: int


@dataclass(frozen=True, slots=True)
class DeadHolder:
    """An item whose holder died, as ``reap`` handed it back: ``parked`` at the death limit."""

    service: str
    table_id: int
    deaths: int
    parked: bool
    reason: str


class WorkQueue:
    """One service's view of ``work_items``, claiming as ``worker``.

    ``death_backoff_seconds`` doubles per death of an item's holder (at most
    ``death_backoff_cap_seconds``); at ``max_deaths`` the item is parked.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        service: str,
        worker: str,
        lease_seconds: float = 300.0,
        *,
        max_deaths: int = 3,
        death_backoff_seconds: float = 60.0,
        death_backoff_cap_seconds: float = 3600.0,
    ) -> None:
        if max_deaths < 1:
            raise ValueError(f"max_deaths must be at least 1, not {max_deaths}")
        self.pool = pool
        self.service = service
        self.worker = worker
        self.lease_seconds = lease_seconds
        self.max_deaths = max_deaths
        self.death_backoff_seconds = death_backoff_seconds
        self.death_backoff_cap_seconds = death_backoff_cap_seconds

    async def request(
        self,
        conn: Conn,
        table_id: int,
        reason: str,
        not_before: datetime | None = None,
        traceparent: str | None = None,
    ) -> int:
        """Ask for work on a table inside the caller's transaction; returns the generation."""
        generation: int = await conn.fetchval(
            load_query("work_request"),
            self.service,
            table_id,
            reason,
            not_before,
            traceparent or current_traceparent(),
        )
        return generation

    async def reap(self, now: datetime | None = None) -> list[DeadHolder]:
        """Hand back every item of this service whose lease expired before ``now`` (its holder
        died): counted, due again after the death backoff, parked at ``max_deaths``."""
        rows = await self.pool.fetch(
            load_query("work_reap"),
            self.service,
            now,
            self.death_backoff_seconds,
            self.death_backoff_cap_seconds,
            self.max_deaths,
        )
        return [
            DeadHolder(self.service, r["table_id"], r["deaths"], r["parked"], r["last_error"])
            for r in rows
        ]

    async def claim(self, limit: int = 1, now: datetime | None = None) -> list[WorkItem]:
        """Claim up to ``limit`` due, unparked items nobody holds (``reap`` hands back those
        whose holder died)."""
        rows = await self.pool.fetch(
            load_query("work_claim"), self.service, self.worker, self.lease_seconds, limit, now
        )
        return [
            WorkItem(
                self.service,
                r["table_id"],
                r["generation"],
                r["reason"],
                r["traceparent"],
                r["attempts"],
            )
            for r in rows
        ]

    async def complete(self, item: WorkItem, conn: Conn | None = None) -> bool:
        """Finish an item. Returns False when it was re-requested meanwhile and stays queued.

        Pass ``conn`` to finish it in the same transaction as the work's own writes.
        """
        runner = conn or self.pool
        row = await runner.fetchrow(
            load_query("work_complete"), self.service, item.table_id, self.worker, item.generation
        )
        assert row is not None
        return bool(row["deleted"])

    async def fail(self, item: WorkItem, error: str, retry_in: float) -> None:
        """Hand an item back after a failure, due again after ``retry_in`` seconds (``error``
        stored as Postgres can store it, ``db.text.storable``)."""
        await self.pool.execute(
            load_query("work_fail"),
            self.service,
            item.table_id,
            self.worker,
            retry_in,
            storable(error),
        )

    async def heartbeat(self, item: WorkItem) -> bool:
        """Extend the lease; False when this worker no longer holds the item."""
        row = await self.pool.fetchrow(
            load_query("work_heartbeat"),
            self.service,
            item.table_id,
            self.worker,
            self.lease_seconds,
        )
        return row is not None

    async def release_all(self) -> None:
        """Hand back every item this worker holds (graceful shutdown)."""
        await self.pool.execute(load_query("work_release"), self.service, self.worker)

    async def pending(self) -> int:
        count: int = await self.pool.fetchval(load_query("work_pending_count"), self.service)
        return count
