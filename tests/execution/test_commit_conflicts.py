"""A writer that wins a commit conflict does not fail the maintenance job, the table or its data.

Real Spark (the executor's ``JobRunner`` on the session's local engine), the real JDBC catalog
in Postgres, and a real writer process (``writer_child``: PyIceberg's SQL catalog) committing
copy-on-write deletes and appends *during* the job. The one instrument: a trigger on the
catalog's ``iceberg_tables`` (per statement, before any row is locked) holds Spark's first
commit (an advisory lock the test owns; only connections of the JDBC driver wait, the writer's
do not) until the writer has
committed, so the race is decided the same way on every run instead of by timing.

After the conflict Iceberg refreshes and re-validates: the files or manifests the action replaced
are gone, so it cannot commit. The job must give its claim back (no attempt spent, queued with
backoff, ``jobs.conflicts`` counted, no hold), then succeed on the next claim; the contents are
exactly the writer's (rows and checksum) and no referenced file is gone.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from icepack_core.execution.job_runner import JobRun, JobRunner
from icepack_core.intents import parse_intent
from icepack_core.queue.deferrals import conflict_figures
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.types import JobState
from tests.execution.spark_tables import (
    CATALOG,
    fingerprint,
    make_small_files_table,
    missing_referenced_files,
    unique_name,
)
from tests.support.settings import service_settings
from tests.support.waiting import eventually

# Spark, a catalog and a writer process per test, on a shared two-core machine.
pytestmark = pytest.mark.timeout(900)
NS = "conflicts"
GATE_KEY = 4343
GATE_SQL = f"""
CREATE TABLE IF NOT EXISTS test_conflict_gate (table_name text PRIMARY KEY, held int NOT NULL);
CREATE OR REPLACE FUNCTION test_conflict_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- Per statement, before any row is locked: the writer's UPDATE must not wait behind Spark's.
  IF current_setting('application_name') LIKE 'PostgreSQL JDBC%'
     AND EXISTS (SELECT 1 FROM test_conflict_gate WHERE held = 0)
  THEN
    UPDATE test_conflict_gate SET held = 1;
    PERFORM pg_advisory_xact_lock({GATE_KEY});
  END IF;
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS test_conflict_gate ON iceberg_tables;
CREATE TRIGGER test_conflict_gate BEFORE UPDATE ON iceberg_tables
   FOR EACH STATEMENT EXECUTE FUNCTION test_conflict_gate();
"""


@pytest.fixture
def runner_settings(
    database_url: str, spark_catalog_settings: Settings, tmp_path: Path
) -> Settings:
    return service_settings(database_url, spark_catalog_settings, tmp_path / "conflicts")


@asynccontextmanager
async def commit_gate(spark_database_url: str, table_name: str) -> AsyncIterator[Any]:
    """Holds Spark's next commit of ``table_name`` while the block runs (see the module)."""
    gate = await asyncpg.connect(spark_database_url)
    try:
        await gate.execute(GATE_SQL)
        await gate.execute(
            "INSERT INTO test_conflict_gate VALUES ($1, 0) "
            "ON CONFLICT (table_name) DO UPDATE SET held = 0",
            table_name,
        )
        await gate.execute("SELECT pg_advisory_lock($1)", GATE_KEY)
        yield gate
    finally:
        await gate.execute("SELECT pg_advisory_unlock_all()")
        await gate.execute("DROP TRIGGER IF EXISTS test_conflict_gate ON iceberg_tables")
        await gate.execute("DELETE FROM test_conflict_gate WHERE table_name = $1", table_name)
        await gate.close()


async def spark_commit_waiting(gate: Any) -> bool:
    waiting = await gate.fetchval(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND NOT l.granted AND l.objid = $1 "
        "AND a.datname = current_database()",
        GATE_KEY,
    )
    return bool(waiting)


async def write(settings: Any, name: str, delete_below: int, append: int) -> int:
    """Run the writer process to its end; the snapshot id of its last commit."""
    (catalog,) = settings.effective_catalogs()
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.execution.writer_child",
        catalog.model_dump_json(),
        NS,
        name,
        str(delete_below),
        str(append),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(child.communicate(), 180)
    assert child.returncode == 0, err.decode()[-2000:]
    return int(out.decode().split()[-1])


async def register(db: asyncpg.Pool, name: str) -> int:
    table_id: int = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ($1, $2, $3) RETURNING id",
        CATALOG,
        NS,
        name,
    )
    return table_id


