"""Inspection benchmark: full and incremental inspection of a metadata-heavy table.

The table (``bench.inspect.table``: 100,000 data files in 1,000 manifests, 50 partitions) is
generated once and cached under ``.cache/bench-inspect/``; each run registers it in a PyIceberg
SqlCatalog on the bench's own Postgres and measures, side by side:

* full inspection by Icepack's Python ``Inspector`` with an empty ``manifest_stats`` cache,
* full inspection by ``go-inspector`` (subprocess, ``--metadata-location``; rebuilt first), with
  its peak RSS; goal: >= 20x the baseline and faster than the Python inspector,
* the baseline: the same headline metrics from PyIceberg's ``table.inspect.files()`` (a child
  process, stopped at ``--baseline-deadline``), checked against the inspector's numbers,
* after one more commit (one new manifest of 100 files): re-inspection with the warm cache vs.
  a full inspection of the new state with an empty cache (goal >= 100x), and re-inspection of
  that same snapshot (its manifest list unchanged: nothing read),
* memory: peak RSS and time of one full inspection by each inspector in its own process, on
  this table and on a 1,000,000-file one generated the same way (cached likewise; ``--no-large``
  skips it); goal: the Python inspector under 1 GiB on the large table.

Wall seconds decide the goals; CPU seconds are printed beside them because a busy 2-core machine
stretches wall time unevenly between runs.

Run: ``make bench`` (or ``uv run python -m bench.inspect [--repeat N]``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from bench.inspect import memory
from bench.inspect import table as bench_table
from icepack_core.db import pool as icedb
from icepack_core.db.migrate import migrate
from icepack_core.inspection.inspector import Inspector, TableStatus
from icepack_core.inspection.store import ManifestStatsStore
from icepack_core.local.postgres import LocalPostgres
from icepack_core.settings import load_settings
from icepack_core.types import TableRef

CATALOG = "bench"
GO_BINARY = Path("go-inspector/bin/icepack-iceberg-inspector")
HEADLINE = (
    "data_file_count",
    "data_file_bytes",
    "record_count",
    "small_file_count",
    "partition_count",
    "max_files_in_partition",
)
# Fields that may differ between two inspections of the same state (docs/table-status.md),
# plus the identity fields (go-inspector on a bare metadata file reports catalog "").
RUN_FIELDS = {
    "inspected_at",
    "inspector",
    "inspect_ms",
    "manifests_read",
    "manifests_cached",
    "catalog",
    "namespace",
    "table",
}
FULL_SPEEDUP_GOAL = 5.0
GO_SPEEDUP_GOAL = 20.0  # and faster than the Python inspector
REINSPECT_SPEEDUP_GOAL = 100.0
REINSPECT_REPEAT = 3
LARGE_TABLE = "metadata_heavy_1m"
MEMORY_TABLE = "metadata_heavy_as_generated"


@dataclass
class Timing:
    wall: float
    cpu: float
    result: Any


def contract(status: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if k not in RUN_FIELDS}


def verdict(value: float, goal: float, lower_bound: bool = False) -> str:
    if value >= goal:
        return "ok"
    return "undecided (baseline stopped early)" if lower_bound else "MISS"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def best_of(
    n: int, prepare: Callable[[], Awaitable[None]], run: Callable[[], Awaitable[TableStatus]]
) -> Timing:
    """Fastest of ``n`` runs (CPU: this process, all threads; Postgres not included)."""
    best: Timing | None = None
    for _ in range(n):
        await prepare()
        start, cpu = time.perf_counter(), time.process_time()
        status = await run()
        timing = Timing(time.perf_counter() - start, time.process_time() - cpu, status)
        if best is None or timing.wall < best.wall:
            best = timing
    assert best is not None
    return best


def run_go(location: str) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """One go-inspector run: (wall s, CPU s, the finished process)."""
    start, cpu = time.perf_counter(), children_cpu()
    proc = subprocess.run(
        [str(GO_BINARY), "--metadata-location", location, "--verbose"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    return time.perf_counter() - start, children_cpu() - cpu, proc


def peak_rss(stderr: str) -> int:
    """The ``peak_rss_bytes`` go-inspector logs with ``--verbose`` (its own VmHWM).

    Not ``ru_maxrss`` of the child: on Linux that keeps the RSS the forked child had before
    ``exec``, i.e. this Python process's (about 200 MiB here), not go-inspector's.
    """
    match = re.search(r"peak_rss_bytes=(\d+)", stderr)
    return int(match.group(1)) if match else 0


def go_inspect(location: str, repeat: int) -> tuple[Timing, int]:
    """Best of ``repeat`` go-inspector runs, and the largest peak RSS (bytes) among them."""
    if shutil.which("go"):  # rebuild so a stale binary is never measured (a no-op when current)
        subprocess.run(
            [
                "go",
                "build",
                "-o",
                "bin/icepack-iceberg-inspector",
                "./cmd/icepack-iceberg-inspector",
            ],
            cwd="go-inspector",
            check=True,
        )
    elif not GO_BINARY.exists():
        raise RuntimeError(f"{GO_BINARY} is missing and there is no go toolchain to build it")
    best: Timing | None = None
    rss = 0
    for _ in range(repeat):
        wall, cpu, proc = run_go(location)
        if proc.returncode != 0:
            raise RuntimeError(f"go-inspector failed: {proc.stdout.strip()} {proc.stderr.strip()}")
        rss = max(rss, peak_rss(proc.stderr))
        timing = Timing(wall, cpu, json.loads(proc.stdout))
        if best is None or timing.wall < best.wall:
            best = timing
    assert best is not None
    return best, rss


def baseline(uri: str, deadline: float) -> Timing | None:
    """The child's own timing, or None when it was killed at the deadline."""
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.inspect.baseline",
                CATALOG,
                uri,
                bench_table.NAMESPACE,
                bench_table.TABLE,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=deadline,
        )
    except subprocess.TimeoutExpired:  # subprocess.run has killed the child
        return None
    if proc.returncode != 0:
        raise RuntimeError(f"baseline failed: {proc.stderr.strip()[-2000:]}")
    result = json.loads(proc.stdout)
    return Timing(result["seconds"], result["cpu_seconds"], result)


