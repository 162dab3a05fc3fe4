"""Maintenance through the Thrift (Kyuubi protocol) and Connect engines, a concurrent writer,
and an executor killed with SIGKILL in the middle of a rewrite (a real ``executor --once``
process with its own Spark JVM; the retry runs in this process)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from icepack_core.execution.job_runner import JobRunner
from icepack_core.execution.maintenance import TableMaintenance
from icepack_core.intents import RewriteDataFiles, RewriteDataFilesParams, parse_intent
from icepack_core.queue.jobs import Backoff, Job, JobQueue
from icepack_core.settings import Settings
from icepack_core.spark.engine import ConnectEngine, LocalEngine, ThriftEngine
from icepack_core.types import TableRef
from tests.execution.spark_tables import (
    CATALOG,
    data_file_count,
    fingerprint,
    local_path,
    make_small_files_table,
    missing_referenced_files,
    snapshot_count,
    unique_name,
)
from tests.execution.verify_support import content, make_all_types_table
from tests.support.settings import service_settings
from tests.support.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "engines"


@pytest.fixture
def runner_settings(
    database_url: str, spark_catalog_settings: Settings, tmp_path: Path
) -> Settings:
    return service_settings(database_url, spark_catalog_settings, tmp_path / "retry")


@pytest.mark.parametrize("kind", ["thrift", "connect"])
async def test_maintenance_through_a_remote_engine(
    kind: str, request: pytest.FixtureRequest, spark: Any
) -> None:
    server = request.getfixturevalue(f"{kind}_server")
    engine = (
        ThriftEngine(server.host, server.port)
        if kind == "thrift"
        else ConnectEngine(f"sc://{server.host}:{server.port}")
    )
    name = unique_name(kind)
    table = make_small_files_table(spark, NS, name, batches=6)
    before, files_before = fingerprint(spark, table), data_file_count(spark, table)
    try:
        maintenance = TableMaintenance(engine, TableRef(CATALOG, NS, name))
        rewrite = await maintenance.run(
            parse_intent(
                {"action": "rewrite_data_files", "params": {"options": {"min-input-files": "2"}}}
            )
        )
        expire = await maintenance.run(
            parse_intent(
                {
                    "action": "expire_snapshots",
                    "params": {"older_than": "2999-01-01T00:00:00Z", "retain_last": 1},
                }
            )
        )
    finally:
        await engine.close()
    spark.sql(f"REFRESH TABLE {table}")
    assert fingerprint(spark, table) == before
    assert data_file_count(spark, table) == 1 < files_before
    assert snapshot_count(spark, table) == 1
    assert rewrite.verification is not None
    assert rewrite.verification.to_json()["snapshots"][0]["rows_after"] == before[0]
    assert int(expire.output["deleted_data_files_count"]) == files_before
    assert missing_referenced_files(spark, table) == []


@pytest.mark.parametrize("kind", ["thrift", "connect"])
async def test_every_type_is_verified_through_a_remote_engine(
    kind: str, request: pytest.FixtureRequest, spark: Any
) -> None:
    """The fingerprint's schema comes from SQL (SHOW CREATE TABLE), so maps, nested types,
    binary, decimals and NaN verify the same over Thrift and Connect as in process."""
    server = request.getfixturevalue(f"{kind}_server")
    engine = (
        ThriftEngine(server.host, server.port)
        if kind == "thrift"
        else ConnectEngine(f"sc://{server.host}:{server.port}")
    )
    name = unique_name(f"types_{kind}")
    table = make_all_types_table(spark, NS, name)
    before = content(spark, table)
    try:
        outcome = await TableMaintenance(engine, TableRef(CATALOG, NS, name)).run(
            parse_intent(
                {"action": "rewrite_data_files", "params": {"options": {"min-input-files": "2"}}}
            )
        )
    finally:
        await engine.close()
    assert outcome.verification is not None
    (checked,) = outcome.verification.to_json()["snapshots"]
    assert checked["ok"] and checked["rows_after"] == 5
    assert checked["checksum_before"] == checked["checksum_after"] != "0"
    assert content(spark, table) == before


async def test_appends_committed_during_compaction_all_survive(
    spark: Any, spark_catalog_settings: Settings
) -> None:
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
        maintenance.run(
            parse_intent(
                {"action": "rewrite_data_files", "params": {"options": {"min-input-files": "2"}}}
            )
        ),
        asyncio.to_thread(writer),
    )
    # The writer and the CALL share this session, whose catalog caches a loaded table: the
    # table object cached after the CALL may not have seen the writer's last commit (a count
    # one short was seen under load; the same count after a refresh was whole).
    spark.sql(f"REFRESH TABLE {table}")
    total = spark.sql(f"SELECT count(*) AS n, count(DISTINCT id) AS d FROM {table}").first()
    assert total["n"] == total["d"] == before[0] + added  # nothing lost, nothing doubled
    original = spark.sql(
        f"SELECT count(*) AS n, coalesce(sum(cast(hash(*) AS BIGINT)), 0) AS h "
        f"FROM {table} WHERE id < 100000"
    ).first()
    assert (original["n"], original["h"]) == before
    assert missing_referenced_files(spark, table) == []


def executor_env(database_url: str, spark_catalog_settings: Any, data_dir: Path) -> dict[str, str]:
    """The environment of an ``icepack service executor --once`` child on the Spark fixtures'
    catalog: a 6 s lease and no retry backoff, so a killed attempt is re-run at once."""
    (catalog,) = spark_catalog_settings.effective_catalogs()
    return {
        **os.environ,
        "ICEPACK_DATABASE_URL": database_url,
        "ICEPACK_HTTP_PORT": "0",
        "ICEPACK_DATA_DIR": str(data_dir),
        "ICEPACK_JOB_LEASE_SECONDS": "6",
        "ICEPACK_JOB_BACKOFF_BASE_SECONDS": "0",
        "ICEPACK_JOB_BACKOFF_CAP_SECONDS": "0",
        "ICEPACK_SPARK_JARS_DIR": str(spark_catalog_settings.spark_jars_dir),
        "ICEPACK_SPARK_MASTER": "local[1]",
        "ICEPACK_CATALOGS": json.dumps(
            [
                {
                    "name": catalog.name,
                    "type": "sql",
                    "uri": catalog.uri,
                    "warehouse": catalog.warehouse,
                }
            ]
        ),
    }


async def start_executor_once(env: dict[str, str]) -> asyncio.subprocess.Process:
    """An ``icepack service executor --once`` child in its own process group, so a kill of
    the group takes its Spark JVM with it, as a killed pod would: nothing of that attempt can
    commit later. Its output is discarded (a pipe nobody reads would stall it)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "icepack_core.cli.app",
        "service",
        "executor",
        "--once",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )


