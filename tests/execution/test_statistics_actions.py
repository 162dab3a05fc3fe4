"""Statistics as maintenance, end to end on real Spark and a real catalog.

A partitioned table written by Spark, an ``icepack.table-statistics`` policy stored through the
gateway's query, then the real producers: the inspector's unit of work (status + health),
``Planner.plan`` (proposal, prediction), the executor's job path (``JobRunner.run``: choke point,
lease, fence, the procedures, evidence, measured outcome). Contents (rows + checksum) and every
file the metadata references are checked before and after; the data snapshot must not move.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from icepack_core.db.queries import load_query
from icepack_core.discovery.catalogs import load_catalog
from icepack_core.execution.job_runner import JobRunner
from icepack_core.execution.ledger.referenced_files import referenced_paths
from icepack_core.inspection.go_inspector import DEFAULT_BINARY, inspect_with_go
from icepack_core.inspection.inspector import MemoryManifestCache, inspect_table
from icepack_core.inspection.process import TableInspections
from icepack_core.intents import (
    ComputeTableStats,
    ComputeTableStatsParams,
    ExpireSnapshots,
    ExpireSnapshotsParams,
    Intent,
)
from icepack_core.planning.planner import Planner
from icepack_core.queue.jobs import Job, JobQueue
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.types import JobState, PolicyType
from icepack_gateway.models import JobOutcome, JobPrediction
from tests.execution.spark_tables import (
    CATALOG,
    fingerprint,
    local_path,
    make_small_files_table,
    missing_referenced_files,
    unique_name,
)
from tests.support.settings import service_settings

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]
NS = "stats"
TABLE_STATS, PARTITION_STATS = "compute_table_stats", "compute_partition_stats"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def runner_settings(
    database_url: str, spark_catalog_settings: Settings, tmp_path: Path
) -> Settings:
    # No expiry age floor: the lifecycle test expires its brand-new snapshots through the ledger.
    return service_settings(
        database_url, spark_catalog_settings, tmp_path, expiry_min_age_hours=0.0
    )


async def register(db: Any, spark: Any, table: str, name: str) -> int:
    location = spark.sql(
        f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1"
    ).first()["file"]
    table_id: int = await db.fetchval(load_query("table_insert"), CATALOG, NS, name, location, {})
    return table_id


async def attach(db: Any, scope: str, enabled: bool, config: dict[str, Any], **target: str) -> None:
    """Store an ``icepack.table-statistics`` policy as ``PUT /policies/...`` does."""
    await db.fetchrow(
        load_query("policy_upsert"),
        PolicyType.TABLE_STATISTICS.value,
        scope,
        CATALOG,
        target.get("namespace"),
        target.get("table"),
        enabled,
        config,
    )


async def inspect_and_plan(db: Any, settings: Any, table_id: int) -> tuple[Any, Any]:
    """Inspect (as the inspector service does) and plan; the recorded assessment and plan."""
    outcome = await TableInspections(settings, db).inspect_and_record(table_id)
    planned = await Planner(settings, db, JobQueue(db)).plan(table_id)
    return outcome.assessment, planned


async def run_planned(db: Any, settings: Any, spark: Any, planned: Any) -> Job:
    queue = JobQueue(db)
    job = await queue.claim("executor@test", 60)
    assert job is not None and job.id == planned.job_id
    runner = JobRunner(db, settings, queue, LocalEngine(settings, session=spark), "executor@test")
    done = (await runner.run(job)).job
    assert done is not None and done.state == JobState.SUCCEEDED, done and done.error
    return done


async def run_operator_job(
    db: Any, settings: Any, spark: Any, table_id: int, actions: Sequence[Intent]
) -> Job:
    """An operator's job (``POST /jobs`` enqueues the same), run by the executor's path."""
    queue = JobQueue(db)
    await queue.enqueue(table_id, actions)
    job = await queue.claim("executor@test", 60)
    assert job is not None
    runner = JobRunner(db, settings, queue, LocalEngine(settings, session=spark), "executor@test")
    done = (await runner.run(job)).job
    assert done is not None and done.state == JobState.SUCCEEDED, done and done.error
    return done


def expire_now() -> ExpireSnapshots:
    older = datetime.now(UTC) + timedelta(milliseconds=1)
    return ExpireSnapshots(params=ExpireSnapshotsParams(older_than=older, retain_last=1))


def table_state(spark: Any, table: str) -> dict[str, Any]:
    """What a statistics run must leave as it was: contents, current snapshot, data files."""
    current = spark.sql(
        f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).first()["snapshot_id"]
    files = sorted(
        r["file_path"] for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()
    )
    snapshots = spark.sql(f"SELECT count(*) AS n FROM {table}.snapshots").first()["n"]
    return {
        "contents": fingerprint(spark, table),
        "snapshot": current,
        "files": files,
        "snapshots": snapshots,
    }


def metadata_doc(settings: Any, name: str) -> tuple[Any, dict[str, Any]]:
    catalog = load_catalog(settings.effective_catalogs()[0])
    loaded = catalog.load_table((NS, name))
    return loaded, json.loads(local_path(loaded.metadata_location).read_text())


def missing_metadata_files(loaded: Any) -> list[str]:
    """Every file the current metadata references (statistics files included) that is gone."""
    return sorted(
        p
        for p in referenced_paths(loaded.io, loaded.metadata_location)
        if not local_path(p).exists()
    )


def actions_of(planned: Any) -> list[str]:
    return [a.action for a in planned.recommendation.actions]


def skip_reason(planned: Any, action: str) -> str:
    found: str = next(s.reason for s in planned.recommendation.skipped if s.action == action)
    return found


async def job_outputs(db: Any, job_id: int) -> dict[str, dict[str, Any]]:
    rows = await db.fetch(load_query("job_actions_of"), [job_id])
    return {r["action"]: r["output"] for r in rows}


async def test_missing_then_stale_statistics_are_computed_without_touching_the_data(
    db: asyncpg.Pool, spark: Any, runner_settings: Settings
) -> None:
    name = unique_name("lifecycle")
    # Two appends over two partitions: four small files, below compaction's five.
    table = make_small_files_table(spark, NS, name, batches=2, partitioned=True)
    table_id = await register(db, spark, table, name)
    await attach(db, "catalog", True, {"columns": ["id", "part"]})
    before = table_state(spark, table)

    health, planned = await inspect_and_plan(db, runner_settings, table_id)
    assert "STATISTICS_MISSING" in health.issue_codes()
    assert actions_of(planned) == [TABLE_STATS, PARTITION_STATS], planned.recommendation
    assert planned.recommendation.actions[0].to_json()["params"] == {"columns": ["id", "part"]}
    assert planned.recommendation.actions[0].reason.startswith("missing: no table statistics")
    job = await run_planned(db, runner_settings, spark, planned)

    # The data snapshot did not move: same snapshot, same data files, same rows.
    assert table_state(spark, table) == before
    assert missing_referenced_files(spark, table) == []
    loaded, doc = metadata_doc(runner_settings, name)
    assert missing_metadata_files(loaded) == []
    (stats,) = doc["statistics"]
    (partition_stats,) = doc["partition-statistics"]
    assert stats["snapshot-id"] == partition_stats["snapshot-id"] == before["snapshot"]
    blobs = stats["blob-metadata"]
    assert {b["type"] for b in blobs} == {"apache-datasketches-theta-v1"}
    assert {b["properties"]["ndv"] for b in blobs} == {"40", "2"}  # 40 ids, parts a and b
    # The evidence says so too, per action, with the bytes written.
    outputs = await job_outputs(db, job.id)
    for action, entry in ((TABLE_STATS, stats), (PARTITION_STATS, partition_stats)):
        evidence = outputs[action]["evidence"]
        assert evidence["data_unchanged"] is True, evidence
        assert evidence["snapshot_before"] == evidence["snapshot_after"] == before["snapshot"]
        assert evidence["snapshots_added"] == [] and evidence["snapshots_removed"] == []
        assert evidence["bytes_written"] == entry["file-size-in-bytes"] > 0
        assert outputs[action]["statistics_file"] == entry["statistics-path"]
    # Predicted and measured like every action.
    predicted = JobPrediction.model_validate(job.predicted)
    assert [
        p.statistics is not None and p.statistics.present_for_current for p in predicted.actions
    ] == [True, True]
    assert all(
        p.statistics is not None and p.statistics.snapshot_id == before["snapshot"]
        for p in predicted.actions
    )
    measured = JobOutcome.model_validate(job.outcome)
    for m, entry in zip(measured.actions, (stats, partition_stats), strict=True):
        assert m.statistics is not None and m.statistics.present_for_current
        assert m.statistics.bytes_written == entry["file-size-in-bytes"]
        assert m.benefit == 0 and m.before == m.after

    # Fresh now: the same table is not planned again, and its health has no statistics issue.
    health, again = await inspect_and_plan(db, runner_settings, table_id)
    assert not again.job_created, again.recommendation
    assert skip_reason(again, TABLE_STATS).startswith("fresh: table statistics describe snapshot")
    assert not {"STATISTICS_MISSING", "STATISTICS_STALE"} & health.issue_codes()

    # The table moves on: 40 more rows on 40 (100 % added >= 20 %) make them stale.
    spark.sql(f"INSERT INTO {table} SELECT id, 'b', 'late' FROM range(1000, 1040)")
    moved = table_state(spark, table)
    health, stale = await inspect_and_plan(db, runner_settings, table_id)
    assert "STATISTICS_STALE" in health.issue_codes()
    assert actions_of(stale) == [TABLE_STATS, PARTITION_STATS], stale.recommendation
    assert stale.recommendation.actions[0].reason.startswith("stale: table statistics describe")
    second = await run_planned(db, runner_settings, spark, stale)
    assert table_state(spark, table) == moved
    assert missing_referenced_files(spark, table) == []
    loaded, doc = metadata_doc(runner_settings, name)
    assert missing_metadata_files(loaded) == []
    described = {s["snapshot-id"] for s in doc["statistics"]}
    assert described == {before["snapshot"], moved["snapshot"]}
    stats = JobOutcome.model_validate(second.outcome).actions[0].statistics
    assert stats is not None and stats.present_for_current

    # Expiry through the deletion ledger records the statistics files of the snapshot it
    # expires (both kinds) before deleting them, and keeps those of the current snapshot.
    entries = [("statistics", e) for e in doc["statistics"]] + [
        ("partition_statistics", e) for e in doc["partition-statistics"]
    ]
    old = {e["statistics-path"]: k for k, e in entries if e["snapshot-id"] == before["snapshot"]}
    kept = {e["statistics-path"] for _, e in entries if e["snapshot-id"] == moved["snapshot"]}
    assert len(old) == len(kept) == 2
    expired = await run_operator_job(db, runner_settings, spark, table_id, [expire_now()])
    rows = await db.fetch(
        "SELECT path, kind, state FROM icepack.deletions WHERE job_id = $1", expired.id
    )
    recorded = {r["path"]: (r["kind"], r["state"]) for r in rows}
    assert {p: recorded.get(p) for p in old} == {p: (k, "deleted") for p, k in old.items()}
    assert not kept & set(recorded)
    assert [p for p in old if local_path(p).exists()] == []
    assert table_state(spark, table)["contents"] == moved["contents"]
    assert missing_referenced_files(spark, table) == []
    loaded, doc = metadata_doc(runner_settings, name)
    assert missing_metadata_files(loaded) == []
    assert {e["statistics-path"] for e in doc["statistics"] + doc["partition-statistics"]} == kept

    # Both inspectors read the statistics entries alike (parity on a real table with them).
    ours = await inspect_table(
        loaded, catalog=CATALOG, namespace=NS, name=name, cache=MemoryManifestCache()
    )
    assert ours.table_statistics is not None and ours.partition_statistics is not None
    assert ours.table_statistics.current and ours.partition_statistics.current
    if (REPO / DEFAULT_BINARY).is_file():
        theirs = await inspect_with_go(
            loaded.metadata_location,
            catalog=CATALOG,
            namespace=NS,
            table=name,
            binary=REPO / DEFAULT_BINARY,
        )
        assert theirs.table_metrics() == ours.table_metrics()


async def test_a_table_whose_policy_disables_statistics_is_not_planned(
    db: asyncpg.Pool, spark: Any, runner_settings: Settings
) -> None:
    name = unique_name("disabled")
    table = make_small_files_table(spark, NS, name, batches=2, partitioned=True)
    table_id = await register(db, spark, table, name)
    # Enabled for the catalog, disabled for this table: the most specific attachment wins.
    await attach(db, "catalog", True, {})
    await attach(db, "table", False, {}, namespace=NS, table=name)
    before = table_state(spark, table)

    health, planned = await inspect_and_plan(db, runner_settings, table_id)
    assert not planned.job_created, planned.recommendation
    assert skip_reason(planned, TABLE_STATS) == "icepack.table-statistics is not enabled"
    assert skip_reason(planned, PARTITION_STATS) == "icepack.table-statistics is not enabled"
    assert "STATISTICS_MISSING" not in health.issue_codes()
    assert table_state(spark, table) == before
    _, doc = metadata_doc(runner_settings, name)
    assert not doc.get("statistics") and not doc.get("partition-statistics")


async def test_statistics_of_a_table_without_a_snapshot_call_nothing(
    db: asyncpg.Pool, spark: Any, runner_settings: Settings
) -> None:
    """An operator's ``compute_table_stats`` (no policy needed: it only adds metadata) on a
    table without a snapshot runs through the executor, calls nothing and records why."""
    name = unique_name("empty")
    table = f"{CATALOG}.{NS}.{name}"
    spark.sql(f"CREATE TABLE {table} (id BIGINT) USING iceberg")
    table_id = await register(db, spark, table, name)
    actions = [ComputeTableStats(params=ComputeTableStatsParams(columns=["id"]))]
    job = await run_operator_job(db, runner_settings, spark, table_id, actions)
    outputs = await job_outputs(db, job.id)
    assert outputs[TABLE_STATS]["skipped"].startswith("the table has no current snapshot")
    _, doc = metadata_doc(runner_settings, name)
    assert not doc.get("statistics")