def files_under(directory: Path) -> set[Path]:
    return {p for p in directory.rglob("*") if p.is_file()}


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


async def main(repeat: int, baseline_deadline: float, large: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="icepack-bench-") as root:
        server = LocalPostgres(Path(root), durable=True)
        dsn = server.start()
        try:
            await run(dsn, repeat, baseline_deadline, large)
        finally:
            server.stop()


async def run(dsn: str, repeat: int, baseline_deadline: float, large: bool) -> None:
    sa_uri = "postgresql+psycopg2://" + dsn.removeprefix("postgresql://")
    location, generated = bench_table.cached_table()
    if generated is None:
        print(f"table: cached in {bench_table.cache_dir()} (generation skipped)")
    else:
        print(f"table: generated in {generated:.1f} s into {bench_table.cache_dir()}")
    table_dir = Path(location.removeprefix("file://")).parent.parent

    catalog = bench_table.sql_catalog(CATALOG, sa_uri, bench_table.cache_dir())
    catalog.create_namespace_if_not_exists(bench_table.NAMESPACE)
    table = catalog.register_table((bench_table.NAMESPACE, bench_table.TABLE), location)
    ref = TableRef(CATALOG, bench_table.NAMESPACE, bench_table.TABLE)

    conn = await asyncpg.connect(dsn)
    await migrate(conn)
    await conn.close()
    settings = load_settings(
        database_url=dsn, catalogs=[{"name": CATALOG, "type": "sql", "uri": sa_uri}]
    )
    pool = await icedb.create_pool(settings, "bench")
    inspector = Inspector(settings, cache=ManifestStatsStore(pool))
    load_before = load()

    async def empty_cache() -> None:
        await pool.execute("TRUNCATE icepack.manifest_stats")

    async def inspect() -> TableStatus:
        return await inspector.inspect(ref)

    try:
        print(f"measuring ({load_before}) ...", flush=True)
        py = await best_of(repeat, empty_cache, inspect)
        go, go_rss = go_inspect(location, repeat)
        base = baseline(sa_uri, baseline_deadline)

        inc, full2, same, commit_s = await reinspect(
            pool, table, table_dir, repeat, empty_cache, inspect
        )
    finally:
        await pool.close()
    report(py, go, go_rss, base, inc, full2, same, commit_s, repeat, baseline_deadline, load_before)
    # The bench table as generated (the extra commit above moved the catalog's pointer on and
    # its files are gone), under its own name.
    catalog.register_table((bench_table.NAMESPACE, MEMORY_TABLE), location)
    report_memory(dsn, sa_uri, memory_tables(catalog, location, large))


