"""The executor's job path for Spark tests: register a Spark-written table, inspect and plan it
as the services do, then claim and run the planned job through ``JobRunner`` (the executor's
own code, on the shared local Spark session)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from icepack_core.db.queries import load_query
from icepack_core.execution.job_runner import JobRunner
from icepack_core.inspection.process import TableInspections
from icepack_core.planning.planner import Planner, PlanOutcome
from icepack_core.queue.jobs import Job, JobQueue
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.types import JobState
from tests.execution.spark_tables import CATALOG

OWNER = "executor@test"


async def register(db: Any, spark: Any, table: str, namespace: str, name: str) -> int:
    """Register Spark's table ``table`` (``namespace.name`` of the Spark fixtures' catalog) as
    discovery would, at its newest metadata file; returns its id."""
    location = spark.sql(
        f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1"
    ).first()["file"]
    table_id: int = await db.fetchval(
        load_query("table_insert"), CATALOG, namespace, name, location, {}
    )
    return table_id


def job_runner(db: Any, settings: Settings, spark: Any) -> JobRunner:
    """The executor's runner on the shared Spark session."""
    return JobRunner(db, settings, JobQueue(db), LocalEngine(settings, session=spark), OWNER)


async def run_claimed(runner: JobRunner, job_id: int | None) -> Job:
    """Claim the next job (it must be ``job_id``) and run it; it must succeed."""
    job = await runner.queue.claim(OWNER, 60)
    assert job is not None and job.id == job_id
    done = (await runner.run(job)).job
    assert done is not None and done.state == JobState.SUCCEEDED, done and done.error
    return done


async def plan_and_run(
    db: Any,
    settings: Settings,
    spark: Any,
    table_id: int,
    now: datetime | None = None,
    runner: JobRunner | None = None,
) -> tuple[PlanOutcome, Job]:
    """Inspect (as the inspector does), plan, claim and run the planned job to its end."""
    await TableInspections(settings, db).inspect_and_record(table_id)
    planned = await Planner(settings, db, JobQueue(db)).plan(table_id, now=now)
    assert planned.job_created, planned.recommendation
    done = await run_claimed(runner or job_runner(db, settings, spark), planned.job_id)
    return planned, done
