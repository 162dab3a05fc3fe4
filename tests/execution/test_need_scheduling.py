"""Maintenance scheduled by need (``planning.due``), end to end on a real table.

Driven through the real producers: Spark-written Iceberg tables (the "writer"), the inspector's
unit of work (``TableInspections.inspect_and_record``), ``Planner.plan``, the executor's job
path (``JobRunner.run``) and the planner's upkeep (``QueueUpkeep.replan_due``). Time after a
run is simulated by passing ``now`` to the planner (the runs themselves happen at real time).
Contents are checked before and after every run, and no file a snapshot references is gone.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import structlog

from icepack_core.inspection.process import TableInspections
from icepack_core.planning.planner import Planner, PlanOutcome
from icepack_core.queue.jobs import Job, JobQueue
from icepack_core.queue.upkeep import QueueUpkeep
from icepack_core.queue.work_items import WorkQueue
from icepack_core.settings import Settings
from icepack_core.spark.sql import qualified_name
from tests.execution import executor_jobs
from tests.execution.executor_jobs import job_runner, run_claimed
from tests.execution.spark_tables import (
    CATALOG,
    fingerprint,
    missing_referenced_files,
    snapshot_count,
    unique_name,
)
from tests.support.settings import service_settings

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "need_scheduling"
REWRITE = "rewrite_data_files"
PARTS = 6


async def all_partitions_closed(db: Any) -> None:
    """An operator's compaction policy with no quiet period: every partition counts as closed
    (``execution.scoping.metadata_scope``), so these tests, which write and compact within seconds,
    are about scheduling, not about open-partition detection."""
    await db.execute(
        "INSERT INTO icepack.policies (policy_type, scope, catalog, config) "
        "VALUES ('system.data-compaction', 'catalog', $1, $2::jsonb)",
        CATALOG,
        {"open_partition_quiet_minutes": 0},
    )


async def register(db: Any, spark: Any, table: str, name: str) -> int:
    return await executor_jobs.register(db, spark, table, NS, name)


def make_partitioned(spark: Any, name: str, appends: int) -> str:
    """``PARTS`` identity partitions, each with ``appends`` small files (one per append)."""
    table = qualified_name(CATALOG, [NS], name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], NS)}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, part STRING) USING iceberg PARTITIONED BY (part) "
        "TBLPROPERTIES ('format-version'='2', 'write.target-file-size-bytes'='1048576', "
        # The rewrite's partial-progress groups (one per partition) commit one after another
        # and, on the local JDBC catalog, retry "stale table metadata" against each other;
        # Iceberg's default 4 retries let one group fail now and then (not this test's subject).
        "'commit.retry.num-retries'='20')"
    )
    for a in range(appends):
        spark.sql(
            f"INSERT INTO {table} SELECT id, concat('p', id % {PARTS}) AS part "
            f"FROM range({a * 60}, {(a + 1) * 60}) DISTRIBUTE BY part"
        )
    return table


def append_to(spark: Any, table: str, part: str, appends: int, start: int) -> None:
    """The writer: ``appends`` commits of one small file each into partition ``part``."""
    for a in range(appends):
        spark.sql(
            f"INSERT INTO {table} SELECT id, '{part}' FROM range({start + a * 10}, "
            f"{start + (a + 1) * 10})"
        )


def files_by_part(spark: Any, table: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for row in spark.sql(f"SELECT file_path, partition.part AS p FROM {table}.files").collect():
        found.setdefault(row["p"], set()).add(row["file_path"])
    return found


async def run(db: Any, settings: Any, spark: Any, planned: PlanOutcome) -> Job:
    return await run_claimed(job_runner(db, settings, spark), planned.job_id)


def skip_reason(outcome: PlanOutcome, action: str) -> str:
    assert outcome.recommendation is not None
    (skip,) = [s for s in outcome.recommendation.skipped if s.action == action]
    return skip.reason


async def test_a_hot_table_is_planned_again_within_minutes_and_an_unchanged_one_is_not(
    db: asyncpg.Pool, spark: Any, need_settings: Settings
) -> None:
    name = unique_name("hot")
    table = make_partitioned(spark, name, appends=6)
    table_id = await register(db, spark, table, name)
    await all_partitions_closed(db)
    inspections = TableInspections(need_settings, db)
    planner = Planner(need_settings, db, JobQueue(db))

    # 1. The first compaction: every partition's 6 small files become one.
    contents = fingerprint(spark, table)
    await inspections.inspect_and_record(table_id)
    first = await planner.plan(table_id)
    assert first.job_created and first.recommendation is not None
    (action,) = first.recommendation.actions
    assert action.action == REWRITE and "due: first run on the table" not in action.reason
    assert "due: benefit 35 vs threshold 3.0" in action.reason, action.reason
    done = await run(db, need_settings, spark, first)
    assert done.finished_at is not None
    compacted = files_by_part(spark, table)
    assert {p: len(f) for p, f in compacted.items()} == {f"p{i}": 1 for i in range(PARTS)}
    assert fingerprint(spark, table) == contents and missing_referenced_files(spark, table) == []

    # 2. Unchanged since: 6 small files (one per closed partition) still trip min_input_files
    #    and a benefit of 5 is above this test's threshold, yet nothing is planned: the
    #    candidates are already compacted. Not after the interval, not an hour later.
    await inspections.inspect_and_record(table_id)
    for later in (timedelta(minutes=6), timedelta(hours=1), timedelta(hours=23)):
        quiet = await planner.plan(table_id, now=done.finished_at + later)
        assert quiet.job_id is None, quiet.recommendation
        reason = skip_reason(quiet, REWRITE)
        assert reason.startswith("not due: unchanged since it ran "), reason
        assert "(would be: 6 small files" in reason
    assert (
        await db.fetchval(
            "SELECT count(*) FROM icepack.planner_replans WHERE table_id = $1", table_id
        )
        == 0
    )

    # 3. The writer appends to p0 (the open partition): due by benefit, but the table's last
    #    run ended under 5 minutes ago. The planner says so and asks to plan again then.
    append_to(spark, table, "p0", appends=6, start=10_000)
    contents = fingerprint(spark, table)
    await inspections.inspect_and_record(table_id)
    hot = await planner.plan(table_id, now=done.finished_at + timedelta(minutes=1))
    assert hot.job_id is None and hot.recommendation is not None
    last_run = await db.fetchval(
        "SELECT max(a.finished_at) FROM icepack.job_actions a JOIN icepack.jobs j "
        "ON j.id = a.job_id WHERE j.table_id = $1 AND a.state = 'succeeded'",
        table_id,
    )
    replan_at = last_run + timedelta(minutes=5)
    assert hot.recommendation.replan_at == replan_at
    reason = skip_reason(hot, REWRITE)
    assert reason.startswith("min interval 5 min: the last run on the table finished "), reason
    assert "due: benefit 11 vs threshold 3.0" in reason
    stored = await db.fetchval(
        "SELECT replan_at FROM icepack.planner_replans WHERE table_id = $1", table_id
    )
    assert stored == replan_at

    # 4. No event comes (the writer stopped); the upkeep turns the due re-plan into a work item.
    work = WorkQueue(db, "planner", "planner@test")
    upkeep = QueueUpkeep(db, JobQueue(db), work, 86400.0, 86400.0, structlog.get_logger())
    assert await upkeep.replan_due(now=replan_at - timedelta(seconds=1)) == []
    assert await upkeep.replan_due(now=replan_at) == [table_id]
    (item,) = await work.claim(now=replan_at)
    assert (item.table_id, item.reason) == (table_id, "replan")
    again = await planner.plan(item.table_id, now=replan_at)
    assert again.job_created, again.recommendation
    await run(db, need_settings, spark, again)

    # Only the open partition was rewritten: the closed ones keep their compacted file.
    after = files_by_part(spark, table)
    assert len(after["p0"]) == 1 and after["p0"] != compacted["p0"]
    assert {p: f for p, f in after.items() if p != "p0"} == {
        p: f for p, f in compacted.items() if p != "p0"
    }
    assert fingerprint(spark, table) == contents and missing_referenced_files(spark, table) == []


async def test_a_table_below_its_threshold_is_not_planned_until_the_cadence(
    db: asyncpg.Pool,
    spark: Any,
    database_url: str,
    spark_catalog_settings: Settings,
    tmp_path: Path,
) -> None:
    """Default threshold (50 objects): after a first run, 6 new small files are not worth a
    job within the cadence (what a batch table had under the cadence alone)."""
    settings = service_settings(database_url, spark_catalog_settings, tmp_path)
    name = unique_name("cold")
    table = make_partitioned(spark, name, appends=6)
    table_id = await register(db, spark, table, name)
    await all_partitions_closed(db)
    inspections = TableInspections(settings, db)
    planner = Planner(settings, db, JobQueue(db))
    await inspections.inspect_and_record(table_id)
    first = await planner.plan(table_id)
    assert first.job_created and first.recommendation is not None
    assert "due: first run on the table (benefit 35 vs threshold 50.0" in (
        first.recommendation.actions[0].reason
    )
    done = await run(db, settings, spark, first)
    assert done.finished_at is not None

    append_to(spark, table, "p0", appends=6, start=10_000)
    await inspections.inspect_and_record(table_id)
    cold = await planner.plan(table_id, now=done.finished_at + timedelta(hours=2))
    assert cold.job_id is None and cold.recommendation is not None
    assert cold.recommendation.replan_at is None
    reason = skip_reason(cold, REWRITE)
    assert reason.startswith("not due: benefit 11 vs threshold 50.0"), reason
    later = await planner.plan(table_id, now=done.finished_at + timedelta(hours=25))
    assert later.job_created


async def test_a_count_retention_the_policy_sets_expires_down_to_it(
    db: asyncpg.Pool,
    spark: Any,
    database_url: str,
    spark_catalog_settings: Settings,
    tmp_path: Path,
) -> None:
    """``icepack.snapshot-expiry.max-count=4`` on a table of 9 young snapshots (the safety floor
    is 0 here so they may go): expiry keeps exactly the newest 4, nothing else changes."""
    settings = service_settings(
        database_url, spark_catalog_settings, tmp_path, expiry_min_age_hours=0
    )
    name = unique_name("retain")
    table = make_partitioned(spark, name, appends=1)
    append_to(spark, table, "p1", appends=8, start=10_000)
    spark.sql(
        f"ALTER TABLE {table} SET TBLPROPERTIES ('icepack.snapshot-expiry.max-count'='4', "
        "'icepack.compaction.enabled'='false')"
    )
    assert snapshot_count(spark, table) == 9
    newest = [
        r["snapshot_id"]
        for r in spark.sql(
            f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 4"
        ).collect()
    ]
    contents = fingerprint(spark, table)
    table_id = await register(db, spark, table, name)
    await TableInspections(settings, db).inspect_and_record(table_id)
    planned = await Planner(settings, db, JobQueue(db)).plan(table_id, now=datetime.now(UTC))
    assert planned.job_created and planned.recommendation is not None
    (expiry,) = planned.recommendation.actions
    assert expiry.action == "expire_snapshots" and expiry.to_json()["params"]["retain_last"] == 4
    assert "9 snapshots > max_snapshots 4 (count-based retention)" in expiry.reason
    await run(db, settings, spark, planned)
    spark.sql(f"REFRESH TABLE {table}")
    kept = [
        r["snapshot_id"] for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect()
    ]
    assert sorted(kept) == sorted(newest)
    assert fingerprint(spark, table) == contents and missing_referenced_files(spark, table) == []
