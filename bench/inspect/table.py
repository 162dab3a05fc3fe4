"""The bench table: a metadata-heavy Iceberg table written as metadata only, cached on disk.

``COMMITS`` append commits, each writing ``MANIFESTS // COMMITS`` manifests of
``FILES_PER_MANIFEST`` hand-built ``DataFile`` records with PyIceberg's own manifest writer, so
the current snapshot lists ``MANIFESTS`` manifests. (One ``fast_append`` per manifest would be
the obvious way, but every PyIceberg commit re-serialises the whole metadata JSON and manifest
list, which grows quadratically: 300 such commits already took 96 s here.) The records carry
realistic per-column metrics (sizes, value/null counts, lower/upper bounds for the 4 columns)
and varied sizes/record counts, but their ``file_path`` points at parquet files that were never
written: every inspector measured here reads manifests only, never data files.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _FastAppendFiles
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import (
    DoubleType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
)

# Bump when anything below changes what is generated (the cache is keyed by it).
VERSION = "v1"
COMMITS = 10
MANIFESTS = 1000
LARGE_MANIFESTS = 10_000  # the 1,000,000-file table of the memory figures
FILES_PER_MANIFEST = 100
PARTITIONS = 50
NAMESPACE = "bench"
TABLE = "metadata_heavy"
CACHE_ROOT = Path(".cache/bench-inspect")

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "ts", TimestamptzType(), required=False),
    NestedField(3, "category", StringType(), required=False),
    NestedField(4, "amount", DoubleType(), required=False),
)
SPEC = PartitionSpec(
    PartitionField(source_id=3, field_id=1000, transform=IdentityTransform(), name="category")
)
CATEGORIES = [f"cat_{i:03d}" for i in range(PARTITIONS)]
MiB = 1 << 20
EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


def _size(rng: random.Random) -> int:
    """A file size: mostly small files (the case inspection exists for), some large."""
    bucket = rng.random()
    if bucket < 0.45:
        return rng.randint(4 << 10, MiB - 1)  # < 1 MiB
    if bucket < 0.75:
        return rng.randint(MiB, 32 * MiB)
    if bucket < 0.9:
        return rng.randint(32 * MiB, 128 * MiB)
    if bucket < 0.99:
        return rng.randint(128 * MiB, 512 * MiB)
    return rng.randint(512 * MiB, 1024 * MiB)


def data_file(rng: random.Random, table_location: str, commit: int, n: int) -> DataFile:
    size = _size(rng)
    records = max(1, size // rng.randint(40, 120))
    category = rng.choice(CATEGORIES)
    first_id = (commit * FILES_PER_MANIFEST + n) * 10_000_000
    ts_lo = EPOCH + timedelta(minutes=commit * 60 + n)
    ts_hi = ts_lo + timedelta(minutes=rng.randint(1, 59))
    nulls = rng.randint(0, records // 100)
    return DataFile.from_args(
        _table_format_version=2,
        content=DataFileContent.DATA,
        file_path=(
            f"{table_location}/data/category={category}/"
            f"{commit:05d}-{n:03d}-bench-{VERSION}.parquet"
        ),
        file_format=FileFormat.PARQUET,
        partition=Record(category),
        record_count=records,
        file_size_in_bytes=size,
        column_sizes={1: size // 4, 2: size // 4, 3: size // 8, 4: size - 5 * (size // 8)},
        value_counts={1: records, 2: records, 3: records, 4: records},
        null_value_counts={1: 0, 2: 0, 3: 0, 4: nulls},
        nan_value_counts={4: 0},
        lower_bounds={
            1: to_bytes(LongType(), first_id),
            2: to_bytes(TimestamptzType(), int(ts_lo.timestamp() * 1_000_000)),
            3: to_bytes(StringType(), category),
            4: to_bytes(DoubleType(), -rng.random() * 1000),
        },
        upper_bounds={
            1: to_bytes(LongType(), first_id + records - 1),
            2: to_bytes(TimestamptzType(), int(ts_hi.timestamp() * 1_000_000)),
            3: to_bytes(StringType(), category),
            4: to_bytes(DoubleType(), rng.random() * 1000),
        },
        split_offsets=[4],
        sort_order_id=0,
    )


class _ManyManifestsAppend(_FastAppendFiles):
    """A fast append that writes its added files as many manifests of ``FILES_PER_MANIFEST``.

    Relies on PyIceberg internals (``_manifests``, ``new_manifest_writer``) of the pinned version.
    """

    def _manifests(self) -> list[ManifestFile]:
        spec = self._transaction.table_metadata.spec()
        written: list[ManifestFile] = []
        files = self._added_data_files
        for start in range(0, len(files), FILES_PER_MANIFEST):
            with self.new_manifest_writer(spec=spec) as writer:
                for f in files[start : start + FILES_PER_MANIFEST]:
                    writer.add(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.ADDED,
                            snapshot_id=self._snapshot_id,
                            sequence_number=None,
                            file_sequence_number=None,
                            data_file=f,
                        )
                    )
            written.append(writer.to_manifest_file())
        return written + self._existing_manifests()


def append_manifests(table: Table, rng: random.Random, first: int, count: int) -> None:
    """One commit adding ``count`` manifests (numbered from ``first``) of fresh files."""
    location = table.location()
    with table.transaction() as tx, _ManyManifestsAppend(Operation.APPEND, tx, table.io) as append:
        for manifest in range(first, first + count):
            for n in range(FILES_PER_MANIFEST):
                append.append_data_file(data_file(rng, location, manifest, n))


def append_one_manifest(table: Table, rng: random.Random, manifest: int) -> None:
    """A plain PyIceberg ``fast_append`` of ``FILES_PER_MANIFEST`` files: one new manifest."""
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        for n in range(FILES_PER_MANIFEST):
            append.append_data_file(data_file(rng, table.location(), manifest, n))


def sql_catalog(name: str, uri: str, warehouse: Path) -> SqlCatalog:
    return SqlCatalog(name, uri=uri, warehouse=warehouse.resolve().as_uri())


def generate(directory: Path, catalog: Catalog, manifests: int = MANIFESTS) -> str:
    """Write the table into ``directory`` through ``catalog``; returns the metadata location."""
    catalog.create_namespace_if_not_exists(NAMESPACE)
    location = (directory / "warehouse" / NAMESPACE / TABLE).resolve().as_uri()
    table = catalog.create_table(
        (NAMESPACE, TABLE),
        SCHEMA,
        location=location,
        partition_spec=SPEC,
        properties={"format-version": "2", "commit.manifest-merge.enabled": "false"},
    )
    rng = random.Random(20251121)
    t0 = time.monotonic()
    per_commit = manifests // COMMITS
    for commit in range(COMMITS):
        append_manifests(table, rng, commit * per_commit, per_commit)
        print(
            f"  ... commit {commit + 1}/{COMMITS}: {(commit + 1) * per_commit} manifests, "
            f"{time.monotonic() - t0:.0f} s",
            flush=True,
        )
    return table.metadata_location


def cache_dir(manifests: int = MANIFESTS) -> Path:
    return (CACHE_ROOT / f"{VERSION}-{manifests}x{FILES_PER_MANIFEST}").resolve()


def cached_table(manifests: int = MANIFESTS) -> tuple[str, float | None]:
    """The cached table of ``manifests`` manifests: its metadata location, generating it first
    if needed.

    Returns ``(metadata_location, generation_seconds or None when it came from the cache)``.
    Generation registers the table in a throw-away SQLite catalog; callers register the
    metadata file in their own catalog.
    """
    directory = cache_dir(manifests)
    marker = directory / "table.json"
    if marker.exists():
        location = json.loads(marker.read_text())["metadata_location"]
        if Path(location.removeprefix("file://")).exists():
            return location, None
    if directory.exists():
        shutil.rmtree(directory)  # an interrupted generation
    directory.mkdir(parents=True)
    t0 = time.monotonic()
    catalog = sql_catalog("gen", f"sqlite:///{directory / 'gen-catalog.db'}", directory)
    location = generate(directory, catalog, manifests)
    seconds = time.monotonic() - t0
    marker.write_text(json.dumps({"metadata_location": location, "generation_seconds": seconds}))
    return location, seconds
