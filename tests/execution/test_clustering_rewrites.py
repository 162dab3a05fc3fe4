"""Sort and z-order compaction on real Spark, a real catalog and real Postgres.

Tables are written by Spark in random key order (every file spans the whole key range), a
compaction policy is attached through the gateway's policy API, and the real producers run:
the inspector's unit of work (``TableInspections``: overlap depth on the key), ``Planner.plan``
(sort/zorder proposed, depth predicted), the executor's job path (``JobRunner.run``: key
checked, partition-scoped, verified, outcome measured) and the planner again (no churn). The
overlap depth is checked against an oracle computed from Spark's own ``files`` metadata table
(``readable_metrics`` bounds), brute force.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from icepack_core.access.tokens import TokenStore
from icepack_core.db.queries import load_query
from icepack_core.errors import ClusteringKeyInvalid
from icepack_core.execution.job_runner import JobRunner
from icepack_core.execution.maintenance import TableMaintenance
from icepack_core.inspection.process import TableInspections
from icepack_core.intents import parse_intent
from icepack_core.planning.planner import Planner
from icepack_core.queue.jobs import Job, JobQueue
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.spark.sql import qualified_name
from icepack_core.types import JobState, TableRef
from icepack_gateway.app import create_app
from icepack_gateway.models import JobOutcome, JobPrediction
from tests.execution.spark_tables import (
    CATALOG,
    fingerprint,
    metadata_loader,
    missing_referenced_files,
    unique_name,
)
from tests.support.settings import service_settings

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "clustering"
REWRITE = "rewrite_data_files"
BATCHES = 8


@pytest.fixture
def runner_settings(
    database_url: str, spark_catalog_settings: Settings, tmp_path: Path
) -> Settings:
    return service_settings(database_url, spark_catalog_settings, tmp_path)


def create(spark: Any, name: str, columns: str, partitioning: str) -> str:
    """A table whose files are well-sized for its 16 KiB target (none is small, so only the
    clustering can make a rewrite due)."""
    table = qualified_name(CATALOG, [NS], name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], NS)}")
    spark.sql(
        f"CREATE TABLE {table} ({columns}) USING iceberg {partitioning} TBLPROPERTIES "
        "('format-version'='2', 'write.target-file-size-bytes'='16384')"
    )
    return table


def write_random(
    spark: Any, table: str, select: str, batches: int = BATCHES, rows: int = 400
) -> None:
    """``batches`` appends of ``rows`` rows each with random keys: one file per partition
    each, every file spanning (nearly) the whole key range."""
    for b in range(batches):
        spark.sql(f"INSERT INTO {table} {select.format(seed=b, lo=b * rows, hi=(b + 1) * rows)}")


def oracle_depth(spark: Any, table: str, columns: list[str]) -> float:
    """Mean over live data files of the files of their partition whose [min, max] boxes on
    ``columns`` intersect theirs (itself included), from Spark's ``files`` table."""
    metrics = ", ".join(
        f"readable_metrics.`{c}`.lower_bound AS lo_{i}, readable_metrics.`{c}`.upper_bound AS "
        f"hi_{i}"
        for i, c in enumerate(columns)
    )
    rows = spark.sql(
        f"SELECT spec_id, to_json(partition) AS p, {metrics} FROM {table}.files WHERE content = 0"
    ).collect()

    def overlap(x: Any, y: Any) -> bool:
        return all(
            x[f"lo_{i}"] <= y[f"hi_{i}"] and y[f"lo_{i}"] <= x[f"hi_{i}"]
            for i in range(len(columns))
        )

    total = 0
    for r in rows:
        same = [s for s in rows if (s["spec_id"], s["p"]) == (r["spec_id"], r["p"])]
        total += sum(overlap(r, s) for s in same)
    return total / len(rows)


async def attach(db: Any, name: str, config: dict[str, Any]) -> httpx.Response:
    """Attach a table-scope compaction policy through the gateway's policy API."""
    token, _ = await TokenStore(db).create("tester")
    transport = httpx.ASGITransport(app=create_app(db))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        return await client.put(
            f"/policies/table/{CATALOG}/{NS}/{name}/system.data-compaction",
            json={"config": config},
            headers={"Authorization": f"Bearer {token}"},
        )


async def register(db: Any, spark: Any, table: str, name: str) -> int:
    location = spark.sql(
        f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1"
    ).first()["file"]
    table_id: int = await db.fetchval(load_query("table_insert"), CATALOG, NS, name, location, {})
    return table_id


