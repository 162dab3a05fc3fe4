"""The executor checks every job at the choke point before any Spark call, whatever its source:
a held or opted-out table, a floor broken or malformed actions fail the job permanently with the
reason, record no action and leave the table exactly as it was."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from icepack_core.db.queries import load_query
from icepack_core.execution.job_runner import JobRunner
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.types import JobState, JobTrigger
from tests.execution.spark_tables import (
    data_file_count,
    fingerprint,
    make_small_files_table,
    snapshot_count,
    unique_name,
)
from tests.support.settings import service_settings

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "choke"


@pytest.fixture
def runner_settings(
    database_url: str, spark_catalog_settings: Settings, tmp_path: Path
) -> Settings:
    return service_settings(database_url, spark_catalog_settings, tmp_path)


async def run_one(
    db: asyncpg.Pool, settings: Settings, spark: Any, table_id: int, actions: Any
) -> Any:
    queue = JobQueue(db)
    enqueued = await queue.enqueue(table_id, actions, trigger=JobTrigger.MANUAL)
    job = await queue.claim("executor@test", 60)
    assert job is not None and job.id == enqueued.job.id
    runner = JobRunner(db, settings, queue, LocalEngine(settings, session=spark), "executor@test")
    return (await runner.run(job)).job


async def register(
    db: asyncpg.Pool, spark: Any, name: str, properties: dict[str, str] | None = None
) -> int:
    table = make_small_files_table(spark, NS, name, batches=6)
    location = spark.sql(
        f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1"
    ).first()["file"]
    table_id: int = await db.fetchval(
        load_query("table_insert"), "icepack", NS, name, location, properties or {}
    )
    return table_id


@pytest.mark.parametrize(
    ("case", "actions", "reason"),
    [
        ("held", [{"action": "rewrite_data_files"}], "is on hold: checksum differs"),
        (
            "opted_out",
            [{"action": "rewrite_data_files"}],
            "opted out of maintenance (icepack.maintenance.enabled=false)",
        ),
        # What a gateway bug once stored: the recommendation's keys as actions.
        ("poison", ["actions", "skipped"], "actions[0]"),
        (
            "too_new_expiry",
            [
                {
                    "action": "expire_snapshots",
                    "params": {
                        "older_than": (datetime.now(UTC) + timedelta(days=365 * 900)).isoformat(),
                        "retain_last": 1,
                    },
                }
            ],
            "expire_snapshots older_than",
        ),
        (
            "orphans_by_property",
            [{"action": "remove_orphan_files", "params": {"older_than": "2020-01-01T00:00:00Z"}}],
            "orphan removal needs an operator policy",
        ),
    ],
)
async def test_refused_jobs_fail_permanently_and_touch_nothing(
    db: asyncpg.Pool,
    spark: Any,
    runner_settings: Settings,
    case: str,
    actions: list[dict[str, Any]] | list[str],
    reason: str,
) -> None:
    name = unique_name(case)
    properties = (
        {"icepack.maintenance.enabled": "false"}
        if case == "opted_out"
        else ({"icepack.orphan-removal.enabled": "true"} if case == "orphans_by_property" else {})
    )
    table_id = await register(db, spark, name, properties)
    if case == "held":
        await db.execute(
            load_query("table_hold_set"),
            table_id,
            {"reason": "checksum differs", "action": "rewrite_data_files"},
        )
    table = f"icepack.{NS}.{name}"
    before = (
        fingerprint(spark, table),
        data_file_count(spark, table),
        snapshot_count(spark, table),
    )

    job = await run_one(db, runner_settings, spark, table_id, actions)

    assert job.state == JobState.FAILED and job.attempts == 1  # not retried
    assert "refused" in job.error and reason in job.error
    assert (
        await db.fetchval("SELECT count(*) FROM icepack.job_actions WHERE job_id = $1", job.id) == 0
    )
    assert await db.fetchval("SELECT count(*) FROM icepack.table_locks") == 0
    assert (
        fingerprint(spark, table),
        data_file_count(spark, table),
        snapshot_count(spark, table),
    ) == before


async def test_an_admitted_job_still_runs(
    db: asyncpg.Pool, spark: Any, runner_settings: Settings
) -> None:
    name = unique_name("ok")
    table_id = await register(db, spark, name)
    table = f"icepack.{NS}.{name}"
    before, files = fingerprint(spark, table), data_file_count(spark, table)
    job = await run_one(
        db,
        runner_settings,
        spark,
        table_id,
        [{"action": "rewrite_data_files", "params": {"options": {"min-input-files": "2"}}}],
    )
    assert job.state == JobState.SUCCEEDED, job.error
    assert fingerprint(spark, table) == before and data_file_count(spark, table) < files
