"""Maintenance through the Thrift (Kyuubi protocol) and Connect engines, a concurrent writer,
and an executor killed with SIGKILL in the middle of a rewrite."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import pytest

from icepack_core.jobs import Backoff, JobQueue
from icepack_core.maintenance import TableMaintenance
from icepack_core.spark.engine import ConnectEngine, LocalEngine, ThriftEngine
from icepack_core.types import TableRef
from tests.maintenance.spark_tables import (
    CATALOG,
    data_file_count,
    fingerprint,
    local_path,
    make_small_files_table,
    missing_referenced_files,
    snapshot_count,
    unique_name,
)
from tests.support.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "engines"


@pytest.mark.parametrize("kind", ["thrift", "connect"])
async def test_maintenance_through_a_remote_engine(kind, request, spark):
    server = request.getfixturevalue(f"{kind}_server")
    engine = (ThriftEngine(server.host, server.port) if kind == "thrift"
              else ConnectEngine(f"sc://{server.host}:{server.port}"))
    name = unique_name(kind)
    table = make_small_files_table(spark, NS, name, batches=6)
    before, files_before = fingerprint(spark, table), data_file_count(spark, table)
    try:
        maintenance = TableMaintenance(engine, TableRef(CATALOG, NS, name))
        rewrite = await maintenance.run({"action": "rewrite_data_files",
                                         "params": {"options": {"min-input-files": "2"}}})
        expire = await maintenance.run({"action": "expire_snapshots",
                                        "params": {"older_than": "2999-01-01T00:00:00Z",
                                                   "retain_last": 1}})
    finally:
        await engine.close()
    spark.sql(f"REFRESH TABLE {table}")
    assert fingerprint(spark, table) == before
    assert data_file_count(spark, table) == 1 < files_before
    assert snapshot_count(spark, table) == 1
    assert rewrite.verification["verified_snapshots"][0]["rows_after"] == before[0]
    assert int(expire.output["deleted_data_files_count"]) == files_before
    assert missing_referenced_files(spark, table) == []


async def test_appends_committed_during_compaction_all_survive(spark, spark_catalog_settings):
    name = unique_name("concurrent")
    table = make_small_files_table(spark, NS, name, batches=20)
    before = fingerprint(spark, table)
    engine = LocalEngine(spark_catalog_settings, session=spark)
    maintenance = TableMaintenance(engine, TableRef(CATALOG, NS, name))

    def writer() -> int:
        for i in range(6):
            spark.sql(f"INSERT INTO {table} VALUES ({100_000 + i}, 'a', 'late')")
        return 6

    _, added = await asyncio.gather(
        maintenance.run({"action": "rewrite_data_files",
                         "params": {"options": {"min-input-files": "2"}}}),
        asyncio.to_thread(writer))
    total = spark.sql(f"SELECT count(*) AS n, count(DISTINCT id) AS d FROM {table}").first()
    assert total["n"] == total["d"] == before[0] + added  # nothing lost, nothing doubled
    original = spark.sql(f"SELECT count(*) AS n, coalesce(sum(cast(hash(*) AS BIGINT)), 0) AS h "
                         f"FROM {table} WHERE id < 100000").first()
    assert (original["n"], original["h"]) == before
    assert missing_referenced_files(spark, table) == []


async def test_executor_killed_mid_rewrite_is_rerun_after_lease_expiry(
        spark, spark_catalog_settings, db, database_url, tmp_path):
    name = unique_name("crash")
    table = make_small_files_table(spark, NS, name, batches=40, rows=50)
    before = fingerprint(spark, table)
    referenced = {local_path(r["file_path"]) for r in
                  spark.sql(f"SELECT file_path FROM {table}.files").collect()}
    data_dir = next(iter(referenced)).parent
    table_id = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ($1, $2, $3) RETURNING id",
        CATALOG, NS, name)
    queue = JobQueue(db, Backoff(base_seconds=0, cap_seconds=0))  # re-run at once once reaped
    job = (await queue.enqueue(table_id, [{"action": "rewrite_data_files",
                                           "params": {"options": {"min-input-files": "2"}}}],
                               max_attempts=3)).job
    (catalog,) = spark_catalog_settings.effective_catalogs()
    env = {**os.environ, "ICEPACK_DATABASE_URL": database_url, "ICEPACK_HTTP_PORT": "0",
           "ICEPACK_DATA_DIR": str(tmp_path), "ICEPACK_JOB_LEASE_SECONDS": "6",
           "ICEPACK_JOB_BACKOFF_BASE_SECONDS": "0", "ICEPACK_JOB_BACKOFF_CAP_SECONDS": "0",
           "ICEPACK_SPARK_JARS_DIR": str(spark_catalog_settings.spark_jars_dir),
           "ICEPACK_SPARK_MASTER": "local[1]",
           "ICEPACK_CATALOGS": json.dumps([{"name": catalog.name, "type": "sql",
                                            "uri": catalog.uri, "warehouse": catalog.warehouse}])}

    async def executor():
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "icepack_core.cli", "service", "executor", "--once", env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)

    first = await executor()

    async def rewrite_writing_files():
        state = await db.fetchval("SELECT state FROM icepack.jobs WHERE id = $1", job.id)
        new = {p for p in data_dir.iterdir() if p.suffix == ".parquet"} - referenced
        return state == "running" and bool(new)

    await eventually(rewrite_writing_files, timeout=120, interval=0.02,
                     what="the rewrite to start writing files")
    first.send_signal(signal.SIGKILL)  # no cleanup, no lock release, no job update
    await first.wait()
    assert (await queue.get(job.id)).state.value == "running"  # until its lease runs out

    async def reaped():
        return [j for j in await queue.reap() if j.id == job.id]

    (requeued,) = await eventually(reaped, timeout=30, interval=0.5, what="lease expiry")
    assert requeued.state.value == "queued" and "lease of executor@" in requeued.error

    second = await executor()
    _, err = await asyncio.wait_for(second.communicate(), timeout=300)
    assert second.returncode == 0, err.decode()[-3000:]
    done = await queue.get(job.id)
    assert done.state.value == "succeeded", (done.error, err.decode()[-2000:])
    assert done.fence == 2 and done.attempts == 2

    spark.sql(f"REFRESH TABLE {table}")
    totals = spark.sql(f"SELECT count(*) AS n, count(DISTINCT id) AS d FROM {table}").first()
    assert totals["n"] == totals["d"] == before[0]  # no row lost or duplicated
    assert fingerprint(spark, table) == before
    assert missing_referenced_files(spark, table) == []
