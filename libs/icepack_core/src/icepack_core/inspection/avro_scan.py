"""A fast scan of manifest files: only the fields an aggregate needs, straight from the Avro.

PyIceberg's ``fetch_manifest_entry`` converts every manifest's header schema, resolves a reader
tree and materialises every entry (column-metric maps, bounds, paths) as objects. The inspector
needs seven values per entry, so this module compiles each distinct writer schema (the header's
``avro.schema`` JSON) once into a Python function that decodes ``status``, the entry's data
``sequence_number``, ``content``, ``file_format``, ``record_count`` and ``file_size_in_bytes``
and skips everything else with
PyIceberg's (Cython) ``BinaryDecoder``. A partition tuple is kept as its raw encoded bytes;
each distinct encoding is decoded once, with the reader PyIceberg itself builds for that
partition type, so partition values are exactly what ``fetch_manifest_entry`` yields.

The scan is an optimisation only. ``AvroUnsupported`` (a schema shape not compiled here, an
unknown codec, a value PyIceberg would reject, a block that does not end where the decoded
entries end) makes the caller fall back to ``fetch_manifest_entry``, which then gives the
same result or the same error as before. The PyIceberg internals used here
(``pyiceberg.avro.decoder.new_decoder``, ``pyiceberg.avro.codecs.KNOWN_CODECS``,
``pyiceberg.avro.resolver.construct_reader``, ``AvroSchemaConversion``) are those of PyIceberg
0.12.0, the pinned version; ``tests/inspection/test_avro_scan.py`` guards them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any, Generic, TypeVar

from pyiceberg.avro.codecs import KNOWN_CODECS
from pyiceberg.avro.decoder import new_decoder
from pyiceberg.avro.reader import Reader
from pyiceberg.avro.resolver import construct_reader
from pyiceberg.io import FileIO, InputFile, InputStream
from pyiceberg.manifest import MANIFEST_ENTRY_SCHEMAS, FileFormat
from pyiceberg.types import NestedField, StructType
from pyiceberg.utils.schema_conversion import AvroSchemaConversion

from icepack_core.decompression import decompress_block
from icepack_core.errors import AvroDamaged, AvroUnsupported
from icepack_core.inspection.exact_doubles import exact_doubles

MAGIC = b"Obj\x01"
SYNC_SIZE = 16
STATUS_ID, DATA_FILE_ID, SEQUENCE_ID = 0, 2, 3
CONTENT_ID, FORMAT_ID, PARTITION_ID, RECORDS_ID, SIZE_ID = 134, 101, 102, 103, 104
_MAX_PLANS = 64  # distinct writer schemas kept compiled
_MAX_PARTITIONS = 200_000  # decoded partition encodings kept per plan

# One decoded entry: (status, content, file_format, partition bytes, record_count, size,
# data sequence number). The sequence number is ``INHERIT`` when the entry has none (an ADDED
# entry, or a v1 manifest): it is then the manifest's own (its manifest list entry's).
Entry = tuple[int, int, str, bytes, int, int, int]
INHERIT = -1
DecodeBlock = Callable[[Any, int, bytes, dict[int, bytes]], list[Entry]]


_PRIMITIVE_SKIP = {
    "null": None,
    "boolean": "skip_boolean()",
    "int": "skip_int()",
    "long": "skip_int()",
    "float": "skip_float()",
    "double": "skip_double()",
    "bytes": "skip_bytes()",
    "string": "skip_utf8()",
}
_INTS = ("int", "long")


class _Compiler:
    """Generates the source of a block decoder for one writer schema."""

    def __init__(self) -> None:
        self.names: dict[str, object] = {}
        self.depth = 0
        self.found: set[int] = set()

    def resolve(self, t: Any) -> Any:
        if isinstance(t, dict) and t.get("type") in ("record", "enum", "fixed"):
            name = t.get("name")
            if isinstance(name, str):
                self.names[name] = t
                namespace = t.get("namespace")
                if isinstance(namespace, str) and namespace and "." not in name:
                    self.names[f"{namespace}.{name}"] = t
            return t
        if (
            isinstance(t, dict)
            and isinstance(t.get("type"), str | list | dict)
            and t["type"] not in ("array", "map")
        ):
            return self.resolve(t["type"])  # {"type": "long", "logicalType": ...}
        if isinstance(t, str) and t not in _PRIMITIVE_SKIP:
            if t not in self.names:
                raise AvroUnsupported(f"unknown type name {t!r}")
            return self.names[t]
        return t

    def plain(self, t: Any) -> str | None:
        """The primitive name of ``t`` ignoring logical types, or None."""
        t = self.resolve(t)
        return t if isinstance(t, str) else None

    def skip(self, t: Any, ind: str) -> list[str]:
        t = self.resolve(t)
        if isinstance(t, str):
            op = _PRIMITIVE_SKIP[t]
            return [ind + op] if op else []
        if isinstance(t, list):
            return self.union(t, ind)
        if not isinstance(t, dict):
            raise AvroUnsupported(f"unexpected schema node {t!r}")
        kind = t.get("type")
        if kind == "record":
            return [line for f in t["fields"] for line in self.skip(f["type"], ind)]
        if kind == "enum":
            return [ind + "skip_int()"]
        if kind == "fixed":
            return [ind + f"skip({int(t['size'])})"]
        if kind == "array":
            return self.blocks(self.items(t["items"]), ind)
        if kind == "map":
            return self.blocks(["skip_utf8()", *self.skip_rel(t["values"])], ind)
        raise AvroUnsupported(f"unsupported Avro type {kind!r}")

    def skip_rel(self, t: Any) -> list[str]:
        """Skip code for ``t`` without indentation (re-indented by ``blocks``)."""
        return self.skip(t, "")

    def items(self, items: Any) -> list[str] | str:
        """Per-element skip code, or the name of a whole-block fast path."""
        r = self.resolve(items)
        if r in _INTS:
            return "ints1"
        if isinstance(r, dict) and r.get("type") == "record" and len(r["fields"]) == 2:
            key, value = (self.plain(f["type"]) for f in r["fields"])
            if key in _INTS and value in _INTS:
                return "ints2"
            if key in _INTS and value == "bytes":
                return "int_bytes"
        return self.skip_rel(items)

    def blocks(self, body: list[str] | str, ind: str) -> list[str]:
        self.depth += 1
        n, i = f"n{self.depth}", f"i{self.depth}"
        inner = ind + "        "
        if body == "ints1":
            each = [inner + f"read_ints({n})"]
        elif body == "ints2":
            each = [inner + f"read_ints({n} * 2)"]
        elif body == "int_bytes":
            each = [inner + f"read_int_bytes_dict({n}, scratch)"]
        else:
            lines = body if isinstance(body, list) else []
            each = [inner + f"for {i} in range({n}):"] + [inner + "    " + ln for ln in lines]
            if not lines:
                each.append(inner + "    pass")
        return [
            ind + f"{n} = read_int()",
            ind + f"while {n}:",
            ind + f"    if {n} < 0:",
            ind + "        skip(read_int())",  # a negative count is followed by the byte size
            ind + "    else:",
            *each,
            ind + f"    {n} = read_int()",
        ]

    def union(self, branches: list[Any], ind: str) -> list[str]:
        self.depth += 1
        u = f"u{self.depth}"
        lines = [ind + f"{u} = read_int()"]
        for pos, branch in enumerate(branches):
            body = self.skip(branch, ind + "    ")
            lines.append(ind + f"{'if' if pos == 0 else 'elif'} {u} == {pos}:")
            lines.extend(body or [ind + "    pass"])
        lines += [ind + "else:", ind + "    raise AvroUnsupported('union branch out of range')"]
        return lines

    def fields_by_id(self, record: Any) -> dict[int, dict[str, object]]:
        record = self.resolve(record)
        if not isinstance(record, dict) or record.get("type") != "record":
            raise AvroUnsupported("manifest entry is not a record")
        out: dict[int, dict[str, object]] = {}
        for f in record["fields"]:
            fid = f.get("field-id")
            if isinstance(fid, int):
                out[fid] = f
        return out

    def read(self, f: dict[str, object], var: str, kinds: tuple[str, ...], ind: str) -> list[str]:
        kind = f["type"]  # a bare primitive: a logical type or union would change the value
        if kind not in kinds:
            raise AvroUnsupported(f"field {f.get('name')!r} has type {f['type']!r}")
        return [ind + f"{var} = {'read_utf8' if kind == 'string' else 'read_int'}()"]

    def read_optional_long(self, f: dict[str, object], var: str, ind: str) -> list[str]:
        """``var`` = a ``long`` or ``["null", "long"]`` field's value, ``INHERIT`` for null."""
        kind = f["type"]
        if kind in _INTS:
            return [ind + f"{var} = read_int()"]
        if not (isinstance(kind, list) and len(kind) == 2 and "null" in kind):
            raise AvroUnsupported(f"field {f.get('name')!r} has type {kind!r}")
        null = kind.index("null")
        if kind[1 - null] not in _INTS:
            raise AvroUnsupported(f"field {f.get('name')!r} has type {kind!r}")
        self.depth += 1
        u = f"u{self.depth}"
        return [
            ind + f"{u} = read_int()",
            ind + f"if {u} == {null}:",
            ind + f"    {var} = {INHERIT}",
            ind + f"elif {u} == {1 - null}:",
            ind + f"    {var} = read_int()",
            ind + "else:",
            ind + "    raise AvroUnsupported('union branch out of range')",
        ]

    def entry(self, schema: Any) -> list[str]:
        ind = "        "
        top = self.fields_by_id(schema)
        if STATUS_ID not in top or DATA_FILE_ID not in top:
            raise AvroUnsupported("no status or data_file field")
        lines: list[str] = [] if SEQUENCE_ID in top else [ind + f"seq = {INHERIT}"]
        for f in self.resolve(schema)["fields"]:
            fid = f.get("field-id")
            if fid == STATUS_ID:
                lines += self.read(f, "status", ("int",), ind)
            elif fid == SEQUENCE_ID:
                lines += self.read_optional_long(f, "seq", ind)
            elif fid == DATA_FILE_ID:
                lines += self.data_file(f["type"], ind)
            else:
                lines += self.skip(f["type"], ind)
        return lines

    def data_file(self, t: Any, ind: str) -> list[str]:
        by_id = self.fields_by_id(t)
        self.found = set(by_id)
        if not {FORMAT_ID, PARTITION_ID, RECORDS_ID, SIZE_ID} <= by_id.keys():
            raise AvroUnsupported("data_file lacks a required field")
        lines = [] if CONTENT_ID in by_id else [ind + "content = 0"]
        for f in self.resolve(t)["fields"]:
            fid = f.get("field-id")
            if fid == CONTENT_ID:
                lines += self.read(f, "content", ("int",), ind)
            elif fid == FORMAT_ID:
                lines += self.read(f, "fmt", ("string",), ind)
            elif fid == RECORDS_ID:
                lines += self.read(f, "records", _INTS, ind)
            elif fid == SIZE_ID:
                lines += self.read(f, "size", _INTS, ind)
            elif fid == PARTITION_ID:
                part = self.resolve(f["type"])
                if not isinstance(part, dict) or part.get("type") != "record":
                    raise AvroUnsupported("partition is not a record")
                lines.append(ind + "p0 = tell()")
                lines += self.skip(part, ind)
                lines.append(ind + "part = buf[p0:tell()]")
            else:
                lines += self.skip(f["type"], ind)
        return lines


