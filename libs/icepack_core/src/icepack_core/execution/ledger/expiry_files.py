"""The files an expiry deletes: reachable from the expiring snapshots and from no other.

This mirrors ``ExpireSnapshotsSparkAction.expireFiles`` (iceberg-spark 1.10), which deletes the
files of the expired snapshots minus the files of the metadata after the commit, compared by
(path, type), where each side's files are:

* the manifest list of each snapshot;
* every manifest its list names (``all_manifests``);
* the live entries (ADDED or EXISTING) of those manifests: data, position- and
  equality-delete files;
* the statistics and partition-statistics files recorded for those snapshots.

``plan_expiry`` computes the same difference from the table's metadata with PyIceberg's readers
(manifests deduplicated by path, each read once), before anything is deleted. Sizes come from
the manifest entries, the manifest lists' ``manifest_length``, the statistics records, and a
``FileIO`` length for manifest lists (None when that fails).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.statistics import StatisticsCommonFields

from icepack_core import decompression
from icepack_core.execution.ledger.expiry_retention import (
    RefInfo,
    Retention,
    SnapshotNode,
    expiring_ids,
)

# PyIceberg's readers below decompress through the bounded codecs (installed on import).
decompression.install()

CONTENT_KINDS = {0: "data", 1: "position_delete", 2: "equality_delete"}
# The procedure's output column counting each kind (statistics covers both statistics kinds).
COUNT_COLUMNS = {
    "data": "deleted_data_files_count",
    "position_delete": "deleted_position_delete_files_count",
    "equality_delete": "deleted_equality_delete_files_count",
    "manifest": "deleted_manifest_files_count",
    "manifest_list": "deleted_manifest_lists_count",
    "statistics": "deleted_statistics_files_count",
    "partition_statistics": "deleted_statistics_files_count",
}


@dataclass(frozen=True, slots=True)
class LedgerFile:
    """One file the expiry will delete."""

    path: str
    kind: str
    size_bytes: int | None


@dataclass(frozen=True)
class ExpiryPlan:
    """What one expiry removes: the snapshots (E), the snapshots kept, and E's own files."""

    expiring: frozenset[int]
    retained: frozenset[int]
    files: tuple[LedgerFile, ...] = field(default=())

    def reason(self) -> str:
        ids = sorted(self.expiring)
        shown = ", ".join(str(i) for i in ids[:50])
        more = f" and {len(ids) - 50} more" if len(ids) > 50 else ""
        return f"reachable only from expired snapshot(s) {shown}{more}"

    def counts(self) -> dict[str, int]:
        """Files per procedure output column."""
        out = dict.fromkeys(sorted(set(COUNT_COLUMNS.values())), 0)
        for f in self.files:
            out[COUNT_COLUMNS[f.kind]] += 1
        return out


def retention_of(metadata: TableMetadata) -> Retention:
    """The retention inputs of a PyIceberg ``TableMetadata`` (see ``Retention.of``)."""
    snapshots = [
        SnapshotNode(s.snapshot_id, s.parent_snapshot_id, s.timestamp_ms)
        for s in metadata.snapshots
    ]
    refs = [
        RefInfo(
            name,
            ref.snapshot_id,
            ref.snapshot_ref_type == SnapshotRefType.BRANCH,
            ref.min_snapshots_to_keep,
            ref.max_snapshot_age_ms,
            ref.max_ref_age_ms,
        )
        for name, ref in metadata.refs.items()
    ]
    return Retention.of(snapshots, refs, metadata.properties, metadata.current_snapshot_id)


def _manifests(metadata: TableMetadata, io: FileIO, ids: Iterable[int]) -> dict[str, ManifestFile]:
    """Every manifest the given snapshots' lists name, by path."""
    out: dict[str, ManifestFile] = {}
    for sid in ids:
        snap = metadata.snapshot_by_id(sid)
        if snap is None:
            continue
        for manifest in snap.manifests(io):
            out.setdefault(manifest.manifest_path, manifest)
    return out


def _live_content(manifests: Iterable[ManifestFile], io: FileIO) -> dict[str, LedgerFile]:
    """The live (ADDED or EXISTING) content files of these manifests, by path."""
    out: dict[str, LedgerFile] = {}
    for manifest in manifests:
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
            f = entry.data_file
            kind = CONTENT_KINDS[int(f.content)]
            out.setdefault(f.file_path, LedgerFile(f.file_path, kind, int(f.file_size_in_bytes)))
    return out


def _length(io: FileIO, path: str) -> int | None:
    try:
        return len(io.new_input(path))
    except Exception:  # only a size for the ledger: a missing length must not stop the plan
        return None


def _add_snapshot_files(
    files: dict[str, LedgerFile],
    metadata: TableMetadata,
    io: FileIO,
    expiring: frozenset[int],
    retained: frozenset[int],
) -> None:
    """Add to ``files`` the manifest lists and statistics files of the ``expiring`` snapshots
    that no ``retained`` snapshot shares."""
    kept_lists = {
        s.manifest_list for s in metadata.snapshots if s.snapshot_id in retained and s.manifest_list
    }
    for snap in metadata.snapshots:
        path = snap.manifest_list
        if snap.snapshot_id in expiring and path and path not in kept_lists:
            files.setdefault(path, LedgerFile(path, "manifest_list", _length(io, path)))
    stats: list[tuple[str, StatisticsCommonFields]] = [
        ("statistics", s) for s in metadata.statistics
    ] + [("partition_statistics", s) for s in metadata.partition_statistics]
    kept_stats = {s.statistics_path for _, s in stats if s.snapshot_id in retained}
    for kind, s in stats:
        path = s.statistics_path
        if s.snapshot_id in expiring and path not in kept_stats:
            files.setdefault(path, LedgerFile(path, kind, int(s.file_size_in_bytes)))


def plan_expiry(
    metadata: TableMetadata,
    io: FileIO,
    *,
    older_than_ms: int,
    retain_last: int,
    now_ms: int,
) -> ExpiryPlan:
    """The expiring snapshots and the files reachable only from them (blocking: reads every
    manifest of every snapshot; call from a thread).

    Raises:
        PermanentError: the retention rules cannot be applied exactly (``expiring_ids``).
        Exception: whatever PyIceberg's FileIO or readers raise for a missing or corrupt file.
    """
    retention = retention_of(metadata)
    expiring = expiring_ids(
        retention, older_than_ms=older_than_ms, retain_last=retain_last, now_ms=now_ms
    )
    all_ids = frozenset(s.snapshot_id for s in metadata.snapshots)
    retained = all_ids - expiring
    if not expiring:
        return ExpiryPlan(expiring, retained)
    gone = _manifests(metadata, io, sorted(expiring))
    kept = _manifests(metadata, io, sorted(retained))
    files: dict[str, LedgerFile] = {}
    # Content files: live in E's manifests and live in no kept manifest (a shared manifest's
    # files are live on both sides, so only E's own manifests need reading on the left).
    kept_content = _live_content(kept.values(), io)
    own = [m for path, m in gone.items() if path not in kept]
    for path, f in _live_content(own, io).items():
        if path not in kept_content:
            files[path] = f
    for path, m in gone.items():
        if path not in kept:
            files.setdefault(path, LedgerFile(path, "manifest", int(m.manifest_length)))
    _add_snapshot_files(files, metadata, io, expiring, retained)
    return ExpiryPlan(expiring, retained, tuple(sorted(files.values(), key=lambda f: f.path)))