async def plan_and_run(db: Any, settings: Any, spark: Any, table_id: int) -> tuple[Any, Job]:
    """Inspect, plan, claim and run the planned job to its end."""
    await TableInspections(settings, db).inspect_and_record(table_id)
    queue = JobQueue(db)
    planned = await Planner(settings, db, queue).plan(table_id)
    assert planned.job_created, planned.recommendation
    job = await queue.claim("executor@test", 60)
    assert job is not None and job.id == planned.job_id
    runner = JobRunner(db, settings, queue, LocalEngine(settings, session=spark), "executor@test")
    done = (await runner.run(job)).job
    assert done is not None and done.state == JobState.SUCCEEDED, done and done.error
    return planned, done


async def replan(db: Any, settings: Any, table_id: int) -> Any:
    await TableInspections(settings, db).inspect_and_record(table_id)
    return (await Planner(settings, db, JobQueue(db)).plan(table_id)).recommendation


async def action_output(db: Any, job_id: int) -> dict[str, Any]:
    output: dict[str, Any] = await db.fetchval(
        "SELECT output FROM icepack.job_actions WHERE job_id = $1 AND action = $2",
        job_id,
        REWRITE,
    )
    return output


async def test_a_randomly_written_table_is_z_ordered_once(
    db: asyncpg.Pool, spark: Any, runner_settings: Settings
) -> None:
    name = unique_name("zorder")
    table = create(spark, name, "id BIGINT, a INT, b INT, part STRING", "PARTITIONED BY (part)")
    write_random(
        spark,
        table,
        "SELECT id, CAST(rand({seed}) * 1000 AS INT) AS a, CAST(rand({seed} + 100) * 1000 AS INT)"
        " AS b, CASE WHEN id % 2 = 0 THEN 'x' ELSE 'y' END AS part FROM range({lo}, {hi}) "
        "DISTRIBUTE BY part",
        rows=8000,
    )
    contents = fingerprint(spark, table)
    before = oracle_depth(spark, table, ["a", "b"])
    assert before > 6  # random order: nearly every file of a partition overlaps every other
    table_id = await register(db, spark, table, name)
    answer = await attach(db, name, {"strategy": "zorder", "zorder_columns": ["a", "b"]})
    assert answer.status_code == 201, answer.text

    planned, job = await plan_and_run(db, runner_settings, spark, table_id)

    # Inspection measured what the oracle measures.
    status = await db.fetchval(
        "SELECT status FROM icepack.status_snapshots WHERE table_id = $1 ORDER BY id LIMIT 1",
        table_id,
    )
    assert status["clustering"]["overlap_depth"] == pytest.approx(before, abs=1e-3)
    assert status["small_file_count"] == 0  # only the clustering made it due
    (action,) = planned.recommendation.actions
    assert action.action == REWRITE
    assert action.to_json()["params"]["strategy"] == "zorder" and action.to_json()["params"][
        "zorder_columns"
    ] == ["a", "b"]
    assert "overlap depth" in action.reason and "zorder(a, b)" in action.reason, action.reason
    (predicted,) = JobPrediction.model_validate(job.predicted).actions
    assert predicted.overlap_depth is not None
    assert predicted.overlap_depth.before == pytest.approx(before, abs=1e-3)
    assert predicted.overlap_depth.after is not None
    assert 1.0 < predicted.overlap_depth.after < before / 3

    # Contents unchanged, nothing referenced deleted, the depth dropped as predicted.
    assert fingerprint(spark, table) == contents
    assert missing_referenced_files(spark, table) == []
    after = oracle_depth(spark, table, ["a", "b"])
    # About k^(1/2) for k files on two columns (inspection.clustering.reachable_depth): boxes
    # of consecutive Z-curve ranges overlap; far below the k of the random order.
    assert after < before / 3
    assert after == pytest.approx(predicted.overlap_depth.after, rel=0.5)
    output = await action_output(db, job.id)
    assert "zorder(`a`,`b`)" in (
        await db.fetchval("SELECT sql_text FROM icepack.job_actions WHERE job_id = $1", job.id)
    )
    assert output["scope"] == "partitions" and output["partitions_selected"] == 2
    assert output["clustering"]["after"] == pytest.approx(after, abs=1e-3)
    (measured,) = JobOutcome.model_validate(job.outcome).actions
    assert measured.overlap_depth is not None
    assert (measured.overlap_depth.before, measured.overlap_depth.after) == pytest.approx(
        (before, after), abs=1e-3
    )

    # Clustered now: the next plan leaves it alone, and says why.
    again = await replan(db, runner_settings, table_id)
    assert REWRITE not in [a.action for a in again.actions]
    (skip,) = [s for s in again.skipped if s.action == REWRITE]
    assert "clustered: overlap depth" in skip.reason, skip.reason