def _required_ids(struct: StructType) -> set[int]:
    return {
        f.field_id
        for f in struct.fields
        if isinstance(f, NestedField) and f.required and f.initial_default is None
    }


_READ_SCHEMA = MANIFEST_ENTRY_SCHEMAS[2]
_REQUIRED_ENTRY_IDS = _required_ids(_READ_SCHEMA.as_struct())
_REQUIRED_DATA_FILE_IDS = _required_ids(_READ_SCHEMA.find_field(DATA_FILE_ID).field_type)  # type: ignore[arg-type]


def compile_block_decoder(schema: Any) -> DecodeBlock:
    """A function decoding ``n`` entries of a block written with ``schema`` (Avro JSON).

    Raises:
        AvroUnsupported: the schema has a shape this module does not compile, or PyIceberg's read
            schema requires a field it lacks (PyIceberg would refuse the file).
    """
    comp = _Compiler()
    try:
        body = comp.entry(schema)
        top = set(comp.fields_by_id(schema))
    except (KeyError, TypeError, ValueError) as exc:
        raise AvroUnsupported(f"cannot compile: {exc!r}") from exc
    if not top >= _REQUIRED_ENTRY_IDS or not comp.found >= _REQUIRED_DATA_FILE_IDS:
        raise AvroUnsupported("a field PyIceberg requires is missing")
    decode: DecodeBlock = build_decoder(
        "decode_block(d, count, buf, scratch)",
        body,
        "(status, content, fmt, part, records, size, seq)",
        "manifest block decoder",
    )
    return decode


