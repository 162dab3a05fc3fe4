"""Table locks: one running job per table, taken and released under the job's fence."""

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from icepack_core.errors import LockHeld, StaleFence
from icepack_core.intents import RewriteManifests
from icepack_core.queue.jobs import Job, JobQueue
from icepack_core.queue.locks import TableLocks


@pytest.fixture
async def table_id(db: asyncpg.Pool) -> int:
    table_id: int = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('c','n','t') RETURNING id"
    )
    return table_id


async def claim(queue: JobQueue, owner: str, table_id: int, **kwargs: Any) -> Job | None:
    await queue.enqueue(table_id, [RewriteManifests()], **kwargs)
    return await queue.claim(owner, 60, now=kwargs.get("not_before"))


async def test_second_job_cannot_lock_a_locked_table(db: asyncpg.Pool, table_id: int) -> None:
    queue, locks = JobQueue(db), TableLocks(db)
    a = await claim(queue, "a", table_id)
    b = await claim(queue, "b", table_id)
    assert a is not None and b is not None
    lock = await locks.acquire(table_id, "a", a.fence, 60, job_id=a.id)
    holder = await locks.holder(table_id)
    assert holder is not None and holder.owner == "a"
    with pytest.raises(LockHeld, match=f"table {table_id} is locked"):
        await locks.acquire(table_id, "b", b.fence, 60, job_id=b.id)
    await locks.release(lock)
    assert await locks.holder(table_id) is None
    await locks.acquire(table_id, "b", b.fence, 60, job_id=b.id)


async def test_expired_lock_can_be_taken_over(db: asyncpg.Pool, table_id: int) -> None:
    locks = TableLocks(db)
    await locks.acquire(table_id, "cli-1", 0, 60)
    await db.execute("UPDATE icepack.table_locks SET expires_at = now() - interval '1 s'")
    taken = await locks.acquire(table_id, "cli-2", 0, 60)
    assert taken.owner == "cli-2"


async def test_stale_holder_cannot_release_or_renew_after_reclaim(
    db: asyncpg.Pool, table_id: int
) -> None:
    queue, locks = JobQueue(db), TableLocks(db)
    past = datetime.now(UTC) - timedelta(minutes=5)
    stale_job = await claim(queue, "old", table_id, not_before=past)
    assert stale_job is not None
    stale_lock = await locks.acquire(table_id, "old", stale_job.fence, 60, job_id=stale_job.id)
    await queue.reap()
    fresh_job = await queue.claim("new", 60, now=datetime.now(UTC) + timedelta(hours=1))
    assert fresh_job is not None
    assert fresh_job.id == stale_job.id

    # Before the new holder takes the lock, the old one can neither free nor extend it...
    with pytest.raises(StaleFence):
        await locks.release(stale_lock)
    with pytest.raises(StaleFence):
        await locks.renew(stale_lock, 60)
    # ...nor take it again with its old fence.
    await db.execute("UPDATE icepack.table_locks SET expires_at = now() - interval '1 s'")
    with pytest.raises(StaleFence):
        await locks.acquire(table_id, "old", stale_job.fence, 60, job_id=stale_job.id)
    # The new holder takes it over (same job, newer fence) and the old one still cannot free it.
    fresh_lock = await locks.acquire(table_id, "new", fresh_job.fence, 60, job_id=fresh_job.id)
    with pytest.raises(StaleFence):
        await locks.release(stale_lock)
    holder = await locks.holder(table_id)
    assert holder is not None and holder.owner == "new"
    await locks.release(fresh_lock)