async def run_racing_a_writer(
    db: asyncpg.Pool,
    spark: Any,
    spark_catalog_settings: Any,
    spark_database_url: str,
    runner_settings: Any,
    name: str,
    action: dict[str, Any],
) -> tuple[JobRun, int, int]:
    """Run a job of ``action`` while the writer deletes ids < 30 and appends 7 rows between the
    action's start and its commit. Returns the run, the job id and the writer's last snapshot."""
    table_id = await register(db, name)
    queue = JobQueue(db)
    job = (await queue.enqueue(table_id, [parse_intent(action)], max_attempts=3)).job
    claimed = await queue.claim("executor@test", 300)
    assert claimed is not None and claimed.id == job.id
    runner = JobRunner(
        db, runner_settings, queue, LocalEngine(runner_settings, session=spark), "executor@test"
    )
    async with commit_gate(spark_database_url, name) as gate:
        running = asyncio.create_task(runner.run(claimed))
        await eventually(
            lambda: spark_commit_waiting(gate),
            timeout=300,
            interval=0.1,
            what="the action's commit waiting at the gate",
        )
        writer_snapshot = await write(spark_catalog_settings, name, delete_below=30, append=7)
        await gate.execute("SELECT pg_advisory_unlock($1)", GATE_KEY)
        run = await asyncio.wait_for(running, 300)
    return run, job.id, writer_snapshot


async def assert_given_back(db: asyncpg.Pool, run: JobRun, action: str, conflict: str) -> None:
    done = run.job
    assert done is not None
    assert done.state is JobState.QUEUED, done.error
    assert done.attempts == 0 and done.conflicts == 1, (done.attempts, done.conflicts)
    assert "commit conflict" in (done.error or "") and conflict in (done.error or "")
    assert done.not_before > datetime.now(UTC)  # backoff: not at once
    recorded_actions = await db.fetch(
        "SELECT action, state, output, error FROM icepack.job_actions WHERE job_id = $1 "
        "ORDER BY id",
        done.id,
    )
    # The conflict, then the verification of whatever the action committed before it.
    assert [a["action"] for a in recorded_actions][:1] == [action], recorded_actions
    recorded = recorded_actions[0]
    for verify in recorded_actions[1:]:
        assert verify["action"] == "verify_rewrites" and verify["state"] == "succeeded"
    assert recorded["state"] == "failed" and conflict in recorded["output"]["conflict"]
    assert "the writer won" in recorded["error"]
    table = await db.fetchrow(
        "SELECT maintenance_hold FROM icepack.tables WHERE id = $1", done.table_id
    )
    assert table is not None
    assert table["maintenance_hold"] is None
    deferral = await db.fetchrow(
        "SELECT conflicts, deferred_until FROM icepack.maintenance_deferrals "
        "WHERE table_id = $1 AND action = $2",
        done.table_id,
        action,
    )
    assert deferral is not None
    assert deferral["conflicts"] == 1 and deferral["deferred_until"] is None


async def retry(db: asyncpg.Pool, spark: Any, runner_settings: Any, job_id: int) -> JobRun:
    """The next claim, past the backoff: the job now runs on the writer's state."""
    queue = JobQueue(db)
    claimed = await queue.claim("executor@test", 300, now=datetime.now(UTC) + timedelta(hours=1))
    assert claimed is not None and claimed.id == job_id and claimed.attempts == 1
    runner = JobRunner(
        db, runner_settings, queue, LocalEngine(runner_settings, session=spark), "executor@test"
    )
    return await runner.run(claimed)


def contents_at(spark: Any, table: str, snapshot_id: int) -> tuple[int, int]:
    row = spark.sql(
        f"SELECT count(*) AS n, coalesce(sum(cast(hash(*) AS BIGINT)), 0) AS h "
        f"FROM {table} VERSION AS OF {snapshot_id}"
    ).first()
    return int(row["n"]), int(row["h"])


async def assert_exact_after(
    db: asyncpg.Pool, spark: Any, table: str, writer_snapshot: int, before: tuple[int, int]
) -> None:
    spark.sql(f"REFRESH TABLE {table}")
    expected = contents_at(spark, table, writer_snapshot)
    assert expected[0] == before[0] - 30 + 7  # the writer's deletes and appends, all of them
    assert fingerprint(spark, table) == expected
    totals = spark.sql(f"SELECT count(*) AS n, count(DISTINCT id) AS d FROM {table}").first()
    assert totals["n"] == totals["d"] == expected[0]
    assert missing_referenced_files(spark, table) == []