async def retry_in_this_process(
    db: Any, queue: JobQueue, spark: Any, settings: Any, job_id: int
) -> Job:
    """The retry after a lease expiry: another executor claims the job and runs it to its end
    (``JobRunner``, what ``executor --once`` runs after its claim), here on the test session's
    Spark, so the retry does not pay a second JVM start."""
    job = await queue.claim("executor@retry", 60)
    assert job is not None and job.id == job_id
    runner = JobRunner(db, settings, queue, LocalEngine(settings, session=spark), "executor@retry")
    done = (await runner.run(job)).job
    assert done is not None
    return done


async def test_executor_killed_mid_rewrite_is_rerun_after_lease_expiry(
    spark: Any,
    spark_catalog_settings: Settings,
    db: asyncpg.Pool,
    database_url: str,
    runner_settings: Settings,
    tmp_path: Path,
) -> None:
    name = unique_name("crash")
    table = make_small_files_table(spark, NS, name, batches=40, rows=50)
    before = fingerprint(spark, table)
    referenced = {
        local_path(r["file_path"])
        for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()
    }
    data_dir = next(iter(referenced)).parent
    table_id = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ($1, $2, $3) RETURNING id",
        CATALOG,
        NS,
        name,
    )
    queue = JobQueue(db, Backoff(base_seconds=0, cap_seconds=0))  # re-run at once once reaped
    job = (
        await queue.enqueue(
            table_id,
            [RewriteDataFiles(params=RewriteDataFilesParams(options={"min-input-files": "2"}))],
            max_attempts=3,
        )
    ).job
    env = executor_env(database_url, spark_catalog_settings, tmp_path)

    first = await start_executor_once(env)

    async def rewrite_writing_files() -> Any:
        state = await db.fetchval("SELECT state FROM icepack.jobs WHERE id = $1", job.id)
        new = {p for p in data_dir.iterdir() if p.suffix == ".parquet"} - referenced
        return state == "running" and bool(new)

    await eventually(
        rewrite_writing_files, timeout=120, interval=0.02, what="the rewrite to start writing files"
    )
    os.killpg(first.pid, signal.SIGKILL)  # no cleanup, no lock release, no job update
    await first.wait()
    assert (await queue.get(job.id)).state.value == "running"  # until its lease runs out

    async def reaped() -> Any:
        return [j for j in await queue.reap() if j.id == job.id]

    (requeued,) = await eventually(reaped, timeout=30, interval=0.5, what="lease expiry")
    assert requeued.state.value == "queued" and "lease of executor@" in requeued.error

    done = await retry_in_this_process(db, queue, spark, runner_settings, job.id)
    assert done.state.value == "succeeded", done.error
    assert done.fence == 2 and done.attempts == 2

    spark.sql(f"REFRESH TABLE {table}")
    totals = spark.sql(f"SELECT count(*) AS n, count(DISTINCT id) AS d FROM {table}").first()
    assert totals["n"] == totals["d"] == before[0]  # no row lost or duplicated
    assert fingerprint(spark, table) == before
    assert missing_referenced_files(spark, table) == []


