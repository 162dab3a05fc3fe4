"""Equality deletes as upsert sinks write them, through inspection, planning, compaction and
verification.

Real Spark with the Iceberg runtime, real JDBC catalog and Postgres. The equality deletes are
written by Iceberg's Java writers through the Spark JVM (``bench.upserts``), exactly as
a Flink or Kafka Connect upsert sink commits them: an equality delete on the key and the new row
in one ``RowDelta``. The inspector's unit of work, ``Planner.plan`` and the executor's
``JobRunner`` then do what the services do. The oracle is the writer's own model of the
logical contents: Spark's read of the table must equal it before and after.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import pytest

from bench.upserts import (
    UpsertTable,
    create_upsert_table,
    delete_file_counts,
    logical_rows,
    model_rows,
    row,
)
from icepack_core.db.queries import load_query
from icepack_core.execution.job_runner import JobRunner
from icepack_core.inspection.process import TableInspections
from icepack_core.planning.planner import Planner
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.types import JobState
from tests.execution.spark_tables import (
    CATALOG,
    data_file_count,
    fingerprint,
    missing_referenced_files,
    unique_name,
)
from tests.support.settings import service_settings

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "eqdel"
REWRITE = "rewrite_data_files"


@pytest.fixture
def runner_settings(
    database_url: str, spark_catalog_settings: Settings, tmp_path: Path
) -> Settings:
    return service_settings(database_url, spark_catalog_settings, tmp_path)


def seed_upserts(spark: Any, name: str, rounds: int = 6) -> UpsertTable:
    """An initial load of 24 keys, then ``rounds`` upserts of 6 keys each (some repeated, some
    new): every upsert commits one data file and one equality delete file per partition."""
    sink = UpsertTable(spark, NS, name)
    sink.append([row(k, 0) for k in range(24)])
    for r in range(1, rounds + 1):
        sink.upsert([row(k, r) for k in {(r * 5 + i * 7) % 30 for i in range(6)}])
    return sink


def applicable_equality_deletes(spark: Any, table: str) -> int:
    """Live equality delete files that still apply to a live data file (an equality delete
    applies to the data files of a lower data sequence number; an unpartitioned table's to
    every file)."""
    return int(
        spark.sql(
            f"SELECT count(*) AS n FROM {table}.entries d WHERE d.status < 2 "
            "AND d.data_file.content = 2 AND d.sequence_number > (SELECT min(sequence_number) "
            f"FROM {table}.entries WHERE status < 2 AND data_file.content = 0)"
        ).first()["n"]
    )


async def register(db: Any, spark: Any, table: str, name: str) -> int:
    location = spark.sql(
        f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1"
    ).first()["file"]
    table_id: int = await db.fetchval(load_query("table_insert"), CATALOG, NS, name, location, {})
    return table_id


async def run_planned_job(db: Any, settings: Any, spark: Any, table_id: int) -> Any:
    """Inspect and plan as the services do; run the planned job to its end; return the
    recommendation and the job's stored actions."""
    queue = JobQueue(db)
    planned = await Planner(settings, db, queue).plan(table_id)
    assert planned.job_created, planned.recommendation
    job = await queue.claim("executor@test", 60)
    assert job is not None and job.id == planned.job_id
    runner = JobRunner(db, settings, queue, LocalEngine(settings, session=spark), "executor@test")
    done = (await runner.run(job)).job
    assert done is not None and done.state == JobState.SUCCEEDED, done and done.error
    actions = await db.fetch(
        "SELECT action, state, output FROM icepack.job_actions WHERE job_id = $1 ORDER BY id",
        job.id,
    )
    return planned.recommendation, [dict(a) for a in actions]


@pytest.mark.parametrize(
    ("version", "partition"),
    [(2, None), (2, "part"), (3, None), (3, "bucket(4, id)")],
    ids=["v2-unpartitioned", "v2-identity", "v3-unpartitioned", "v3-bucket"],
)
async def test_upsert_sink_equality_deletes_are_counted_applied_and_verified(
    db: asyncpg.Pool, spark: Any, runner_settings: Settings, version: int, partition: str | None
) -> None:
    name = unique_name(f"upsert_v{version}")
    table = create_upsert_table(spark, NS, name, version=version, partition=partition)
    sink = seed_upserts(spark, name)
    expected = model_rows(sink.model)
    assert logical_rows(spark, table) == expected  # Spark applies the equality deletes
    eq_files = delete_file_counts(spark, table)["equality"]
    assert eq_files >= 6
    before = fingerprint(spark, table)
    table_id = await register(db, spark, table, name)

    inspected = await TableInspections(runner_settings, db).inspect_and_record(table_id)
    assert inspected.status is not None and inspected.assessment is not None
    assert inspected.status.equality_delete_file_count == eq_files
    assert "DELETE_FILE_BUILDUP" in {i.code for i in inspected.assessment.issues}

    recommendation, actions = await run_planned_job(db, runner_settings, spark, table_id)
    (intent,) = [a for a in recommendation.actions if a.action == REWRITE]
    assert f"{eq_files} equality delete files" in intent.reason
    assert intent.to_json()["params"]["options"]["delete-file-threshold"] == "1"

    # Applied: no equality delete file left live, the same logical rows, nothing lost.
    assert logical_rows(spark, table) == expected
    assert fingerprint(spark, table) == before
    if partition:
        assert delete_file_counts(spark, table)["equality"] == 0
    else:
        # Iceberg's dangling-delete removal skips unpartitioned tables (it leaves them to the
        # commit's own filter, which drops only some): the ones left apply to no row.
        assert applicable_equality_deletes(spark, table) == 0
    assert missing_referenced_files(spark, table) == []
    assert data_file_count(spark, table) <= 4
    # Verified by a Spark scan: the in-process reader cannot apply equality deletes.
    (rewrite,) = [a for a in actions if a["action"] == REWRITE]
    evidence = rewrite["output"]["verification"]
    assert evidence["status"] == "verified" and evidence["snapshots"], evidence
    for record in evidence["snapshots"]:
        assert record["ok"] and record["rows_before"] == record["rows_after"], record
        assert record.get("reader") != "in_process", record
        assert record["scope"] in ("table", "partitions"), record
    if partition == "part":  # scoped to the touched partitions, and the evidence says why
        assert {r.get("reader_fallback") for r in evidence["snapshots"]} == {
            "equality delete files in a touched partition"
        }, evidence

    # Re-inspected: the delete files left (unpartitioned tables keep some) apply to no row, so
    # health counts none and planning again proposes no delete application.
    again = await TableInspections(runner_settings, db).inspect_and_record(table_id)
    assert again.status is not None and again.assessment is not None
    if not partition:
        assert delete_file_counts(spark, table)["equality"] > 0  # the case this covers
    assert again.status.equality_delete_file_count == 0
    assert "DELETE_FILE_BUILDUP" not in {i.code for i in again.assessment.issues}
    replanned = (await Planner(runner_settings, db, JobQueue(db)).plan(table_id)).recommendation
    assert replanned is not None
    reasons = [a.reason for a in replanned.actions] + [s.reason for s in replanned.skipped]
    assert not any("equality delete files" in r for r in reasons), replanned
