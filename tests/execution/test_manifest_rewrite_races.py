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

The other race (``test_a_manifest_rewrite_racing_a_writer_process_keeps_every_writer_commit``)
is not instrumented: the job is planned by ``Planner.plan`` (manifest rewrites only) from the
inspector's record, and a writer process commits once a second during the whole job (appends,
or equality-delete upserts on v2 and v3); the executor's ``after_call`` hook waits for two of
its commits on top of the rewrite, so the verification always runs with writer snapshots after
the rewrite's. A conflict, if the timing makes one, is retried as the executor service would.
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

from bench.upserts import (
    Row,
    UpsertTable,
    create_upsert_table,
    delete_file_counts,
    logical_rows,
    row,
)
from icepack_core.db.queries import load_query
from icepack_core.execution.job_runner import JobRunner
from icepack_core.intents import RewriteManifests
from icepack_core.planning.planner import Planner
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.types import JobState
from tests.execution.spark_tables import CATALOG, missing_referenced_files, unique_name
from tests.execution.test_writer_races import race_beside_writer, race_problems, writer_commits
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


async def register(db: Any, spark: Any, table: str, name: str) -> int:
    """The table in ``icepack.tables`` as discovery records it (its metadata location)."""
    location = spark.sql(
        f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1"
    ).first()["file"]
    table_id: int = await db.fetchval(load_query("table_insert"), CATALOG, NS, name, location, {})
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
    table_id = await register(db, spark, table, name)
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


def seed_appends(spark: Any, name: str) -> None:
    """Twelve keys, then six appends of new keys: a data manifest per commit."""
    sink = UpsertTable(spark, NS, name, writer="seed")
    sink.append([row(k, 0) for k in range(12)])
    for r in range(1, 7):
        sink.append([row(100 * r + k, r) for k in range(3)])


def content_checksum(spark: Any, source: str) -> tuple[int, int]:
    """Row count and the sum of a hash of every column, as Spark reads ``source`` (a table:
    every delete applied; or a ``VALUES`` relation)."""
    first = spark.sql(
        "SELECT count(*) AS n, coalesce(sum(cast(hash(id, part, v, ts) AS BIGINT)), 0) AS h "
        f"FROM {source}"
    ).first()
    return int(first["n"]), int(first["h"])


def model_checksum(spark: Any, rows: list[tuple[int, str, str, int]]) -> tuple[int, int]:
    """``content_checksum`` of the writer's model rows, computed by the same Spark expression
    over the same column types."""
    values = ", ".join(Row(*r).sql() for r in rows)
    return content_checksum(spark, f"(VALUES {values} AS t(id, part, v, ts))")


async def plan_and_race(
    db: Any, settings: Settings, spark: Any, table_id: int, writer: StreamWriter
) -> tuple[Any, list[dict[str, Any]]]:
    """Plan (a manifest rewrite only), run the job while ``writer`` commits, and run it again
    while it is given back as a commit conflict, as the executor service would claim it after
    its backoff; the verification of each run waits for two writer commits on top."""
    queue = JobQueue(db)
    planned = await Planner(settings, db, queue).plan(table_id)
    assert planned.job_created and planned.recommendation is not None, planned.recommendation
    assert [a.action for a in planned.recommendation.actions] == ["rewrite_manifests"]
    await eventually(
        lambda: writer_commits(writer, 1),
        timeout=START_DEADLINE_S,
        interval=0.5,
        what="the writer's first commits",
    )
    runner = JobRunner(db, settings, queue, LocalEngine(settings, session=spark), "executor@test")

    async def writer_commits_on_top(_action: str) -> None:
        seen = len(writer.commits())
        await eventually(
            lambda: writer_commits(writer, seen + 1),
            timeout=120,
            interval=0.2,
            what="two writer commits after the rewrite",
        )

    runner.execution.after_call = writer_commits_on_top
    now = datetime.now(UTC)
    for _ in range(3):
        job = await queue.claim("executor@test", 120, now=now)
        assert job is not None and job.id == planned.job_id
        done = (await runner.run(job)).job
        assert done is not None
        if done.state != JobState.QUEUED or "commit conflict" not in (done.error or ""):
            break
        now = datetime.now(UTC) + timedelta(hours=1)  # past the conflict's backoff
    actions = await db.fetch(
        "SELECT action, state, output, error FROM icepack.job_actions WHERE job_id = $1 "
        "ORDER BY id",
        planned.job_id,
    )
    return done, [dict(a) for a in actions]


@pytest.mark.parametrize(
    ("kind", "version", "partition"),
    [("upsert", 2, "part"), ("upsert", 3, None), ("append", 2, "bucket(4, id)")],
    ids=["upsert-v2-identity", "upsert-v3-unpartitioned", "append-v2-bucket"],
)
async def test_a_manifest_rewrite_racing_a_writer_process_keeps_every_writer_commit(
    db: asyncpg.Pool,
    spark: Any,
    spark_catalog_settings: Settings,
    runner_settings: Settings,
    tmp_path: Path,
    kind: str,
    version: int,
    partition: str | None,
) -> None:
    """A planned ``rewrite_manifests`` while a writer process commits once a second (appends,
    or upserts as a Flink / Kafka Connect sink writes them: an equality delete on the key and
    the new row in one ``RowDelta``).

    What it guards: the job ends succeeded (or conflict-retried, then succeeded); no table
    hold; every snapshot the writer committed is still an ancestor of the current one (a
    rollback of the rewrite that took the writer's later commits with it fails here); no
    writer snapshot appears in the verification evidence as a checked rewrite (a verification
    that took the writer's snapshots for the rewrite's, and so saw contents change, fails
    here); every ``replace`` was verified; Spark's read of the table (equality deletes
    applied, which only the data sequence numbers the rewritten manifests carry make right)
    equals the writer's committed rows, row for row and by a content checksum; and no file a
    snapshot references is gone."""
    name = unique_name(f"mrace_{kind}")
    table = create_upsert_table(spark, NS, name, version=version, partition=partition)
    (seed if kind == "upsert" else seed_appends)(spark, name)
    spark.sql(
        f"ALTER TABLE {table} SET TBLPROPERTIES ('icepack.compaction.enabled'='false', "
        "'icepack.manifests.max-count'='2')"
    )
    deletes_before = delete_file_counts(spark, table)["equality"]
    assert (deletes_before > 0) == (kind == "upsert"), deletes_before
    table_id = await register(db, spark, table, name)
    raced = await race_beside_writer(
        db,
        spark,
        runner_settings,
        spark_catalog_settings,
        table,
        table_id,
        namespace=NS,
        name=name,
        kind=kind,
        out_dir=tmp_path / "writer",
        run=plan_and_race,
        pause_seconds=1.0,
    )
    writer, expected = raced.writer, raced.expected
    problems = raced.problems + race_problems(spark, table, raced.done, writer)
    if content_checksum(spark, table) != model_checksum(spark, expected):
        problems.append("the table's content checksum differs from the writer's rows'")
    assert not problems, "\n".join(problems) + f"\nwriter: {writer.commits()[-3:]}"
    assert len(writer.committed()) >= 2, writer.commits()
    if kind == "upsert":  # rewriting manifests keeps every delete file, the writer's too
        assert delete_file_counts(spark, table)["equality"] > deletes_before