# Test-only commit gate in the JDBC catalog's database: the second commit of the gated table
# blocks inside its catalog UPDATE while the test holds an advisory lock, so "killed between two
# partial-progress commits" is a state the test waits for, not a timing it hopes for.
GATE_KEY = 4242
GATE_SQL = f"""
CREATE TABLE IF NOT EXISTS test_commit_gate (table_name text PRIMARY KEY, commits int NOT NULL);
CREATE OR REPLACE FUNCTION test_commit_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE test_commit_gate SET commits = commits + 1 WHERE table_name = NEW.table_name;
  IF (SELECT commits FROM test_commit_gate WHERE table_name = NEW.table_name) >= 2 THEN
    PERFORM pg_advisory_xact_lock({GATE_KEY});
  END IF;
  RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS test_commit_gate ON iceberg_tables;
CREATE TRIGGER test_commit_gate BEFORE UPDATE ON iceberg_tables
   FOR EACH ROW EXECUTE FUNCTION test_commit_gate();
"""


async def test_kill_between_partial_progress_commits_is_verified_by_the_retry(
    spark: Any,
    spark_catalog_settings: Settings,
    spark_database_url: str,
    db: asyncpg.Pool,
    database_url: str,
    runner_settings: Settings,
    tmp_path: Path,
) -> None:
    import asyncpg

    name = unique_name("partialkill")
    table = make_small_files_table(spark, NS, name, batches=24, rows=50)
    before = fingerprint(spark, table)
    start = int(
        spark.sql(
            f"SELECT snapshot_id FROM {table}.history WHERE is_current_ancestor "
            "ORDER BY made_current_at DESC LIMIT 1"
        ).first()["snapshot_id"]
    )
    avg_size = int(
        spark.sql(f"SELECT avg(file_size_in_bytes) AS s FROM {table}.files").first()["s"]
    )
    table_id = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ($1, $2, $3) RETURNING id",
        CATALOG,
        NS,
        name,
    )
    queue = JobQueue(db, Backoff(base_seconds=0, cap_seconds=0))
    # ~6 file groups of 4 files, committed in up to 3 partial-progress commits.
    options = {
        "rewrite-all": "true",
        "partial-progress.enabled": "true",
        "partial-progress.max-commits": "3",
        "max-concurrent-file-group-rewrites": "1",
        "max-file-group-size-bytes": str(int(avg_size * 4.5)),
    }
    job = (
        await queue.enqueue(
            table_id,
            [RewriteDataFiles(params=RewriteDataFilesParams(options=options))],
            max_attempts=3,
        )
    ).job
    env = executor_env(database_url, spark_catalog_settings, tmp_path)
    gate = await asyncpg.connect(spark_database_url)
    try:
        await gate.execute(GATE_SQL)
        await gate.execute("INSERT INTO test_commit_gate VALUES ($1, 0)", name)
        await gate.execute("SELECT pg_advisory_lock($1)", GATE_KEY)
        first = await start_executor_once(env)

        async def second_commit_blocked() -> bool:
            return (
                await gate.fetchval(
                    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE l.locktype = 'advisory' AND NOT l.granted AND a.datname = "
                    "current_database()"
                )
                == 1
            ) is True

        await eventually(
            second_commit_blocked,
            timeout=300,
            interval=0.1,
            what="the first partial commit, and the second waiting at the gate",
        )
        assert (
            await gate.fetchval("SELECT commits FROM test_commit_gate WHERE table_name = $1", name)
            == 1
        )  # exactly one partial commit landed
        os.killpg(first.pid, signal.SIGKILL)
        await first.wait()
        # The dead executor's catalog UPDATE must not land when the gate opens.
        await gate.execute(
            "SELECT pg_terminate_backend(l.pid) FROM pg_locks l WHERE l.locktype = 'advisory' "
            "AND NOT l.granted AND l.pid <> pg_backend_pid()"
        )

        async def blocked_gone() -> bool:
            return not await second_commit_blocked()

        await eventually(blocked_gone, timeout=30, what="the blocked commit to be aborted")
        await gate.execute("DELETE FROM test_commit_gate WHERE table_name = $1", name)
        await gate.execute("SELECT pg_advisory_unlock($1)", GATE_KEY)
    finally:
        await gate.execute("SELECT pg_advisory_unlock_all()")
        await gate.execute("DROP TRIGGER IF EXISTS test_commit_gate ON iceberg_tables")
        await gate.close()

    spark.sql(f"REFRESH TABLE {table}")
    partial = [
        int(r["snapshot_id"])
        for r in spark.sql(
            f"SELECT snapshot_id FROM {table}.snapshots WHERE operation = 'replace'"
        ).collect()
    ]
    assert len(partial) == 1  # the first attempt's one partial commit
    pending = await db.fetchrow(
        "SELECT * FROM icepack.pending_verifications WHERE table_id = $1", table_id
    )
    assert pending is not None
    assert (pending["job_id"], pending["fence"], pending["start_snapshot_id"]) == (job.id, 1, start)

    async def reaped() -> Any:
        return [j for j in await queue.reap() if j.id == job.id]

    await eventually(reaped, timeout=30, interval=0.5, what="lease expiry")
    done = await retry_in_this_process(db, queue, spark, runner_settings, job.id)
    assert done.state.value == "succeeded" and done.fence == 2, done.error

    actions = await db.fetch(
        "SELECT action, state, fence, output FROM icepack.job_actions "
        "WHERE job_id = $1 ORDER BY id",
        job.id,
    )
    assert [(a["action"], a["state"], a["fence"]) for a in actions] == [
        ("verify_rewrites", "succeeded", 2),
        ("rewrite_data_files", "succeeded", 2),
    ]
    evidence = actions[0]["output"]["verification"]
    assert evidence["status"] == "verified" and evidence["start_snapshot_id"] == start
    assert evidence["pending"]["job_id"] == job.id and evidence["pending"]["fence"] == 1
    assert [s["snapshot_id"] for s in evidence["snapshots"]] == partial
    assert all(s["ok"] and s["rows_after"] == before[0] for s in evidence["snapshots"])
    assert (
        await db.fetchval(
            "SELECT count(*) FROM icepack.pending_verifications WHERE table_id = $1", table_id
        )
        == 0
    )

    spark.sql(f"REFRESH TABLE {table}")
    totals = spark.sql(f"SELECT count(*) AS n, count(DISTINCT id) AS d FROM {table}").first()
    assert totals["n"] == totals["d"] == before[0]
    assert fingerprint(spark, table) == before
    assert missing_referenced_files(spark, table) == []
