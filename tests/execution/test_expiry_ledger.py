"""Snapshot expiry records every file in the deletion ledger before deleting it.

Real Spark + Iceberg tables, real Postgres, through ``JobExecution`` (the executor's path). The
table has appends, merge-on-read deletes (position delete files), an overwrite, a statistics
file, and a tag pinning an old snapshot, so every kind of file becomes unreachable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Coroutine, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import asyncpg
import pytest

import icepack_core.execution.ledger.expiry_ledger as expiry_ledger
from icepack_core.errors import PermanentError
from icepack_core.execution.job_execution import JobExecution
from icepack_core.execution.ledger.expiry_files import LedgerFile, plan_expiry
from icepack_core.execution.ledger.expiry_live import live_conflicts
from icepack_core.inspection.inspector import Inspector
from icepack_core.intents import ExpireSnapshots, ExpireSnapshotsParams, Intent
from icepack_core.queue.jobs import Backoff, Job, JobQueue
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine, SparkEngine, ThriftEngine
from tests.execution.spark_tables import (
    CATALOG,
    fingerprint,
    local_path,
    make_small_files_table,
    missing_referenced_files,
    snapshot_count,
    unique_name,
)
from tests.plugins.spark import SparkServer

if TYPE_CHECKING:  # type-only: #29 moves the job execution's records
    from icepack_core.execution.job_execution import ActionRecord

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "expiry"


@pytest.fixture(scope="module")
def engine(spark: Any, spark_catalog_settings: Settings) -> LocalEngine:
    return LocalEngine(spark_catalog_settings, session=spark)


def build_table(spark: Any, name: str) -> tuple[str, int]:
    """Appends, two MoR deletes, a tag on the third snapshot, stats, then an overwrite."""
    table = make_small_files_table(spark, NS, name, batches=4, merge_on_read=True)
    spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0")
    tagged = spark.sql(
        f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at LIMIT 1 OFFSET 2"
    ).first()["snapshot_id"]
    spark.sql(f"ALTER TABLE {table} CREATE TAG `pinned` AS OF VERSION {tagged}")
    spark.sql(f"CALL {CATALOG}.system.compute_table_stats(table => '{NS}.{name}')")
    spark.sql(f"DELETE FROM {table} WHERE id % 11 = 0")
    spark.sql(f"INSERT OVERWRITE {table} SELECT * FROM {table} WHERE id < 60")
    spark.sql(f"INSERT INTO {table} VALUES (1000, 'a', 'late')")
    return table, tagged


def files_of(spark: Any, table: str, snapshot_id: int) -> set[str]:
    """Data/delete files, manifests and the manifest list of one snapshot (Spark's view)."""
    paths = {
        r["file_path"]
        for r in spark.sql(
            f"SELECT file_path FROM {table}.files VERSION AS OF {snapshot_id}"
        ).collect()
    }
    paths |= {
        r["path"]
        for r in spark.sql(
            f"SELECT path FROM {table}.all_manifests WHERE reference_snapshot_id = {snapshot_id}"
        ).collect()
    }
    paths |= {
        r["manifest_list"]
        for r in spark.sql(
            f"SELECT manifest_list FROM {table}.snapshots WHERE snapshot_id = {snapshot_id}"
        ).collect()
    }
    return paths


async def register(db: asyncpg.Pool, name: str) -> int:
    table_id: int = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ($1, $2, $3) RETURNING id",
        CATALOG,
        NS,
        name,
    )
    return table_id


async def run_job(
    db: asyncpg.Pool,
    engine: SparkEngine,
    settings: Settings,
    table_id: int,
    actions: Sequence[Intent],
) -> tuple[Job, Coroutine[Any, Any, Any]]:
    queue = JobQueue(db, Backoff(base_seconds=0, cap_seconds=0))
    await queue.enqueue(table_id, actions, max_attempts=1)
    job = await queue.claim("test@expiry", 300)
    assert job is not None
    execution = JobExecution(db, engine, Inspector(settings), expiry_min_age_hours=0.0)

    async def record(action: ActionRecord) -> None:
        await queue.record_action(job, **vars(action))

    return job, execution.run(table_id, actions, record, job=job)


