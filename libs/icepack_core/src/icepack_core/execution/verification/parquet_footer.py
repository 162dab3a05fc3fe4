"""The schema elements of a Parquet file's footer, exactly as written.

The encoding check (``parquet_encoding``) must judge what DuckDB will read, and DuckDB derives a
column's type from the raw schema element: its ``converted_type`` and its own ``scale`` and
``precision`` win over the logical type for integers and decimals. PyArrow's ``ColumnSchema``
rebuilds those three from the logical type, so a file whose logical type says ``INT(32)`` while
its converted type says ``INT_8`` looks exact to PyArrow and reads as a lossy TINYINT in DuckDB.
DuckDB's own ``parquet_schema`` shows the raw fields but costs 3-6x PyArrow's footer read per
small file; this module decodes only what is needed -- the footer's ``FileMetaData`` up to its
schema list, in Thrift's compact protocol -- and ``tests/execution/test_parquet_footer.py``
holds it to ``parquet_schema`` as the oracle.

Files with identical schemas have identical bytes up to the end of the schema list (Thrift
encodes deterministically what it decodes), so ``SchemaReader`` decodes each distinct prefix
once and recognises the others by comparing bytes.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import Any

from icepack_core.errors import InProcessUnsupported

MAGIC = b"PAR1"
# Thrift compact protocol type ids (the low nibble of a field header).
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
PHYSICAL = (
    "BOOLEAN",
    "INT32",
    "INT64",
    "INT96",
    "FLOAT",
    "DOUBLE",
    "BYTE_ARRAY",
    "FIXED_LEN_BYTE_ARRAY",
)
CONVERTED = (
    "UTF8",
    "MAP",
    "MAP_KEY_VALUE",
    "LIST",
    "ENUM",
    "DECIMAL",
    "DATE",
    "TIME_MILLIS",
    "TIME_MICROS",
    "TIMESTAMP_MILLIS",
    "TIMESTAMP_MICROS",
    "UINT_8",
    "UINT_16",
    "UINT_32",
    "UINT_64",
    "INT_8",
    "INT_16",
    "INT_32",
    "INT_64",
    "JSON",
    "BSON",
    "INTERVAL",
)
# parquet.thrift's LogicalType union members, by field id.
LOGICAL = {
    1: "STRING",
    2: "MAP",
    3: "LIST",
    4: "ENUM",
    5: "DECIMAL",
    6: "DATE",
    7: "TIME",
    8: "TIMESTAMP",
    10: "INTEGER",
    11: "UNKNOWN",
    12: "JSON",
    13: "BSON",
    14: "UUID",
    15: "FLOAT16",
    16: "VARIANT",
    17: "GEOMETRY",
    18: "GEOGRAPHY",
}
TIME_UNITS = {1: "MILLIS", 2: "MICROS", 3: "NANOS"}


@dataclass
class LogicalParams:
    """A logical type's parameters as written (None: not set): ``scale``/``precision``
    (DECIMAL), ``adjusted``/``unit`` (TIME, TIMESTAMP), ``bits``/``signed`` (INTEGER)."""

    scale: int | None = None
    precision: int | None = None
    adjusted: bool | None = None
    unit: str | None = None
    bits: int | None = None
    signed: bool | None = None


@dataclass(frozen=True)
class SchemaElement:
    """One element of a Parquet schema as written (None: the field is not set). ``logical``
    is the logical type's name (``LOGICAL``) with its parameters (``LogicalParams``)."""

    name: str
    physical: str | None
    length: int | None
    repetition: int | None  # 0 required, 1 optional, 2 repeated
    num_children: int | None
    converted: str | None
    scale: int | None
    precision: int | None
    field_id: int | None
    logical: str | None = None
    params: LogicalParams = field(default_factory=LogicalParams)

    @property
    def is_leaf(self) -> bool:
        return self.physical is not None


