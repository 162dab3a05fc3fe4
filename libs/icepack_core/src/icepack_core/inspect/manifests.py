"""Per-manifest aggregates: what one manifest contributes to a ``TableStatus``.

Manifests are immutable, so an aggregate keyed by the manifest's path never goes stale and
re-inspection after a commit only reads the manifests the commit added (``manifest_stats``).

Cache format (the ``stats`` jsonb of ``manifest_stats``, version ``AGGREGATE_VERSION``)::

    {"v": 1, "small_threshold": 67108864,
     "data_files": n, "data_bytes": b, "records": r, "small_files": n, "small_bytes": b,
     "histogram": {"<1MiB": n, ...},
     "position_deletes": n, "equality_deletes": n, "deletion_vectors": n, "delete_records": r,
     "partitions": {"[0,[\"2024-01-01\"]]": files, ...}}

The small-file counts depend on the table's ``write.target-file-size-bytes``, so the threshold
they were computed with is part of the aggregate: a cached row is only used when its threshold
equals the current one; otherwise the manifest is re-read and the row replaced. A threshold change
is rare (a table property edit), while keeping every file size would make the cache as large as
the manifests themselves. Partition keys are ``[spec_id, [values...]]`` rendered as compact JSON
with values made JSON-safe, so equal partitions from different manifests merge.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFileContent, FileFormat, ManifestContent, ManifestFile

from icepack_core.inspect.status import bucket_of, empty_histogram

AGGREGATE_VERSION = 1


def _json_safe(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode()}
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    return repr(value)


def partition_key(spec_id: int, partition: Any) -> str:
    """Canonical JSON of a data file's partition: ``[spec_id, [v1, v2, ...]]``."""
    values = [_json_safe(partition[i]) for i in range(len(partition))] if partition else []
    return json.dumps([spec_id, values], separators=(",", ":"), sort_keys=True)


@dataclass
class ManifestAggregate:
    """The live (ADDED/EXISTING) entries of one manifest, summed."""

    small_threshold: int
    data_files: int = 0
    data_bytes: int = 0
    records: int = 0
    small_files: int = 0
    small_bytes: int = 0
    histogram: dict[str, int] = field(default_factory=empty_histogram)
    position_deletes: int = 0
    equality_deletes: int = 0
    deletion_vectors: int = 0
    delete_records: int = 0
    partitions: Counter[str] = field(default_factory=Counter)

    def to_json(self) -> dict[str, Any]:
        return {
            "v": AGGREGATE_VERSION,
            "small_threshold": self.small_threshold,
            "data_files": self.data_files,
            "data_bytes": self.data_bytes,
            "records": self.records,
            "small_files": self.small_files,
            "small_bytes": self.small_bytes,
            "histogram": dict(self.histogram),
            "position_deletes": self.position_deletes,
            "equality_deletes": self.equality_deletes,
            "deletion_vectors": self.deletion_vectors,
            "delete_records": self.delete_records,
            "partitions": dict(self.partitions),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], small_threshold: int) -> ManifestAggregate | None:
        """The cached aggregate, or None when it cannot serve this threshold/format."""
        if data.get("v") != AGGREGATE_VERSION or data.get("small_threshold") != small_threshold:
            return None
        histogram = empty_histogram()
        histogram.update({k: int(v) for k, v in data["histogram"].items()})
        return cls(
            small_threshold=small_threshold,
            data_files=int(data["data_files"]),
            data_bytes=int(data["data_bytes"]),
            records=int(data["records"]),
            small_files=int(data["small_files"]),
            small_bytes=int(data["small_bytes"]),
            histogram=histogram,
            position_deletes=int(data["position_deletes"]),
            equality_deletes=int(data["equality_deletes"]),
            deletion_vectors=int(data["deletion_vectors"]),
            delete_records=int(data["delete_records"]),
            partitions=Counter({k: int(v) for k, v in data["partitions"].items()}),
        )


def read_manifest(manifest: ManifestFile, io: FileIO, small_threshold: int) -> ManifestAggregate:
    """Open one manifest and aggregate its live entries (blocking: call from a thread).

    Raises:
        Exception: whatever the FileIO or Avro reader raises for a missing or corrupt file.
    """
    agg = ManifestAggregate(small_threshold=small_threshold)
    spec_id = manifest.partition_spec_id
    for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
        f = entry.data_file
        size = int(f.file_size_in_bytes)
        records = int(f.record_count)
        if f.content == DataFileContent.DATA:
            agg.data_files += 1
            agg.data_bytes += size
            agg.records += records
            agg.histogram[bucket_of(size)] += 1
            if size < small_threshold:
                agg.small_files += 1
                agg.small_bytes += size
            agg.partitions[partition_key(spec_id, f.partition)] += 1
        elif f.content == DataFileContent.EQUALITY_DELETES:
            agg.equality_deletes += 1
            agg.delete_records += records
        else:  # position deletes: a v3 deletion vector lives in a Puffin file
            if f.file_format == FileFormat.PUFFIN:
                agg.deletion_vectors += 1
            else:
                agg.position_deletes += 1
            agg.delete_records += records
    return agg


def manifest_content(manifest: ManifestFile) -> int:
    """0 for a data manifest, 1 for a delete manifest (``manifest_stats.content``)."""
    return 1 if manifest.content == ManifestContent.DELETES else 0


@dataclass
class Totals:
    """Aggregates of every manifest of a snapshot, merged."""

    data_files: int = 0
    data_bytes: int = 0
    records: int = 0
    small_files: int = 0
    small_bytes: int = 0
    histogram: dict[str, int] = field(default_factory=empty_histogram)
    position_deletes: int = 0
    equality_deletes: int = 0
    deletion_vectors: int = 0
    delete_records: int = 0
    partitions: Counter[str] = field(default_factory=Counter)

    def add(self, agg: ManifestAggregate) -> None:
        self.data_files += agg.data_files
        self.data_bytes += agg.data_bytes
        self.records += agg.records
        self.small_files += agg.small_files
        self.small_bytes += agg.small_bytes
        for key, count in agg.histogram.items():
            self.histogram[key] += count
        self.position_deletes += agg.position_deletes
        self.equality_deletes += agg.equality_deletes
        self.deletion_vectors += agg.deletion_vectors
        self.delete_records += agg.delete_records
        self.partitions.update(agg.partitions)