def expire_action(retain_last: int = 1) -> ExpireSnapshots:
    older = datetime.now(UTC) + timedelta(milliseconds=1)
    return ExpireSnapshots(params=ExpireSnapshotsParams(older_than=older, retain_last=retain_last))


async def ledger(db: asyncpg.Pool, job_id: int) -> list[dict[str, Any]]:
    return [
        dict(r)
        for r in await db.fetch(
            "SELECT path, kind, size_bytes, state, reason FROM icepack.deletions "
            "WHERE job_id = $1 ORDER BY path",
            job_id,
        )
    ]


async def test_expiry_records_exactly_what_the_procedure_deletes(
    spark: Any, engine: LocalEngine, db: asyncpg.Pool, spark_catalog_settings: Settings
) -> None:
    name = unique_name("ledger")
    table, tagged = build_table(spark, name)
    before = fingerprint(spark, table)
    snapshots = {
        r["snapshot_id"] for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect()
    }
    current = spark.sql(
        f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).first()["snapshot_id"]
    retained_files = files_of(spark, table, tagged) | files_of(spark, table, current)
    table_id = await register(db, name)
    action = expire_action()
    job, run = await run_job(db, engine, spark_catalog_settings, table_id, [action])
    (result,) = await run

    rows = await ledger(db, job.id)
    assert rows and all(r["state"] == "deleted" for r in rows)
    kinds = {r["kind"] for r in rows}
    assert {"data", "position_delete", "manifest", "manifest_list", "statistics"} <= kinds
    # per kind, the ledger is what the procedure reports deleting
    per_kind = {k: sum(1 for r in rows if r["kind"] == k) for k in kinds}
    assert int(result["deleted_data_files_count"]) == per_kind["data"]
    assert int(result["deleted_position_delete_files_count"]) == per_kind["position_delete"]
    assert int(result["deleted_manifest_files_count"]) == per_kind["manifest"]
    assert int(result["deleted_manifest_lists_count"]) == per_kind["manifest_list"]
    assert int(result["deleted_statistics_files_count"]) == per_kind["statistics"]
    assert per_kind["manifest_list"] == len(snapshots) - 2  # all but the head and the tag
    expected_ids = sorted(snapshots - {tagged, current})
    assert result["expiring_snapshot_ids"] == expected_ids
    assert all(str(expected_ids[0]) in r["reason"] for r in rows)
    assert all(r["size_bytes"] and r["size_bytes"] > 0 for r in rows)
    # every recorded file is gone; nothing a retained snapshot (tag included) needs was touched
    assert [r["path"] for r in rows if local_path(r["path"]).exists()] == []
    assert not {r["path"] for r in rows} & retained_files
    assert [p for p in retained_files if not local_path(p).exists()] == []
    assert missing_referenced_files(spark, table) == []
    assert fingerprint(spark, table) == before
    assert snapshot_count(spark, table) == 2
    (stored,) = await db.fetch(
        "SELECT sql_text, output FROM icepack.job_actions WHERE job_id = $1", job.id
    )
    assert "snapshot_ids => array(" in stored["sql_text"]
    assert "older_than => TIMESTAMP '1970-01-01 00:00:00+00:00'" in stored["sql_text"]
    assert (
        stored["output"]["ledger"]["ledger_counts"]
        == stored["output"]["ledger"]["procedure_counts"]
    )


