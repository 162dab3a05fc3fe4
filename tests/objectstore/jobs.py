"""Running one job on a table through the executor's path, for the object-store tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from icepack_core.execution.job_execution import JobExecution
from icepack_core.inspection.inspector import Inspector
from icepack_core.intents import Intent
from icepack_core.queue.jobs import Backoff, JobQueue
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine


async def run_job(
    db: Any, settings: Settings, table_id: int, actions: Sequence[Intent]
) -> tuple[Any, list[dict[str, Any]]]:
    """One job through the executor's path: enqueue, claim, ``JobExecution.run``."""
    queue = JobQueue(db, Backoff(base_seconds=0, cap_seconds=0))
    await queue.enqueue(table_id, actions, max_attempts=1)
    job = await queue.claim("test@glue", 300)
    assert job is not None
    engine = LocalEngine(settings)  # reuses the running session, adds the Glue catalog to it
    execution = JobExecution(db, engine, Inspector(settings), expiry_min_age_hours=0.0)

    async def record(action: Any) -> None:
        await queue.record_action(job, **vars(action))

    return job, await execution.run(table_id, actions, record, job=job)
