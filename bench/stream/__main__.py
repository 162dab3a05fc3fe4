"""Streaming benchmark: Icepack on defaults beside writers that commit every second.

Three tables in a SQL catalog in Postgres (``bench.stream.writers``): ``hour(ts)``,
``bucket(16, id)`` and an upsert table (equality deletes, see the writers' docstring), each
committed once a second by its own writer thread in a writer process. Two phases on the same
machine, one after the other:

1. **without Icepack**: the writers alone for ``--baseline-minutes`` (their commit latency);
2. **with Icepack**: ``icepack up`` (all five services as processes, every setting at its
   default, the catalog's push trigger on, as ``icepack up`` runs it) while the writers commit
   for ``--minutes`` (default 30); every ``--sample-seconds`` the tables and Icepack's database
   are sampled (``bench.stream.sample``).

Printed over time: data files per partition (p50, max, the open partition's), snapshots
retained and the metadata file's size, bytes rewritten per byte written, Spark busy time, jobs
by outcome; at the end, beside the goals of issue #27: the writers' commit latency p50/p99 with
and without Icepack (on a 2-core machine CPU contention is part of the difference), commits
redone after a conflict, holds and rollbacks, and the contents checked exact.

Run: ``uv run python -m bench.stream [--minutes 30] [--baseline-minutes N] [--sample-seconds S]``
(``make bench`` runs it with the defaults; ``--minutes 3`` is a quick run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
from pyiceberg.catalog.sql import SqlCatalog

from bench.stream.sample import (
    SETTLE_SECONDS,
    Bytes,
    TableSample,
    contents,
    icepack_side,
    sample_table,
    timeline,
)
from bench.stream.writers import create_tables
from icepack_core.local.postgres import LocalPostgres

GOAL_CLOSED_FILES = 2
GOAL_OPEN_FILES = 100
GOAL_AMPLIFICATION = 2.0
GOAL_FAILED_SHARE = 0.01
CATALOG = "lake"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def create_database(admin_dsn: str, name: str) -> str:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return admin_dsn.rsplit("/", 1)[0] + f"/{name}"


def write(spec: dict[str, Any], root: Path, label: str) -> subprocess.Popen[bytes]:
    """Start the writer process for ``spec`` (its results go to ``spec['out']``), in its own
    process group with the Spark JVM it starts (``stop_group``)."""
    path = root / f"writers-{label}.json"
    path.write_text(json.dumps(spec))
    log = (root / f"writers-{label}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "bench.stream.writers", str(path)],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )


def stop_group(proc: subprocess.Popen[bytes], grace_seconds: float) -> None:
    """Stop the process group ``proc`` leads (started with ``start_new_session``): SIGTERM,
    then SIGKILL to whatever is left after ``grace_seconds``, so an interrupted bench leaves
    no service, writer or Spark JVM running."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return  # the group is gone
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_seconds)


def finished(proc: subprocess.Popen[bytes], out: Path, log: Path) -> list[dict[str, Any]]:
    code = proc.wait()
    if code != 0:
        raise RuntimeError(f"writers exited {code}:\n{log.read_text()[-3000:]}")
    result: list[dict[str, Any]] = json.loads(out.read_text())
    return result


def print_sample(
    elapsed: float, samples: list[TableSample], seen: dict[str, Bytes], ice: Any
) -> None:
    written = sum(b.written for b in seen.values())
    rewritten = sum(b.rewritten for b in seen.values())
    ratio = rewritten / written if written else 0.0
    print(
        f"  t={elapsed / 60:5.1f} min  rewritten/written {ratio:.2f}  spark busy "
        f"{ice.spark_seconds:6.1f} s  jobs {dict(sorted(ice.jobs.items()))} "
        f"conflict-retried {ice.conflict_retried} deferred {ice.deferred}",
        flush=True,
    )
    for s in samples:
        print(
            f"    {s.table:<22} partitions {s.partitions:4d}  files/partition p50 "
            f"{s.files_p50:6.1f} max {s.files_max:5d} (open max {s.open_files:5d}, closed max "
            f"{s.closed_max:3d} of {s.closed:3d}, closing max {s.closing_max:3d})  snapshots "
            f"{s.snapshots:5d}  metadata {s.metadata_bytes / 1024:8.1f} KiB",
            flush=True,
        )


