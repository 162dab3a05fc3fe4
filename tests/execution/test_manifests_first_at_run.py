"""Manifests first at run time (``planning.manifest_merge.manifests_first_at_run``), on the real
executor path: a compaction job that a writer's commits overtook between its plan and its run
rewrites the table's manifests first, and a job nobody committed after runs as planned.

Real Spark, the JDBC catalog and Postgres; the job is planned by ``Planner.plan`` from the
inspector's record and run by the executor's ``JobRunner``. The table is written as a
streaming sink writes it: PyIceberg fast appends, one new manifest each (a Spark ``INSERT``
would merge them). ``commit.manifest.min-count-to-merge`` is set to 4 on the table so a handful
of appends reach it (Iceberg's default is 100). Contents are checked before and after, and no
file any snapshot references is gone.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import pyarrow as pa
import pytest

from icepack_core.discovery.catalogs import load_catalog
from icepack_core.inspection.process import TableInspections
from icepack_core.planning.planner import Planner
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import Settings
from icepack_core.spark.sql import qualified_name
from tests.execution import executor_jobs
from tests.execution.executor_jobs import job_runner, run_claimed
from tests.execution.spark_tables import (
    CATALOG,
    fingerprint,
    missing_referenced_files,
    unique_name,
)
from tests.execution.test_need_scheduling import all_partitions_closed

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "manifests_first_run"
APPENDS = 6


def append(settings: Settings, name: str, first: int, rows: int) -> None:
    """One writer commit: a PyIceberg fast append of ``rows`` rows over the three partitions."""
    loaded = load_catalog(settings.effective_catalogs()[0]).load_table((NS, name))
    ids = list(range(first, first + rows))
    batch = pa.table(
        {"id": pa.array(ids, pa.int64()), "part": pa.array([f"p{i % 3}" for i in ids])}
    )
    loaded.append(batch)


def make_table(spark: Any, settings: Settings, name: str) -> str:
    """Three identity partitions, ``APPENDS`` commits of one small file to each: ``APPENDS``
    manifests, at or above the table's merge count of 4."""
    table = qualified_name(CATALOG, [NS], name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], NS)}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, part STRING) USING iceberg PARTITIONED BY (part) "
        "TBLPROPERTIES ('format-version'='2', 'commit.manifest.min-count-to-merge'='4', "
        "'commit.retry.num-retries'='20')"
    )
    for a in range(APPENDS):
        append(settings, name, a * 30, 30)
    spark.sql(f"REFRESH TABLE {table}")  # the session caches the table it created
    return table


async def planned_job(db: Any, settings: Settings, spark: Any, name: str) -> tuple[str, int, int]:
    """A new table, inspected and planned: (table, its id, the planned job's id)."""
    table = make_table(spark, settings, name)
    table_id = await executor_jobs.register(db, spark, table, NS, name)
    await TableInspections(settings, db).inspect_and_record(table_id)
    planned = await Planner(settings, db, JobQueue(db)).plan(table_id)
    assert planned.job_created and planned.job_id is not None, planned.recommendation
    actions = await db.fetchval("SELECT actions FROM icepack.jobs WHERE id = $1", planned.job_id)
    assert [a["action"] for a in actions] == ["rewrite_data_files"], actions
    return table, table_id, planned.job_id


async def ran_actions(db: Any, job_id: int) -> list[tuple[str, dict[str, object]]]:
    rows = await db.fetch(
        "SELECT action, output FROM icepack.job_actions WHERE job_id = $1 AND state = "
        "'succeeded' ORDER BY id",
        job_id,
    )
    return [(r["action"], r["output"]) for r in rows]


async def test_a_compaction_a_writer_overtook_rewrites_the_manifests_first(
    db: asyncpg.Pool, spark: Any, need_settings: Settings
) -> None:
    await all_partitions_closed(db)
    name = unique_name("overtaken")
    table, _, job_id = await planned_job(db, need_settings, spark, name)
    # The writer commits after the plan: three more small files, one more manifest.
    append(need_settings, name, 1000, 3)
    spark.sql(f"REFRESH TABLE {table}")
    manifests_before = spark.sql(f"SELECT count(*) AS n FROM {table}.manifests").first()["n"]
    assert manifests_before >= 4
    before = fingerprint(spark, table)

    await run_claimed(job_runner(db, need_settings, spark), job_id)

    ran = await ran_actions(db, job_id)
    assert [action for action, _ in ran] == ["rewrite_manifests", "rewrite_data_files"], ran
    reason = str(ran[0][1]["run_reason"])
    assert reason.startswith(
        f"manifests first (at run time): {manifests_before} manifests (about "
    ), reason
    assert ">= commit.manifest.min-count-to-merge 4, and a writer committed after the plan" in (
        reason
    )
    assert "run_reason" not in ran[1][1]
    assert fingerprint(spark, table) == before
    assert missing_referenced_files(spark, table) == []


async def test_a_compaction_nobody_committed_after_runs_as_planned(
    db: asyncpg.Pool, spark: Any, need_settings: Settings
) -> None:
    await all_partitions_closed(db)
    table, _, job_id = await planned_job(db, need_settings, spark, unique_name("quiet"))
    before = fingerprint(spark, table)

    await run_claimed(job_runner(db, need_settings, spark), job_id)

    assert [action for action, _ in await ran_actions(db, job_id)] == ["rewrite_data_files"]
    assert fingerprint(spark, table) == before
    assert missing_referenced_files(spark, table) == []