async def test_a_manifest_rewrite_racing_a_copy_on_write_delete_is_conflict_retried(
    spark: Any,
    spark_catalog_settings: Settings,
    spark_database_url: str,
    db: asyncpg.Pool,
    runner_settings: Settings,
) -> None:
    name = unique_name("manifests_race")
    table = make_small_files_table(spark, NS, name, batches=8, rows=20)
    before = fingerprint(spark, table)
    run, job_id, writer_snapshot = await run_racing_a_writer(
        db,
        spark,
        spark_catalog_settings,
        spark_database_url,
        runner_settings,
        name,
        {"action": "rewrite_manifests"},
    )
    await assert_given_back(
        db, run, "rewrite_manifests", "could not be found in the latest snapshot"
    )
    await assert_exact_after(db, spark, table, writer_snapshot, before)

    again = await retry(db, spark, runner_settings, job_id)
    assert again.job is not None and again.job.state is JobState.SUCCEEDED, again.job
    assert again.job.conflicts == 1  # the figure: this job was conflict-retried once
    assert (
        await db.fetchval(
            "SELECT count(*) FROM icepack.maintenance_deferrals WHERE table_id = $1",
            again.job.table_id,
        )
        == 0
    )  # a clean commit starts the conflict count over
    await assert_exact_after(db, spark, table, writer_snapshot, before)
    figures = await conflict_figures(db)
    assert figures.conflict_retried_jobs == 1 and figures.conflict_jobs_failed == 0


async def test_a_compaction_racing_deletes_and_appends_is_conflict_retried(
    spark: Any,
    spark_catalog_settings: Settings,
    spark_database_url: str,
    db: asyncpg.Pool,
    runner_settings: Settings,
) -> None:
    """Without partial progress the whole rewrite is one commit: the writer's delete removed
    one of the files it replaced, so the commit is refused and the job is given back."""
    name = unique_name("compaction_race")
    table = make_small_files_table(spark, NS, name, batches=8, rows=20)
    before = fingerprint(spark, table)
    action = {
        "action": "rewrite_data_files",
        "params": {"options": {"min-input-files": "2", "partial-progress.enabled": "false"}},
    }
    run, job_id, writer_snapshot = await run_racing_a_writer(
        db, spark, spark_catalog_settings, spark_database_url, runner_settings, name, action
    )
    await assert_given_back(db, run, "rewrite_data_files", "Missing required files to delete")
    await assert_exact_after(db, spark, table, writer_snapshot, before)

    again = await retry(db, spark, runner_settings, job_id)
    assert again.job is not None and again.job.state is JobState.SUCCEEDED, again.job
    await assert_exact_after(db, spark, table, writer_snapshot, before)


async def test_a_compaction_with_partial_progress_keeps_what_committed_and_retries_the_rest(
    spark: Any,
    spark_catalog_settings: Settings,
    spark_database_url: str,
    db: asyncpg.Pool,
    runner_settings: Settings,
) -> None:
    """With ``partial-progress.enabled`` (the planner's default) file groups commit in batches:
    a batch holding a file the writer rewrote loses, the others stay committed. Iceberg only
    logs the lost batch (its output says the rewrite succeeded); the executor finds the old
    small files the lost batch left (``scoping.left_behind``, table-wide here) and gives the job
    back as conflict-retried for that part; the retry compacts them."""
    name = unique_name("partial_race")
    table = make_small_files_table(spark, NS, name, batches=12, rows=20)
    before = fingerprint(spark, table)
    avg_size = int(
        spark.sql(f"SELECT avg(file_size_in_bytes) AS s FROM {table}.files").first()["s"]
    )
    action = {
        "action": "rewrite_data_files",
        "params": {
            "options": {
                "min-input-files": "2",
                "partial-progress.enabled": "true",
                "partial-progress.max-commits": "3",
                "max-concurrent-file-group-rewrites": "1",
                "max-file-group-size-bytes": str(int(avg_size * 4.5)),
            }
        },
    }
    run, job_id, writer_snapshot = await run_racing_a_writer(
        db, spark, spark_catalog_settings, spark_database_url, runner_settings, name, action
    )
    done = run.job
    assert done is not None and done.state is JobState.QUEUED, done
    assert done.conflicts == 1 and done.attempts == 0
    assert "partial progress: 1 partitions not rewritten" in (done.error or ""), done.error
    (result,) = await db.fetch(
        "SELECT output FROM icepack.job_actions WHERE job_id = $1 "
        "AND action = 'rewrite_data_files' AND state = 'succeeded'",
        job_id,
    )
    # The groups that committed are kept (and verified).
    assert result["output"]["rewritten_data_files_count"] > 0
    assert result["output"]["partitions_lost"] == 1
    await assert_exact_after(db, spark, table, writer_snapshot, before)
    kept = spark.sql(
        f"SELECT count(*) AS n FROM {table}.snapshots WHERE operation = 'replace'"
    ).first()["n"]
    assert kept >= 1
    hold = await db.fetchval(
        "SELECT maintenance_hold FROM icepack.tables WHERE id = $1", done.table_id
    )
    assert hold is None
    again = await retry(db, spark, runner_settings, job_id)
    assert again.job is not None and again.job.state is JobState.SUCCEEDED, again.job
    await assert_exact_after(db, spark, table, writer_snapshot, before)


