"""Every planned job records what it was predicted to do and what it measurably did.

Driven through the real producers: a Spark-written Iceberg table, the inspector's unit of work
(``TableInspections.inspect_and_record``), ``Planner.plan`` (prediction at enqueue), the
executor's job path (``JobRunner.run``: actions, impact, outcome with the read probe), and the
planner again (throttling from the measured history). Contents are checked before and after.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from rich.console import Console

from icepack_core.cli.outcomes import outcome_table, probe_line
from icepack_core.inspection.process import TableInspections
from icepack_core.planning.planner import Planner
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import Settings
from icepack_core.spark.sql import qualified_name
from icepack_gateway.models import JobOutcome, JobPrediction
from tests.execution import executor_jobs
from tests.execution.executor_jobs import plan_and_run
from tests.execution.spark_tables import (
    CATALOG,
    data_file_count,
    fingerprint,
    make_small_files_table,
    unique_name,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "outcomes"
REWRITE = "rewrite_data_files"


async def register(db: Any, spark: Any, table: str, name: str) -> int:
    return await executor_jobs.register(db, spark, table, NS, name)


async def test_a_compaction_records_its_prediction_and_measured_outcome(
    db: asyncpg.Pool, spark: Any, runner_settings: Settings
) -> None:
    name = unique_name("compact")
    table = make_small_files_table(spark, NS, name, batches=12)
    contents, files = fingerprint(spark, table), data_file_count(spark, table)
    assert files >= 12  # at least one small file per append
    table_id = await register(db, spark, table, name)

    planned, job = await plan_and_run(db, runner_settings, spark, table_id)

    assert planned.recommendation is not None
    assert [a.action for a in planned.recommendation.actions] == [REWRITE]
    assert fingerprint(spark, table) == contents and data_file_count(spark, table) == 1
    # Predicted at planning: the small files become one.
    prediction = JobPrediction.model_validate(job.predicted)
    (predicted,) = prediction.actions
    assert predicted.before is not None
    assert predicted.after is not None
    assert (predicted.before.data_files, predicted.after.data_files) == (files, 1)
    assert predicted.benefit == files - 1 and job.benefit == files - 1
    assert job.rewrite_bytes == predicted.rewrite_bytes > 0
    assert job.priority == 100 and job.health_score is not None
    # Measured by the executor, fenced into the job: the same fields, before -> after.
    outcome = JobOutcome.model_validate(job.outcome)
    (measured,) = outcome.actions
    assert measured.action == REWRITE and measured.before is not None
    assert measured.after is not None
    assert (measured.before.data_files, measured.after.data_files) == (files, 1)
    assert measured.before.data_bytes > 0 and measured.after.snapshots == 13
    # Benefit: files and manifests a scan no longer opens (the new manifest counts against it).
    expected = (files - 1) + (measured.before.manifests - measured.after.manifests)
    assert measured.benefit == expected and measured.predicted_benefit == files - 1
    assert measured.ratio == pytest.approx(expected / (files - 1))
    # The read probe planned the same full scan before and after: every small file, then 1.
    before, after = outcome.read_probe.before, outcome.read_probe.after
    assert before.error is None and after.error is None, (before, after)
    assert (before.files_planned, after.files_planned) == (files, 1)
    assert before.plan_ms is not None and before.plan_ms > 0
    assert before.snapshot_id != after.snapshot_id
    # `icepack job ID` shows them side by side.
    console = Console(width=200, record=True)
    rendered = outcome_table(job.predicted, job.outcome)
    assert rendered is not None
    console.print(rendered)
    text = console.export_text()
    assert f"data files {files} -> 1" in text and f"benefit {files - 1}" in text
    assert probe_line(job.outcome) == (
        f"read probe (full scan planning): {files} files planned in {before.plan_ms} ms -> "
        f"1 files planned in {after.plan_ms} ms"
    )


def make_sparse_partitions_table(spark: Any, name: str, partitions: int) -> str:
    """One small file in each of ``partitions`` partitions: the table has many small files, but
    no partition has enough for binpack's ``min-input-files``."""
    table = qualified_name(CATALOG, [NS], name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], NS)}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, part STRING) USING iceberg PARTITIONED BY (part) "
        "TBLPROPERTIES ('format-version'='2')"
    )
    spark.sql(
        f"INSERT INTO {table} SELECT id, concat('p', id) AS part FROM range(0, {partitions}) "
        "DISTRIBUTE BY part"
    )
    return table


async def test_an_action_that_twice_measures_under_ten_percent_is_throttled(
    db: asyncpg.Pool, spark: Any, runner_settings: Settings
) -> None:
    name = unique_name("sparse")
    table = make_sparse_partitions_table(spark, name, partitions=8)
    contents = fingerprint(spark, table)
    assert data_file_count(spark, table) == 8
    table_id = await register(db, spark, table, name)
    start = datetime.now(UTC)
    cadence = timedelta(hours=runner_settings.maintenance_cadence_hours)

    ratios = []
    for run in range(2):  # each run past the cadence of the one before
        planned, job = await plan_and_run(
            db, runner_settings, spark, table_id, now=start + run * (cadence + timedelta(hours=1))
        )
        assert planned.recommendation is not None
        assert [a.action for a in planned.recommendation.actions] == [REWRITE]
        (measured,) = JobOutcome.model_validate(job.outcome).actions
        assert measured.predicted_benefit == 7  # the planner sees 8 small files -> 1
        assert measured.benefit == 0  # binpack found no group of 5 in any partition
        ratios.append(measured.ratio)
        assert fingerprint(spark, table) == contents and data_file_count(spark, table) == 8
    assert ratios == [0.0, 0.0]

    await TableInspections(runner_settings, db).inspect_and_record(table_id)
    third = start + 2 * (cadence + timedelta(hours=1))
    outcome = await Planner(runner_settings, db, JobQueue(db)).plan(table_id, now=third)
    assert outcome.recommendation is not None
    assert outcome.job_id is None and outcome.recommendation.actions == []
    assert outcome.recommendation is not None
    (skip,) = [s for s in outcome.recommendation.skipped if s.action == REWRITE]
    assert skip.reason.startswith(
        "throttled: last 2 runs measured 0 % and 0 % of the predicted benefit (< 10 %); "
        "proposed again after "
    ), skip.reason
    assert skip.reason.endswith("or once the predicted benefit reaches 14 (now 7)")
    # The stored recommendation says so too, and after the throttle period it runs again.
    stored = await db.fetchval(
        "SELECT actions FROM icepack.recommendations WHERE table_id = $1 ORDER BY id DESC LIMIT 1",
        table_id,
    )
    assert any(s["reason"] == skip.reason for s in stored["skipped"])
    later = datetime.now(UTC) + timedelta(hours=runner_settings.throttle_hours, minutes=1)
    assert (await Planner(runner_settings, db, JobQueue(db)).plan(table_id, now=later)).job_created
