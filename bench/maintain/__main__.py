"""Maintenance benchmark: Icepack's partition-scoped compaction vs. a whole-table rewrite.

On a partitioned small-files table (``bench.maintain.table``: ~2,000 data files in 10 partitions,
3 of which need compaction), measured side by side in one run on the same Spark session:

* Icepack's job: the planner's ``rewrite_data_files`` intent (``recommend`` on a fresh
  inspection, ``scope: partitions``) run by ``JobExecution`` (inspection before/after, the
  partition scope from the table's manifests, the procedure, the verification of every
  ``replace`` snapshot: unchanged partitions proven from metadata, the touched ones
  fingerprinted);
* the same ``CALL rewrite_data_files`` (same ``where`` and options) sent directly to Spark;
* the baseline: ``rewrite_data_files`` on the whole table with ``rewrite-all = true``.

Every run starts from the same snapshot: ``rewrite_data_files`` only adds snapshots, so
``rollback_to_snapshot`` restores the table (checked: the same data files come back).

Run: ``make bench`` (or ``uv run python -m bench.maintain [--pairs N] [--regenerate]``).
The figures and their printing are in ``bench.maintain.report``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from bench.maintain import objstore
from bench.maintain import table as bench_table
from bench.maintain.breakdown import in_process_steps, statement_breakdown
from bench.maintain.prefetch_ab import Timed, call_seconds, prefetch_ab, refreshed
from bench.maintain.report import (
    FLOOR,
    IN_PROCESS,
    MIN_INPUT_FILES,
    SCAN_REPEAT,
    SPARK_SCAN,
    FileSet,
    Measured,
    Rewrite,
    Scan,
    load,
    report,
)
from icepack_core.db import pool as icedb
from icepack_core.db.migrate import migrate
from icepack_core.db.queries import load_query
from icepack_core.execution.job_execution import ActionRecord, JobExecution
from icepack_core.execution.maintenance import TableMaintenance
from icepack_core.execution.verification import stored_fingerprints
from icepack_core.execution.verification.comparison import Comparison
from icepack_core.execution.verification.fingerprint import checksum_expression, table_columns
from icepack_core.execution.verification.first_sight import FirstSight
from icepack_core.execution.verification.scope import TableLayout, snapshot_view
from icepack_core.execution.verification.verifier import RewriteVerifier
from icepack_core.inspection.inspector import Inspector, LoadedTable
from icepack_core.inspection.status import TableStatus
from icepack_core.inspection.store import ManifestStatsStore
from icepack_core.intents import Intent
from icepack_core.local.postgres import LocalPostgres
from icepack_core.planning.recommendation import recommend
from icepack_core.policy import resolve
from icepack_core.safety.verification import ScopeNote
from icepack_core.settings import Settings, load_settings
from icepack_core.spark.engine import LocalEngine, Rows
from icepack_core.spark.session import build_local_session
from icepack_core.spark.sql import procedure_call
from icepack_core.telemetry.logs import setup_logging
from icepack_core.types import TableRef


class TimedEngine(LocalEngine):
    """The local engine, recording how long each statement took (for the job's breakdown)."""

    def __init__(self, settings: Settings, session: Any) -> None:
        super().__init__(settings, session=session)
        self.log: list[tuple[str, float]] = []

    async def sql(self, statement: str) -> Rows:
        start = time.perf_counter()
        try:
            return await super().sql(statement)
        finally:
            self.log.append((statement, time.perf_counter() - start))


class TimedInspector(Inspector):
    """The inspector, adding up the seconds its inspections took (of a loaded table: a job's
    loads of the table's metadata are shared by all its readers, ``job_context``)."""

    seconds = 0.0

    async def inspect_loaded(
        self, ref: TableRef, table: LoadedTable, started: float | None = None
    ) -> TableStatus:
        start = time.perf_counter()
        try:
            return await super().inspect_loaded(ref, table, started)
        finally:
            self.seconds += time.perf_counter() - start


class Bench:
    def __init__(self, spark: Any, engine: TimedEngine, settings: Settings) -> None:
        self.spark = spark
        self.settings = settings
        self.engine = engine
        self.table = bench_table.qualified()
        self.ref = TableRef(bench_table.CATALOG, bench_table.NAMESPACE, bench_table.TABLE)
        self.maintenance = TableMaintenance(engine, self.ref)

    def files(self) -> FileSet:
        rows = self.spark.sql(
            f"SELECT file_path, file_size_in_bytes AS size, {bench_table.partition_name()} AS "
            f"part FROM {self.table}.files WHERE content = 0"
        ).collect()
        parts: dict[str, int] = {}
        for row in rows:
            parts[row["part"]] = parts.get(row["part"], 0) + 1
        return FileSet({r["file_path"]: int(r["size"]) for r in rows}, parts)

    def needing_rewrite(self) -> tuple[int, int, int]:
        """Files (count, bytes, partitions) under 75 % of target in partitions that have at
        least ``min-input-files`` of them: what a compaction has to rewrite."""
        threshold = int(bench_table.TARGET_FILE_SIZE * 0.75)
        rows = self.spark.sql(
            "SELECT partition, count(*) AS n, sum(file_size_in_bytes) AS b "
            f"FROM {self.table}.files WHERE content = 0 AND file_size_in_bytes < {threshold} "
            f"GROUP BY partition HAVING count(*) >= {MIN_INPUT_FILES}"
        ).collect()
        return sum(r["n"] for r in rows), sum(r["b"] for r in rows), len(rows)

    def scans(self, snapshots: dict[str, int]) -> dict[str, Scan]:
        """The full-table aggregate at each snapshot (time travel), round-robin
        ``SCAN_REPEAT`` times so that every state is measured on an equally warm JVM."""
        found = {name: Scan([], 0, []) for name in snapshots}
        for _ in range(SCAN_REPEAT):
            for name, snapshot_id in snapshots.items():
                query = (
                    f"SELECT part, count(*) AS n, sum(length(payload)) AS b FROM "
                    f"{self.table} VERSION AS OF {snapshot_id} GROUP BY part ORDER BY part"
                )
                start = time.perf_counter()
                found[name].result = [tuple(r) for r in self.spark.sql(query).collect()]
                found[name].seconds.append(time.perf_counter() - start)
        for name, snapshot_id in snapshots.items():
            found[name].tasks = self.spark.sql(
                f"SELECT part, payload FROM {self.table} VERSION AS OF {snapshot_id}"
            ).rdd.getNumPartitions()
        return found

    async def verification_ab(self, start: int, end: int) -> dict[str, list[float]]:
        """The comparison of ``start`` and ``end`` (the job's first parent and last snapshot)
        as the verification did it before scoping (two whole-table fingerprints) and as it
        does now (entries diff + one pruned scan), and the latter with Iceberg's row reader
        instead of the vectorized one; round-robin, ``SCAN_REPEAT`` times. The scoped
        comparisons diff the files from the metadata in this process (as the job does), except
        the one labelled Spark entries diff."""
        ref = TableRef(bench_table.CATALOG, bench_table.NAMESPACE, bench_table.TABLE)
        inspector = Inspector(self.settings)

        async def metadata() -> Any:
            return (await inspector.load(ref)).table

        spark_diff = RewriteVerifier(self.engine, bench_table.CATALOG, ref)
        # With the table loaded, as a job has it: a transform's fields come from its spec.
        layout = await RewriteVerifier(
            self.engine, bench_table.CATALOG, ref, metadata=metadata
        ).layout()
        found: dict[str, list[float]] = {
            "whole table (2 scans)": [],
            IN_PROCESS: [],
            SPARK_SCAN: [],
            "scoped, Spark entries diff + scan": [],
            "scoped, Spark scan, Iceberg row reader": [],
            FLOOR: [],
        }
        for _ in range(SCAN_REPEAT):
            for name in found:
                started = time.perf_counter()
                if name.startswith("whole"):
                    same = await spark_diff.fingerprint(start) == await spark_diff.fingerprint(end)
                elif name == FLOOR:
                    same = await self.floor(start)
                else:
                    # A new verifier loads the table each time, as a job does.
                    chosen = (
                        spark_diff
                        if "Spark entries" in name
                        else RewriteVerifier(
                            self.engine,
                            bench_table.CATALOG,
                            ref,
                            metadata=metadata,
                            in_process=name == IN_PROCESS,
                        )
                    )
                    same = await self.scoped(name, chosen, start, end, layout)
                found[name].append(time.perf_counter() - started)
                if not same:
                    raise RuntimeError(f"verification A/B: {name} did not verify {end}")
        return found

    async def floor(self, start: int) -> bool:
        """What any verification that re-reads the replaced rows must read at least: the
        rewritten partitions of the start snapshot, once, as the scoped scan reads them (same
        view options, same checksum), nothing else. True when it read rows."""
        view = "icepack_bench_floor"
        await self.engine.sql(snapshot_view(view, self.table, start))
        try:
            where = " OR ".join(f"(`part` = '{p}')" for p in bench_table.HOT)
            columns = await table_columns(self.engine, self.table)
            rows = await self.engine.sql(
                f"SELECT count(*) AS n, {checksum_expression(columns)} AS h "
                f"FROM {view} WHERE {where}"
            )
        finally:
            await self.engine.sql(f"DROP VIEW IF EXISTS {view}")
        return int(rows[0]["n"]) > 0

    async def scoped(
        self, name: str, chosen: RewriteVerifier, start: int, end: int, layout: TableLayout
    ) -> bool:
        """One scoped comparison of the A/B (``name``: in process, or a Spark scan with the
        vectorized or the row reader); True when it proved the partitions equal the way
        ``name`` says."""
        vectorization = "spark.sql.iceberg.vectorization.enabled"
        if "row reader" in name:
            self.spark.conf.set(vectorization, "false")
        try:
            compared = (
                await chosen.proven_in_process(start, end, ScopeNote())
                if name == IN_PROCESS
                else await chosen.scoped_comparison(start, end, layout)
            )
        finally:
            self.spark.conf.unset(vectorization)
        return (
            isinstance(compared, Comparison)
            and compared.ok
            and compared.scope.scope == "partitions"
            and compared.scope.reader == ("in_process" if name == IN_PROCESS else "engine")
        )

    def rollback(self, snapshot_id: int, expected: FileSet) -> None:
        self.spark.sql(
            procedure_call(
                bench_table.CATALOG,
                "rollback_to_snapshot",
                {
                    "table": TableRef(
                        bench_table.CATALOG, bench_table.NAMESPACE, bench_table.TABLE
                    ),
                    "snapshot_id": snapshot_id,
                },
            )
        ).collect()
        restored = self.files()
        if restored.paths != expected.paths:
            raise RuntimeError(
                f"rollback to {snapshot_id} did not restore the data files: "
                f"{restored.count} files, expected {expected.count}"
            )

    async def direct(self, name: str, call: str) -> Rewrite:
        start = time.perf_counter()
        rows = self.spark.sql(call).collect()
        seconds = time.perf_counter() - start
        output = rows[0].asDict() if rows else {}
        return Rewrite(
            name,
            seconds,
            self.files(),
            output,
            await self.maintenance.fingerprint(),
            sql=call,
            snapshot=await self.maintenance.current_snapshot_id(),
        )

    async def job(
        self,
        execution: JobExecution,
        inspector: TimedInspector,
        table_id: int,
        intent: Intent,
    ) -> Rewrite:
        records: list[ActionRecord] = []

        async def record(rec: ActionRecord) -> None:
            records.append(rec)

        self.engine.log.clear()
        inspector.seconds = 0.0
        start = time.perf_counter()
        await execution.run(table_id, [intent], record)
        seconds = time.perf_counter() - start
        (rec,) = records
        breakdown = {
            "inspections": inspector.seconds,
            "procedure": 0.0,
            "scoping": 0.0,
            "verification": 0.0,
            "other statements": 0.0,
        }
        scans, steps = statement_breakdown(self.engine.log, breakdown)
        in_process_steps(rec, breakdown, steps)
        breakdown["rest"] = seconds - sum(breakdown.values())
        call = (rec.sql_text or "").split(";\n")[-1]
        return Rewrite(
            "icepack",
            seconds,
            self.files(),
            rec.output,
            await self.maintenance.fingerprint(),
            breakdown,
            call,
            scans,
            await self.maintenance.current_snapshot_id(),
            steps,
        )


async def main(
    pairs: int, regenerate: bool, layout: str, object_store: bool, prefetch_runs: int = 0
) -> None:
    bench_table.configure(layout)
    print(f"layout: {layout} (PARTITIONED BY {bench_table.LAYOUTS[layout]})", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="icepack-bench-") as root,
        tempfile.TemporaryDirectory(prefix="icepack-bench-spark-") as spark_tmp,
    ):
        server = LocalPostgres(Path(root), durable=True)
        dsn = server.start()
        try:
            await run(
                dsn,
                Path(spark_tmp),
                pairs,
                regenerate,
                server if object_store else None,
                prefetch_runs,
            )
        finally:
            server.stop()


