"""The live file paths of one manifest, streamed a block at a time.

What expiry's "still live" check needs of a manifest entry is its status and its data file's
path. As for the manifest list (``manifest_list``) and the inspector's scan (``avro_scan``), the
manifest's writer schema (its header's ``avro.schema``) is compiled once into a function that
decodes those two fields and skips every other one with PyIceberg's (Cython) decoder; the paths
are yielded one Avro block at a time, so memory holds one manifest's bytes and one block's
entries, never a table's. A schema the compiler does not handle falls back to PyIceberg's
generic ``AvroFile`` reader over the same (framing-checked) bytes, still entry by entry.

This reader shares no code with ``pyiceberg.manifest.ManifestFile.fetch_manifest_entry``, which
the expiry plan uses (``execution.ledger.expiry_files``): the check is a second, independent
reading.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from pyiceberg.avro.decoder import new_decoder
from pyiceberg.avro.file import AvroFile
from pyiceberg.io import FileIO
from pyiceberg.typedef import Record
from pyiceberg.types import StructType

from icepack_core.errors import AvroDamaged, AvroUnsupported
from icepack_core.inspection.avro_scan import (
    CheckedInput,
    CompiledCache,
    _Compiler,
    build_decoder,
    check_framing,
    open_container,
)

STATUS_ID, DATA_FILE_ID, FILE_PATH_ID = 0, 2, 100
DELETED = 2  # manifest entry status: 0 EXISTING, 1 ADDED, 2 DELETED
_MAX_PLANS = 16

# Decodes ``n`` entries of a block: (status, file path) each.
DecodePaths = Callable[[Any, int], list[tuple[int, str]]]


def compile_path_decoder(schema: Any) -> DecodePaths:
    """A function decoding (status, file_path) of ``n`` manifest entries written with
    ``schema`` (Avro JSON).

    Raises:
        AvroUnsupported: status or data_file.file_path is missing or not a plain int/string.
    """
    comp = _Compiler()
    ind = "        "
    try:
        top = comp.fields_by_id(schema)
        if STATUS_ID not in top or DATA_FILE_ID not in top:
            raise AvroUnsupported("no status or data_file field")
        body: list[str] = []
        for f in comp.resolve(schema)["fields"]:
            fid = f.get("field-id")
            if fid == STATUS_ID:
                body += comp.read(f, "status", ("int",), ind)
            elif fid == DATA_FILE_ID:
                inner = comp.fields_by_id(f["type"])
                if FILE_PATH_ID not in inner:
                    raise AvroUnsupported("data_file has no file_path")
                for g in comp.resolve(f["type"])["fields"]:
                    if g.get("field-id") == FILE_PATH_ID:
                        body += comp.read(g, "path", ("string",), ind)
                    else:
                        body += comp.skip(g["type"], ind)
            else:
                body += comp.skip(f["type"], ind)
    except (KeyError, TypeError, ValueError) as exc:
        raise AvroUnsupported(f"cannot compile: {exc!r}") from exc
    decode: DecodePaths = build_decoder(
        "decode_paths(d, count)", body, "(status, path)", "manifest path decoder"
    )
    return decode


_plans: CompiledCache[DecodePaths] = CompiledCache(
    lambda text: compile_path_decoder(json.loads(text)), _MAX_PLANS, "manifest paths"
)


def _compiled(data: bytes) -> Iterator[tuple[int, str]]:
    """(status, path) of every entry, a block at a time, with the compiled decoder."""
    container = open_container(data)
    if "avro.schema" not in container.meta:
        raise AvroUnsupported("schema missing")
    decode = _plans.get(container.meta["avro.schema"])
    for count, block in container.blocks():
        d = new_decoder(block)
        entries = decode(d, count)
        if d.tell() != len(block):
            raise AvroUnsupported("block not consumed exactly")
        yield from entries


def _generic(location: str, data: bytes) -> Iterator[tuple[int, str]]:
    """(status, path) of every entry with PyIceberg's generic reader (any writer schema)."""
    with AvroFile[Record](CheckedInput(location, data)) as reader:
        schema = reader.schema.as_struct()
        top = {f.field_id: i for i, f in enumerate(schema.fields)}
        data_type = schema.fields[top[DATA_FILE_ID]].field_type
        if not isinstance(data_type, StructType):
            raise AvroDamaged(f"manifest {location}: data_file is not a struct")
        path_at = {f.field_id: i for i, f in enumerate(data_type.fields)}[FILE_PATH_ID]
        for entry in reader:
            yield int(entry[top[STATUS_ID]]), str(entry[top[DATA_FILE_ID]][path_at])


def live_paths(io: FileIO, location: str) -> Iterator[str]:
    """The file path of every live (ADDED or EXISTING) entry of the manifest at ``location``,
    in file order (blocking: iterate in a thread). When the compiled decoder gives up midway
    (``AvroUnsupported``), the generic reader starts over: paths of the blocks before may come
    twice, which a membership check does not mind.

    Raises:
        AvroDamaged: the manifest's framing is broken.
        Exception: whatever the FileIO raises for a missing or unreadable file, or PyIceberg's
            reader for a manifest it cannot read.
    """
    with io.new_input(location).open() as stream:
        data = stream.read()
    check_framing(data)
    try:
        for status, path in _compiled(data):
            if status != DELETED:
                yield path
        return
    except AvroUnsupported:
        pass
    for status, path in _generic(location, data):
        if status != DELETED:
            yield path
