"""Maintenance racing a writer in another process: nothing the writer committed is lost,
reverted, or taken for the rewrite, and no table is held because a writer committed.

Real Spark in both processes (the writer starts its own JVM: ``tests.support.stream_writer``),
one JDBC catalog, real Postgres; the job is planned by ``Planner.plan`` from the inspector's
record and run by the executor's ``JobRunner``. The executor's test hook ``after_call`` (it
runs after the procedure committed, before verification) waits until the writer has committed
on top of the rewrite, so every run verifies with a writer's snapshots after the rewrite's.
Commits during the procedure itself happen as they happen (the writer commits continuously).

The oracle is the writer's own model: its starting rows plus each commit that returned. After
the race, Spark's read of the table must equal it, every snapshot the writer committed must
still be an ancestor of the current one, and no snapshot the writer committed may appear in
the verification evidence as a checked rewrite.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from bench.upserts import (
    UpsertTable,
    create_upsert_table,
    delete_file_counts,
    logical_rows,
    row,
)
from icepack_core.db.queries import load_query
from icepack_core.execution.job_runner import JobRunner
from icepack_core.inspection.process import TableInspections
from icepack_core.planning.planner import Planner
from icepack_core.planning.throttle import THROTTLE_RATIO, THROTTLE_RUNS
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.types import JobState
from tests.execution.spark_tables import missing_referenced_files, unique_name
from tests.execution.test_equality_deletes import register
from tests.support.settings import service_settings
from tests.support.stream_writer import START_DEADLINE_S, StreamWriter
from tests.support.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "eqdel"  # the namespace ``register`` records tables under


@pytest.fixture
def runner_settings(
    database_url: str, spark_catalog_settings: Settings, tmp_path: Path
) -> Settings:
    return service_settings(database_url, spark_catalog_settings, tmp_path)


def seed(spark: Any, name: str, kind: str) -> None:
    """Small files to compact (and equality deletes to apply for the upsert table)."""
    sink = UpsertTable(spark, NS, name, writer="seed")
    sink.append([row(k, 0) for k in range(12)])
    if kind == "cow_delete":  # rewrites the files it deletes from: before the small files
        spark.sql(f"DELETE FROM {sink.qualified} WHERE id % 5 = 0")
    for r in range(1, 7):
        if kind == "upsert":
            sink.upsert([row(k, r) for k in (r, r + 3, 20 + r)])
        else:
            sink.append([row(100 * r + k, r) for k in range(4)])
    if kind == "mor_delete":
        spark.sql(f"DELETE FROM {sink.qualified} WHERE id % 5 = 0")


async def writer_commits(writer: StreamWriter, more_than: int) -> bool:
    writer.check_alive()
    return len(writer.commits()) > more_than


async def race(
    db: Any, settings: Any, spark: Any, table_id: int, writer: StreamWriter
) -> tuple[Any, list[dict[str, Any]]]:
    """Plan, then run the planned job while ``writer`` commits; the verification waits for two
    writer commits on top of the rewrite."""
    queue = JobQueue(db)
    planned = await Planner(settings, db, queue).plan(table_id)
    assert planned.job_created, planned.recommendation
    await eventually(
        lambda: writer_commits(writer, 1),
        timeout=START_DEADLINE_S,
        interval=0.5,
        what="the writer's first commits",
    )
    job = await queue.claim("executor@test", 120)
    assert job is not None and job.id == planned.job_id
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
    done = (await runner.run(job)).job
    for _ in range(3):
        # A file group whose commit lost to the writer (its commit retries ran out) gives the
        # job back for that part, as the executor service would run it again: run the retry.
        if done is None or done.state != JobState.QUEUED:
            break
        if "partitions not rewritten" not in (done.error or ""):
            break
        again = await queue.claim("executor@test", 120, now=datetime.now(UTC) + timedelta(hours=1))
        assert again is not None and again.id == job.id
        done = (await runner.run(again)).job
    assert done is not None
    actions = await db.fetch(
        "SELECT action, state, output, error FROM icepack.job_actions WHERE job_id = $1 "
        "ORDER BY id",
        job.id,
    )
    return done, [dict(a) for a in actions]


def ancestry(spark: Any, table: str) -> tuple[list[int], set[int]]:
    """The current snapshot's ancestors (oldest first) and the ``replace`` snapshots among
    every snapshot of the table."""
    spark.sql(f"REFRESH TABLE {table}")
    history = spark.sql(
        f"SELECT snapshot_id FROM {table}.history WHERE is_current_ancestor "
        "ORDER BY made_current_at"
    ).collect()
    replaces = spark.sql(
        f"SELECT snapshot_id FROM {table}.snapshots WHERE operation = 'replace'"
    ).collect()
    return [int(r[0]) for r in history], {int(r[0]) for r in replaces}


def checked_snapshots(actions: list[dict[str, Any]]) -> set[int]:
    out: set[int] = set()
    for action in actions:
        evidence = (action["output"] or {}).get("verification") or {}
        out |= {int(s["snapshot_id"]) for s in evidence.get("snapshots") or []}
    return out


async def invariants(
    db: Any,
    spark: Any,
    table: str,
    table_id: int,
    writer: StreamWriter,
    actions: list[dict[str, Any]],
    expected: list[Any],
) -> list[str]:
    """What must hold after any race, whatever became of the job: the table is not held,
    nothing was rolled back, every writer snapshot is still an ancestor and none was checked as
    a rewrite, every rewrite snapshot was verified, the rows are the writer's committed rows,
    and no referenced file is gone."""
    problems = []
    hold = await db.fetchval("SELECT maintenance_hold FROM icepack.tables WHERE id = $1", table_id)
    if hold is not None:
        problems.append(f"table held: {hold}")
    for action in actions:
        evidence = (action["output"] or {}).get("verification") or {}
        if evidence and (evidence.get("status") != "verified" or evidence.get("rollback")):
            problems.append(f"{action['action']} verification: {evidence}")
    ancestors, replaces = ancestry(spark, table)
    committed = writer.committed()
    if lost := [s for s in committed if s not in ancestors]:
        problems.append(f"writer snapshots no longer current ancestors (rolled back): {lost}")
    checked = checked_snapshots(actions)
    if mistaken := checked & set(committed):
        problems.append(f"writer snapshots checked as rewrites: {mistaken}")
    if unverified := replaces - checked:
        problems.append(f"rewrite snapshots never verified: {unverified}")
    if logical_rows(spark, table) != expected:
        problems.append("the table's rows differ from the writer's committed rows")
    if missing := missing_referenced_files(spark, table):
        problems.append(f"referenced files deleted: {missing[:3]}")
    return problems


RunRace = Callable[
    [Any, Settings, Any, int, StreamWriter], Awaitable[tuple[Any, list[dict[str, Any]]]]
]


@dataclass(frozen=True)
class WriterRace:
    """A job raced by a writer process: the job as it ended, its stored actions, the rows
    the writer's model says the table holds, and what ``invariants`` found wrong."""

    writer: StreamWriter
    done: Any
    actions: list[dict[str, Any]]
    expected: list[tuple[int, str, str, int]]
    problems: list[str]