async def reinspect(
    pool: asyncpg.Pool,
    table: Table,
    table_dir: Path,
    repeat: int,
    empty_cache: Callable[[], Awaitable[None]],
    inspect: Callable[[], Awaitable[TableStatus]],
) -> tuple[Timing, Timing, Timing, float]:
    """One more commit, then the incremental re-inspection, a full one (empty cache) and one
    of the same snapshot again; and the commit's seconds. The commit's files are removed after,
    so the cached table stays as generated."""
    before = files_under(table_dir)
    commit_start = time.perf_counter()
    bench_table.append_one_manifest(table, random.Random(7), bench_table.MANIFESTS)
    commit_s = time.perf_counter() - commit_start
    added = sorted(files_under(table_dir) - before)
    try:
        new_manifests = [p.as_uri() for p in added if p.name.endswith(".avro")]

        # The totals of the inspection before the commit: each repeat starts from them, as
        # a real re-inspection does (forgetting the new manifest's row also drops totals).
        saved_totals = await pool.fetch("SELECT * FROM icepack.inspection_totals")

        async def forget_new_manifest() -> None:
            await pool.execute(
                "DELETE FROM icepack.manifest_stats WHERE manifest_path = ANY($1::text[])",
                new_manifests,
            )
            await pool.execute("DELETE FROM icepack.inspection_totals")
            for row in saved_totals:
                columns = list(row.keys())
                await pool.execute(
                    f"INSERT INTO icepack.inspection_totals ({', '.join(columns)}) "
                    f"VALUES ({', '.join(f'${i + 1}' for i in range(len(columns)))})",
                    *row.values(),
                )

        inc = await best_of(REINSPECT_REPEAT, forget_new_manifest, inspect)
        full2 = await best_of(repeat, empty_cache, inspect)

        async def nothing() -> None:
            pass

        # the same snapshot again: its manifest list is the one the totals were summed from
        same = await best_of(REINSPECT_REPEAT, nothing, inspect)
    finally:
        for path in added:  # keep the cached table as generated
            path.unlink()
    return inc, full2, same, commit_s


def memory_tables(catalog: SqlCatalog, location: str, large: bool) -> list[tuple[str, str]]:
    """The tables the memory report inspects: the bench table as generated and, with
    ``large``, the large table (generated when not cached), each registered in ``catalog``."""
    tables = [(MEMORY_TABLE, location)]
    if large:
        big, generated = bench_table.cached_table(bench_table.LARGE_MANIFESTS)
        where = bench_table.cache_dir(bench_table.LARGE_MANIFESTS)
        print(
            f"\ntable of {bench_table.LARGE_MANIFESTS * bench_table.FILES_PER_MANIFEST:,} "
            "files: "
            + (
                f"cached in {where}"
                if generated is None
                else f"generated in {generated:.0f} s into {where}"
            )
        )
        catalog.register_table((bench_table.NAMESPACE, LARGE_TABLE), big)
        tables.append((LARGE_TABLE, big))
    return tables


