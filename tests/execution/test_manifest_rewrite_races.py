"""A manifest rewrite racing an equality-delete writer (an upsert sink in another OS process).

Real Spark in both processes (the writer starts its own JVM: ``tests.support.stream_writer``,
committing upserts as Flink or Kafka Connect do: an equality delete on the key and the new row
in one ``RowDelta``), one JDBC catalog in Postgres, the executor's ``JobRunner``.

The race is decided the same way on every run by one instrument, as in ``test_commit_conflicts``:
a trigger on the catalog's ``iceberg_tables`` holds the *first* JDBC commit after it is set up
(the rewrite's) until the test lets it go, and lets every later one through (the writer's),
using a sequence, which no transaction rolls back or waits on. The writer's commits merge
manifests (``commit.manifest.min-count-to-merge`` = 2, as any sink's commits do once a table
has enough manifests), so the manifests the rewrite replaced are gone when it retries: Iceberg
refuses it (``ValidationException``). The job must give its claim back as a conflict (no
attempt spent, no hold), and succeed on the next claim; the contents are exactly the writer's
final rows and no referenced file is gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from bench.upserts import UpsertTable, create_upsert_table, delete_file_counts, logical_rows, row
from icepack_core.execution.job_runner import JobRunner
from icepack_core.intents import RewriteManifests
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.types import JobState
from tests.execution.spark_tables import CATALOG, missing_referenced_files, unique_name
from tests.support.settings import service_settings
from tests.support.stream_writer import START_DEADLINE_S, StreamWriter
from tests.support.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]
NS = "mrace"
GATE_KEY = 4344
GATE_SQL = f"""
DROP SEQUENCE IF EXISTS test_first_commit_gate;
CREATE SEQUENCE test_first_commit_gate;
CREATE OR REPLACE FUNCTION test_first_commit_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- Per statement, before any row is locked; only the first JDBC commit waits.
  IF current_setting('application_name') LIKE 'PostgreSQL JDBC%'
     AND nextval('test_first_commit_gate') = 1
  THEN
    PERFORM pg_advisory_xact_lock({GATE_KEY});
  END IF;
  RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS test_first_commit_gate ON iceberg_tables;
CREATE TRIGGER test_first_commit_gate BEFORE UPDATE ON iceberg_tables
   FOR EACH STATEMENT EXECUTE FUNCTION test_first_commit_gate();
"""


@pytest.fixture
def runner_settings(
    database_url: str, spark_catalog_settings: Settings, tmp_path: Path
) -> Settings:
    return service_settings(database_url, spark_catalog_settings, tmp_path / "mrace")


@asynccontextmanager
async def first_commit_gate(spark_database_url: str) -> AsyncIterator[Any]:
    """Holds the next JDBC commit to the catalog while the block runs (see the module)."""
    gate = await asyncpg.connect(spark_database_url)
    try:
        await gate.execute("SELECT pg_advisory_lock($1)", GATE_KEY)
        await gate.execute(GATE_SQL)
        yield gate
    finally:
        await gate.execute("SELECT pg_advisory_unlock_all()")
        await gate.execute("DROP TRIGGER IF EXISTS test_first_commit_gate ON iceberg_tables")
        await gate.execute("DROP SEQUENCE IF EXISTS test_first_commit_gate")
        await gate.close()


async def commit_waiting(gate: Any) -> bool:
    return bool(
        await gate.fetchval(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND NOT l.granted AND l.objid = $1 "
            "AND a.datname = current_database()",
            GATE_KEY,
        )
    )


async def writer_done(writer: StreamWriter) -> bool:
    return not writer.alive()


def seed(spark: Any, name: str) -> None:
    """Twelve keys, then six upserts: a data and a delete manifest per commit."""
    sink = UpsertTable(spark, NS, name, writer="seed")
    sink.append([row(k, 0) for k in range(12)])
    for r in range(1, 7):
        sink.upsert([row(k, r) for k in (r, r + 3, 20 + r)])


async def register(db: Any, name: str) -> int:
    table_id: int = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ($1, $2, $3) RETURNING id",
        CATALOG,
        NS,
        name,
    )
    return table_id


async def test_a_manifest_rewrite_racing_an_equality_delete_writer_is_conflict_retried(
    db: asyncpg.Pool,
    spark: Any,
    spark_catalog_settings: Settings,
    spark_database_url: str,
    runner_settings: Settings,
    tmp_path: Path,
) -> None:
    name = unique_name("mrace_upsert")
    table = create_upsert_table(spark, NS, name, version=2)
    seed(spark, name)
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('commit.manifest.min-count-to-merge'='2')")
    assert delete_file_counts(spark, table)["equality"] == 6
    table_id = await register(db, name)
    queue = JobQueue(db)
    job = (await queue.enqueue(table_id, [RewriteManifests()], max_attempts=3)).job
    claimed = await queue.claim("executor@test", 600)
    assert claimed is not None and claimed.id == job.id
    runner = JobRunner(
        db, runner_settings, queue, LocalEngine(runner_settings, session=spark), "executor@test"
    )
    writer = StreamWriter.for_table(
        spark_catalog_settings, NS, name, "upsert", Path(tmp_path) / "writer", max_rounds=3
    )
    try:
        async with first_commit_gate(spark_database_url) as gate:
            running = asyncio.create_task(runner.run(claimed))
            await eventually(
                lambda: commit_waiting(gate),
                timeout=300,
                interval=0.1,
                what="the manifest rewrite's commit waiting at the gate",
            )
            writer.start()
            await eventually(
                lambda: writer_done(writer),
                timeout=START_DEADLINE_S + 120,
                interval=0.5,
                what="the upsert writer's three commits",
            )
            expected = writer.stop()
            await gate.execute("SELECT pg_advisory_unlock($1)", GATE_KEY)
            run = await asyncio.wait_for(running, 300)
    finally:
        writer.kill()
    assert len(writer.committed()) == 3 and not writer.failed(), writer.commits()

    # Given back as a conflict: no attempt spent, backoff, no hold, the writer's rows intact.
    done = run.job
    assert done is not None and done.state is JobState.QUEUED, done and done.error
    assert done.attempts == 0 and done.conflicts == 1, (done.attempts, done.conflicts)
    assert "commit conflict" in (done.error or ""), done.error
    assert done.not_before > datetime.now(UTC)
    hold = await db.fetchval("SELECT maintenance_hold FROM icepack.tables WHERE id = $1", table_id)
    assert hold is None
    assert logical_rows(spark, table) == expected
    assert missing_referenced_files(spark, table) == []

    # The next claim (past the backoff) runs on the writer's state and commits.
    claimed = await queue.claim("executor@test", 600, now=datetime.now(UTC) + timedelta(hours=1))
    assert claimed is not None and claimed.id == job.id
    again = (await runner.run(claimed)).job
    assert again is not None and again.state is JobState.SUCCEEDED, again and again.error
    assert again.conflicts == 1
    assert logical_rows(spark, table) == expected
    assert missing_referenced_files(spark, table) == []
    assert delete_file_counts(spark, table)["equality"] == 6 + 3  # rewriting manifests keeps them