def build_decoder(signature: str, body: list[str], row: str, label: str) -> Any:
    """Compile a block decoder: ``def <signature>`` binding the decoder's methods to locals,
    running ``body`` (the statements ``_Compiler`` generated for one entry) ``count`` times and
    collecting ``row`` of each. ``scratch`` is a fresh dict unless the signature passes one."""
    name = signature.split("(", 1)[0]
    source = "\n".join(
        [
            f"def {signature}:",
            "    read_int = d.read_int; read_ints = d.read_ints; read_utf8 = d.read_utf8",
            "    read_int_bytes_dict = d.read_int_bytes_dict; skip = d.skip; tell = d.tell",
            "    skip_int = d.skip_int; skip_boolean = d.skip_boolean; skip_bytes = d.skip_bytes",
            "    skip_utf8 = d.skip_utf8; skip_float = d.skip_float; skip_double = d.skip_double",
            *([] if "scratch" in signature else ["    scratch = {}"]),
            "    out = []",
            "    append = out.append",
            "    for _ in range(count):",
            *body,
            f"        append({row})",
            "    return out",
        ]
    )
    namespace: dict[str, Any] = {"AvroUnsupported": AvroUnsupported}
    exec(compile(source, f"<{label}>", "exec"), namespace)  # noqa: S102
    return namespace[name]