async def run(
    dsn: str,
    spark_tmp: Path,
    pairs: int,
    regenerate: bool,
    s3_server: LocalPostgres | None,
    prefetch_runs: int = 0,
) -> None:
    """The local pass (with ``prefetch_runs``, the prefetch A/B too); then, given
    ``s3_server`` (``--object-store``), the same on S3 in a second database of that server,
    and both side by side."""
    conn = await asyncpg.connect(dsn)
    await migrate(conn)
    await conn.close()
    settings = load_settings(
        database_url=dsn,
        data_dir=bench_table.cache_dir(),
        spark_jars_dir=bench_table.REPO_ROOT / ".cache" / "jars",
        spark_master="local[2]",
        spark_conf={
            "spark.driver.memory": "2g",
            "spark.sql.warehouse.dir": str(spark_tmp / "spark-warehouse"),
        },
    )
    if s3_server is not None:
        settings = objstore.with_aws_bundle(settings)
    started = time.perf_counter()
    spark, created = build_local_session(settings)
    spark.sparkContext.setLogLevel("ERROR")
    print(f"spark session: {time.perf_counter() - started:.1f} s", flush=True)
    try:
        location = None if regenerate else bench_table.cached_location()
        if location is None:
            print(f"generating the table into {bench_table.cache_dir()} ...", flush=True)
            location, seconds = bench_table.generate(spark)
            print(f"table: generated in {seconds:.1f} s", flush=True)
        else:
            print(f"table: cached in {bench_table.cache_dir()} (generation skipped)")
        bench_table.register(spark, location)
        table_dir = bench_table.table_dir(location)
        original = {p for p in table_dir.rglob("*") if p.is_file()}
        pool = await icedb.create_pool(settings, "bench")
        try:
            measured = await measure(
                spark, settings, pool, location, pairs, prefetch_runs=prefetch_runs
            )
        finally:
            await pool.close()
            for path in {p for p in table_dir.rglob("*") if p.is_file()} - original:
                path.unlink()  # keep the cached table as generated
        report(measured)
        if s3_server is not None:
            print("\n--- the same on the object store ---", flush=True)
            on_s3, written = await objstore.measure_on_object_store(
                spark, settings, s3_server, pairs, measure
            )
            report(on_s3)
            objstore.report_side_by_side(measured, on_s3, written)
    finally:
        if created:
            spark.stop()