async def race_beside_writer(
    db: Any,
    spark: Any,
    settings: Settings,
    writer_settings: Settings,
    table: str,
    table_id: int,
    *,
    namespace: str = NS,
    name: str,
    kind: str,
    out_dir: Path,
    run: RunRace = race,
    **writer_options: Any,
) -> WriterRace:
    """Inspect the registered table, start a writer process committing ``kind`` to it (on the
    Spark fixtures' catalog, ``writer_settings``), run the race (``run``: plan and run the
    job), stop the writer and check ``invariants``. The writer is killed whatever happens."""
    await TableInspections(settings, db).inspect_and_record(table_id)
    writer = StreamWriter.for_table(
        writer_settings, namespace, name, kind, out_dir, **writer_options
    ).start()
    try:
        done, actions = await run(db, settings, spark, table_id, writer)
        expected = writer.stop()
    finally:
        writer.kill()
    problems = await invariants(db, spark, table, table_id, writer, actions, expected)
    return WriterRace(writer, done, actions, expected, problems)


@pytest.mark.parametrize(
    ("kind", "version", "partition"),
    [("upsert", 2, "part"), ("append", 2, None), ("upsert", 3, None)],
    ids=["upsert-v2-identity", "append-v2-unpartitioned", "upsert-v3-unpartitioned"],
)
@pytest.mark.timeout(900)
async def test_a_compaction_racing_a_writer_process_keeps_every_writer_commit(
    db: asyncpg.Pool,
    spark: Any,
    spark_catalog_settings: Settings,
    runner_settings: Settings,
    tmp_path: Path,
    kind: str,
    version: int,
    partition: str | None,
) -> None:
    name = unique_name(f"race_{kind}")
    table = create_upsert_table(spark, NS, name, version=version, partition=partition)
    seed(spark, name, kind)
    table_id = await register(db, spark, table, name)
    # A sink committing once a second. With no pause the writer commits every ~0.3 s, and on a
    # loaded machine it can win every one of the rewrite's commit retries (Iceberg's
    # commit.retry.num-retries): the rewrite then commits nothing and there is no race to check.
    raced = await race_beside_writer(
        db,
        spark,
        runner_settings,
        spark_catalog_settings,
        table,
        table_id,
        name=name,
        kind=kind,
        out_dir=tmp_path / "writer",
        pause_seconds=1.0,
    )
    writer = raced.writer
    # Appends and upserts (equality deletes) never conflict with a rewrite that keeps its
    # starting sequence number: the job succeeds, and the writer never failed a commit.
    problems = raced.problems + race_problems(spark, table, raced.done, writer)
    assert not problems, "\n".join(problems) + f"\nwriter: {writer.commits()[-3:]}"
    assert len(writer.committed()) >= 4, writer.commits()


