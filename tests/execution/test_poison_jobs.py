"""No single job can end an executor: malformed jobs fail alone, permanently, with their reason.

The real executor loop (``ExecutorService.run`` with its pool, listener and ``JobRunner``) runs
in-process against a real Postgres; poison jobs are rows written by hand
(``tests.support.stored_jobs``): ``JobQueue.enqueue`` takes typed intents only.
"""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from icepack_core.intents import RewriteManifests
from icepack_core.queue.jobs import Job, JobQueue
from icepack_core.settings import Settings, load_settings
from icepack_executor.service import ExecutorService
from tests.support.services import running
from tests.support.stored_jobs import enqueue_hand_written
from tests.support.waiting import eventually

POISON = {
    "string list": ["actions", "skipped"],
    "dict without action": [{"params": {}}],
    "params is a list": [{"action": "rewrite_manifests", "params": ["use_caching"]}],
    "unknown action": [{"action": "drop_everything"}],
}


@pytest.fixture
def executor_settings(database_url: str, tmp_path: Path) -> Settings:
    # No catalog is configured for the table below: its inspection fails (logged, not fatal),
    # and none of these jobs ever reaches Spark.
    return load_settings(
        database_url=database_url,
        data_dir=tmp_path / "data",
        poll_interval_seconds=0.2,
        job_backoff_base_seconds=0,
        job_lease_seconds=30,
    )


async def test_poison_jobs_fail_alone_and_the_executor_runs_the_next_job(
    db: asyncpg.Pool, executor_settings: Settings
) -> None:
    queue = JobQueue(db)
    table_id = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('c', 'n', 't') RETURNING id"
    )
    dropped_id = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name, dropped_at) "
        "VALUES ('c', 'n', 'gone', now()) RETURNING id"
    )
    poison = {}
    for priority, (label, actions) in enumerate(POISON.items()):
        poison[label] = (
            await enqueue_hand_written(db, table_id, actions, priority=priority, max_attempts=3)
        ).id
    poison["dropped table"] = (
        await queue.enqueue(dropped_id, [RewriteManifests()], priority=10, max_attempts=3)
    ).job.id

    async with running([ExecutorService()], executor_settings) as tasks:

        async def all_finished() -> dict[str, Job] | None:
            states = {label: await queue.get(job_id) for label, job_id in poison.items()}
            done = all(j.state.terminal for j in states.values())
            return states if done else None

        finished = await eventually(all_finished, timeout=60, what="poison jobs to finish")
        assert finished is not None
        for label, job in finished.items():
            assert job.state.value == "failed", (label, job.state, job.error)
            assert job.attempts == 1, (label, job.attempts)  # permanent: never retried
            assert job.error, label
        errors = {label: job.error or "" for label, job in finished.items()}
        # Refused by the intent validation before any Spark call, naming the field.
        assert "actions[0]" in errors["string list"]
        assert 'needs an "action" name' in errors["dict without action"]
        assert "actions[0].params" in errors["params is a list"]
        assert "unknown action 'drop_everything'" in errors["unknown action"]
        assert "unknown or dropped" in errors["dropped table"]
        assert not any(t.done() for t in tasks), "an executor task ended"

        good = (await queue.enqueue(table_id, [], priority=0)).job.id

        async def good_done() -> Job | None:
            job = await queue.get(good)
            return job if job.state.terminal else None

        good_job = await eventually(good_done, timeout=60, what="the good job to finish")
        assert good_job is not None
        assert good_job.state.value == "succeeded", good_job.error
        assert not any(t.done() for t in tasks), "an executor task ended"
    assert await db.fetchval("SELECT count(*) FROM icepack.table_locks") == 0
