"""A snapshot's manifests: a fast projecting read of its manifest list, or its v1 inline list.

What the inspector needs of each manifest is its path, length, partition spec id, content and
sequence number (``ManifestRef``; the last is the data sequence number its ADDED entries
inherit). PyIceberg's ``Snapshot.manifests`` builds a full ``ManifestFile`` (partition
summaries, counts, sequence numbers) per entry through its generic reader, about 10 ms for 1,000
manifests; re-inspection after one commit is dominated by that read. Here the list's writer
schema (its header's ``avro.schema``) is compiled once into a function that decodes the five
fields (``avro_scan``'s compiler skips every other one), the same approach as the manifest
scan. Anything the compiled reader does not handle exactly (a union-typed field, a schema
shape not compiled, a block not consumed exactly) falls back to PyIceberg's
``read_manifest_list``, which then gives the same result or the same error as before.

A v1 snapshot may list its manifests inline (``manifests``: paths, no ``manifest-list``); each
then has its length from the file's size and its spec id from the manifest's own header
(``partition-spec-id``), which the manifest read supplies (``spec_id`` is None here).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyiceberg.avro.decoder import new_decoder
from pyiceberg.io import FileIO
from pyiceberg.manifest import read_manifest_list

from icepack_core.errors import AvroDamaged, AvroUnsupported, InspectionFailed
from icepack_core.inspection.avro_scan import (
    CheckedInput,
    CompiledCache,
    _Compiler,
    build_decoder,
    check_framing,
    open_container,
)
from icepack_core.inspection.status import describe_error

PATH_ID, LENGTH_ID, SPEC_ID, CONTENT_ID, SEQUENCE_ID = 500, 501, 502, 517, 515
_MAX_PLANS = 16

# One decoded list entry: (manifest_path, manifest_length, partition_spec_id, content,
# sequence_number).
ListEntry = tuple[str, int, int, int, int]
DecodeList = Callable[[Any, int], list[ListEntry]]


@dataclass(frozen=True, slots=True)
class ManifestRef:
    """One manifest of a snapshot, as its manifest list describes it.

    ``partition_spec_id`` is None for a v1 inline manifest: its header says (read with it).
    """

    manifest_path: str
    manifest_length: int
    partition_spec_id: int | None
    content: int  # 0 data, 1 deletes (``manifest_stats.content``)
    sequence_number: int = 0  # 0 in a v1 table (no sequence numbers)


def compile_list_decoder(schema: Any) -> DecodeList:
    """A function decoding ``n`` manifest list entries written with ``schema`` (Avro JSON).

    Raises:
        AvroUnsupported: a field read here is missing or not a plain primitive of the expected type.
    """
    comp = _Compiler()
    ind = "        "
    try:
        by_id = comp.fields_by_id(schema)
        if not {PATH_ID, LENGTH_ID, SPEC_ID} <= by_id.keys():
            raise AvroUnsupported("manifest list lacks manifest_path, length or spec id")
        body: list[str] = [] if CONTENT_ID in by_id else [ind + "content = 0"]
        body += [] if SEQUENCE_ID in by_id else [ind + "seq = 0"]
        for f in comp.resolve(schema)["fields"]:
            fid = f.get("field-id")
            if fid == PATH_ID:
                body += comp.read(f, "path", ("string",), ind)
            elif fid == LENGTH_ID:
                body += comp.read(f, "length", ("long", "int"), ind)
            elif fid == SPEC_ID:
                body += comp.read(f, "spec", ("int", "long"), ind)
            elif fid == CONTENT_ID:
                body += comp.read(f, "content", ("int",), ind)
            elif fid == SEQUENCE_ID:
                body += comp.read(f, "seq", ("long", "int"), ind)
            else:
                body += comp.skip(f["type"], ind)
    except (KeyError, TypeError, ValueError) as exc:
        raise AvroUnsupported(f"cannot compile: {exc!r}") from exc
    decode: DecodeList = build_decoder(
        "decode_list(d, count)", body, "(path, length, spec, content, seq)", "manifest list decoder"
    )
    return decode


_plans: CompiledCache[DecodeList] = CompiledCache(
    lambda text: compile_list_decoder(json.loads(text)), _MAX_PLANS, "manifest list"
)


def _plan_for(schema_json: str) -> DecodeList:
    return _plans.get(schema_json)


def scan_manifest_list(data: bytes) -> list[ManifestRef]:
    """Every entry of a manifest list file's bytes.

    Raises:
        AvroUnsupported: the file is not one this scan handles exactly (the caller falls back).
    """
    try:
        container = open_container(data)
        decode = _plan_for(container.meta["avro.schema"])
        out: list[ManifestRef] = []
        for count, block in container.blocks():
            d = new_decoder(block)
            for path, length, spec, content, seq in decode(d, count):
                if content not in (0, 1):
                    raise AvroUnsupported(f"manifest content {content}")
                out.append(ManifestRef(path, length, spec, content, seq))
            if d.tell() != len(block):
                raise AvroUnsupported("block not consumed exactly")
        return out
    except (AvroUnsupported, AvroDamaged):
        raise
    except Exception as exc:  # EOF, bad varint, decompression error ... PyIceberg decides
        raise AvroUnsupported(f"scan failed: {exc!r}") from exc


def read_list(io: FileIO, location: str) -> list[ManifestRef]:
    """The manifests a manifest list file names (blocking: call from a thread).

    Raises:
        Exception: whatever the FileIO or PyIceberg's reader raises for a missing or corrupt
            file.
    """
    with io.new_input(location).open() as stream:
        data = stream.read()
    try:
        return scan_manifest_list(data)  # checks every length it reads (AvroDamaged)
    except AvroUnsupported:
        check_framing(data)  # before PyIceberg's reader sees it
        return [
            ManifestRef(
                m.manifest_path,
                m.manifest_length,
                m.partition_spec_id,
                int(m.content),
                int(m.sequence_number or 0),
            )
            for m in read_manifest_list(CheckedInput(location, data))
        ]


def inline_refs(io: FileIO, paths: list[str]) -> list[ManifestRef]:
    """Refs of a v1 snapshot's inline manifests: length from each file's size (blocking).

    Raises:
        InspectionFailed: a manifest cannot be found; the message names it.
    """
    refs = []
    for path in paths:
        try:
            size = len(io.new_input(path))
        except Exception as exc:
            raise InspectionFailed(f"cannot read manifest {path}: {describe_error(exc)}") from exc
        refs.append(ManifestRef(path, size, None, 0))
    return refs