def report_memory(dsn: str, sa_uri: str, tables: list[tuple[str, str]]) -> None:
    """Peak RSS and time of one full inspection by each inspector, each in its own process."""
    print(
        "\nmemory: one full inspection (empty cache) per inspector, each in its own process; "
        "seconds = wall (CPU)"
    )
    for name, location in tables:
        py = memory.python_run(dsn, sa_uri, CATALOG, bench_table.NAMESPACE, name)
        go, go_rss = go_inspect(location, 1)
        files = f"{py.status['data_file_count']:,} files"
        goal = ""
        if name == LARGE_TABLE:
            ok = py.peak_rss and py.peak_rss < memory.PYTHON_RSS_GOAL
            goal = f" (goal < {memory.PYTHON_RSS_GOAL // memory.MIB} MiB) {'ok' if ok else 'MISS'}"
        print(
            f"  {files:>16} python inspector  : {py.wall:7.2f} s ({py.cpu:5.2f})   peak RSS "
            f"{memory.mib(py.peak_rss)}{goal}, {memory.mib(py.start_rss)} before inspecting"
        )
        print(
            f"  {'':>16} go-inspector      : {go.wall:7.2f} s ({go.cpu:5.2f})   peak RSS "
            f"{memory.mib(go_rss)}"
        )
        agree = contract(go.result) == contract(py.status)
        print(
            f"  {'':>16} {'MATCH' if agree else 'MISMATCH'}  go-inspector == python inspector "
            "(whole contract)"
        )


def report(
    py: Timing,
    go: Timing,
    go_rss: int,
    base: Timing | None,
    inc: Timing,
    full2: Timing,
    same: Timing,
    commit_s: float,
    repeat: int,
    deadline: float,
    load_before: str,
) -> None:
    status = py.result.model_dump(mode="json")
    how = f"best of {repeat}" if repeat > 1 else "once"
    print()
    print(
        f"inspection of {status['data_file_count']} data files in {status['manifest_count']} "
        f"manifests, {status['partition_count']} partitions; seconds = wall (CPU); full "
        f"inspections {how}, baseline once, re-inspection best of {REINSPECT_REPEAT}"
    )
    report_full(py, go, go_rss, base, deadline)
    report_reinspection(inc, full2, same, commit_s)
    print("headline metrics: " + ", ".join(f"{k}={status[k]}" for k in HEADLINE))
    report_checks(status, go, base, inc, full2, same)
    print(f"({load_before} before measuring, {load()} after; {os.cpu_count()} CPUs)")


def report_full(py: Timing, go: Timing, go_rss: int, base: Timing | None, deadline: float) -> None:
    """The full inspections (empty cache): the baseline's, the python inspector's and
    go-inspector's, each beside its goal."""
    base_wall = base.wall if base else deadline
    lower = "" if base else ">="
    if base:
        print(
            f"  baseline inspect.files() + arithmetic : {base.wall:7.2f} s ({base.cpu:5.2f})"
            f"   inspect.files() alone {base.result['files_seconds']:.2f} s"
        )
    else:
        print(
            f"  baseline inspect.files() + arithmetic : >= {deadline:.0f} s "
            "(stopped at the deadline, its start-up included)"
        )
    speedup = base_wall / py.wall
    print(
        f"  python inspector, empty cache         : {py.wall:7.2f} s ({py.cpu:5.2f})"
        f"   {lower}{speedup:.1f}x vs baseline (goal >= {FULL_SPEEDUP_GOAL:.0f}x) "
        f"{verdict(speedup, FULL_SPEEDUP_GOAL, lower_bound=base is None)}"
    )
    go_speedup = base_wall / go.wall
    go_ok = go_speedup >= GO_SPEEDUP_GOAL and go.wall < py.wall
    go_verdict = (
        "ok"
        if go_ok
        else "undecided (baseline stopped early)"
        if base is None and go.wall < py.wall
        else "MISS"
    )
    print(
        f"  go-inspector (subprocess)             : {go.wall:7.2f} s ({go.cpu:5.2f})"
        f"   {lower}{go_speedup:.1f}x vs baseline, {py.wall / go.wall:.1f}x vs python "
        f"(goal >= {GO_SPEEDUP_GOAL:.0f}x and faster than python) {go_verdict}"
    )
    rss = f"{go_rss / (1 << 20):.0f} MiB" if go_rss else "unknown (no /proc)"
    print(
        f"    its inspect_ms {go.result['inspect_ms']} (the wall time adds process start-up), "
        f"peak RSS {rss}"
    )


