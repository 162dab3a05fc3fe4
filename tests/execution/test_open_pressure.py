"""Open partitions kept under their small-file bound while a writer process keeps committing
(``planning.pressure``), end to end.

Real Spark in two processes (the writer starts its own JVM: ``tests.support.stream_writer``),
one JDBC catalog, real Postgres. The table is partitioned so that every writer commit adds one
small file to each of its three partitions (a ``bucket(N, id)`` sink's shape): every partition
is open. The inspector records statuses (``TableInspections.inspect_and_record``), the planner
(``Planner.plan``) projects the fullest partition's growth from two of them, and the executor
(``JobRunner``) runs the job while the writer commits. The growth span is one second (the
default 30 s is a steadier rate for a service; the rule is the same).

The oracle is the writer's own model (its starting rows plus each commit that returned): after
the race the table's rows equal it, no referenced file is gone, the table is not held.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from bench.upserts import UpsertTable, create_upsert_table, logical_rows, row
from icepack_core.execution.job_runner import JobRunner
from icepack_core.inspection.process import TableInspections
from icepack_core.planning.planner import Planner, PlanOutcome
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.types import JobState
from tests.execution.spark_tables import CATALOG, missing_referenced_files, unique_name
from tests.execution.test_equality_deletes import register
from tests.support.settings import service_settings
from tests.support.stream_writer import START_DEADLINE_S, StreamWriter
from tests.support.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "eqdel"  # the namespace ``register`` records tables under
REWRITE = "rewrite_data_files"
BOUND = 12  # the policy's open_partition_max_small_files: 0.75 * 12 = 9 reached in 9 commits


@pytest.fixture
def pressure_settings(
    database_url: str, spark_catalog_settings: Settings, tmp_path: Path
) -> Settings:
    return service_settings(
        database_url, spark_catalog_settings, tmp_path, maintenance_growth_span_seconds=1.0
    )


def fullest(spark: Any, table: str) -> int:
    """The most live data files in one partition (every file here is small)."""
    spark.sql(f"REFRESH TABLE {table}")
    row_ = spark.sql(
        f"SELECT max(n) AS n FROM (SELECT count(*) AS n FROM {table}.files "
        "WHERE content = 0 GROUP BY partition)"
    ).first()
    return int(row_["n"] or 0)


async def grown_to(spark: Any, table: str, writer: StreamWriter, files: int) -> bool:
    writer.check_alive()
    return fullest(spark, table) >= files


async def inspect_twice(
    db: Any, settings: Any, spark: Any, table: str, table_id: int, writer: StreamWriter
) -> None:
    """A status, then another once the fullest partition has grown since and holds more than
    0.75 * BOUND files (whatever the rate, the projection's level is at most that: the
    partition is threatened)."""
    inspections = TableInspections(settings, db)
    await eventually(
        lambda: grown_to(spark, table, writer, 2),
        timeout=START_DEADLINE_S,
        interval=0.5,
        what="the writer's first commits",
    )
    first = fullest(spark, table)
    await inspections.inspect_and_record(table_id)
    await eventually(
        lambda: grown_to(spark, table, writer, max(first + 2, int(0.75 * BOUND) + 1)),
        timeout=180,
        interval=0.5,
        what="the fullest open partition growing to 3/4 of its bound",
    )
    await inspections.inspect_and_record(table_id)


def rewrite_of(planned: PlanOutcome) -> Any:
    assert planned.recommendation is not None
    found = [a for a in planned.recommendation.actions if a.action == REWRITE]
    return found[0] if found else None


@pytest.mark.timeout(900)
async def test_a_growing_open_partition_is_compacted_before_its_bound_and_planned_again_soon(
    db: asyncpg.Pool,
    spark: Any,
    spark_catalog_settings: Settings,
    pressure_settings: Settings,
    tmp_path: Path,
) -> None:
    name = unique_name("pressure")
    table = create_upsert_table(spark, NS, name, partition="part")
    UpsertTable(spark, NS, name, writer="seed").append([row(k, 0) for k in range(3)])
    table_id = await register(db, spark, table, name)
    await db.execute(
        "INSERT INTO icepack.policies (policy_type, scope, catalog, config) "
        "VALUES ('system.data-compaction', 'catalog', $1, $2::jsonb)",
        CATALOG,
        {"open_partition_max_small_files": BOUND},
    )
    # Three fresh ids a commit: one small file in each of the three partitions.
    writer = StreamWriter.for_table(
        spark_catalog_settings, NS, name, "append", Path(tmp_path) / "writer", pause_seconds=0.2
    ).start()
    queue = JobQueue(db)
    planner = Planner(pressure_settings, db, queue)
    try:
        await inspect_twice(db, pressure_settings, spark, table, table_id, writer)
        planned = await planner.plan(table_id)
        action = rewrite_of(planned)
        assert planned.job_created and action is not None, planned.recommendation
        # Due by the projection, not the benefit (9 small files are far below the threshold
        # of 50 objects): open partitions from the level, closed ones from 2 files.
        assert "due: open-partition pressure: the fullest open partition holds" in action.reason
        level = action.to_json()["params"]["open_max_small_files"] + 1
        assert 5 <= level <= int(0.75 * BOUND), action.to_json()
        assert action.to_json()["params"]["options"]["min-input-files"] == "2"
        assert action.to_json()["params"]["open_quiet_seconds"] == 600

        job = await queue.claim("executor@test", 120)
        assert job is not None and job.id == planned.job_id
        runner = JobRunner(
            db, pressure_settings, queue, LocalEngine(pressure_settings, session=spark), "ex"
        )
        done = (await runner.run(job)).job
        # A partition group whose commit lost to the writer (Iceberg's commit retries run out
        # at a commit every 0.2 s) gives the job back for that part: it runs again (on a
        # loaded machine the writer can win a partition's commit several times running).
        for _ in range(8):
            if done is None or done.state != JobState.QUEUED:
                break
            assert done.conflicts >= 1 and "partitions not rewritten" in (done.error or "")
            retry = await queue.claim(
                "executor@test", 120, now=datetime.now(UTC) + timedelta(hours=1)
            )
            assert retry is not None and retry.id == job.id
            done = (await runner.run(retry)).job
        assert done is not None and done.state == JobState.SUCCEEDED, done and done.error
        outputs = [
            r["output"]
            for r in await db.fetch(
                "SELECT output FROM icepack.job_actions WHERE job_id = $1 AND action = $2 "
                "ORDER BY id",
                job.id,
                REWRITE,
            )
        ]
        output = outputs[0]
        # Every partition was open (written within the quiet period) and at the level or
        # above: all three were selected, none skipped as open (and compacted, by the retry
        # for a partition whose group lost).
        assert output["partitions_selected"] == 3, output
        assert output.get("open_partitions_skipped_count", 0) == 0, output
        rewritten = sum(o["rewritten_data_files_count"] for o in outputs)
        assert rewritten >= 3 * level, outputs

        last_run = await db.fetchval(
            "SELECT max(finished_at) FROM icepack.job_actions WHERE job_id = $1 AND action = $2",
            job.id,
            REWRITE,
        )
        # One status after the run: no rate measured since it yet, so the rate measured
        # before it is carried (the pressure interval holds it, not the 5-minute interval).
        await eventually(
            lambda: grown_to(spark, table, writer, int(0.75 * BOUND) + 1),
            timeout=180,
            interval=0.5,
            what="the fullest open partition past 3/4 of its bound after the run",
        )
        await TableInspections(pressure_settings, db).inspect_and_record(table_id)
        carried = await planner.plan(table_id, now=last_run + timedelta(seconds=30))
        assert not carried.job_created and carried.recommendation is not None
        (skip,) = [s for s in carried.recommendation.skipped if s.action == REWRITE]
        assert skip.reason.startswith("min interval 1 min: the last run on the table"), skip
        assert "(due: open-partition pressure" in skip.reason

        # The writer goes on: the table is planned again within the pressure interval (1 min),
        # not the 5-minute minimum interval (planned as if 30 s after the run, whatever the
        # machine's pace; the statuses are real).
        await inspect_twice(db, pressure_settings, spark, table, table_id, writer)
        again = await planner.plan(table_id, now=last_run + timedelta(seconds=30))
        assert not again.job_created, again.recommendation
        assert again.recommendation is not None
        (skip,) = [s for s in again.recommendation.skipped if s.action == REWRITE]
        assert skip.reason.startswith("min interval 1 min: the last run on the table"), skip
        assert "(due: open-partition pressure" in skip.reason
        assert again.recommendation.replan_at == last_run + timedelta(seconds=60)
        # At the end of the pressure interval it is due.
        due = await planner.plan(table_id, now=last_run + timedelta(seconds=61))
        assert due.job_created, due.recommendation
        expected = writer.stop()
    finally:
        writer.kill()

    assert writer.failed() == [], writer.failed()[:3]
    assert logical_rows(spark, table) == expected
    assert missing_referenced_files(spark, table) == []
    hold = await db.fetchval("SELECT maintenance_hold FROM icepack.tables WHERE id = $1", table_id)
    assert hold is None