# The baseline: Spark's own compaction of the whole table, as an engineer would run it.
WHOLE_TABLE = procedure_call(
    bench_table.CATALOG,
    "rewrite_data_files",
    {
        "table": TableRef(bench_table.CATALOG, bench_table.NAMESPACE, bench_table.TABLE),
        "strategy": "binpack",
        "options": {
            "rewrite-all": "true",
            "target-file-size-bytes": str(bench_table.TARGET_FILE_SIZE),
        },
    },
)


async def planned_rewrite(
    inspector: TimedInspector, ref: TableRef, properties: dict[str, str]
) -> Intent:
    """The planner's ``rewrite_data_files`` intent, from a fresh inspection (which also warms
    the manifest cache)."""
    status = await inspector.inspect(ref)
    policy = resolve([], bench_table.NAMESPACE, bench_table.TABLE, properties)
    rec = recommend(
        status,
        policy,
        {},
        datetime.now(UTC),
        target_file_size_bytes=bench_table.TARGET_FILE_SIZE,
    )
    (intent,) = [a.intent for a in rec.actions if a.action == "rewrite_data_files"]
    return intent


async def first_sight(
    pool: asyncpg.Pool, inspector: TimedInspector, ref: TableRef, table_id: int
) -> tuple[int, float]:
    """The inspector's first-sight pass over the table (``first_sight``): files it
    fingerprinted, and its seconds (spent at the inspection, before any job)."""
    loaded = (await inspector.load(ref)).table
    assert loaded is not None
    started = time.monotonic()
    sighting = await FirstSight(pool).take(table_id, loaded)
    seconds = time.monotonic() - started
    print(f"first sight: {sighting.taken} small files fingerprinted in {seconds:.2f} s", flush=True)
    return sighting.taken, seconds


