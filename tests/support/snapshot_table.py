"""A streaming table's metadata with thousands of snapshots, written in seconds.

A streaming writer commits small appends all day: thousands of snapshots that share almost all
their manifests. PyIceberg's own commits take 0.2 s to 1 s each on such a table and grow with it
(every commit rewrites the metadata file with every snapshot and, without merging, a manifest
list naming every manifest): 5,000 of them would take hours. So this writes the same files
directly with PyIceberg's writers (``write_manifest``, ``write_manifest_list``, its
``TableMetadataV2`` model and ``ToOutputFile``), one metadata file at the end, which a catalog
then registers: what PyIceberg or Iceberg would have written for the same appends, with
Iceberg's manifest merging:

* snapshot ``i`` (1-based) appends ``files_per_snapshot`` data files in its own manifest;
* every ``merge_every`` snapshots the small manifests since the last merge are merged into one
  (their entries ``EXISTING``), as ``commit.manifest.min-count-to-merge`` does;
* each snapshot's manifest list names the merged manifests so far and the small ones since.

The data files are not written (metadata readers never open them): a table for measuring
metadata reads (expiry's live check), not for scanning rows.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.serializers import ToOutputFile
from pyiceberg.table.metadata import TableMetadataV2
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRef, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, SnapshotLogEntry, Summary
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
FIRST_ID = 1_000_000
START_MS = 1_700_000_000_000


@dataclass(frozen=True)
class BuiltTable:
    """What ``build_streaming_table`` wrote."""

    metadata_location: str
    snapshot_ids: list[int]  # oldest first
    data_files: int  # live in the last snapshot
    manifests: int  # distinct manifests written
    list_entries: int  # manifest references over all manifest lists
    snapshot_files: int  # sum over snapshots of their live data files (Spark's rows)

    def data_path(self, location: str, snapshot: int, file: int) -> str:
        return data_path(location, snapshot, file)


def data_path(location: str, snapshot: int, file: int) -> str:
    """The path of data file ``file`` of snapshot ``snapshot`` (1-based)."""
    return f"{location}/data/s{snapshot:05d}-f{file:03d}.parquet"


def _data_file(path: str) -> DataFile:
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=10,
        file_size_in_bytes=1000,
        spec_id=0,
    )


def _manifest(
    io: FileIO, path: str, snapshot_id: int, entries: list[ManifestEntry]
) -> ManifestFile:
    writer = write_manifest(
        2, UNPARTITIONED_PARTITION_SPEC, SCHEMA, io.new_output(path), snapshot_id, "deflate"
    )
    with writer:
        for entry in entries:
            writer.add_entry(entry)
    return writer.to_manifest_file()


def _entry(status: ManifestEntryStatus, snapshot_id: int, seq: int, path: str) -> ManifestEntry:
    return ManifestEntry.from_args(
        status=status,
        snapshot_id=snapshot_id,
        sequence_number=seq,
        file_sequence_number=seq,
        data_file=_data_file(path),
    )


def _snapshot(io: FileIO, meta: str, i: int, current: list[ManifestFile], files: int) -> Snapshot:
    """Snapshot ``i``: its manifest list (naming ``current``) written, its record returned."""
    sid = FIRST_ID + i
    parent = sid - 1 if i > 1 else None
    list_path = f"{meta}/snap-{sid}-1-{uuid.uuid4()}.avro"
    with write_manifest_list(2, io.new_output(list_path), sid, parent, i, "deflate") as writer:
        writer.add_manifests(current)
    summary = {"added-data-files": str(files), "total-data-files": str(i * files)}
    return Snapshot(
        snapshot_id=sid,
        parent_snapshot_id=parent,
        sequence_number=i,
        timestamp_ms=START_MS + i * 1000,
        manifest_list=list_path,
        summary=Summary(Operation.APPEND, **summary),
        schema_id=0,
    )


def _metadata(location: str, snaps: list[Snapshot]) -> TableMetadataV2:
    head = snaps[-1].snapshot_id
    return TableMetadataV2(
        location=location,
        table_uuid=uuid.uuid4(),
        last_updated_ms=snaps[-1].timestamp_ms,
        last_column_id=1,
        schemas=[SCHEMA],
        current_schema_id=0,
        partition_specs=[UNPARTITIONED_PARTITION_SPEC],
        default_spec_id=0,
        last_partition_id=999,
        properties={"gc.enabled": "true"},
        current_snapshot_id=head,
        snapshots=snaps,
        snapshot_log=[
            SnapshotLogEntry(snapshot_id=s.snapshot_id, timestamp_ms=s.timestamp_ms) for s in snaps
        ],
        sort_orders=[UNSORTED_SORT_ORDER],
        default_sort_order_id=0,
        refs={
            MAIN_BRANCH: SnapshotRef(
                snapshot_id=head,
                snapshot_ref_type=SnapshotRefType.BRANCH,
                min_snapshots_to_keep=None,
                max_snapshot_age_ms=None,
                max_ref_age_ms=None,
            )
        },
        last_sequence_number=len(snaps),
    )


def build_streaming_table(
    io: FileIO, location: str, snapshots: int, files_per_snapshot: int, merge_every: int = 100
) -> BuiltTable:
    """Write the metadata of ``snapshots`` appends under ``location`` (see the module)."""
    meta = f"{location}/metadata"
    merged: list[ManifestFile] = []
    small: list[tuple[ManifestFile, list[tuple[int, int, str]]]] = []
    snaps: list[Snapshot] = []
    manifests = list_entries = 0
    for i in range(1, snapshots + 1):
        sid = FIRST_ID + i
        added = [(sid, i, data_path(location, i, f)) for f in range(files_per_snapshot)]
        entries = [_entry(ManifestEntryStatus.ADDED, s, q, p) for s, q, p in added]
        small.append((_manifest(io, f"{meta}/m-{i:05d}.avro", sid, entries), added))
        manifests += 1
        if merge_every and len(small) >= merge_every:
            existing = [_entry(ManifestEntryStatus.EXISTING, *e) for _, g in small for e in g]
            merged.append(_manifest(io, f"{meta}/merged-{i:05d}.avro", sid, existing))
            manifests += 1
            small = []
        current = merged + [m for m, _ in small]
        list_entries += len(current)
        snaps.append(_snapshot(io, meta, i, current, files_per_snapshot))
    metadata_location = f"{meta}/00001-{uuid.uuid4()}.metadata.json"
    ToOutputFile.table_metadata(_metadata(location, snaps), io.new_output(metadata_location))
    return BuiltTable(
        metadata_location,
        [s.snapshot_id for s in snaps],
        snapshots * files_per_snapshot,
        manifests,
        list_entries,
        files_per_snapshot * snapshots * (snapshots + 1) // 2,
    )
