"""The KEDA trigger query, run against a migrated database: it counts claimable jobs only."""

from __future__ import annotations

from datetime import timedelta

import asyncpg

from tests.deploy.deploy_helpers import KUSTOMIZE, find, render


def trigger_query() -> str:
    scaled = find(render(KUSTOMIZE / "base"), "ScaledJob", "icepack-executor")
    query: str = scaled["spec"]["triggers"][0]["metadata"]["query"]
    return query


async def insert_job(db: asyncpg.Pool, key: str, state: str, due_in: timedelta) -> None:
    # A running job must carry a lease (jobs_running_has_lease); queued ones carry none.
    await db.execute(
        """
        INSERT INTO icepack.jobs
            (state, not_before, actions, dedupe_key, trigger, lease_owner, lease_until)
        VALUES ($1, now() + $2, '[]'::jsonb, $3, 'planner',
                CASE WHEN $1 = 'running' THEN 'executor-test' END,
                CASE WHEN $1 = 'running' THEN now() + interval '2 minutes' END)
        """,
        state,
        due_in,
        key,
    )


async def test_trigger_query_counts_only_queued_due_jobs(db: asyncpg.Pool) -> None:
    query = trigger_query()
    # KEDA parses the value as a number; an empty queue must still give 0, not NULL.
    assert await db.fetchval(query) == 0

    await insert_job(db, "due", "queued", timedelta(minutes=-1))
    await insert_job(db, "future", "queued", timedelta(hours=1))
    await insert_job(db, "running", "running", timedelta(minutes=-1))
    value = await db.fetchval(query)
    assert isinstance(value, int)
    assert value == 1


async def test_trigger_query_counts_every_claimable_job(db: asyncpg.Pool) -> None:
    for i in range(3):
        await insert_job(db, f"due-{i}", "queued", timedelta(0))
    assert await db.fetchval(trigger_query()) == 3