@dataclass
class Plan:
    """A compiled writer schema: its block decoder and the partition decoder."""

    schema_json: str
    decode_block: DecodeBlock
    _partition_reader: Reader | None = None
    keys: dict[tuple[int, bytes], str] = field(default_factory=dict)

    def partition_reader(self) -> Reader:
        """The reader PyIceberg builds for this file's partition struct (built on first use),
        with doubles read exactly (``exact_doubles``: PyIceberg's decoder rounds them)."""
        if self._partition_reader is None:
            schema = AvroSchemaConversion().avro_to_iceberg(json.loads(self.schema_json))
            partition = schema.find_field(DATA_FILE_ID).field_type.field(PARTITION_ID)  # type: ignore[attr-defined]
            self._partition_reader = exact_doubles(construct_reader(partition.field_type))
        return self._partition_reader

    def partition_key(self, spec_id: int, raw: bytes, key_of: Callable[[int, Any], str]) -> str:
        """``key_of(spec_id, partition)`` for one raw partition encoding, memoised."""
        found = self.keys.get((spec_id, raw))
        if found is None:
            decoder = new_decoder(raw)
            found = key_of(spec_id, self.partition_reader().read(decoder))
            if decoder.tell() != len(raw):
                raise AvroUnsupported("partition encoding not fully consumed")
            if len(self.keys) >= _MAX_PARTITIONS:
                self.keys.clear()
            self.keys[(spec_id, raw)] = found
        return found


C = TypeVar("C")