def race_problems(spark: Any, table: str, done: Any, writer: StreamWriter) -> list[str]:
    """What a race that kept every writer commit must not show: the job not succeeded, a
    writer commit failed, or no writer commit on top of the rewrite before it was verified (no
    race happened, so nothing was checked)."""
    problems = []
    if done.state != JobState.SUCCEEDED:
        problems.append(f"job {done.state}: {done.error}")
    if writer.failed():
        problems.append(f"writer commits failed: {writer.failed()[:3]}")
    ancestors, replaces = ancestry(spark, table)
    rewritten_at = [ancestors.index(s) for s in replaces if s in ancestors]
    if not rewritten_at or not any(
        ancestors.index(s) > min(rewritten_at) for s in writer.committed() if s in ancestors
    ):
        problems.append("no writer commit landed after the rewrite (no race)")
    return problems


async def quiet_compaction(db: Any, settings: Any, spark: Any, table_id: int) -> Any:
    """Inspect, plan (a day later: past the cadence of a job the race may have finished) and
    run the planned job, if any, with nobody writing."""
    await TableInspections(settings, db).inspect_and_record(table_id)
    queue = JobQueue(db)
    later = datetime.now(UTC) + timedelta(hours=25)
    planned = await Planner(settings, db, queue).plan(table_id, now=later)
    if not planned.job_created:
        return planned.recommendation
    job = await queue.claim("executor@test", 120)
    assert job is not None and job.id == planned.job_id
    runner = JobRunner(db, settings, queue, LocalEngine(settings, session=spark), "executor@test")
    done = (await runner.run(job)).job
    assert done is not None and done.state == JobState.SUCCEEDED, done and done.error
    return planned.recommendation


