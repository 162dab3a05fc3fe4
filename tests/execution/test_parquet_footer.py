"""The footer decoder behind the encoding check, with DuckDB's ``parquet_schema`` as the oracle.

Files are written by PyArrow (every primitive type, nested groups, field ids, logical types with
their parameters) and, for the annotations no honest writer produces, patched byte for byte
afterwards: the decoder must report every schema element exactly as DuckDB reads it, because
the check judges what DuckDB will cast.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, NestedField, StringType

from icepack_core.errors import InProcessUnsupported
from icepack_core.execution.verification.parquet_encoding import check_encodings
from icepack_core.execution.verification.parquet_footer import (
    SchemaElement,
    SchemaReader,
    decode_schema,
    read_footer,
)

_counter = itertools.count()
LEAF_TYPES = [
    pa.bool_(),
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.uint8(),
    pa.uint32(),
    pa.float32(),
    pa.float64(),
    pa.decimal128(9, 2),
    pa.decimal128(20, 3),
    pa.decimal128(38, 10),
    pa.date32(),
    pa.time64("us"),
    pa.time32("ms"),
    pa.timestamp("us"),
    pa.timestamp("us", tz="UTC"),
    pa.timestamp("ms", tz="UTC"),
    pa.timestamp("ns"),
    pa.string(),
    pa.binary(),
    pa.binary(16),
    pa.binary(5),
    pa.uuid(),
]
NESTED = [
    lambda t: pa.list_(pa.field("element", t, metadata={"PARQUET:field_id": "900"})),
    lambda t: pa.struct([pa.field("x", t, metadata={"PARQUET:field_id": "901"})]),
    lambda t: pa.map_(
        pa.field("key", pa.string(), nullable=False, metadata={"PARQUET:field_id": "902"}),
        pa.field("value", t, metadata={"PARQUET:field_id": "903"}),
    ),
]
# DuckDB's text for each logical type the decoder names.
DUCKDB_LOGICAL = {
    "STRING": "StringType",
    "DECIMAL": "DecimalType",
    "DATE": "DateType",
    "TIME": "TimeType",
    "TIMESTAMP": "TimestampType",
    "INTEGER": "IntType",
    "UUID": "UUIDType",
    "LIST": "ListType",
    "MAP": "MapType",
}


def write(tmp_path: Path, schema: pa.Schema) -> str:
    path = tmp_path / f"f{next(_counter)}.parquet"
    pq.write_table(pa.Table.from_pylist([], schema=schema), path)
    return str(path)


def assert_matches_duckdb(path: str) -> tuple[SchemaElement, ...]:
    elements, _ = decode_schema(read_footer(path))
    connection = duckdb.connect(":memory:")
    try:
        rows = connection.execute(
            "SELECT name, type, type_length, num_children, converted_type, scale, precision, "
            f"field_id, logical_type FROM parquet_schema('{path}')"
        ).fetchall()
    finally:
        connection.close()
    assert len(rows) == len(elements)
    for element, row in zip(elements, rows, strict=True):
        length = str(element.length) if element.length is not None else None
        assert (
            element.name,
            element.physical,
            length,
            element.num_children,
            element.converted,
            element.scale,
            element.precision,
            element.field_id,
        ) == row[:8], (element, row)
        logical = row[8]
        if element.logical is None:
            assert logical is None, (element, row)
            continue
        assert logical.startswith(DUCKDB_LOGICAL[element.logical]), (element, row)
        params = element.params
        if element.logical == "DECIMAL":
            assert f"scale={params['scale']}, precision={params['precision']}" in logical
        if element.logical in ("TIME", "TIMESTAMP"):
            assert f"isAdjustedToUTC={int(params['adjusted'])}" in logical
            assert f"{params['unit']}=<null>" not in logical, (element, row)
        if element.logical == "INTEGER":
            # DuckDB prints the 8-bit width as a character.
            bits, signed = chr(params["bits"]), int(params["signed"])
            assert f"bitWidth={bits}, isSigned={signed}" in logical
    return elements


@pytest.mark.parametrize("kind", LEAF_TYPES, ids=str)
def test_every_leaf_type_decodes_as_duckdb_reads_it(tmp_path: Path, kind: pa.DataType) -> None:
    field = pa.field("c", kind, metadata={"PARQUET:field_id": "7"})
    elements = assert_matches_duckdb(write(tmp_path, pa.schema([field])))
    assert elements[1].field_id == 7 and elements[1].is_leaf


@pytest.mark.parametrize("nest", NESTED, ids=["list", "struct", "map"])
def test_nested_groups_decode_as_duckdb_reads_them(
    tmp_path: Path, nest: Callable[[pa.DataType], pa.DataType]
) -> None:
    field = pa.field("g", nest(pa.int64()), metadata={"PARQUET:field_id": "8"})
    assert_matches_duckdb(write(tmp_path, pa.schema([field])))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    columns=st.lists(
        st.tuples(
            st.sampled_from(range(len(LEAF_TYPES))),
            st.sampled_from([None, *range(len(NESTED))]),
            st.booleans(),  # with a field id
        ),
        min_size=1,
        max_size=6,
    )
)
def test_any_schema_decodes_as_duckdb_reads_it(
    tmp_path: Path, columns: list[tuple[int, int | None, bool]]
) -> None:
    fields = []
    for i, (leaf, nest, with_id) in enumerate(columns):
        if nest is not None and isinstance(LEAF_TYPES[leaf], pa.BaseExtensionType):
            nest = None  # PyArrow cannot write an extension type inside a group
        kind = LEAF_TYPES[leaf] if nest is None else NESTED[nest](LEAF_TYPES[leaf])
        metadata = {"PARQUET:field_id": str(i + 1)} if with_id else None
        fields.append(pa.field(f"c{i}", kind, metadata=metadata))
    assert_matches_duckdb(write(tmp_path, pa.schema(fields)))


def test_annotations_that_disagree_are_read_as_written_and_refused(tmp_path: Path) -> None:
    """A footer whose logical type says INT(32) while its converted type says INT_8: PyArrow
    reports a plain int (it rebuilds the converted type from the logical one), DuckDB reads a
    TINYINT (300 as 44). The check must see the INT_8 and refuse the file."""
    path = Path(
        write(tmp_path, pa.schema([pa.field("c", pa.int8(), metadata={"PARQUET:field_id": "1"})]))
    )
    data = path.read_bytes()
    # IntType{bitWidth: i8 8, isSigned: true}: field 1 (byte) = 8, field 2 (bool true), stop.
    assert data.count(b"\x13\x08\x11\x00") == 1
    path.write_bytes(data.replace(b"\x13\x08\x11\x00", b"\x13\x20\x11\x00"))
    assert pq.read_metadata(path).schema.column(0).converted_type == "INT_32"  # PyArrow's view
    (_, column) = assert_matches_duckdb(str(path))
    assert column.converted == "INT_8" and column.params == {"bits": 32, "signed": True}
    current = Schema(NestedField(1, "c", IntegerType(), required=False))
    with pytest.raises(
        InProcessUnsupported, match=r"field 1 \(int\) is stored as INT32 INTEGER INT_8"
    ):
        check_encodings(current, [str(path)])


def test_each_distinct_schema_is_decoded_once(tmp_path: Path) -> None:
    one = pa.schema([pa.field("c", pa.int32(), metadata={"PARQUET:field_id": "1"})])
    other = pa.schema([pa.field("c", pa.int32(), metadata={"PARQUET:field_id": "2"})])
    reader = SchemaReader()
    first, second, third = write(tmp_path, one), write(tmp_path, one), write(tmp_path, other)
    assert reader.schema(first)[1] is False
    assert reader.schema(second) == (reader.schema(first)[0], True)
    elements, seen = reader.schema(third)
    assert seen is False and elements[1].field_id == 2


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "too short"),
        (b"not parquet at all", "no plain Parquet footer"),
        (b"PAR1" + b"\x00" * 8 + b"\xff\xff\x00\x00PAR1", "no plain Parquet footer"),
        # version 1, then a schema list of 3 structs that never comes.
        (b"PAR1\x15\x02\x19\x3c" + b"\x04\x00\x00\x00PAR1", "more elements than it holds"),
        # version 1, then version again (long-form header): readers disagree on which counts.
        (b"PAR1\x15\x02\x05\x02\x02" + b"\x05\x00\x00\x00PAR1", "no schema before"),
        # one schema element naming itself twice (``a``, then ``b`` by a long-form header).
        (
            b"PAR1\x15\x02\x19\x1c\x48\x01a\x08\x08\x01b\x00" + b"\x0c\x00\x00\x00PAR1",
            "repeats Thrift field 4",
        ),
        # one schema element whose first field has no value.
        (b"PAR1\x15\x02\x19\x1c\x15" + b"\x05\x00\x00\x00PAR1", "ends inside its schema"),
        # a schema list claiming 2**32 elements in a footer of 9 bytes.
        (
            b"PAR1\x15\x02\x19\xfc\x80\x80\x80\x80\x10" + b"\x09\x00\x00\x00PAR1",
            "more elements than it holds",
        ),
        # an empty schema list followed by the end of the struct, not by num_rows.
        (b"PAR1\x15\x02\x19\x0c\x00" + b"\x05\x00\x00\x00PAR1", "not followed by num_rows"),
    ],
)
def test_a_file_that_is_not_plain_parquet_is_refused(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / f"bad{next(_counter)}.parquet"
    path.write_bytes(content)
    with pytest.raises(InProcessUnsupported, match=reason):
        decode_schema(read_footer(str(path)))


def test_a_group_where_a_column_is_declared_is_refused(tmp_path: Path) -> None:
    """DuckDB would cast the struct to the declared string (``{'x': 1}``)."""
    kind = pa.struct([pa.field("x", pa.int32(), metadata={"PARQUET:field_id": "100"})])
    path = write(tmp_path, pa.schema([pa.field("c", kind, metadata={"PARQUET:field_id": "1"})]))
    current = Schema(NestedField(1, "c", StringType(), required=False))
    with pytest.raises(InProcessUnsupported, match=r"field 1 \(string\) is stored as a group"):
        check_encodings(current, [path])


def test_two_columns_with_one_field_id_are_refused(tmp_path: Path) -> None:
    fields = [pa.field(n, pa.int32(), metadata={"PARQUET:field_id": "1"}) for n in ("a", "b")]
    current = Schema(NestedField(1, "a", IntegerType(), required=False))
    with pytest.raises(InProcessUnsupported, match="same field id"):
        check_encodings(current, [write(tmp_path, pa.schema(fields))])
