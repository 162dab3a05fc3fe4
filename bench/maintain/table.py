"""The bench table: a partitioned small-files Iceberg table written by Spark, cached on disk.

Ten identity partitions of ``part``, 4 MiB target file size:

* 3 "hot" partitions (``HOT``) of ``HOT_FILES`` tiny files each (``HOT_ROWS`` rows, ~8 KB):
  these need compaction;
* 7 healthy partitions of ``BIG_FILES`` files of ``BIG_ROWS`` rows (~3.5 MiB, above the 75 %
  binpack threshold of 3 MiB and below the 4 MiB target) plus ``STRAY_FILES`` tiny files, fewer
  than ``min-input-files``: nothing there is worth rewriting.

Everything is written by one Spark append, so one commit: ``spark.range(start, end, 1, files)``
splits ids into exactly ``files`` equal slices (no shuffle), each slice's rows belong to one
partition, and ``write.distribution-mode=none`` keeps Iceberg from shuffling them together again,
so each Spark task writes exactly one data file (the write's own target file size is raised
so that the writer does not roll the big files early). Payloads are SHA-256 hex strings (~36 bytes a
row in zstd Parquet), so file sizes follow row counts.

``configure(layout)`` chooses the partitioning: ``identity`` (``part``, the default),
``hour`` (``hours(ts)``, ``ts`` the partition's hour: ``2026-01-01 00:00`` plus its index in
hours) or ``bucket`` (``bucket(16, k)``, ``k`` the smallest key of the partition's own bucket,
so that the ten partitions fall in ten distinct buckets). The extra column exists only in its
layout, so the identity table is the one measured before.

The table directory lives in ``cache_dir()/warehouse`` (absolute paths are written into the
manifests, so the cache is only valid where it was generated). A run registers the cached
metadata file in its own catalog (``register_table``) and afterwards deletes every file the run
added, so the cached table stays exactly as generated.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from icepack_core.spark.sql import qualified_name, sql_string_literal

# Bump when anything below changes what is generated (the cache is keyed by it).
VERSION = "v1"
CATALOG = "icepack"
NAMESPACE = "bench"
TABLE = "small_files"
MiB = 1 << 20
TARGET_FILE_SIZE = 4 * MiB
PARTITIONS = [f"p{i:02d}" for i in range(10)]
HOT = ["p01", "p04", "p07"]
HEALTHY = [p for p in PARTITIONS if p not in HOT]
HOT_FILES = 660  # per hot partition
HOT_ROWS = 200  # per hot file (~8 KB)
BIG_FILES = 2  # per healthy partition
BIG_ROWS = 100_000  # per big file (~3.5 MiB)
STRAY_FILES = 2  # tiny files per healthy partition, below min-input-files
REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_ROOT = REPO_ROOT / ".cache" / "bench-maintain"
PROPERTIES = {
    "format-version": "2",
    "write.target-file-size-bytes": str(TARGET_FILE_SIZE),
    "write.distribution-mode": "none",
}


LAYOUTS = {"identity": "part", "hour": "hours(ts)", "bucket": "bucket(16, k)"}
BUCKETS = 16
HOUR_BASE = 1_767_225_600  # 2026-01-01 00:00:00 UTC, the first partition's hour
_layout = ["identity"]


def configure(layout: str) -> None:
    """Choose the partitioning of the table every other function builds and names."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    _layout[0] = layout


def layout() -> str:
    return _layout[0]


def cache_dir() -> Path:
    return CACHE_ROOT / (VERSION if layout() == "identity" else f"{VERSION}-{layout()}")


def bucket_keys() -> list[int]:
    """Per partition index, the smallest ``k`` whose ``bucket[16]`` is that index."""
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import LongType

    bucket = BucketTransform[int](BUCKETS).transform(LongType())
    keys: dict[int, int] = {}
    k = 0
    while len(keys) < len(PARTITIONS):
        found = bucket(k)
        if found is not None and found < len(PARTITIONS):
            keys.setdefault(found, k)
        k += 1
    return [keys[i] for i in range(len(PARTITIONS))]


def warehouse_dir() -> Path:
    """The embedded catalog's warehouse (``Settings.data_dir / "warehouse"``)."""
    return cache_dir() / "warehouse"


def qualified() -> str:
    return qualified_name(CATALOG, [NAMESPACE], TABLE)


def expected_files() -> int:
    return len(HOT) * HOT_FILES + len(HEALTHY) * (BIG_FILES + STRAY_FILES)


def cached_location() -> str | None:
    """The cached table's metadata file URI, or None when it must be (re)generated."""
    manifest = cache_dir() / "table.json"
    if not manifest.exists():
        return None
    info = json.loads(manifest.read_text())
    location = str(info.get("metadata_location", ""))
    sample = str(info.get("sample_data_file", ""))
    if not location or not local_path(location).exists():
        return None
    if not sample or not local_path(sample).exists():
        return None
    return location