async def test_a_day_partitioned_table_is_sorted_by_its_sort_order_per_partition(
    db: asyncpg.Pool, spark: Any, runner_settings: Settings
) -> None:
    name = unique_name("sorted")
    table = create(spark, name, "id BIGINT, ts TIMESTAMP, a INT", "PARTITIONED BY (days(ts))")
    spark.sql(f"ALTER TABLE {table} WRITE ORDERED BY a")
    # Two days written in random order of a; a third day holds one file (already clustered).
    write_random(
        spark,
        table,
        "SELECT id, timestamp_seconds(1700000000 + (id % 2) * 86400) AS ts, "
        "CAST(rand({seed}) * 1000000 AS INT) AS a FROM range({lo}, {hi}) DISTRIBUTE BY ts "
        "SORT BY id",
        rows=8000,
    )
    spark.sql(
        f"INSERT INTO {table} SELECT id, timestamp_seconds(1700000000 + 5 * 86400), "
        "CAST(id AS INT) FROM range(0, 50)"
    )
    contents = fingerprint(spark, table)
    before = oracle_depth(spark, table, ["a"])
    table_id = await register(db, spark, table, name)
    answer = await attach(db, name, {"strategy": "sort"})
    assert answer.status_code == 201, answer.text

    planned, job = await plan_and_run(db, runner_settings, spark, table_id)

    (action,) = planned.recommendation.actions
    assert action.to_json()["params"]["strategy"] == "sort" and "sort(a)" in action.reason, (
        action.reason
    )
    assert fingerprint(spark, table) == contents
    assert missing_referenced_files(spark, table) == []
    after = oracle_depth(spark, table, ["a"])
    output = await action_output(db, job.id)
    # Several files per day, their ranges of a disjoint but for a shared boundary value.
    assert output["clustering"]["files_after"] >= 2 * 3 + 1
    assert after < before / 3 and after <= 2.0
    # Scoped to the two unclustered days (a time-transform range each), not the third.
    assert (output["partitions_selected"], output["partitions_total"]) == (2, 3), output
    assert output["partitions_unclustered"] == 2
    again = await replan(db, runner_settings, table_id)
    assert REWRITE not in [a.action for a in again.actions]


async def test_a_bad_zorder_column_is_refused_with_its_name(
    db: asyncpg.Pool, spark: Any, runner_settings: Settings
) -> None:
    name = unique_name("badkey")
    table = create(spark, name, "id BIGINT, a INT", "")
    write_random(
        spark, table, "SELECT id, CAST(rand({seed}) * 1000 AS INT) FROM range({lo}, {hi})", 6
    )
    contents = fingerprint(spark, table)
    table_id = await register(db, spark, table, name)
    answer = await attach(db, name, {"strategy": "zorder", "zorder_columns": ["a", "nope"]})
    assert answer.status_code == 201, answer.text

    rec = await replan(db, runner_settings, table_id)

    assert rec.actions == []
    (skip,) = [s for s in rec.skipped if s.action == REWRITE]
    assert "zorder column 'nope' is not a primitive column of the table" in skip.reason
    # The executor refuses it too, before any commit (an operator's job names it directly).
    snapshots = spark.sql(f"SELECT count(*) AS n FROM {table}.snapshots").first()["n"]
    maintenance = TableMaintenance(
        LocalEngine(runner_settings, session=spark),
        TableRef(CATALOG, NS, name),
        metadata=metadata_loader(runner_settings, NS, name),
    )
    with pytest.raises(ClusteringKeyInvalid, match="zorder column 'nope'"):
        await maintenance.run(
            parse_intent(
                {
                    "action": REWRITE,
                    "params": {"strategy": "zorder", "zorder_columns": ["a", "nope"]},
                }
            )
        )
    assert spark.sql(f"SELECT count(*) AS n FROM {table}.snapshots").first()["n"] == snapshots
    assert fingerprint(spark, table) == contents
