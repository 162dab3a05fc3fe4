"""The executor checks every job at the choke point before any Spark call, whatever its source:
a held or opted-out table, a floor broken or malformed actions fail the job permanently with the
reason, record no action and leave the table exactly as it was."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from icepack_core.db.queries import load_query
from icepack_core.execution.job_runner import JobRunner
from icepack_core.intents import (
    ExpireSnapshots,
    ExpireSnapshotsParams,
    Intent,
    RemoveOrphanFiles,
    RemoveOrphanFilesParams,
    RewriteDataFiles,
    RewriteDataFilesParams,
)
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
from tests.support.stored_jobs import enqueue_hand_written

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "choke"


@pytest.fixture
def runner_settings(
    database_url: str, spark_catalog_settings: Settings, tmp_path: Path
) -> Settings:
    return service_settings(database_url, spark_catalog_settings, tmp_path)


async def run_one(
    db: asyncpg.Pool,
    settings: Settings,
    spark: Any,
    table_id: int,
    actions: Sequence[Intent] | list[str],
) -> Any:
    """Run ``actions`` as a manual job; a list of strings is stored as given (a row no
    Icepack writer produces: ``JobQueue.enqueue`` takes intents only)."""
    queue = JobQueue(db)
    if all(isinstance(a, str) for a in actions):
        queued_id = (
            await enqueue_hand_written(db, table_id, actions, trigger=JobTrigger.MANUAL)
        ).id
    else:
        intents = [a for a in actions if not isinstance(a, str)]
        queued_id = (await queue.enqueue(table_id, intents, trigger=JobTrigger.MANUAL)).job.id
    job = await queue.claim("executor@test", 60)
    assert job is not None and job.id == queued_id
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
        ("held", [RewriteDataFiles()], "is on hold: checksum differs"),
        (
            "opted_out",
            [RewriteDataFiles()],
            "opted out of maintenance (icepack.maintenance.enabled=false)",
        ),
        # What a gateway bug once stored: the recommendation's keys as actions.
        ("poison", ["actions", "skipped"], "actions[0]"),
        (
            "too_new_expiry",
            [
                ExpireSnapshots(
                    params=ExpireSnapshotsParams(
                        older_than=datetime.now(UTC) + timedelta(days=365 * 900), retain_last=1
                    )
                )
            ],
            "expire_snapshots older_than",
        ),
        (
            "orphans_by_property",
            [
                RemoveOrphanFiles(
                    params=RemoveOrphanFilesParams(older_than=datetime(2020, 1, 1, tzinfo=UTC))
                )
            ],
            "orphan removal needs an operator policy",
        ),
    ],
)
async def test_refused_jobs_fail_permanently_and_touch_nothing(
    db: asyncpg.Pool,
    spark: Any,
    runner_settings: Settings,
    case: str,
    actions: list[Intent] | list[str],
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
        [RewriteDataFiles(params=RewriteDataFilesParams(options={"min-input-files": "2"}))],
    )
    assert job.state == JobState.SUCCEEDED, job.error
    assert fingerprint(spark, table) == before and data_file_count(spark, table) < files
