"""What inspection needs of a table's metadata JSON, from PyIceberg's model or read directly.

``MetadataView`` holds only the fields the ``TableStatus`` contract uses: format version, base
location, properties, the current snapshot (its manifest list, or a v1 snapshot's inline
``manifests``), snapshot timestamps, metadata-log and ref counts. A table loaded by PyIceberg is
viewed through its ``TableMetadata`` (``MetadataView.of``); a metadata file PyIceberg's model
rejects, although it is valid Iceberg, is read here (``parse_metadata``), with the same rules as
go-inspector's reader (``go-inspector/internal/inspect/metadata.go``):

* gzip by content, whatever the name (``*.gz.metadata.json``, ``*.metadata.json.gz``);
* format versions 1 to 3; fields nothing here uses (schemas, specs, row lineage's
  ``next-row-id``/``first-row-id``, encryption keys) are not validated; ``statistics`` and
  ``partition-statistics`` entries and snapshot summaries are read leniently
  (``inspection.statistics``: what is malformed there is skipped, never fatal);
* v1 snapshots that list their manifests inline (``manifests``, no ``manifest-list``), which
  PyIceberg's ``Snapshot`` model rejects (it requires ``manifest-list``);
* snapshot ids of any integer size (reported exactly, as PyIceberg does);
* the current snapshot is none when ``current-snapshot-id`` is absent, null, -1 or names no
  listed snapshot; a current snapshot without ``refs["main"]`` counts an implicit main ref.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.table.metadata import TableMetadata

from icepack_core.decompression import AvroBlockTooLarge, gunzip
from icepack_core.errors import InspectionFailed
from icepack_core.inspection.statistics import SnapshotLink, StatisticsRef, link_of, refs_of
from icepack_core.inspection.status import describe_error

GZIP_MAGIC = b"\x1f\x8b"


class MetadataError(ValueError):
    """The bytes are not table metadata this reader accepts; ``str()`` says why."""


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """The current snapshot: where its manifests are listed."""

    snapshot_id: int
    timestamp_ms: int
    manifest_list: str | None
    inline_manifests: tuple[str, ...] | None = None  # v1 only, when manifest_list is None


@dataclass(frozen=True, slots=True)
class MetadataView:
    """The contract's view of one metadata file."""

    format_version: int
    location: str
    properties: dict[str, str]
    current: SnapshotInfo | None
    snapshot_timestamps: tuple[int, ...]
    metadata_log_count: int
    ref_count: int
    # What ``inspection.statistics`` walks: every snapshot's parent and summary counts, and the
    # table's ``statistics`` / ``partition-statistics`` entries.
    links: tuple[SnapshotLink, ...] = ()
    table_statistics: tuple[StatisticsRef, ...] = ()
    partition_statistics: tuple[StatisticsRef, ...] = ()

    @classmethod
    def of(cls, metadata: TableMetadata) -> MetadataView:
        """The view of metadata PyIceberg has parsed (its refs include the implicit main)."""
        snapshot = metadata.current_snapshot()
        current = None
        if snapshot is not None:
            current = SnapshotInfo(
                snapshot.snapshot_id, snapshot.timestamp_ms, snapshot.manifest_list
            )
        return cls(
            format_version=metadata.format_version,
            location=metadata.location,
            properties=dict(metadata.properties),
            current=current,
            snapshot_timestamps=tuple(s.timestamp_ms for s in metadata.snapshots),
            metadata_log_count=len(metadata.metadata_log),
            ref_count=len(metadata.refs),
            links=tuple(
                link_of(s.snapshot_id, s.parent_snapshot_id, _summary(s.summary))
                for s in metadata.snapshots
            ),
            table_statistics=_refs(getattr(metadata, "statistics", ())),
            partition_statistics=_refs(getattr(metadata, "partition_statistics", ())),
        )


def _summary(summary: Any) -> dict[str, object]:
    """A PyIceberg ``Summary`` as the raw JSON mapping (operation included)."""
    if summary is None:
        return {}
    operation = getattr(summary, "operation", None)
    raw = dict(getattr(summary, "additional_properties", {}) or {})
    raw["operation"] = getattr(operation, "value", operation)
    return raw


def _refs(entries: Any) -> tuple[StatisticsRef, ...]:
    """PyIceberg's (validated) statistics entries as ``StatisticsRef``."""
    return tuple(StatisticsRef(e.snapshot_id, e.file_size_in_bytes) for e in entries or ())


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MetadataError(f"{what} is {value!r}, not an integer")
    return value


def _list(doc: dict[str, object], key: str) -> list[object]:
    value = doc.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise MetadataError(f"{key} is not a list")
    return value