def report_reinspection(inc: Timing, full2: Timing, same: Timing, commit_s: float) -> None:
    """After one more commit: a full inspection, the incremental one and the same snapshot's."""
    inc_status, full2_status = inc.result, full2.result
    print(
        f"after one more commit ({commit_s:.2f} s: +{bench_table.FILES_PER_MANIFEST} files "
        "in 1 new manifest):"
    )
    print(
        f"  python full inspection, empty cache   : {full2.wall:7.2f} s ({full2.cpu:5.2f})"
        f"   manifests_read {full2_status.manifests_read}"
    )
    re_speedup = full2.wall / inc.wall
    print(
        f"  python re-inspection, warm cache      : {inc.wall:7.3f} s ({inc.cpu:5.3f})"
        f"   manifests_read {inc_status.manifests_read}, cached "
        f"{inc_status.manifests_cached}; {re_speedup:.0f}x vs full "
        f"(goal >= {REINSPECT_SPEEDUP_GOAL:.0f}x) {verdict(re_speedup, REINSPECT_SPEEDUP_GOAL)}"
    )
    same_speedup = full2.wall / same.wall
    print(
        f"  python re-inspection, same snapshot   : {same.wall:7.3f} s ({same.cpu:5.3f})"
        f"   manifests_read {same.result.manifests_read}, manifest list not read; "
        f"{same_speedup:.0f}x vs full"
    )


def report_checks(
    status: dict[str, Any],
    go: Timing,
    base: Timing | None,
    inc: Timing,
    full2: Timing,
    same: Timing,
) -> None:
    """Whether the inspectors and the re-inspections agree with the full inspection."""
    inc_status, full2_status = inc.result, full2.result
    checks = {
        "inspect.files() baseline == python inspector (headline metrics)": None
        if base is None
        else all(base.result["metrics"][k] == status[k] for k in HEADLINE),
        "go-inspector == python inspector (whole contract)": contract(go.result)
        == contract(status),
        "re-inspection == full inspection of the new state (whole contract)": contract(
            inc_status.model_dump(mode="json")
        )
        == contract(full2_status.model_dump(mode="json")),
        "re-inspection of the same snapshot == full inspection (whole contract)": contract(
            same.result.model_dump(mode="json")
        )
        == contract(full2_status.model_dump(mode="json")),
    }
    for name, ok in checks.items():
        print(
            f"  {'n/a (baseline stopped)' if ok is None else 'MATCH' if ok else 'MISMATCH'}  {name}"
        )
    if base is not None and not checks[next(iter(checks))]:
        print(f"    inspect.files() gave {base.result['metrics']}")
    if inc_status.manifests_read != 1:
        print(f"  note: re-inspection read {inc_status.manifests_read} manifests (expected 1)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--repeat", type=int, default=2, help="best of N for the full inspections (default 2)"
    )
    parser.add_argument(
        "--baseline-deadline",
        type=float,
        default=300.0,
        help="stop the inspect.files() baseline after this many seconds",
    )
    parser.add_argument(
        "--no-large",
        action="store_true",
        help="skip the 1,000,000-file table of the memory figures (generating "
        "it the first time takes minutes; it is cached afterwards)",
    )
    args = parser.parse_args()
    asyncio.run(main(args.repeat, args.baseline_deadline, not args.no_large))
