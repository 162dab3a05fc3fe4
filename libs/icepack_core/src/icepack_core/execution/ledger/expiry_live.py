"""Expiry's "still live" check, in memory bounded by one manifest: which recorded files a
snapshot the expiry keeps still references.

``live_conflicts`` reads the table's current metadata file (fresh from the catalog, so a commit
since the plan is seen) and walks every snapshot outside E: its manifest list, each manifest the
list names, and the live (ADDED or EXISTING) entries of each manifest, read by Icepack's own
streaming reader (``inspection.manifest_paths``; the plan reads with PyIceberg's
``fetch_manifest_entry``, so the two readings are independent). A manifest is read once however
many snapshots name it (a streaming table's snapshots share almost all their manifests), and
its entries are compared one at a time with the set of recorded paths. Memory: the recorded
paths (which the ledger write holds anyway), the paths of the manifests read so far, one
manifest's bytes and one Avro block's entries; never snapshots x files rows.

Paths are compared by ``path_key``, the one place the comparison is spelled (``s3a://`` and
``s3://``, ``file:/`` and ``file:///`` agree).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache

from pyiceberg.io import FileIO

from icepack_core.inspection.manifest_list import read_list
from icepack_core.inspection.manifest_paths import live_paths
from icepack_core.inspection.metadata import decompress
from icepack_core.safety.locations import location_key
from icepack_core.types import JSONObject

# Conflicts kept with their paths (the count has them all).
KEPT_CONFLICTS = 200


def _normalize(path: str) -> str:
    """The project's location normalisation (``safety.locations.location_key``)."""
    return location_key(path)


# A file name the fast path of ``path_key`` may append as it is, and the name it probes with.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._=-]+")
_PROBE = "Ab9_.-="


@lru_cache(maxsize=4096)
def _directory_prefix(directory: str) -> str | None:
    """What ``_normalize`` makes of ``directory + "/"``, when it passes a plain file name
    through unchanged (probed with one of every character class); else None."""
    probe = _normalize(f"{directory}/{_PROBE}")
    return probe[: -len(_PROBE)] if probe.endswith(f"/{_PROBE}") else None


def path_key(path: str) -> str:
    """How two spellings of one file are compared: ``_normalize(path)``. The entries of a
    manifest share a few directories, so a plain file name is appended to its directory's
    normalised prefix (cached) instead of parsing every path again; equal to ``_normalize``
    (property-tested)."""
    directory, sep, name = path.rpartition("/")
    if sep and name not in (".", "..") and _PLAIN_NAME.fullmatch(name):
        prefix = _directory_prefix(directory)
        if prefix is not None:
            return prefix + name
    return _normalize(path)


@dataclass(frozen=True)
class LiveConflict:
    """A recorded file still referenced by a kept snapshot, and where."""

    path: str
    live_in: str


@dataclass
class LiveCheck:
    """The outcome of ``live_conflicts``: the conflicts (the first ``KEPT_CONFLICTS``), their
    count, the snapshot ids of the metadata read, and what was read."""

    conflicts: list[LiveConflict] = field(default_factory=list)
    conflict_count: int = 0
    snapshot_ids: set[int] = field(default_factory=set)
    lists_read: int = 0
    manifests_read: int = 0
    manifests_shared: int = 0  # manifest references skipped: read already for another snapshot
    entries_read: int = 0

    # The recorded paths found live so far (at most the recorded set): each counted once.
    _hit: set[str] = field(default_factory=set)

    def found(self, path: str, live_in: str) -> None:
        """Note ``path`` live in ``live_in`` (a path found again is not counted again)."""
        if path in self._hit:
            return
        self._hit.add(path)
        self.conflict_count += 1
        if len(self.conflicts) < KEPT_CONFLICTS:
            self.conflicts.append(LiveConflict(path, live_in))

    def counters(self) -> dict[str, int]:
        return {
            "snapshots": len(self.snapshot_ids),
            "manifest_lists_read": self.lists_read,
            "manifests_read": self.manifests_read,
            "manifest_references_shared": self.manifests_shared,
            "entries_read": self.entries_read,
        }


def _metadata(io: FileIO, metadata_location: str) -> JSONObject:
    """The table metadata file as parsed JSON (Iceberg's format, read by key, not modelled:
    PyIceberg's model may reject the very metadata this check must still read)."""
    with io.new_input(metadata_location).open() as stream:
        doc = json.loads(decompress(stream.read()))
    if not isinstance(doc, dict):
        raise ValueError(f"metadata {metadata_location} is not a JSON object")
    return doc


def _kept_manifests(io: FileIO, snapshot: JSONObject, check: LiveCheck) -> Iterator[str]:
    """The manifest paths of one kept snapshot (its list, or a v1 snapshot's inline list)."""
    listed = snapshot.get("manifest-list")
    if listed:
        check.lists_read += 1
        for ref in read_list(io, listed):
            yield ref.manifest_path
        return
    inline = snapshot.get("manifests") or []
    if not all(isinstance(path, str) for path in inline):
        raise ValueError("a snapshot's inline manifests are not a list of paths")
    yield from inline


def live_conflicts(
    io: FileIO, metadata_location: str, expiring: frozenset[int], recorded: Iterable[str]
) -> LiveCheck:
    """Every path of ``recorded`` that a snapshot outside ``expiring`` of the metadata at
    ``metadata_location`` references: its manifest list, a manifest, a live data or delete file,
    or a statistics file (blocking: reads every distinct manifest once; call from a thread).

    Raises:
        AvroDamaged: a manifest list or manifest is damaged.
        Exception: whatever the FileIO or readers raise for a missing or unreadable file, or a
            ``ValueError``/``KeyError`` for metadata that is not what the spec says. The caller
            must then treat every recorded file as possibly live (delete nothing).
    """
    wanted: dict[str, str] = {path_key(p): p for p in recorded}
    doc = _metadata(io, metadata_location)
    check = LiveCheck()
    seen: set[str] = set()
    for snapshot in doc.get("snapshots") or []:
        sid = int(snapshot["snapshot-id"])
        check.snapshot_ids.add(sid)
        if sid in expiring:
            continue
        listed = snapshot.get("manifest-list")
        if listed and path_key(listed) in wanted:
            check.found(wanted[path_key(listed)], f"manifest list of snapshot {sid}")
        for manifest in _kept_manifests(io, snapshot, check):
            key = path_key(manifest)
            if key in seen:
                check.manifests_shared += 1
                continue
            seen.add(key)
            if key in wanted:
                check.found(wanted[key], f"manifest of snapshot {sid}")
            check.manifests_read += 1
            for path in live_paths(io, manifest):
                check.entries_read += 1
                hit = wanted.get(path_key(path))
                if hit is not None:
                    check.found(hit, f"file of snapshot {sid} (manifest {manifest})")
    for key in ("statistics", "partition-statistics"):
        for stats in doc.get(key) or []:
            sid, path = stats.get("snapshot-id"), stats.get("statistics-path")
            if sid not in expiring and isinstance(path, str) and path_key(path) in wanted:
                check.found(wanted[path_key(path)], f"statistics of snapshot {sid}")
    return check
