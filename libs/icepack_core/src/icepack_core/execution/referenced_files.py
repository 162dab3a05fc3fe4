"""Every file a table's current metadata references: the check an orphan listing must pass.

Spark's orphan dry run lists the files its *engine's* view of the table does not reference. That
view can be older than the catalog's: Iceberg's Spark catalog caches a loaded table until 30 s
after its last access, so a long-lived session that keeps touching a table keeps its old
metadata. And a commit can land between the listing and the quarantine. A path in
``referenced_paths`` of a fresh load is never an orphan, whatever a listing says.

The set is wide on purpose (a wider set only keeps more files):

* every snapshot's manifest list, and every manifest those lists name;
* every entry of those manifests, whatever its status (a DELETED entry's file may still be
  live in an older snapshot's manifest);
* the statistics and partition-statistics files;
* the current metadata file and the ones its log names.

Paths are compared as ``normalize_location`` gives them (``file:/x`` and ``file:///x`` agree).
"""

from __future__ import annotations

from collections.abc import Iterable

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile
from pyiceberg.table.metadata import TableMetadata

from icepack_core.execution.metadata_diff import checked_manifests
from icepack_core.inspection.avro_scan import read_checked
from icepack_core.safety.admission import normalize_location


def _manifests(metadata: TableMetadata, io: FileIO) -> dict[str, ManifestFile]:
    """Every manifest any snapshot's list names, by path (each list read once)."""
    out: dict[str, ManifestFile] = {}
    for snapshot in metadata.snapshots:
        for manifest in checked_manifests(snapshot, io):
            out.setdefault(manifest.manifest_path, manifest)
    return out


def _entry_paths(manifests: Iterable[ManifestFile], io: FileIO) -> set[str]:
    paths: set[str] = set()
    for manifest in manifests:
        read_checked(io, manifest.manifest_path)  # no decoder sees a damaged file
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
            paths.add(entry.data_file.file_path)
    return paths


def referenced_paths(
    metadata: TableMetadata, io: FileIO, metadata_location: str | None
) -> frozenset[str]:
    """The normalized paths of every file ``metadata`` references (blocking: reads every
    manifest list and manifest of every snapshot; call from a thread).

    Raises:
        AvroDamaged: a manifest list or manifest is damaged.
        Exception: whatever the FileIO or PyIceberg's readers raise for a missing or corrupt
            file. A caller must then treat every listed path as possibly referenced.
    """
    manifests = _manifests(metadata, io)
    paths = set(manifests) | _entry_paths(manifests.values(), io)
    paths.update(s.manifest_list for s in metadata.snapshots if s.manifest_list)
    paths.update(s.statistics_path for s in metadata.statistics)
    paths.update(s.statistics_path for s in metadata.partition_statistics)
    paths.update(entry.metadata_file for entry in metadata.metadata_log)
    if metadata_location:
        paths.add(metadata_location)
    return frozenset(normalize_location(p) for p in paths)


def split_referenced(
    listed: Iterable[str], referenced: frozenset[str]
) -> tuple[list[str], list[str]]:
    """``listed`` split into (not referenced, referenced), each in listing order."""
    free: list[str] = []
    kept: list[str] = []
    for path in listed:
        (kept if normalize_location(path) in referenced else free).append(path)
    return free, kept