class _Decoder:
    """Thrift compact protocol over ``data`` from ``pos`` (only what a footer needs)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        result = shift = 0
        while True:
            value = self.byte()
            result |= (value & 0x7F) << shift
            if not value & 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)

    def field_header(self, last: int) -> tuple[int, int]:
        """(field id, type); type 0 ends the struct."""
        header = self.byte()
        kind = header & 0x0F
        if kind == 0:
            return 0, 0
        delta = header >> 4
        return (last + delta if delta else self.zigzag()), kind

    def list_header(self) -> tuple[int, int]:
        header = self.byte()
        size = header >> 4
        return self.bounded(self.varint() if size == 15 else size), header & 0x0F

    def bounded(self, size: int) -> int:
        """``size`` elements, each at least a byte: more than the bytes left is malformed."""
        if size > len(self.data) - self.pos:
            raise InProcessUnsupported("a Parquet footer lists more elements than it holds")
        return size

    def skip_element(self, kind: int) -> None:
        """Skip one list, set or map element (a bool element is a byte there)."""
        if kind in (_TRUE, _FALSE):
            self.pos += 1
        else:
            self.skip(kind)

    def skip(self, kind: int) -> None:
        if kind in (_TRUE, _FALSE):
            return
        if kind == _BYTE:
            self.pos += 1
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.pos += 8
        elif kind == _BINARY:
            self.pos += self.bounded(self.varint())
        elif kind in (_LIST, _SET):
            size, element = self.list_header()
            for _ in range(size):
                self.skip_element(element)
        elif kind == _MAP:
            size = self.bounded(self.varint())
            if size:
                types = self.byte()
                for _ in range(size):
                    self.skip_element(types >> 4)
                    self.skip_element(types & 0x0F)
        elif kind == _STRUCT:
            self.struct(lambda field_id, kind: self.skip(kind))
        else:
            raise InProcessUnsupported(f"a Parquet footer holds Thrift type {kind}")

    def struct(self, on_field: Any) -> None:
        """Read a struct, calling ``on_field(field id, type)`` to consume each field.

        Raises:
            InProcessUnsupported: a field appears twice (readers disagree on which one wins).
        """
        last = 0
        seen: set[int] = set()
        while True:
            field_id, kind = self.field_header(last)
            if kind == 0:
                return
            if field_id in seen:
                raise InProcessUnsupported(f"a Parquet footer repeats Thrift field {field_id}")
            seen.add(field_id)
            on_field(field_id, kind)
            last = field_id


def _logical(decoder: _Decoder) -> tuple[str | None, LogicalParams]:
    """A ``LogicalType`` union: its member's name and parameters."""
    found: list[tuple[str | None, LogicalParams]] = []

    def member(member_id: int, kind: int) -> None:
        params = LogicalParams()

        def param(field_id: int, param_kind: int) -> None:
            name = LOGICAL.get(member_id)
            if name == "DECIMAL" and field_id in (1, 2) and param_kind == _I32:
                setattr(params, "scale" if field_id == 1 else "precision", decoder.zigzag())
            elif name in ("TIME", "TIMESTAMP") and field_id == 1 and param_kind in (_TRUE, _FALSE):
                params.adjusted = param_kind == _TRUE
            elif name in ("TIME", "TIMESTAMP") and field_id == 2 and param_kind == _STRUCT:
                units: list[str] = []

                def unit(unit_id: int, unit_kind: int) -> None:
                    units.append(TIME_UNITS.get(unit_id, f"unit {unit_id}"))
                    decoder.skip(unit_kind)

                decoder.struct(unit)
                params.unit = units[0] if len(units) == 1 else None
            elif name == "INTEGER" and field_id == 1 and param_kind == _BYTE:
                params.bits = struct.unpack("b", bytes([decoder.byte()]))[0]
            elif name == "INTEGER" and field_id == 2 and param_kind in (_TRUE, _FALSE):
                params.signed = param_kind == _TRUE
            else:
                decoder.skip(param_kind)

        if kind == _STRUCT:
            decoder.struct(param)
        else:
            decoder.skip(kind)
        found.append((LOGICAL.get(member_id, f"logical {member_id}"), params))

    decoder.struct(member)
    if len(found) != 1:  # a union has exactly one member set
        return (f"{len(found)} logical members", LogicalParams())
    return found[0]