async def test_nothing_to_expire_skips_the_call(
    spark: Any, engine: LocalEngine, db: asyncpg.Pool, spark_catalog_settings: Settings
) -> None:
    name = unique_name("fresh")
    table = make_small_files_table(spark, NS, name, batches=1)
    table_id = await register(db, name)
    job, run = await run_job(db, engine, spark_catalog_settings, table_id, [expire_action()])
    # a row an earlier attempt of the job left 'recorded' is reported, never changed
    await db.execute(
        "INSERT INTO icepack.deletions (job_id, table_id, action, path, kind, reason) "
        "VALUES ($1, $2, 'expire_snapshots', 'file:/earlier', 'data', 'earlier attempt')",
        job.id,
        table_id,
    )
    (result,) = await run
    assert result["expiring_snapshot_ids"] == [] and "not called" in result["expired"]
    assert result["earlier_attempt_recorded_files"] == 1
    assert [(r["path"], r["state"]) for r in await ledger(db, job.id)] == [
        ("file:/earlier", "recorded")
    ]
    assert snapshot_count(spark, table) == 1


async def test_a_still_referenced_file_stops_the_job_before_the_call(
    spark: Any,
    engine: LocalEngine,
    db: asyncpg.Pool,
    spark_catalog_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The planted fault: the plan computation (``expiry_ledger.plan_expiry``, monkeypatched)
    adds a data file the current snapshot still reads. The independent Spark check must stop
    the job before the procedure runs and hold the table."""
    name = unique_name("planted")
    table, _tagged = build_table(spark, name)
    before, count = fingerprint(spark, table), snapshot_count(spark, table)
    live = spark.sql(f"SELECT file_path FROM {table}.files WHERE content = 0 LIMIT 1").first()[
        "file_path"
    ]
    real = plan_expiry

    def planted(*args: Any, **kwargs: Any) -> Any:
        plan = real(*args, **kwargs)
        return dataclasses.replace(plan, files=(*plan.files, LedgerFile(live, "data", 1)))

    monkeypatch.setattr(expiry_ledger, "plan_expiry", planted)
    table_id = await register(db, name)
    job, run = await run_job(db, engine, spark_catalog_settings, table_id, [expire_action()])
    with pytest.raises(PermanentError, match="still referenced"):
        await run
    assert snapshot_count(spark, table) == count  # the procedure never ran
    assert fingerprint(spark, table) == before and missing_referenced_files(spark, table) == []
    hold = await db.fetchval("SELECT maintenance_hold FROM icepack.tables WHERE id = $1", table_id)
    assert hold["action"] == "expire_snapshots"
    assert [c["path"] for c in hold["evidence"]["conflicts"]] == [live]
    assert hold["evidence"]["conflicts"][0]["live_in"].startswith("file of snapshot")
    rows = await ledger(db, job.id)
    assert rows and all(r["state"] == "recorded" for r in rows)
    assert all(local_path(r["path"]).exists() for r in rows)
    (stored,) = await db.fetch(
        "SELECT state, output FROM icepack.job_actions WHERE job_id = $1", job.id
    )
    assert stored["state"] == "failed" and stored["output"]["conflict_count"] == 1


async def test_the_spark_sample_stops_a_live_file_icepacks_reader_missed(
    spark: Any,
    engine: LocalEngine,
    db: asyncpg.Pool,
    spark_catalog_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two planted faults at once: the plan records a data file the head still reads, and
    Icepack's own live check (``live_conflicts``) is blinded so that it finds nothing. Spark's
    sample (the newest kept snapshots, the head among them) still stops the job before the
    procedure runs, and the evidence says Spark saw it."""
    name = unique_name("sampled")
    table, _tagged = build_table(spark, name)
    before, count = fingerprint(spark, table), snapshot_count(spark, table)
    live = spark.sql(f"SELECT file_path FROM {table}.files WHERE content = 0 LIMIT 1").first()[
        "file_path"
    ]
    real_plan, real_check = plan_expiry, live_conflicts

    def planted(*args: Any, **kwargs: Any) -> Any:
        plan = real_plan(*args, **kwargs)
        return dataclasses.replace(plan, files=(*plan.files, LedgerFile(live, "data", 1)))

    def blind(*args: Any, **kwargs: Any) -> Any:
        check = real_check(*args, **kwargs)
        return dataclasses.replace(check, conflicts=[], conflict_count=0, _hit=set())

    monkeypatch.setattr(expiry_ledger, "plan_expiry", planted)
    monkeypatch.setattr(expiry_ledger, "live_conflicts", blind)
    table_id = await register(db, name)
    job, run = await run_job(db, engine, spark_catalog_settings, table_id, [expire_action()])
    with pytest.raises(PermanentError, match="still referenced"):
        await run
    assert snapshot_count(spark, table) == count  # the procedure never ran
    assert fingerprint(spark, table) == before and missing_referenced_files(spark, table) == []
    hold = await db.fetchval("SELECT maintenance_hold FROM icepack.tables WHERE id = $1", table_id)
    (conflict,) = hold["evidence"]["conflicts"]
    assert conflict["path"] == live and conflict["live_in"].endswith("(Spark)")
    rows = await ledger(db, job.id)
    assert rows and all(r["state"] == "recorded" for r in rows)
    assert all(local_path(r["path"]).exists() for r in rows)


async def test_a_count_mismatch_after_the_call_holds_the_table(
    spark: Any,
    engine: LocalEngine,
    db: asyncpg.Pool,
    spark_catalog_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The planted fault: the plan (monkeypatched) forgets one data file the procedure will
    delete. The procedure's count then exceeds the ledger's: the job fails, the table is held
    and the evidence names both counts; the rows stay ``recorded``."""
    name = unique_name("mismatch")
    table, _tagged = build_table(spark, name)
    before = fingerprint(spark, table)
    real = plan_expiry
    forgotten: list[str] = []

    def forgetful(*args: Any, **kwargs: Any) -> Any:
        plan = real(*args, **kwargs)
        data = next(f for f in plan.files if f.kind == "data")
        forgotten.append(data.path)
        return dataclasses.replace(plan, files=tuple(f for f in plan.files if f is not data))

    monkeypatch.setattr(expiry_ledger, "plan_expiry", forgetful)
    table_id = await register(db, name)
    job, run = await run_job(db, engine, spark_catalog_settings, table_id, [expire_action()])
    with pytest.raises(PermanentError, match="the ledger recorded"):
        await run
    hold = await db.fetchval("SELECT maintenance_hold FROM icepack.tables WHERE id = $1", table_id)
    evidence = hold["evidence"]
    assert evidence["status"] == "count_mismatch"
    data_col = "deleted_data_files_count"
    assert evidence["procedure_counts"][data_col] == evidence["ledger_counts"][data_col] + 1
    rows = await ledger(db, job.id)
    assert rows and all(r["state"] == "recorded" for r in rows)
    assert forgotten and not local_path(forgotten[0]).exists()
    assert fingerprint(spark, table) == before


async def test_the_ledger_check_runs_through_a_thrift_engine(
    spark: Any, thrift_server: SparkServer, db: asyncpg.Pool, spark_catalog_settings: Settings
) -> None:
    """Spark's sampled live view (``files VERSION AS OF``, ``all_manifests``, ``snapshots``)
    and the reconciliation read rows as the Thrift engine returns them."""
    name = unique_name("thrift")
    table, tagged = build_table(spark, name)
    before = fingerprint(spark, table)
    table_id = await register(db, name)
    engine = ThriftEngine(thrift_server.host, thrift_server.port)
    try:
        job, run = await run_job(db, engine, spark_catalog_settings, table_id, [expire_action()])
        (result,) = await run
    finally:
        await engine.close()
    spark.sql(f"REFRESH TABLE {table}")
    rows = await ledger(db, job.id)
    assert rows and all(r["state"] == "deleted" for r in rows)
    assert int(result["deleted_data_files_count"]) == sum(r["kind"] == "data" for r in rows)
    assert [r["path"] for r in rows if local_path(r["path"]).exists()] == []
    assert tagged not in result["expiring_snapshot_ids"]
    assert fingerprint(spark, table) == before and missing_referenced_files(spark, table) == []
