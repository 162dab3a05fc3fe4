"""Table locks: one running maintenance job per table, taken under the job's fence.

A lock is acquired with the job's current fence and released only by the owner that still holds
that fence, so a stale executor can neither take nor free a table another executor now works on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from icepack_core.db.queries import load_query
from icepack_core.errors import LockHeld, StaleFence


@dataclass(frozen=True, slots=True)
class TableLock:
    table_id: int
    owner: str
    job_id: int | None
    fence: int
    expires_at: datetime


class TableLocks:
    """Intent-named operations on ``icepack.table_locks``."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def acquire(
        self, table_id: int, owner: str, fence: int, ttl_seconds: float, job_id: int | None = None
    ) -> TableLock:
        """Take the table's lock for ``job_id`` under ``fence``.

        Raises:
            StaleFence: the job's fence moved on (the caller lost the job).
            LockHeld: another job holds an unexpired lock on the table.
        """
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                load_query("lock_acquire"), table_id, owner, job_id, fence, ttl_seconds
            )
            if row is not None:
                return TableLock(table_id, owner, job_id, fence, row["expires_at"])
            if job_id is not None:
                current = await conn.fetchval(load_query("job_running_fence"), job_id)
                if current != fence:
                    raise StaleFence(job_id, fence, "acquire the table lock")
            raise LockHeld(table_id)

    async def renew(self, lock: TableLock, ttl_seconds: float) -> TableLock:
        """Extend the lock. Raises ``StaleFence`` when the caller no longer owns it."""
        expires = await self.pool.fetchval(
            load_query("lock_renew"), lock.table_id, lock.owner, lock.fence, ttl_seconds
        )
        if expires is None:
            raise StaleFence(lock.job_id or 0, lock.fence, "renew the table lock")
        return TableLock(lock.table_id, lock.owner, lock.job_id, lock.fence, expires)

    async def release(self, lock: TableLock) -> None:
        """Release the lock. Raises ``StaleFence`` when the caller no longer owns it."""
        released = await self.pool.fetchval(
            load_query("lock_release"), lock.table_id, lock.owner, lock.fence
        )
        if released is None:
            raise StaleFence(lock.job_id or 0, lock.fence, "release the table lock")

    async def holder(self, table_id: int) -> TableLock | None:
        row = await self.pool.fetchrow(load_query("lock_get"), table_id)
        if row is None:
            return None
        return TableLock(
            row["table_id"], row["owner"], row["job_id"], row["fence"], row["expires_at"]
        )