def decompress(raw: bytes) -> bytes:
    """``raw``, gunzipped when it starts with the gzip magic, in bounded memory
    (``decompression.gunzip``).

    Raises:
        MetadataError: a gzip stream that cannot be decompressed or expands beyond the cap.
    """
    if not raw.startswith(GZIP_MAGIC):
        return raw
    try:
        return gunzip(raw)
    except (OSError, EOFError, zlib.error, AvroBlockTooLarge) as exc:
        raise MetadataError(f"gzip: {exc}") from exc


def parse_metadata(raw: bytes) -> MetadataView:
    """Parse a metadata file's bytes (plain or gzip-compressed).

    Raises:
        MetadataError: not JSON, not an object, an unsupported format version, or a field this
            view uses with the wrong type.
    """
    try:
        doc = json.loads(decompress(raw))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MetadataError(f"not valid table metadata JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise MetadataError("not valid table metadata JSON: not an object")
    version = doc.get("format-version")
    if isinstance(version, bool) or version not in (1, 2, 3):
        raise MetadataError(f"unsupported format-version {version!r}")
    location = doc.get("location", "")
    if not isinstance(location, str):
        raise MetadataError(f"location is {location!r}, not a string")
    properties = doc.get("properties") or {}
    if not isinstance(properties, dict):
        raise MetadataError("properties is not an object")
    snapshots, timestamps, links = _snapshots(doc)
    current_id = doc.get("current-snapshot-id")
    if current_id is not None:
        _int(current_id, "current-snapshot-id")
    has_current = current_id is not None and current_id != -1
    refs = doc.get("refs") or {}
    if not isinstance(refs, dict):
        raise MetadataError("refs is not an object")
    ref_count = len(refs) + (1 if has_current and "main" not in refs else 0)
    current = None
    if has_current and current_id in snapshots:
        current = _snapshot(snapshots[current_id], current_id, version)
    return MetadataView(
        format_version=version,
        location=location,
        properties={str(k): str(v) for k, v in properties.items()},
        current=current,
        snapshot_timestamps=tuple(timestamps),
        metadata_log_count=len(_list(doc, "metadata-log")),
        ref_count=ref_count,
        links=tuple(links),
        table_statistics=refs_of(_lenient_list(doc, "statistics")),
        partition_statistics=refs_of(_lenient_list(doc, "partition-statistics")),
    )


def _snapshots(
    doc: dict[str, object],
) -> tuple[dict[int, dict[str, object]], list[int], list[SnapshotLink]]:
    """The snapshots by id (the first of a repeated id), every snapshot's timestamp and its
    link to its parent, checking the fields the view uses."""
    snapshots: dict[int, dict[str, object]] = {}
    timestamps: list[int] = []
    links: list[SnapshotLink] = []
    for i, snap in enumerate(_list(doc, "snapshots")):
        if not isinstance(snap, dict):
            raise MetadataError(f"snapshot {i} is not an object")
        sid = _int(snap.get("snapshot-id"), f"snapshot {i}: snapshot-id")
        timestamps.append(_int(snap.get("timestamp-ms"), f"snapshot {sid}: timestamp-ms"))
        snapshots.setdefault(sid, snap)
        summary = snap.get("summary")
        links.append(
            link_of(
                sid, snap.get("parent-snapshot-id"), summary if isinstance(summary, dict) else None
            )
        )
    return snapshots, timestamps, links


def _lenient_list(doc: dict[str, object], key: str) -> list[object]:
    """A list field nothing validates (statistics): anything else reads as empty."""
    value = doc.get(key)
    return value if isinstance(value, list) else []


def _snapshot(snap: dict[str, object], sid: int, version: int) -> SnapshotInfo:
    manifest_list = snap.get("manifest-list")
    if manifest_list is not None and not isinstance(manifest_list, str):
        raise MetadataError(f"snapshot {sid}: manifest-list is not a string")
    if manifest_list:
        return SnapshotInfo(sid, _int(snap["timestamp-ms"], "timestamp-ms"), manifest_list)
    if version >= 2:
        raise MetadataError(f"snapshot {sid} of a v{version} table has no manifest-list")
    inline = snap.get("manifests") or []
    if not isinstance(inline, list) or not all(isinstance(p, str) for p in inline):
        raise MetadataError(f"snapshot {sid}: manifests is not a list of paths")
    return SnapshotInfo(sid, _int(snap["timestamp-ms"], "timestamp-ms"), None, tuple(inline))


def read_metadata(io: FileIO, location: str) -> MetadataView:
    """Read and parse the metadata file at ``location`` (blocking: call from a thread).

    Raises:
        InspectionFailed: the file is missing, unreadable or not valid table metadata; the
            message names the file and the cause.
    """
    try:
        with io.new_input(location).open() as stream:
            raw = stream.read()
        return parse_metadata(raw)
    except MetadataError as exc:
        raise InspectionFailed(f"cannot read table metadata {location}: {exc}") from exc
    except Exception as exc:
        raise InspectionFailed(
            f"cannot read table metadata {location}: {describe_error(exc)}"
        ) from exc
