"""Whether Parquet files store each column the way Iceberg reads it.

The verification's in-process reader (``file_fingerprint``) has DuckDB read Parquet by field id
and cast each column to the type the table declares now. That cast is exact only when the file
holds Iceberg's own encoding of that type, or of a type Iceberg promotes to it (int -> long,
float -> double, a decimal of the same scale and no larger precision). Anything else -- a
double stored for a float, a decimal of another scale, a long for an int, unannotated binary
for a string, a local timestamp for a ``timestamptz``, nanoseconds for micros -- DuckDB would
cast (lossily, or as another instant) where Iceberg's reader would not, and a file whose
columns carry no field ids would read as NULLs where Iceberg reads it by position. So a file
that the comparison reads on one side only is checked here first (``check_encodings``).

Each column is judged on its schema element as written (``parquet_footer``), every annotation
included: DuckDB takes an integer's or a decimal's type from the converted type and the
element's own scale and precision, so a converted type, a logical type and a scale that
disagree are refused, never reconciled. Each distinct schema is judged once: a compaction's
inputs usually share one or two.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyiceberg import types as ice
from pyiceberg.schema import Schema

from icepack_core.errors import InProcessUnsupported
from icepack_core.execution.verification.parquet_footer import SchemaElement, SchemaReader


def _bare(column: SchemaElement) -> bool:
    return column.converted is None and column.logical is None


def _plain_int(column: SchemaElement, bits: int) -> bool:
    """Unannotated, or annotated (both ways alike) as a signed integer of ``bits`` bits."""
    logical_ok = column.logical is None or (
        column.logical == "INTEGER" and column.params.bits == bits and column.params.signed is True
    )
    return column.converted in (None, f"INT_{bits}") and logical_ok


def _micros(column: SchemaElement, logical: str, adjusted: bool, converted: str) -> bool:
    return (
        column.physical == "INT64"
        and column.logical == logical
        and column.params.unit == "MICROS"
        and column.params.adjusted is adjusted
        and column.converted in (None, converted)
    )


def _decimal(kind: ice.DecimalType, column: SchemaElement) -> bool:
    """A decimal of ``kind``'s scale and no larger precision, annotated consistently."""
    return (
        column.converted == "DECIMAL"
        and column.physical in ("INT32", "INT64", "FIXED_LEN_BYTE_ARRAY", "BYTE_ARRAY")
        and column.scale == kind.scale
        and column.precision is not None
        and 0 < column.precision <= kind.precision
        and (
            column.logical is None
            or (
                column.logical == "DECIMAL"
                and column.params.scale == column.scale
                and column.params.precision == column.precision
            )
        )
    )


def _date(column: SchemaElement) -> bool:
    return (
        column.physical == "INT32"
        and column.converted in (None, "DATE")
        and column.logical in (None, "DATE")
        and not _bare(column)
    )


def _string(column: SchemaElement) -> bool:
    return (
        column.physical == "BYTE_ARRAY"
        and column.converted == "UTF8"
        and column.logical in (None, "STRING")
    )


def _uuid(column: SchemaElement) -> bool:
    return (
        column.physical == "FIXED_LEN_BYTE_ARRAY"
        and column.length == 16
        and column.converted is None
        and column.logical in (None, "UUID")
    )


# The exact encodings of each primitive type whose check needs only the column.
_EXACT: dict[type[ice.IcebergType], Callable[[SchemaElement], bool]] = {
    ice.BooleanType: lambda c: c.physical == "BOOLEAN" and _bare(c),
    ice.IntegerType: lambda c: c.physical == "INT32" and _plain_int(c, 32),
    ice.LongType: lambda c: (
        (c.physical == "INT32" and _plain_int(c, 32))
        or (c.physical == "INT64" and _plain_int(c, 64))
    ),
    ice.FloatType: lambda c: c.physical == "FLOAT" and _bare(c),
    ice.DoubleType: lambda c: c.physical in ("FLOAT", "DOUBLE") and _bare(c),
    ice.DateType: _date,
    ice.TimeType: lambda c: _micros(c, "TIME", False, "TIME_MICROS"),
    ice.TimestampType: lambda c: _micros(c, "TIMESTAMP", False, "TIMESTAMP_MICROS"),
    ice.TimestamptzType: lambda c: _micros(c, "TIMESTAMP", True, "TIMESTAMP_MICROS"),
    ice.StringType: _string,
    ice.UUIDType: _uuid,
    ice.BinaryType: lambda c: c.physical == "BYTE_ARRAY" and _bare(c),
}


def encoded_exactly(kind: ice.IcebergType, column: SchemaElement) -> bool:
    """Whether ``column`` holds ``kind`` the way Iceberg writes it, or a type Iceberg promotes
    to it, with no annotation DuckDB could read otherwise: only then does DuckDB's cast to the
    declared type read what Iceberg reads. Anything unrecognised is not exact (the caller
    falls back to the Spark scan)."""
    if isinstance(kind, ice.DecimalType):
        return _decimal(kind, column)
    if isinstance(kind, ice.FixedType):
        return (
            column.physical == "FIXED_LEN_BYTE_ARRAY"
            and column.length == len(kind)
            and _bare(column)
        )
    exact = _EXACT.get(type(kind))
    return exact is not None and exact(column)


def _describe(column: SchemaElement) -> str:
    annotations = [a for a in (column.logical, column.converted) if a is not None]
    repeated = ["repeated"] if column.repetition == 2 else []
    return " ".join([*repeated, column.physical or "group", *annotations])


def check_encodings(schema: Schema, paths: Sequence[str]) -> None:
    """Refuse the first of the local files ``paths`` that DuckDB would not read as Iceberg
    does: a leaf column without a field id, or one whose field id is a column of ``schema``
    stored in an encoding ``encoded_exactly`` does not accept. Blocking.

    Raises:
        InProcessUnsupported: that column, named by field id and type; or a file that is not
            plain Parquet (``parquet_footer``).
        OSError: a missing or unreadable file.
    """
    kinds = {column.field_id: column.field_type for column in schema.fields}
    reader = SchemaReader()
    for path in paths:
        elements, seen = reader.schema(path)
        if not seen:
            _check_schema(kinds, elements[1:])  # the first element is the root


def _check_schema(kinds: dict[int, ice.IcebergType], elements: Sequence[SchemaElement]) -> None:
    ids = [column.field_id for column in elements if column.field_id is not None]
    if len(ids) != len(set(ids)):
        raise InProcessUnsupported("a data file gives two columns the same field id")
    for column in elements:
        children = column.num_children
        if (children is not None and children < 0) or (column.is_leaf and children):
            raise InProcessUnsupported(f"a data file's schema element {column.name!r} is malformed")
        kind = kinds.get(column.field_id) if column.field_id is not None else None
        if not column.is_leaf:
            if kind is not None:  # DuckDB would cast the group to the declared type
                raise InProcessUnsupported(f"field {column.field_id} ({kind}) is stored as a group")
            continue
        if column.field_id is None:
            raise InProcessUnsupported("a data file has a column without a field id")
        if kind is not None and (column.repetition == 2 or not encoded_exactly(kind, column)):
            raise InProcessUnsupported(
                f"field {column.field_id} ({kind}) is stored as {_describe(column)}"
            )