class CompiledCache(Generic[C]):
    """Compiled decoders by writer schema (JSON text), ``limit`` at most; a schema that cannot
    be compiled is remembered too, so it is never compiled twice. Safe across threads."""

    def __init__(self, compile_schema: Callable[[str], C], limit: int, what: str) -> None:
        self._compile = compile_schema
        self._limit = limit
        self._what = what
        self._found: dict[str, C | None] = {}
        self._lock = threading.Lock()

    def get(self, schema_json: str) -> C:
        """The compiled decoder; ``AvroUnsupported`` when the schema cannot be compiled."""
        if schema_json in self._found:
            cached = self._found[schema_json]
        else:
            try:
                cached = self._compile(schema_json)
            except (AvroUnsupported, ValueError):  # ValueError: not JSON
                cached = None
            with self._lock:
                if len(self._found) >= self._limit:
                    self._found.clear()
                self._found[schema_json] = cached
        if cached is None:
            raise AvroUnsupported(f"{self._what} schema not supported")
        return cached


_plans: CompiledCache[Plan] = CompiledCache(
    lambda text: Plan(text, compile_block_decoder(json.loads(text))), _MAX_PLANS, "manifest"
)


def plan_for(schema_json: str) -> Plan:
    """The compiled plan of a writer schema (cached; ``AvroUnsupported`` is cached too)."""
    return _plans.get(schema_json)


_VALID_FORMATS: dict[str, bool] = {}


def check_format(name: str) -> None:
    """Raise ``AvroUnsupported`` for a file format PyIceberg's enum would reject."""
    ok = _VALID_FORMATS.get(name)
    if ok is None:
        try:
            FileFormat(name)
            ok = True
        except ValueError:
            ok = False
        if len(_VALID_FORMATS) > 1000:
            _VALID_FORMATS.clear()
        _VALID_FORMATS[name] = ok
    if not ok:
        raise AvroUnsupported(f"unknown file format {name!r}")


def scan_entries(data: bytes) -> tuple[Plan, list[Entry]]:
    """Every entry of one manifest file's bytes (deleted ones included), decoded.

    Raises:
        AvroUnsupported: the file is not one this scan handles exactly (the caller falls back).
    """
    try:
        return _scan(data)
    except (AvroUnsupported, AvroDamaged):
        raise
    except Exception as exc:  # EOF, bad varint, decompression error ... PyIceberg decides
        raise AvroUnsupported(f"scan failed: {exc!r}") from exc


@dataclass
class Container:
    """An Avro object container file's header, and a decoder positioned at its first block."""

    meta: dict[str, str]
    sync: bytes
    codec: str  # an ``avro.codec`` name PyIceberg knows (``null`` for none)
    decoder: Any
    size: int

    def blocks(self) -> Iterator[tuple[int, bytes]]:
        """``(object count, decompressed block bytes)`` of every block, in order.

        Raises:
            AvroUnsupported: a sync marker does not match (a damaged file).
            AvroBlockTooLarge: a block expands beyond the cap (``decompression``).
            Exception: whatever the decoder or codec raises on a truncated or corrupt block.
        """
        d = self.decoder
        while d.tell() < self.size:
            count = d.read_int()
            block = _take(d, self.size, d.read_int())
            block = decompress_block(self.codec, block)
            yield count, block
            if _take(d, self.size, SYNC_SIZE) != self.sync:
                raise AvroDamaged("sync marker mismatch")


def _take(d: Any, size: int, n: int) -> bytes:
    """``n`` bytes from ``d``, checked against the buffer's ``size`` first (the Cython
    decoder's ``read`` would copy whatever memory follows the buffer).

    Raises:
        AvroDamaged: a negative length, or fewer than ``n`` bytes left.
    """
    left = size - d.tell()
    if n < 0 or n > left:
        raise AvroDamaged(
            f"a length of {n} bytes at offset {d.tell()} runs past the end ({left} left)"
        )
    return d.read(n)  # type: ignore[no-any-return]


