"""What a compaction job reads of its table, and what the inspector's re-inspection costs after.

On a partitioned small-files table written by Spark (``--partitions`` x ``--appends`` files,
one manifest per append), the real path on the bench's own Postgres: the inspector's unit of
work (``TableInspections.inspect_and_record``), ``Planner.plan``, ``JobRunner.run`` (the
executor), then ``inspect_and_record`` again, as the inspector service does on ``job.finished``.
Printed side by side:

* the executor's catalog loads of the table in the job (PyIceberg's ``SqlCatalog``, counted);
  goal 2 (once before the ``CALL``, once after: ``execution.job_context.TableMetadata``),
  baseline 7 (before it was loaded by each reader);
* the inspector's re-inspection after the job: wall ms and manifests read from storage, with
  the ``manifest_stats`` cache the executor's own after-inspection filled; goal: no manifest
  read (the recomputation is one catalog load and the manifest list), baseline: the same
  inspection with an empty cache (every manifest read), and the job's own wall time.

Run: ``uv run python -m bench.after_job [--partitions N] [--appends N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import asyncpg

from icepack_core.db import pool as icedb
from icepack_core.db.migrate import migrate
from icepack_core.db.queries import load_query
from icepack_core.execution.job_runner import JobRunner
from icepack_core.inspection.inspector import Inspector, MemoryManifestCache
from icepack_core.inspection.process import TableInspections
from icepack_core.local.postgres import LocalPostgres
from icepack_core.planning.planner import Planner
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import Settings, load_settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.spark.session import build_local_session
from icepack_core.spark.sql import qualified_name
from icepack_core.telemetry.logs import setup_logging
from icepack_core.types import JobState, TableRef
from tests.support.counting_catalog import CountingCatalogs

REPO_ROOT = Path(__file__).resolve().parents[2]
NAMESPACE, NAME = "bench", "after_job"
LOADS_GOAL, LOADS_BASELINE = 2, 7


def write_table(spark: Any, catalog: str, partitions: int, appends: int) -> str:
    """The small-files table: each append one small file per partition."""
    table = qualified_name(catalog, [NAMESPACE], NAME)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(catalog, [], NAMESPACE)}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, part STRING) USING iceberg PARTITIONED BY (part) "
        "TBLPROPERTIES ('format-version'='2', 'commit.retry.num-retries'='20')"
    )
    for a in range(appends):
        spark.sql(
            f"INSERT INTO {table} SELECT id, concat('p', id % {partitions}) AS part FROM "
            f"range({a * partitions * 10}, {(a + 1) * partitions * 10}) DISTRIBUTE BY part"
        )
    return table


T = TypeVar("T")


async def record_table(pool: asyncpg.Pool, catalog: str, location: str) -> int:
    """The table as discovery would record it, and a compaction policy without a quiet
    period: the partitions were all written seconds ago, and the bench is about the job's
    reads, not about open-partition detection."""
    table_id: int = await pool.fetchval(
        load_query("table_insert"), catalog, NAMESPACE, NAME, location, {}
    )
    await pool.execute(
        "INSERT INTO icepack.policies (policy_type, scope, catalog, config) "
        "VALUES ('system.data-compaction', 'catalog', $1, $2::jsonb)",
        catalog,
        {"open_partition_quiet_minutes": 0},
    )
    return table_id


async def timed_ms(work: Awaitable[T]) -> tuple[T, float]:
    """``work``'s result and how long awaiting it took, in milliseconds."""
    started = time.perf_counter()
    result = await work
    return result, (time.perf_counter() - started) * 1000


async def measure(settings: Settings, spark: Any, partitions: int, appends: int) -> None:
    (catalog,) = settings.effective_catalogs()
    started = time.perf_counter()
    table = write_table(spark, catalog.name, partitions, appends)
    print(f"table {table}: written in {time.perf_counter() - started:.1f} s", flush=True)
    pool = await icedb.create_pool(settings, "bench")
    try:
        location = spark.sql(
            f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1"
        ).first()["file"]
        table_id = await record_table(pool, catalog.name, location)
        inspections = TableInspections(settings, pool)
        before = await inspections.inspect_and_record(table_id)  # as on table.discovered
        assert before.status is not None
        queue = JobQueue(pool)
        planned = await Planner(settings, pool, queue).plan(table_id)
        assert planned.job_created, planned.recommendation
        runner = JobRunner(pool, settings, queue, LocalEngine(settings, session=spark), "bench")
        counting = CountingCatalogs(settings.effective_catalogs())
        runner.execution.inspector.catalogs = counting
        job = await queue.claim("bench", 600)
        assert job is not None
        run, job_ms = await timed_ms(runner.run(job))
        done = run.job
        assert done is not None and done.state == JobState.SUCCEEDED, done and done.error
        ran = await pool.fetch("SELECT action FROM icepack.job_actions WHERE job_id = $1", job.id)
        actions = [r["action"] for r in ran]
        # As on job.finished; then the baseline, an inspection with an empty cache.
        after, warm_ms = await timed_ms(inspections.inspect_and_record(table_id))
        assert after.status is not None
        cold = Inspector(settings, cache=MemoryManifestCache())
        baseline, cold_ms = await timed_ms(cold.inspect(TableRef(catalog.name, NAMESPACE, NAME)))
    finally:
        await pool.close()
    status = after.status
    print(
        f"job {actions}: {job_ms:.0f} ms, data files {before.status.data_file_count} -> "
        f"{status.data_file_count}, manifests {before.status.manifest_count} -> "
        f"{status.manifest_count}"
    )
    print(
        f"executor catalog loads per compaction job: {len(counting.loads)} "
        f"(goal {LOADS_GOAL}, baseline {LOADS_BASELINE})"
    )
    print(
        f"inspector re-inspection on job.finished: {warm_ms:.0f} ms, "
        f"{status.manifests_read} manifests read, {status.manifests_cached} from the cache "
        f"(goal 0 read; baseline, empty cache: {cold_ms:.0f} ms, "
        f"{baseline.manifests_read} manifests read; the job: {job_ms:.0f} ms)"
    )


async def main(partitions: int, appends: int) -> None:
    setup_logging("bench", "warning")
    with (
        tempfile.TemporaryDirectory(prefix="icepack-bench-") as root,
        tempfile.TemporaryDirectory(prefix="icepack-bench-spark-") as spark_tmp,
    ):
        server = LocalPostgres(Path(root), durable=True)
        dsn = server.start()
        try:
            conn = await asyncpg.connect(dsn)
            await migrate(conn)
            await conn.close()
            settings = load_settings(
                database_url=dsn,
                data_dir=Path(spark_tmp) / "data",
                spark_jars_dir=REPO_ROOT / ".cache" / "jars",
                spark_master="local[2]",
                spark_conf={
                    "spark.driver.memory": "1g",
                    "spark.sql.warehouse.dir": str(Path(spark_tmp) / "spark-warehouse"),
                },
            )
            spark, created = build_local_session(settings)
            spark.sparkContext.setLogLevel("ERROR")
            try:
                await measure(settings, spark, partitions, appends)
            finally:
                if created:
                    spark.stop()
        finally:
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--appends", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.partitions, args.appends))