def _element(decoder: _Decoder) -> SchemaElement:
    values: dict[int, Any] = {}
    logical: list[tuple[str | None, LogicalParams]] = []

    def on_field(field_id: int, kind: int) -> None:
        if field_id in (1, 2, 3, 5, 6, 7, 8, 9) and kind == _I32:
            values[field_id] = decoder.zigzag()
        elif field_id == 4 and kind == _BINARY:
            size = decoder.varint()
            end = decoder.pos + decoder.bounded(size)
            values[4] = decoder.data[decoder.pos : end].decode("utf-8", "replace")
            decoder.pos = end
        elif field_id == 10 and kind == _STRUCT:
            logical.append(_logical(decoder))
        else:
            decoder.skip(kind)

    decoder.struct(on_field)

    def enum(names: tuple[str, ...], value: int | None) -> str | None:
        if value is None:
            return None
        return names[value] if 0 <= value < len(names) else f"unknown {value}"

    name, params = logical[0] if logical else (None, LogicalParams())
    return SchemaElement(
        name=str(values.get(4, "")),
        physical=enum(PHYSICAL, values.get(1)),
        length=values.get(2),
        repetition=values.get(3),
        num_children=values.get(5),
        converted=enum(CONVERTED, values.get(6)),
        scale=values.get(7),
        precision=values.get(8),
        field_id=values.get(9),
        logical=name,
        params=params,
    )


def decode_schema(footer: bytes) -> tuple[tuple[SchemaElement, ...], int]:
    """The schema elements of a ``FileMetaData`` and the number of bytes up to the end of its
    schema list (which determine them).

    Raises:
        InProcessUnsupported: no schema list before the row groups, or a malformed footer.
    """
    decoder = _Decoder(footer)
    found: list[tuple[SchemaElement, ...]] = []
    last = 0
    try:
        while not found:
            field_id, kind = decoder.field_header(last)
            if kind == 0 or field_id not in (1, 2) or field_id <= last:
                raise InProcessUnsupported("a Parquet footer lists no schema before its data")
            if field_id == 2 and kind == _LIST:
                size, element = decoder.list_header()
                if element != _STRUCT:
                    raise InProcessUnsupported("a Parquet footer's schema is not a struct list")
                found.append(tuple(_element(decoder) for _ in range(size)))
            else:
                decoder.skip(kind)
            last = field_id
        # The schema must be followed by ``num_rows`` (field 3), as every writer orders them;
        # readers would take a schema list repeated further on instead of this one. That
        # header is part of the prefix that identifies the schema.
        if decoder.field_header(2) != (3, _I64):
            raise InProcessUnsupported("a Parquet footer's schema is not followed by num_rows")
    except (IndexError, RecursionError) as exc:
        raise InProcessUnsupported("a Parquet footer ends inside its schema") from exc
    if decoder.pos > len(footer):
        raise InProcessUnsupported("a Parquet footer ends inside its schema")
    return found[0], decoder.pos


def read_footer(path: str) -> bytes:
    """The ``FileMetaData`` bytes of the local Parquet file ``path``.

    Raises:
        InProcessUnsupported: not a plain Parquet file (no ``PAR1`` trailer, an encrypted
            footer, a length past the start).
        OSError: the file cannot be read.
    """
    with open(path, "rb") as source:
        size = source.seek(0, os.SEEK_END)
        if size < 12:
            raise InProcessUnsupported(f"{path!r:.120} is too short for Parquet")
        source.seek(size - 8)
        trailer = source.read(8)
        length = struct.unpack("<I", trailer[:4])[0]
        if trailer[4:] != MAGIC or length > size - 12:
            raise InProcessUnsupported(f"{path!r:.120} has no plain Parquet footer")
        source.seek(size - 8 - length)
        return source.read(length)


class SchemaReader:
    """Schemas of many files, each distinct one decoded once: a footer whose first bytes equal
    an already decoded schema's prefix has that schema."""

    def __init__(self) -> None:
        self._known: list[tuple[bytes, tuple[SchemaElement, ...]]] = []

    def schema(self, path: str) -> tuple[tuple[SchemaElement, ...], bool]:
        """The schema elements of ``path`` and whether this reader saw that schema before."""
        footer = read_footer(path)
        for prefix, elements in self._known:
            if footer.startswith(prefix):
                return elements, True
        elements, end = decode_schema(footer)
        self._known.append((footer[:end], elements))
        return elements, False
