"""Expiry's "still live" check on a streaming table: 5,000 snapshots, 100,000 live data files.

Measured side by side in one run, each in its own process (so each peak RSS is its own):

* **icepack**: ``execution.ledger.expiry_live.live_conflicts``, every kept snapshot's manifest
  list and each distinct manifest once, streamed (the check an expiry runs now);
* **baseline**: the check as it was before (issue #28): Spark's ``snapshots`` and
  ``all_manifests`` collected into Python, then ``files VERSION AS OF`` of every kept snapshot,
  25 per ``UNION ALL`` statement, each statement's rows collected into Python. Its full run
  reads about 250 million (snapshot, file) rows and takes hours, so it runs for a time budget
  (``--budget``), largest statements first (the newest snapshots hold the most files): its
  peak memory is then the full run's (the rows of one statement are what is held at once; the
  deduplicated path map is full after the first), and its full time is extrapolated from the
  rows it read per second. The Python process's peak RSS and the Spark JVM's are both given.

The table is written by ``tests.support.snapshot_table`` (PyIceberg's writers; appends of 20
files, manifests merged every 100 snapshots) in a Hadoop-catalog layout that Spark reads. The
expiry being checked removes the 10 oldest snapshots; the files recorded are their manifest
lists and one data file they added that the head still reads (each check must find it).

Run: ``uv run python -m bench.ledger`` (all ledger figures) or ``uv run python -m
bench.ledger.live_check [--snapshots N] [--budget S]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pyiceberg.io.pyarrow import PyArrowFileIO

from icepack_core.execution.ledger.expiry_live import live_conflicts
from icepack_core.settings import load_settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.spark.session import build_local_session
from icepack_core.spark.sql import qualified_name, sql_literal
from icepack_core.types import TableRef
from tests.support.snapshot_table import build_streaming_table

REPO_ROOT = Path(__file__).resolve().parents[2]
SNAPSHOTS = 5000
FILES_PER_SNAPSHOT = 20
EXPIRING = 10
SNAPSHOTS_PER_QUERY = 25  # the old check's statement size
GOAL_MB = 256  # the check's peak RSS must stay below this at 5,000 x 100,000
MiB = 1 << 20


def rss_mb() -> float:
    """This process's resident set now (MB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def peak_mb(pid: int | str = "self") -> float:
    """The peak resident set of process ``pid`` (its VmHWM, in MB). Not ``ru_maxrss``: on
    Linux a child's keeps the size of the forked parent from before its ``exec``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def build(root: Path, snapshots: int) -> tuple[str, list[int]]:
    """The table under ``root/warehouse/bench/t`` as a Hadoop catalog lays it out."""
    table_dir = root / "warehouse" / "bench" / "t"
    built = build_streaming_table(
        PyArrowFileIO(), f"file://{table_dir}", snapshots, FILES_PER_SNAPSHOT
    )
    metadata = table_dir / "metadata"
    shutil.copy(built.metadata_location.removeprefix("file://"), metadata / "v1.metadata.json")
    (metadata / "version-hint.text").write_text("1")
    return f"file://{metadata}/v1.metadata.json", built.snapshot_ids


def recorded(metadata_location: str, expiring: list[int]) -> list[str]:
    """What the expiry of ``expiring`` records: their manifest lists, plus (the fault every
    check must catch) a data file of the 5th snapshot, which the head still reads."""
    doc = json.loads(Path(metadata_location.removeprefix("file://")).read_text())
    lists = [s["manifest-list"] for s in doc["snapshots"] if s["snapshot-id"] in set(expiring)]
    return [*lists, f"{doc['location']}/data/s00005-f000.parquet"]


def run_icepack(metadata_location: str, expiring: list[int]) -> dict[str, Any]:
    paths = recorded(metadata_location, expiring)
    before = rss_mb()
    started = time.perf_counter()
    check = live_conflicts(PyArrowFileIO(), metadata_location, frozenset(expiring), paths)
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "conflicts": check.conflict_count,
        "rss_before_mb": before,
        "peak_rss_mb": peak_mb(),
        **check.counters(),
    }


def _table(ref: TableRef, name: str) -> str:
    return qualified_name(ref.catalog, (*ref.levels, ref.name), name)


async def _old_check(
    engine: LocalEngine, ref: TableRef, expiring: set[int], paths: list[str], budget: float
) -> dict[str, Any]:
    """The removed ``live_view`` (a path -> where map of everything live), its ``files``
    statements run newest first until ``budget`` seconds have passed (at least one)."""
    started = time.perf_counter()
    await engine.sql(f"REFRESH TABLE {qualified_name(ref.catalog, ref.levels, ref.name)}")
    snaps = await engine.sql(f"SELECT snapshot_id, manifest_list FROM {_table(ref, 'snapshots')}")
    kept = sorted({int(r["snapshot_id"]) for r in snaps} - expiring)
    live: dict[str, str] = {}
    for r in snaps:
        if int(r["snapshot_id"]) in kept and r["manifest_list"]:
            live[str(r["manifest_list"])] = f"manifest list of snapshot {r['snapshot_id']}"
    manifests = await engine.sql(
        f"SELECT path, reference_snapshot_id FROM {_table(ref, 'all_manifests')}"
    )
    for r in manifests:
        if int(r["reference_snapshot_id"]) not in expiring:
            live.setdefault(str(r["path"]), f"manifest of snapshot {r['reference_snapshot_id']}")
    manifest_rows = len(manifests)
    del manifests
    setup = time.perf_counter() - started
    started = time.perf_counter()
    batches = [kept[i : i + SNAPSHOTS_PER_QUERY] for i in range(0, len(kept), SNAPSHOTS_PER_QUERY)][
        ::-1
    ]
    rows_read = statements = 0
    for batch in batches:
        if statements and time.perf_counter() - started > budget:
            break
        union = " UNION ALL ".join(
            f"SELECT {sql_literal(sid)} AS snapshot_id, file_path "
            f"FROM {_table(ref, 'files')} VERSION AS OF {sql_literal(sid)}"
            for sid in batch
        )
        rows = await engine.sql(union)
        rows_read += len(rows)
        statements += 1
        for r in rows:
            live.setdefault(str(r["file_path"]), f"file of snapshot {r['snapshot_id']}")
        del rows
    return {
        "setup_seconds": setup,
        "seconds": time.perf_counter() - started,
        "statements": statements,
        "statements_total": len(batches),
        "rows_read": rows_read,
        "manifest_rows": manifest_rows,
        "live_paths": len(live),
        "conflicts": sum(path in live for path in paths),
    }


def run_baseline(metadata_location: str, expiring: list[int], budget: float) -> dict[str, Any]:
    warehouse = Path(metadata_location.removeprefix("file://")).parents[3]
    settings = load_settings(
        database_url="postgresql://bench@localhost/unused",  # no catalog of Icepack's is used
        data_dir=warehouse.parent / "data",
        spark_jars_dir=REPO_ROOT / ".cache" / "jars",
        spark_master="local[2]",
        spark_conf={
            "spark.driver.memory": "4g",
            "spark.driver.maxResultSize": "4g",
            "spark.ui.enabled": "false",
            "spark.sql.catalog.bench": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.bench.type": "hadoop",
            "spark.sql.catalog.bench.warehouse": f"file://{warehouse}",
        },
    )
    spark, _ = build_local_session(settings)
    spark.sparkContext.setLogLevel("ERROR")
    gateway = spark.sparkContext._jvm
    assert gateway is not None
    jvm = int(gateway.java.lang.ProcessHandle.current().pid())
    engine = LocalEngine(settings, session=spark)
    before = rss_mb()
    paths = recorded(metadata_location, expiring)
    ref = TableRef("bench", "bench", "t")
    result = asyncio.run(_old_check(engine, ref, set(expiring), paths, budget))
    result |= {"rss_before_mb": before, "peak_rss_mb": peak_mb(), "jvm_peak_rss_mb": peak_mb(jvm)}
    spark.stop()
    return result


def _child(mode: str, metadata_location: str, expiring: list[int], budget: float) -> dict[str, Any]:
    """Run one side in a fresh interpreter and read back its JSON line."""
    args = [sys.executable, "-m", "bench.ledger.live_check", "--child", mode, metadata_location]
    args += ["--expiring", ",".join(map(str, expiring)), "--budget", str(budget)]
    done = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} check failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def measure(snapshots: int, budget: float) -> None:
    with tempfile.TemporaryDirectory(prefix="icepack-bench-live-") as root:
        started = time.perf_counter()
        metadata_location, ids = build(Path(root), snapshots)
        print(
            f"expiry live check: {snapshots} snapshots, {snapshots * FILES_PER_SNAPSHOT} live "
            f"files (table written in {time.perf_counter() - started:.0f} s)",
            flush=True,
        )
        expiring = ids[:EXPIRING]
        new = _child("icepack", metadata_location, expiring, budget)
        old = _child("baseline", metadata_location, expiring, budget)
    report(new, old, snapshots)


def report(new: dict[str, Any], old: dict[str, Any], snapshots: int) -> None:
    total_rows = sum(i * FILES_PER_SNAPSHOT for i in range(EXPIRING + 1, snapshots + 1))
    rate = old["rows_read"] / old["seconds"] if old["seconds"] else 0.0
    estimate = old["setup_seconds"] + (total_rows / rate if rate else float("inf"))
    print(
        f"  goal    : peak RSS < {GOAL_MB} MB, memory independent of snapshots x files "
        f"({total_rows:,} (snapshot, file) pairs here)"
    )
    print(
        f"  icepack : {new['seconds']:8.1f} s, peak RSS {new['peak_rss_mb']:6.0f} MB "
        f"({new['rss_before_mb']:.0f} MB before the check); {new['manifests_read']:,} manifests "
        f"read once, {new['manifest_references_shared']:,} shared references skipped, "
        f"{new['entries_read']:,} entries; conflicts found {new['conflicts']}"
    )
    print(
        f"  baseline: {estimate:8.0f} s estimated for the full run ({old['statements']} of "
        f"{old['statements_total']} statements, the largest, in {old['seconds']:.0f} s after "
        f"{old['setup_seconds']:.0f} s for snapshots and all_manifests: "
        f"{old['rows_read']:,} rows + {old['manifest_rows']:,} all_manifests rows); peak RSS "
        f"Python {old['peak_rss_mb']:.0f} MB ({old['rss_before_mb']:.0f} MB before), Spark JVM "
        f"{old['jvm_peak_rss_mb']:.0f} MB; conflicts found {old['conflicts']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--snapshots", type=int, default=SNAPSHOTS)
    parser.add_argument("--budget", type=float, default=180.0, help="baseline seconds")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "METADATA"))
    parser.add_argument("--expiring", default="")
    args = parser.parse_args()
    if args.child:
        mode, metadata_location = args.child
        expiring = [int(x) for x in args.expiring.split(",") if x]
        if mode == "icepack":
            result = run_icepack(metadata_location, expiring)
        else:
            result = run_baseline(metadata_location, expiring, args.budget)
        print(json.dumps(result))
        return
    measure(args.snapshots, args.budget)


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    main()