def _slices(
    spark: Any, start: int, partitions: list[str], files_per_partition: int, rows: int
) -> Any:
    """``files_per_partition`` Spark partitions per table partition, one file's rows each."""
    from pyspark.sql import functions as F

    files = len(partitions) * files_per_partition
    frame = spark.range(start, start + files * rows, 1, files)
    file_index = F.floor((F.col("id") - start) / rows)
    names = F.array(*[F.lit(p) for p in partitions])
    part = F.element_at(names, (F.floor(file_index / files_per_partition) + 1).cast("int"))
    columns = [
        F.col("id"),
        part.alias("part"),
        F.sha2(F.col("id").cast("string"), 256).alias("payload"),
    ]
    index = F.substring(part, 2, 2).cast("int")  # "p07" -> 7
    if layout() == "hour":
        columns.append(F.timestamp_seconds(F.lit(HOUR_BASE) + index * 3600).alias("ts"))
    elif layout() == "bucket":
        keys = F.array(*[F.lit(k) for k in bucket_keys()])
        columns.append(F.element_at(keys, index + 1).cast("bigint").alias("k"))
    return frame.select(*columns)


def write(spark: Any) -> tuple[str, list[Any]]:
    """Create and fill the table in the session's ``icepack`` catalog, wherever its warehouse
    is (the cache directory, or a bucket for ``--object-store``), and check its layout.

    Returns:
        ``(metadata location, the files table's rows)``.
    """
    table = qualified()
    props = ", ".join(
        f"{sql_string_literal(k)}={sql_string_literal(v)}" for k, v in PROPERTIES.items()
    )
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], NAMESPACE)}")
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    extra = {"identity": "", "hour": ", ts TIMESTAMP", "bucket": ", k BIGINT"}[layout()]
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, part STRING, payload STRING{extra}) USING iceberg "
        f"PARTITIONED BY ({LAYOUTS[layout()]}) TBLPROPERTIES ({props})"
    )
    hot = _slices(spark, 0, HOT, HOT_FILES, HOT_ROWS)
    big = _slices(spark, 10**9, HEALTHY, BIG_FILES, BIG_ROWS)
    stray = _slices(spark, 2 * 10**9, HEALTHY, STRAY_FILES, HOT_ROWS)
    # The writer rolls files early on its in-memory estimate (a 100,000-row file came out as
    # 3.6 MB + 37 KB at a 4 MiB target), so this one write gets a larger target.
    hot.unionByName(big).unionByName(stray).writeTo(table).option(
        "target-file-size-bytes", str(2 * TARGET_FILE_SIZE)
    ).append()
    files = spark.sql(
        f"SELECT file_path, file_size_in_bytes AS size, {partition_name()} AS part "
        f"FROM {table}.files"
    ).collect()
    check_layout(files)
    location = spark.sql(
        f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1"
    ).first()["file"]
    return location, files


def generate(spark: Any) -> tuple[str, float]:
    """Write the table into ``warehouse_dir()`` through the session's ``icepack`` catalog, drop
    it from the catalog (files kept) and record it in ``cache_dir()/table.json``.

    Returns:
        ``(metadata location, seconds)``.
    """
    import shutil

    started = time.perf_counter()
    shutil.rmtree(cache_dir(), ignore_errors=True)
    warehouse_dir().mkdir(parents=True)
    table = qualified()
    location, files = write(spark)
    spark.sql(f"DROP TABLE {table}")  # no PURGE: Iceberg keeps the files
    seconds = time.perf_counter() - started
    (cache_dir() / "table.json").write_text(
        json.dumps(
            {
                "metadata_location": location,
                "sample_data_file": files[0]["file_path"],
                "data_files": len(files),
                "generated_seconds": round(seconds, 1),
                "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
            indent=2,
        )
        + "\n"
    )
    return location, seconds


def partition_name() -> str:
    """A SQL expression over the ``files`` table naming a file's partition as ``PARTITIONS``
    does (``p00``...), for every layout."""
    if layout() == "identity":
        return "partition.part"
    if layout() == "hour":
        index = f"partition.ts_hour - {HOUR_BASE // 3600}"
    else:  # partition index i holds the key of bucket i (``bucket_keys``)
        index = "partition.k_bucket"
    return f"format_string('p%02d', {index})"


def check_layout(files: list[Any]) -> None:
    """Fail loudly if the written files do not have the intended shape."""
    threshold = 0.75 * TARGET_FILE_SIZE
    problems = []
    if len(files) != expected_files():
        problems.append(f"{len(files)} data files, expected {expected_files()}")
    for part in HEALTHY:
        sizes = sorted(f["size"] for f in files if f["part"] == part)
        big = [s for s in sizes if s >= threshold]
        if len(big) != BIG_FILES or any(s >= TARGET_FILE_SIZE * 1.8 for s in big):
            problems.append(f"partition {part}: file sizes {sizes}")
    for part in HOT:
        if any(f["size"] >= threshold for f in files if f["part"] == part):
            problems.append(f"partition {part} has a file >= 75 % of target")
    if problems:
        raise RuntimeError("bench table has the wrong layout: " + "; ".join(problems))


def register(spark: Any, location: str) -> None:
    """Register the cached metadata file as ``icepack.bench.small_files`` in this catalog."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], NAMESPACE)}")
    spark.sql(
        f"CALL {qualified_name(CATALOG, ['system'], 'register_table')}("
        f"table => {sql_string_literal(f'{NAMESPACE}.{TABLE}')}, "
        f"metadata_file => {sql_string_literal(location)})"
    ).collect()


def local_path(location: str) -> Path:
    return Path(urlsplit(location).path) if location.startswith("file:") else Path(location)


def table_dir(location: str) -> Path:
    """The table's directory (``.../metadata/x.metadata.json`` -> ``...``)."""
    return local_path(location).parent.parent
