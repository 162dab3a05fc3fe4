"""Clustering benchmark: a z-order (or sort) compaction through Icepack vs. the direct CALL,
and what it buys a query filtering on the key.

A table written in random key order (``BATCHES`` appends into ``PARTS`` identity partitions,
files of about the 256 KiB target, every one spanning the whole key range) is measured:

* the overlap depth on the key (``inspection.clustering``) before, as the planner predicts it
  after (``recommend`` on the inspected status with a z-order or sort policy) and measured
  after;
* Icepack's action (``TableMaintenance.run`` of the planner's intent: key check, scope from the
  manifests, the ``CALL``, the verification of every ``replace`` snapshot, the depth measured
  after) against the same ``CALL`` sent directly to Spark (rolled back in between);
* a query filtering on both key columns: files PyIceberg plans for it and Spark's wall time
  (median of ``REPEAT``), before and after, and the same for binpack's whole-table rewrite
  (``rewrite-all``) as the baseline: bin-packing alone does not cluster.

Run: ``uv run python -m bench.clustering [--strategy zorder|sort]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pyiceberg.expressions import And, GreaterThanOrEqual, LessThanOrEqual

from icepack_core.execution.maintenance import TableMaintenance
from icepack_core.inspection.clustering import measure
from icepack_core.inspection.inspector import Inspector
from icepack_core.local.postgres import LocalPostgres
from icepack_core.planning.recommendation import recommend
from icepack_core.policy import EffectivePolicy, PolicyAttachment, resolve
from icepack_core.settings import Settings, load_settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.spark.session import build_local_session
from icepack_core.spark.sql import procedure_call, qualified_name
from icepack_core.telemetry.logs import setup_logging
from icepack_core.types import PolicyType, TableRef

CATALOG, NAMESPACE, TABLE = "icepack", "bench", "clustering"
PARTS, BATCHES, ROWS = 4, 8, 50_000
TARGET = 256 << 10
REPEAT = 5
REPO_ROOT = Path(__file__).resolve().parents[2]
# The query: a small box of the key (1 % of each column's range).
LOW, HIGH = 500_000, 510_000


def create(spark: Any) -> str:
    table = qualified_name(CATALOG, [NAMESPACE], TABLE)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], NAMESPACE)}")
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, a INT, b INT, part STRING, payload STRING) USING "
        f"iceberg PARTITIONED BY (part) TBLPROPERTIES ('format-version'='2', "
        f"'write.target-file-size-bytes'='{TARGET}')"
    )
    for batch in range(BATCHES):
        lo, hi = batch * ROWS, (batch + 1) * ROWS
        spark.sql(
            f"INSERT INTO {table} SELECT id, CAST(rand({batch}) * 1000000 AS INT), "
            f"CAST(rand({batch + 1000}) * 1000000 AS INT), concat('p', id % {PARTS}), "
            f"concat('row-', id) FROM range({lo}, {hi}) DISTRIBUTE BY id % {PARTS}"
        )
    # The sort order is set after the writes, so they stay in random order (a sort run uses it).
    spark.sql(f"ALTER TABLE {table} WRITE ORDERED BY a, b")
    return table


def query(spark: Any, table: str, snapshot: int) -> tuple[int, float]:
    """Rows of the key box at ``snapshot`` and Spark's median wall time."""
    sql = (
        f"SELECT count(*) AS n FROM {table} VERSION AS OF {snapshot} WHERE a BETWEEN {LOW} AND "
        f"{HIGH} AND b BETWEEN {LOW} AND {HIGH}"
    )
    seconds, rows = [], 0
    for _ in range(REPEAT):
        started = time.perf_counter()
        rows = int(spark.sql(sql).first()["n"])
        seconds.append(time.perf_counter() - started)
    return rows, statistics.median(seconds)


async def planned_files(inspector: Inspector, ref: TableRef, snapshot: int) -> int:
    """Data files PyIceberg plans for the key box at ``snapshot`` (pruned by column bounds)."""
    table = (await inspector.load(ref)).table
    assert table is not None
    box = And(
        And(GreaterThanOrEqual(term="a", value=LOW), LessThanOrEqual(term="a", value=HIGH)),
        And(GreaterThanOrEqual(term="b", value=LOW), LessThanOrEqual(term="b", value=HIGH)),
    )
    return len(list(table.scan(row_filter=box, snapshot_id=snapshot).plan_files()))


def rollback(spark: Any, ref: TableRef, snapshot: int) -> None:
    call = procedure_call(CATALOG, "rollback_to_snapshot", {"table": ref, "snapshot_id": snapshot})
    spark.sql(call).collect()


def compaction_policy(strategy: str) -> EffectivePolicy:
    """The table's policy: data compaction with ``strategy`` (z-order on ``a, b``)."""
    config: dict[str, Any] = {"strategy": strategy}
    if strategy == "zorder":
        config["zorder_columns"] = ["a", "b"]
    return resolve(
        [
            PolicyAttachment(
                PolicyType.DATA_COMPACTION, "catalog", CATALOG, None, None, True, config
            )
        ],
        NAMESPACE,
        TABLE,
    )