async def job_direct_pairs(
    pairs: int,
    then_rollback: Callable[[Callable[[], Awaitable[Rewrite]]], Awaitable[Rewrite]],
    job: Callable[[], Awaitable[Rewrite]],
    direct: Callable[[str], Awaitable[Rewrite]],
) -> tuple[list[Rewrite], list[Rewrite]]:
    """``pairs`` Icepack jobs and as many direct CALLs of the SQL the job sent (its where
    filter included), in ABBA order so that neither side always runs on the warmer JVM."""
    jobs: list[Rewrite] = []
    directs: list[Rewrite] = []
    for i in range(max(pairs, 1)):
        for kind in ("job", "direct") if i % 2 == 0 else ("direct", "job"):
            if kind == "job":
                jobs.append(await then_rollback(job))
            else:  # the exact CALL the job sent, where filter included
                call = jobs[-1].sql
                directs.append(await then_rollback(functools.partial(direct, call)))
    return jobs, directs


async def measure(
    spark: Any,
    settings: Settings,
    pool: asyncpg.Pool,
    location: str,
    pairs: int,
    with_ab: bool = True,
    prefetch_runs: int = 0,
) -> Measured:
    """The baseline, the job / direct pairs, the scans, (``with_ab``) the verification A/B
    and (``prefetch_runs``) the prefetch A/B (``prefetch_ab``)."""
    engine = TimedEngine(settings, spark)
    bench = Bench(spark, engine, settings)
    properties = {k: v for k, v in bench_table.PROPERTIES.items() if k != "format-version"}
    ref = bench.ref
    table_id: int = await pool.fetchval(
        load_query("table_insert"), ref.catalog, ref.namespace, ref.name, location, properties
    )
    inspector = TimedInspector(settings, cache=ManifestStatsStore(pool))
    execution = JobExecution(pool, engine, inspector)

    intent = await planned_rewrite(inspector, bench.ref, properties)
    sight = await first_sight(pool, inspector, ref, table_id)
    snapshot = await bench.maintenance.current_snapshot_id()
    assert snapshot is not None
    before = bench.files()
    need = bench.needing_rewrite()
    fingerprint = await bench.maintenance.fingerprint()
    load_before = load()
    print(f"measuring ({load_before}) ...", flush=True)

    async def then_rollback(make: Callable[[], Awaitable[Rewrite]]) -> Rewrite:
        result = await make()
        bench.rollback(snapshot, before)
        print(f"  {result.name}: {result.seconds:.1f} s", flush=True)
        return result

    # The baseline first: it reads every file once, so the later runs start equally warm.
    base = await then_rollback(lambda: bench.direct("whole table", WHOLE_TABLE))
    jobs, directs = await job_direct_pairs(
        pairs,
        then_rollback,
        lambda: bench.job(execution, inspector, table_id, intent),
        lambda call: bench.direct("direct", call),
    )
    # Rolled-back snapshots stay readable: scan all three states side by side.
    assert jobs[0].snapshot is not None and base.snapshot is not None
    scans = bench.scans(
        {"before": snapshot, "icepack": jobs[0].snapshot, "whole table": base.snapshot}
    )
    ab = await bench.verification_ab(snapshot, jobs[0].snapshot) if with_ab else {}

    async def timed_job(stored: bool) -> Timed:
        if not stored:
            await stored_fingerprints.drop_table(pool, table_id)
        run = await bench.job(execution, inspector, table_id, intent)
        bench.rollback(snapshot, before)
        if not stored:  # as the inspection left them, for the other sides
            await first_sight(pool, inspector, ref, table_id)
        return run.seconds, call_seconds(engine.log)

    async def timed_direct() -> Timed:
        refreshed(spark, bench.table)
        run = await bench.direct("direct", jobs[0].sql)
        bench.rollback(snapshot, before)
        return run.seconds, run.seconds

    sides = await prefetch_ab(prefetch_runs, timed_direct, timed_job) if prefetch_runs else None
    return Measured(
        intent,
        snapshot,
        before,
        need,
        fingerprint,
        base,
        jobs,
        directs,
        scans,
        load_before,
        ab,
        sides,
        sight,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--pairs",
        type=int,
        default=2,
        help="icepack job / direct CALL pairs, in ABBA order (default 2)",
    )
    parser.add_argument("--regenerate", action="store_true", help="regenerate the cached table")
    parser.add_argument(
        "--layout",
        choices=sorted(bench_table.LAYOUTS),
        default="identity",
        help="partitioning: identity (part), hour (hours(ts)) or bucket (bucket(16, k))",
    )
    parser.add_argument(
        "--object-store",
        action="store_true",
        help="also measure the table on S3 (a local SeaweedFS), beside the local figures",
    )
    parser.add_argument(
        "--prefetch-ab",
        type=int,
        default=0,
        metavar="N",
        help="also run the direct CALL and the job with and without the prefetch N times "
        "each, shuffled, and print their medians (bench.maintain.prefetch_ab)",
    )
    args = parser.parse_args()
    setup_logging("bench", level="warning", fmt="console")  # Spark's own warnings go to stderr
    asyncio.run(main(args.pairs, args.regenerate, args.layout, args.object_store, args.prefetch_ab))