def start_icepack(env: dict[str, str], root: Path) -> subprocess.Popen[bytes]:
    """Migrate, then ``icepack up`` (all five services) with ``env``; output to a log."""
    icepack = [sys.executable, "-m", "icepack_core.cli.app"]
    subprocess.run([*icepack, "migrate"], env=env, check=True)
    log = (root / "icepack-up.log").open("wb")
    return subprocess.Popen(
        [*icepack, "up"], env=env, stdout=log, stderr=log, start_new_session=True
    )


async def with_icepack(
    args: argparse.Namespace, root: Path, admin_dsn: str, spec: dict[str, Any], catalog: SqlCatalog
) -> tuple[list[dict[str, Any]], dict[str, Bytes], list[list[TableSample]], Any]:
    dsn = await create_database(admin_dsn, "icepack_stream")
    env = {
        **os.environ,
        "ICEPACK_DATABASE_URL": dsn,
        "ICEPACK_DATA_DIR": str(root / "icepack"),
        "ICEPACK_LOG_LEVEL": "warning",
        "ICEPACK_UP_BASE_PORT": str(args.base_port),
        "ICEPACK_CATALOGS": json.dumps(
            [
                {
                    "name": CATALOG,
                    "type": "sql",
                    "uri": spec["catalog_dsn"],
                    "warehouse": spec["warehouse"],
                    "notify": True,
                }
            ]
        ),
    }
    up = start_icepack(env, root)
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    seen = {t: Bytes() for t in spec["tables"]}
    history: list[list[TableSample]] = []
    writers = write(spec, root, "icepack")
    try:
        started = time.monotonic()
        while writers.poll() is None:
            await asyncio.sleep(args.sample_seconds)
            if up.poll() is not None:
                raise RuntimeError(f"icepack up exited {up.returncode}; see {root}/icepack-up.log")
            samples = [sample_table(catalog, t, seen[t]) for t in spec["tables"]]
            history.append(samples)
            print_sample(time.monotonic() - started, samples, seen, await icepack_side(pool))
        results = finished(writers, Path(spec["out"]), root / "writers-icepack.log")
        history.append([sample_table(catalog, t, seen[t]) for t in spec["tables"]])
        ice = await icepack_side(pool)
        if args.timeline:  # a post-mortem of every plan and run, per table
            text = json.dumps(await timeline(pool), indent=1)
            await asyncio.to_thread(Path(args.timeline).write_text, text)
        return results, seen, history, ice
    finally:
        await pool.close()
        stop_group(writers, grace_seconds=30)
        stop_group(up, grace_seconds=120)


def latency_line(label: str, results: list[dict[str, Any]]) -> float:
    """Print the commit latency p50/p99 (all tables, then each); returns the p99."""
    all_lat = [x for r in results for x in r["latencies"]]
    p50, p99 = percentile(all_lat, 0.5), percentile(all_lat, 0.99)
    per = ", ".join(
        f"{r['table'].rsplit('.', 1)[1]} {percentile(r['latencies'], 0.5) * 1000:.0f}/"
        f"{percentile(r['latencies'], 0.99) * 1000:.0f}"
        for r in results
    )
    print(f"  commit latency {label}: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms ({per})")
    return p99