def check_framing(data: bytes) -> None:
    """Check that ``data`` is an Avro object container whose header and every block lie within
    it, each block followed by the header's sync marker. Decodes nothing but lengths.

    Raises:
        AvroDamaged: the framing is broken (``AvroDamaged``'s docstring says why that matters).
    """
    size = len(data)
    try:
        d = new_decoder(data)
        if _take(d, size, 4) != MAGIC:
            raise AvroDamaged("not an Avro object container")
        n = d.read_int()
        while n:
            if n < 0:
                n = -n
                d.read_int()
            for _ in range(2 * n):  # key and value
                _take(d, size, d.read_int())
            n = d.read_int()
        sync = _take(d, size, SYNC_SIZE)
        while d.tell() < size:
            if d.read_int() < 0:
                raise AvroDamaged(f"a negative object count at offset {d.tell()}")
            _take(d, size, d.read_int())
            if _take(d, size, SYNC_SIZE) != sync:
                raise AvroDamaged(f"sync marker mismatch at offset {d.tell() - SYNC_SIZE}")
    except AvroDamaged:
        raise
    except Exception as exc:  # a varint running past the end (EOFError) ...
        raise AvroDamaged(f"{type(exc).__name__}: {exc}") from exc


def read_checked(io: FileIO, location: str) -> bytes:
    """A whole Avro file's bytes, its framing checked (``check_framing``) before any decoder
    sees them (blocking: call from a thread).

    Raises:
        AvroDamaged: see ``check_framing``.
        Exception: the FileIO's error for a missing or unreadable file.
    """
    with io.new_input(location).open() as stream:
        data = stream.read()
    check_framing(data)
    return data


class CheckedInput(InputFile):
    """An Avro file read once and framing-checked (``read_checked``), served to PyIceberg's
    readers from memory: the decoder sees exactly the bytes that were checked, and the store
    is asked once per file, not twice."""

    def __init__(self, location: str, data: bytes) -> None:
        super().__init__(location)
        self._data = data

    def __len__(self) -> int:
        return len(self._data)

    def exists(self) -> bool:
        return True

    def open(self, seekable: bool = True) -> InputStream:
        return BytesIO(self._data)


def checked_input(file_io: FileIO, location: str) -> CheckedInput:
    """``read_checked`` of ``location`` as an ``InputFile`` (blocking: call from a thread).

    Raises:
        AvroDamaged: see ``check_framing``.
        Exception: the FileIO's error for a missing or unreadable file.
    """
    return CheckedInput(location, read_checked(file_io, location))


def open_container(data: bytes) -> Container:
    """Parse an Avro object container's header (magic, metadata map, sync marker).

    Raises:
        AvroUnsupported: not an Avro container, or a codec PyIceberg does not know.
        Exception: whatever the decoder raises on a truncated header.
    """
    d = new_decoder(data)
    if _take(d, len(data), 4) != MAGIC:
        raise AvroUnsupported("not an Avro object container")
    meta: dict[str, str] = {}
    n = d.read_int()
    while n:
        if n < 0:
            n = -n
            d.read_int()
        for _ in range(n):
            key = _take(d, len(data), d.read_int()).decode()
            meta[key] = _take(d, len(data), d.read_int()).decode()
        n = d.read_int()
    sync = _take(d, len(data), SYNC_SIZE)
    codec_name = meta.get("avro.codec")
    if codec_name is None or codec_name not in KNOWN_CODECS:
        raise AvroUnsupported(f"codec {codec_name!r}")
    return Container(meta, sync, codec_name, d, len(data))


def _scan(data: bytes) -> tuple[Plan, list[Entry]]:
    container = open_container(data)
    if "avro.schema" not in container.meta:
        raise AvroUnsupported("schema missing")
    plan = plan_for(container.meta["avro.schema"])
    entries: list[Entry] = []
    scratch: dict[int, bytes] = {}
    for count, block in container.blocks():
        bd = new_decoder(block)
        entries += plan.decode_block(bd, count, block, scratch)
        if bd.tell() != len(block):
            raise AvroUnsupported("block not consumed exactly")
    return plan, entries
