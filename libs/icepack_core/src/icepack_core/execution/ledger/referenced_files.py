"""Every file a table's current metadata references: the check an orphan listing must pass.

Spark's orphan dry run lists the files its *engine's* view of the table does not reference. That
view can be older than the catalog's: Iceberg's Spark catalog caches a loaded table until 30 s
after its last access, so a long-lived session that keeps touching a table keeps its old
metadata. And a commit can land between the listing and the quarantine. A path in
``referenced_paths`` of a fresh load is never an orphan, whatever a listing says.

The set is wide on purpose (a wider set only keeps more files):

* every snapshot's manifest list, and every manifest those lists name (or a v1 snapshot
  lists inline);
* every entry of those manifests, whatever its status (a DELETED entry's file may still be
  live in an older snapshot's manifest);
* the statistics and partition-statistics files;
* the current metadata file and the ones its log names.

Paths are compared as ``safety.locations.location_key`` gives them (as the file system reads
them: ``file:/x``, ``file:///x`` and ``file:/y/../x`` agree; ``s3a://`` is ``s3://``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pyiceberg.avro.file import AvroFile
from pyiceberg.io import FileIO
from pyiceberg.typedef import Record
from pyiceberg.types import StructType

from icepack_core.inspection.avro_scan import checked_input
from icepack_core.inspection.manifest_list import read_list
from icepack_core.inspection.metadata import decompress
from icepack_core.safety.locations import location_key

# Manifest entry field ids (Iceberg spec, "Manifests"): the entry's data_file, and its path.
DATA_FILE, FILE_PATH = 2, 100


def _entry_paths(io: FileIO, manifest_path: str) -> set[str]:
    """The file path of every entry of one manifest, whatever its status (read with the
    manifest's own writer schema, so any format version)."""
    with AvroFile[Record](checked_input(io, manifest_path)) as reader:  # framing checked
        schema = reader.schema.as_struct()
        top = {f.field_id: i for i, f in enumerate(schema.fields)}
        data_type = schema.fields[top[DATA_FILE]].field_type
        if not isinstance(data_type, StructType):
            raise ValueError(f"manifest {manifest_path}: data_file is not a struct")
        path_at = {f.field_id: i for i, f in enumerate(data_type.fields)}[FILE_PATH]
        return {str(entry[top[DATA_FILE]][path_at]) for entry in reader}


def _strings(items: Any, key: str) -> list[str]:
    """``item[key]`` of every object in a metadata list, each required to be a string."""
    found = [item[key] for item in items or []]
    if not all(isinstance(value, str) for value in found):
        raise ValueError(f"a {key} in the table metadata is not a string")
    return found


def referenced_paths(io: FileIO, metadata_location: str) -> frozenset[str]:
    """The normalized paths of every file the metadata at ``metadata_location`` references
    (blocking: reads every manifest list and manifest of every snapshot; call from a thread).

    Read from the metadata file itself, not PyIceberg's model of it, so every table Iceberg
    reads is covered (v1 snapshots listing their manifests inline, gzip metadata).

    Raises:
        AvroDamaged: a manifest list or manifest is damaged.
        Exception: whatever the FileIO or the readers raise for a missing or corrupt file, or a
            ``ValueError``/``KeyError`` for metadata that is not what the spec says. A caller
            must then treat every listed path as possibly referenced.
    """
    with io.new_input(metadata_location).open() as stream:
        doc = json.loads(decompress(stream.read()))
    paths = {metadata_location}
    manifests: set[str] = set()
    for snapshot in doc.get("snapshots") or []:
        listed = snapshot.get("manifest-list")
        if listed:
            paths.add(listed)
            manifests.update(ref.manifest_path for ref in read_list(io, listed))
        else:  # a v1 snapshot listing its manifests inline
            inline = snapshot.get("manifests") or []
            if not all(isinstance(path, str) for path in inline):
                raise ValueError("a snapshot's inline manifests are not a list of paths")
            manifests.update(inline)
    paths |= manifests
    for manifest in sorted(manifests):
        paths |= _entry_paths(io, manifest)
    for key in ("statistics", "partition-statistics"):
        paths.update(_strings(doc.get(key), "statistics-path"))
    paths.update(_strings(doc.get("metadata-log"), "metadata-file"))
    return frozenset(location_key(p) for p in paths)


def split_referenced(
    listed: Iterable[str], referenced: frozenset[str]
) -> tuple[list[str], list[str]]:
    """``listed`` split into (not referenced, referenced), each in listing order."""
    free: list[str] = []
    kept: list[str] = []
    for path in listed:
        (kept if location_key(path) in referenced else free).append(path)
    return free, kept