def report(
    base: list[dict[str, Any]],
    ice: list[dict[str, Any]],
    seen: dict[str, Bytes],
    history: list[list[TableSample]],
    icepack: Any,
    exact: dict[str, bool],
    minutes: float,
) -> None:
    print("\nresults beside the goals of issue #27")
    samples = history[-1] if history else []
    for s in samples:
        closed = "n/a (no settled closed partition)" if not s.closed else f"{s.closed_max}"
        worst_open = max(
            (x.open_files for h in history for x in h if x.table == s.table), default=0
        )
        print(
            f"  {s.table}: closed partitions max files {closed} over {s.closed} (goal <= "
            f"{GOAL_CLOSED_FILES}; {s.closing_max} max in those closed within "
            f"{SETTLE_SECONDS:.0f} s); open partitions max files {s.open_files} at the end, "
            f"{worst_open} at worst over the samples (goal <= {GOAL_OPEN_FILES})"
        )
        print(
            f"    snapshots retained {s.snapshots}, metadata file "
            f"{s.metadata_bytes / 1024:.1f} KiB (reported; no goal)"
        )
    written = sum(b.written for b in seen.values())
    rewritten = sum(b.rewritten for b in seen.values())
    print(
        f"  bytes rewritten per byte written: {rewritten / written if written else 0:.2f} "
        f"({rewritten:,} / {written:,}; goal <= {GOAL_AMPLIFICATION})"
    )
    commits = sum(len(r["latencies"]) for r in ice)
    redone = sum(r["failures"] for r in ice)
    gave_up = sum(r["gave_up"] for r in ice)
    print(
        f"  writers' commits redone after a conflict: {redone} of {commits} "
        f"({redone / max(1, commits):.2%}; goal <= {GOAL_FAILED_SHARE:.0%}); lost: {gave_up}"
    )
    b99 = latency_line("without Icepack", base)
    i99 = latency_line("with Icepack   ", ice)
    print(f"  p99 with / without: {i99 / b99 if b99 else float('nan'):.2f}x")
    per_hour = icepack.spark_seconds / (minutes / 60) if minutes else float("nan")
    print(
        f"  Spark busy: {icepack.spark_seconds:.1f} s in {minutes:g} min = {per_hour:.0f} s "
        f"per hour ({per_hour / 36:.0f} % of one executor; reported)"
    )
    print(
        f"  jobs by outcome: succeeded {icepack.jobs.get('succeeded', 0)}, conflict-retried "
        f"{icepack.conflict_retried}, deferred (table, action) {icepack.deferred}; all states "
        f"{icepack.jobs} ({icepack.retried} needed more than one attempt); actions "
        f"{icepack.actions} (reported)"
    )
    print(f"  holds {icepack.held}, rollbacks {icepack.rollbacks} (goal: 0 and 0)")
    for table, reason in sorted(icepack.decisions.items()):
        print(f"  last plan, {table} rewrite_data_files: {reason[:300]}")
    print(f"  contents exact: {exact} (goal: all true)")


async def main_async(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="icepack-bench-stream-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)  # the server runs as its own user under root
        server = LocalPostgres(root / "pg", durable=False)
        server.start()
        admin = server.admin_dsn()
        try:
            catalog_dsn = await create_database(admin, "lake")
            warehouse = (root / "warehouse").as_uri()
            uri = catalog_dsn.replace("postgresql://", "postgresql+psycopg2://", 1)
            catalog = SqlCatalog(CATALOG, uri=uri, warehouse=warehouse)
            common = {
                "catalog": CATALOG,
                "uri": uri,
                "warehouse": warehouse,
                "hour_minutes": args.hour_minutes,
                "catalog_dsn": catalog_dsn,  # the upsert writer's JDBC catalog
            }

            print(f"phase 1: writers alone for {args.baseline_minutes:g} min", flush=True)
            base_tables = create_tables(catalog, "baseline")
            spec = {**common, "tables": base_tables, "seconds": args.baseline_minutes * 60}
            spec["out"] = str(root / "baseline.json")
            base_writers = write(spec, root, "baseline")
            try:
                base = finished(base_writers, Path(spec["out"]), root / "writers-baseline.log")
            finally:
                stop_group(base_writers, grace_seconds=30)
            for ident in base_tables:  # Icepack must not find (and maintain) them in phase 2
                catalog.drop_table(ident)

            print(f"phase 2: writers with Icepack (icepack up, defaults) for {args.minutes:g} min")
            tables = create_tables(catalog, "stream")
            spec = {**common, "tables": tables, "seconds": args.minutes * 60}
            spec |= {"out": str(root / "icepack.json")}
            ice, seen, history, icepack = await with_icepack(args, root, admin, spec, catalog)
            exact = {}
            for r in ice:
                # The upsert table has equality deletes, which PyIceberg cannot read: its
                # writer read it back through Spark (``writers.UpsertWriter``).
                read = (
                    (r["read_rows"], r["read_checksum"])
                    if r.get("read_checksum") is not None
                    else contents(catalog, r["table"])
                )
                exact[r["table"]] = read == (r["expected_rows"], r["expected_checksum"])
            report(base, ice, seen, history, icepack, exact, args.minutes)
            return 0 if all(exact.values()) else 1
        finally:
            server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench.stream", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--baseline-minutes", type=float, default=None)
    parser.add_argument("--sample-seconds", type=float, default=60.0)
    parser.add_argument("--base-port", type=int, default=18480)
    parser.add_argument(
        "--hour-minutes",
        type=float,
        default=60.0,
        help="wall minutes per event hour of the hour(ts) writer (below 60: hours close "
        "within a short run)",
    )
    parser.add_argument(
        "--timeline",
        default=None,
        help="write each table's plans (the rewrite's verdict, the status read) and runs, "
        "oldest first, to this JSON file",
    )
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl-C: every ``finally`` stops its processes and the database.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.baseline_minutes is None:
        args.baseline_minutes = max(1.0, args.minutes / 3)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
