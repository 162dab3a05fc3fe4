"""Jobs whose stored ``actions`` are not intents: a row written by hand.

``JobQueue.enqueue`` takes only typed intents, so no Icepack writer can store malformed
actions. A row written with SQL by an operator (or a bug) still can, and the executor and the
API must survive it; these helpers produce such rows for the tests that check that.
"""

from __future__ import annotations

import asyncpg

from icepack_core.queue.jobs import Job, JobQueue
from icepack_core.types import JobTrigger


async def enqueue_hand_written(
    pool: asyncpg.Pool,
    table_id: int | None,
    actions: object,
    *,
    priority: int = 100,
    max_attempts: int = 3,
    dedupe_key: str | None = None,
    trigger: JobTrigger = JobTrigger.PLANNER,
) -> Job:
    """Queue a job storing ``actions`` verbatim (any JSON value).

    The job is queued by ``JobQueue.enqueue`` (its event, dedupe and defaults) with no actions,
    and its ``actions`` column is overwritten in the same transaction, so no claimer ever sees
    the job without them. Returns the job as read back (``actions_error`` says why its actions
    are not intents).
    """
    async with pool.acquire() as conn, conn.transaction():
        enqueued = await JobQueue(pool).enqueue(
            table_id,
            [],
            priority=priority,
            max_attempts=max_attempts,
            dedupe_key=dedupe_key,
            trigger=trigger,
            conn=conn,
        )
        assert enqueued.created, f"dedupe key {dedupe_key!r} is held by job {enqueued.job.id}"
        row = await conn.fetchrow(
            "UPDATE icepack.jobs SET actions = $2::jsonb WHERE id = $1 RETURNING *",
            enqueued.job.id,
            actions,
        )
    assert row is not None
    return Job.from_record(row)