def timed_direct(spark: Any, ref: TableRef, start: int, call: str) -> float:
    """Seconds of ``call`` (the CALL the Icepack action sent) run directly from ``start``;
    the table is rolled back to ``start`` before and after."""
    rollback(spark, ref, start)
    started = time.perf_counter()
    spark.sql(call).collect()
    seconds = time.perf_counter() - started
    rollback(spark, ref, start)
    return seconds


def binpack_call(ref: TableRef) -> str:
    """The baseline: a binpack rewrite of every file to the target size."""
    return procedure_call(
        CATALOG,
        "rewrite_data_files",
        {
            "table": ref,
            "strategy": "binpack",
            "options": {"rewrite-all": "true", "target-file-size-bytes": str(TARGET)},
        },
    )


async def run(settings: Settings, strategy: str) -> None:
    spark, _ = build_local_session(settings)
    spark.sparkContext.setLogLevel("ERROR")
    table = create(spark)
    ref = TableRef(CATALOG, NAMESPACE, TABLE)
    inspector = Inspector(settings)

    async def load() -> Any:
        return (await inspector.load(ref)).table

    policy = compaction_policy(strategy)
    cfg = policy.data_compaction
    assert cfg is not None
    loaded = await load()
    strategy_key: Literal["sort", "zorder"] = "zorder" if cfg.strategy == "zorder" else "sort"
    clustering = measure(loaded, strategy_key, cfg.zorder_columns, cfg.max_overlap_ratio, TARGET)
    status = (await inspector.inspect(ref)).model_copy(update={"clustering": clustering})
    rec = recommend(status, policy, {}, datetime.now(UTC), target_file_size_bytes=TARGET)
    (intent,) = [a for a in rec.actions if a.action == "rewrite_data_files"]
    start = loaded.metadata.current_snapshot_id
    before_rows, before_seconds = query(spark, table, start)
    before_files = await planned_files(inspector, ref, start)
    engine = LocalEngine(settings, session=spark)

    maintenance = TableMaintenance(engine, ref, metadata=load)
    started = time.perf_counter()
    outcome = await maintenance.run(intent.intent)
    job_seconds = time.perf_counter() - started
    clustered = (await load()).metadata.current_snapshot_id
    direct_seconds = timed_direct(spark, ref, start, outcome.sql[-1])
    spark.sql(binpack_call(ref)).collect()
    packed = (await load()).metadata.current_snapshot_id
    after_rows, after_seconds = query(spark, table, clustered)
    packed_rows, packed_seconds = query(spark, table, packed)
    assert before_rows == after_rows == packed_rows, (before_rows, after_rows, packed_rows)
    after_files = await planned_files(inspector, ref, clustered)
    packed_files = await planned_files(inspector, ref, packed)
    found = outcome.output["clustering"]
    predicted = intent.predicted.overlap_depth if intent.predicted else None
    print(f"strategy {strategy}: {status.data_file_count} data files, {PARTS} partitions")
    print(
        f"overlap depth: before {found['before']:g}, predicted after "
        f"{predicted.after if predicted else None}, measured after {found['after']:g} in "
        f"{found['files_after']} files, {found['partitions_unclustered_after']} partitions "
        f"still unclustered (goal: 0, i.e. not rewritten again; baseline: before)"
    )
    print(
        f"rewrite: Icepack action {job_seconds:.1f} s vs direct CALL {direct_seconds:.1f} s "
        f"(goal: within 2x + 5 s; baseline: the direct CALL)"
    )
    print(
        f"key query ({before_rows} rows): files planned {before_files} -> {after_files} "
        f"(binpack rewrite-all baseline: {packed_files}); wall {before_seconds:.2f} s -> "
        f"{after_seconds:.2f} s (binpack: {packed_seconds:.2f} s)"
    )
    spark.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strategy", choices=("zorder", "sort"), default="zorder")
    args = parser.parse_args()
    setup_logging("bench", level="warning", fmt="console")
    with (
        tempfile.TemporaryDirectory(prefix="icepack-bench-clustering-") as root,
        tempfile.TemporaryDirectory(prefix="icepack-bench-clustering-pg-") as pg,
    ):
        server = LocalPostgres(Path(pg), durable=True)  # the embedded SQL catalog's
        dsn = server.start()
        try:
            settings = load_settings(
                database_url=dsn,
                data_dir=Path(root) / "data",
                spark_jars_dir=REPO_ROOT / ".cache" / "jars",
                spark_master="local[2]",
                spark_conf={
                    "spark.driver.memory": "2g",
                    "spark.sql.warehouse.dir": str(Path(root) / "spark-warehouse"),
                },
            )
            asyncio.run(run(settings, args.strategy))
        finally:
            server.stop()