def make_two_partitions(spark: Any, name: str, files: int = 6) -> str:
    """Partitions ``b`` (ids 0..) and ``a`` (ids 1000..), ``files`` small files each: the
    writer's delete of ids < 30 rewrites files of ``b`` only."""
    table = f"{CATALOG}.{NS}.{name}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{NS}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, part STRING, payload STRING) USING iceberg "
        "PARTITIONED BY (part) TBLPROPERTIES ('format-version'='2', "
        "'write.target-file-size-bytes'='1048576')"
    )
    for b in range(files):
        for part, base in (("b", 0), ("a", 1000)):
            spark.sql(
                f"INSERT INTO {table} SELECT id, '{part}', concat('row-', id) "
                f"FROM range({base + b * 20}, {base + (b + 1) * 20})"
            )
    return table


def live_files(spark: Any, table: str, part: str) -> set[str]:
    spark.sql(f"REFRESH TABLE {table}")
    rows = spark.sql(
        f"SELECT file_path FROM {table}.files WHERE content = 0 AND partition.part = '{part}'"
    ).collect()
    return {r["file_path"] for r in rows}


async def test_a_scoped_compaction_whose_partition_group_lost_is_conflict_retried(
    spark: Any,
    spark_catalog_settings: Settings,
    spark_database_url: str,
    db: asyncpg.Pool,
    runner_settings: Settings,
) -> None:
    """The planner's scoped compaction with partial progress (its default) on partitions ``a``
    and ``b``; the writer's copy-on-write delete rewrites files of ``b`` while the rewrite
    runs. ``a``'s group commits, ``b``'s loses (Iceberg only logs it: its output says the
    rewrite succeeded). The executor finds ``b`` still holding its old small files: the
    action is recorded with ``partitions_lost`` 1 (what committed verified and kept) and the
    job is given back as conflict-retried, not succeeded, so ``b`` is compacted by the retry
    instead of waiting for the next planned run."""
    name = unique_name("lost_group")
    table = make_two_partitions(spark, name)
    before = fingerprint(spark, table)
    b_before = live_files(spark, table, "b")
    action = {
        "action": "rewrite_data_files",
        "params": {
            "scope": "partitions",
            "open_quiet_seconds": 0,
            "options": {"min-input-files": "2", "partial-progress.enabled": "true"},
        },
    }
    run, job_id, writer_snapshot = await run_racing_a_writer(
        db, spark, spark_catalog_settings, spark_database_url, runner_settings, name, action
    )
    done = run.job
    assert done is not None and done.state is JobState.QUEUED, done
    assert done.attempts == 0 and done.conflicts == 1, (done.attempts, done.conflicts)
    assert "1 of 2 selected partitions not rewritten" in (done.error or ""), done.error
    rows = await db.fetch(
        "SELECT action, state, output FROM icepack.job_actions WHERE job_id = $1 ORDER BY id",
        job_id,
    )
    (rewrite,) = [r for r in rows if r["action"] == "rewrite_data_files"]
    assert rewrite["state"] == "succeeded" and rewrite["output"]["partitions_lost"] == 1
    assert rewrite["output"]["partitions_selected"] == 2
    assert all(s["ok"] for s in rewrite["output"]["verification"]["snapshots"])
    assert len(live_files(spark, table, "a")) == 2  # compacted, plus the writer's append
    assert live_files(spark, table, "b") & b_before  # b's old small files are still live
    # A partial loss that committed something is progress: it never defers the action.
    deferral = await db.fetchrow(
        "SELECT conflicts, deferred_until FROM icepack.maintenance_deferrals "
        "WHERE table_id = $1 AND action = 'rewrite_data_files'",
        done.table_id,
    )
    assert deferral is not None
    assert deferral["conflicts"] == 1 and deferral["deferred_until"] is None
    assert (
        await db.fetchval(
            "SELECT maintenance_hold FROM icepack.tables WHERE id = $1", done.table_id
        )
        is None
    )
    await assert_exact_after(db, spark, table, writer_snapshot, before)

    again = await retry(db, spark, runner_settings, job_id)
    assert again.job is not None and again.job.state is JobState.SUCCEEDED, again.job
    assert again.job.conflicts == 1  # the figure: conflict-retried once, for the lost part
    assert len(live_files(spark, table, "b")) == 1 and not live_files(spark, table, "b") & b_before
    await assert_exact_after(db, spark, table, writer_snapshot, before)
    figures = await conflict_figures(db)
    assert figures.conflict_retried_jobs >= 1 and figures.conflict_jobs_failed == 0