@pytest.mark.parametrize(
    ("kind", "version", "mode"),
    [("mor_delete", 3, "merge-on-read"), ("cow_delete", 2, "copy-on-write")],
    ids=["deletion-vectors-v3", "copy-on-write-v2"],
)
@pytest.mark.timeout(1200)
async def test_a_compaction_racing_a_deleting_writer_loses_nothing_and_holds_nothing(
    db: asyncpg.Pool,
    spark: Any,
    spark_catalog_settings: Settings,
    runner_settings: Settings,
    tmp_path: Path,
    kind: str,
    version: int,
    mode: str,
) -> None:
    """A deleting writer and a rewrite of the same files conflict (one of them is refused by
    Iceberg's validation); whichever loses, nothing may be lost, reverted or held. What becomes
    of a conflicted job (failed or requeued) is the conflict handling's to decide and is not
    asserted here. Afterwards, with the merge-on-read writer gone, the next planned compaction
    applies every delete: no deletion vector or delete file is left."""
    name = unique_name(f"race_{kind}")
    table = create_upsert_table(spark, NS, name, version=version)
    spark.sql(
        f"ALTER TABLE {table} SET TBLPROPERTIES ('write.delete.mode'='{mode}', "
        f"'write.update.mode'='{mode}')"
    )
    seed(spark, name, kind)
    if kind == "mor_delete":
        assert delete_file_counts(spark, table)["deletion_vector"] > 0
    table_id = await register(db, spark, table, name)
    raced = await race_beside_writer(
        db,
        spark,
        runner_settings,
        spark_catalog_settings,
        table,
        table_id,
        name=name,
        kind=kind,
        out_dir=tmp_path / "writer",
    )
    writer, expected = raced.writer, raced.expected
    assert not raced.problems, "\n".join(raced.problems) + f"\nwriter: {writer.commits()[-3:]}"
    assert len(writer.committed()) >= 4, writer.commits()

    if kind != "mor_delete":
        return  # copy-on-write leaves no delete file behind
    recommendation = await quiet_compaction(db, runner_settings, spark, table_id)
    assert logical_rows(spark, table) == expected
    assert missing_referenced_files(spark, table) == []
    counts = delete_file_counts(spark, table)
    if "rewrite_data_files" in {a.action for a in recommendation.actions}:
        # The build-up was planned and applied: no delete file is left.
        assert counts == {"equality": 0, "position": 0, "deletion_vector": 0}
        return
    # Not planned: the race's own compaction already kept the deletes below the build-up
    # threshold (docs: >= 10 % of records deleted or >= 100 position delete files/DVs).
    data_records = spark.sql(
        f"SELECT coalesce(sum(record_count), 0) FROM {table}.files WHERE content = 0"
    ).collect()[0][0]
    deleted = data_records - len(expected)
    assert sum(counts.values()) < 100 and deleted < 0.10 * data_records, (
        counts,
        deleted,
        data_records,
        recommendation,
    )


@pytest.mark.timeout(900)
async def test_a_compaction_beside_an_appending_writer_is_measured_by_its_own_commits(
    db: asyncpg.Pool,
    spark: Any,
    spark_catalog_settings: Settings,
    runner_settings: Settings,
    tmp_path: Path,
) -> None:
    """The job's recorded outcome measures the rewrite's own snapshots: the writer's small
    files committed during the job (and after the rewrite) are not counted against it, so the
    ratio the throttle reads is the rewrite's, close to its prediction."""
    name = unique_name("race_measure")
    table = create_upsert_table(spark, NS, name, version=2, partition=None)
    seed(spark, name, "append")
    table_id = await register(db, spark, table, name)
    raced = await race_beside_writer(
        db,
        spark,
        runner_settings,
        spark_catalog_settings,
        table,
        table_id,
        name=name,
        kind="append",
        out_dir=tmp_path / "writer",
    )
    done, actions, expected = raced.done, raced.actions, raced.expected

    assert done.state == JobState.SUCCEEDED, done.error
    entry = next(a for a in done.outcome["actions"] if a["action"] == "rewrite_data_files")
    # The outcome is the succeeded run's: its rewrite is the last one recorded.
    rewrite = [a for a in actions if a["action"] == "rewrite_data_files"][-1]
    verified = {s["snapshot_id"] for s in rewrite["output"]["verification"]["snapshots"]}
    own = entry.get("own")
    assert own is not None, entry
    assert own["error"] is None and set(own["snapshots"]) == verified, own
    assert own["writer_snapshots"] >= 2, own  # the race happened: writers' snapshots beside
    predicted = entry["predicted_benefit"]
    assert predicted is not None and predicted > 0, entry
    # Its own benefit: the small files it replaced, less the manifest it added.
    assert entry["benefit"] > 0 and entry["ratio"] >= 0.5, entry
    # The table around the job (writers' files included) is recorded beside it; whether it is
    # more or less than the rewrite's own depends on when the writer committed (files it added
    # before the rewrite planned are compacted too), so only its presence is asserted.
    assert isinstance(own["table_benefit"], int), entry
    assert entry["ratio"] >= THROTTLE_RATIO
    # The planner reads that ratio (the run the throttle judges), and throttles nothing.
    history = await db.fetch(load_query("job_outcome_history"), table_id, THROTTLE_RUNS)
    assert [r["ratio"] for r in history] == [entry["ratio"]]
    assert await Planner(runner_settings, db, JobQueue(db)).throttles(table_id) == {}
    assert logical_rows(spark, table) == expected
    assert not missing_referenced_files(spark, table)
