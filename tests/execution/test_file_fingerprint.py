"""The verification's in-process reader (``file_fingerprint``) on real Parquet files.

Files are written by PyArrow with PyIceberg's own schema conversion (``schema_to_pyarrow``,
which puts the Iceberg field ids into the Parquet schema, as every Iceberg writer does) and read
by the real DuckDB. The reader must find every change of any value of every primitive type
(and a NULL in place of a value), see the same rows in other files or another order as equal,
read columns by field id (renamed, widened, added later), and refuse what it cannot read
exactly. Its use inside a verification, on tables written by Spark, is in
``test_verification_scope.py``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import random
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from icepack_core.errors import InProcessUnsupported
from icepack_core.execution.verification.file_fingerprint import (
    FileFingerprints,
    ListedFile,
    PartitionFiles,
    TouchedFiles,
    compare_files,
    duckdb_string_literal,
    local_path,
    one_sided,
    reader_blocker,
)

COLUMNS: list[tuple[str, Any, Any, Any]] = [
    # name, Iceberg type, a value, another value
    ("b", BooleanType(), True, False),
    ("i", IntegerType(), 7, 8),
    ("l", LongType(), 1 << 40, (1 << 40) + 1),
    ("f", FloatType(), 1.5, -1.5),
    ("d", DoubleType(), 0.0, -0.0),  # a sign is a value
    ("dec", DecimalType(10, 2), Decimal("12.30"), Decimal("12.31")),
    ("day", DateType(), dt.date(2024, 2, 29), dt.date(2024, 3, 1)),
    ("t", TimeType(), dt.time(12, 0, 0, 1), dt.time(12, 0, 0, 2)),
    ("ts", TimestampType(), dt.datetime(2024, 1, 1, 0, 0, 0, 1), dt.datetime(2024, 1, 1)),
    (
        "tstz",
        TimestamptzType(),
        dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
        dt.datetime(2024, 1, 1, 0, 0, 1, tzinfo=dt.UTC),
    ),
    ("s", StringType(), "a", "a "),
    ("u", UUIDType(), uuid.UUID(int=1).bytes, uuid.UUID(int=2).bytes),
    ("fx", FixedType(4), b"\x00\x01\x02\x03", b"\x00\x01\x02\x04"),
    ("bin", BinaryType(), b"", b"\x00"),
]
SCHEMA = Schema(
    *(
        NestedField(i + 1, name, kind, required=False)
        for i, (name, kind, _, _) in enumerate(COLUMNS)
    )
)


def row(which: int) -> dict[str, Any]:
    """A row with every column set (``which`` picks value or other value per column)."""
    return {name: (a if (which >> i) % 2 == 0 else b) for i, (name, _, a, b) in enumerate(COLUMNS)}


ROWS = [row(0), row(0b1010101), row(-1 & 0x3FFF), {name: None for name, *_ in COLUMNS}]
_counter = itertools.count()


def write(directory: Path, rows: list[dict[str, Any]], schema: Schema = SCHEMA) -> ListedFile:
    path = directory / f"f{next(_counter)}.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema_to_pyarrow(schema)), path)
    return ListedFile(f"file:{path}", len(rows), "PARQUET")


def one_partition(before: list[ListedFile], after: list[ListedFile]) -> TouchedFiles:
    return TouchedFiles((PartitionFiles('spec 0 {"p":1}', tuple(before), tuple(after)),), None)


def test_the_same_rows_in_other_files_and_order_are_equal(tmp_path: Path) -> None:
    before = [write(tmp_path, ROWS)]
    after = [write(tmp_path, ROWS[2:][::-1]), write(tmp_path, ROWS[:2][::-1])]
    compared = compare_files(SCHEMA, one_partition(before, after))
    assert compared.differs is None
    assert compared.before == compared.after and compared.before.rows == 4
    assert compared.before.checksum != 0


@pytest.mark.parametrize("column", [name for name, *_ in COLUMNS])
@pytest.mark.parametrize("change", ["other value", "NULL"])
def test_any_changed_value_of_any_type_differs(tmp_path: Path, column: str, change: str) -> None:
    changed = [dict(r) for r in ROWS]
    a, b = next((a, b) for name, _, a, b in COLUMNS if name == column)
    changed[0][column] = None if change == "NULL" else (b if changed[0][column] == a else a)
    compared = compare_files(
        SCHEMA, one_partition([write(tmp_path, ROWS)], [write(tmp_path, changed)])
    )
    assert compared.before.rows == compared.after.rows == 4
    assert compared.differs == 'partition spec 0 {"p":1}: 4 rows -> 4 rows, checksum differs'


def test_a_lost_or_duplicated_row_or_an_emptied_partition_differs(tmp_path: Path) -> None:
    full = write(tmp_path, ROWS)
    lost = compare_files(SCHEMA, one_partition([full], [write(tmp_path, ROWS[1:])]))
    assert lost.differs == 'partition spec 0 {"p":1}: 4 rows -> 3 rows'
    # A file on both sides is not read (its record count still counts): only what one side
    # adds is.
    twice = compare_files(SCHEMA, one_partition([full], [full, write(tmp_path, ROWS[:1])]))
    assert twice.differs == 'partition spec 0 {"p":1}: 4 rows -> 5 rows'
    assert twice.files_read == 1
    # The same file listed twice where it was listed once adds its rows again.
    listed_twice = compare_files(SCHEMA, one_partition([full], [full, full]))
    assert listed_twice.differs == 'partition spec 0 {"p":1}: 4 rows -> 8 rows'
    emptied = compare_files(SCHEMA, one_partition([full], []))
    assert emptied.differs is not None and emptied.after.rows == 0


def test_partitions_are_compared_one_by_one(tmp_path: Path) -> None:
    """Two rows trading partitions keep the totals but not the partitions: a difference."""
    x, y = write(tmp_path, ROWS[:2]), write(tmp_path, ROWS[2:])
    x2, y2 = write(tmp_path, [ROWS[0], ROWS[2]]), write(tmp_path, [ROWS[1], ROWS[3]])
    files = TouchedFiles((PartitionFiles("x", (x,), (x2,)), PartitionFiles("y", (y,), (y2,))), None)
    assert compare_files(SCHEMA, files).differs == "partition x: 2 rows -> 2 rows, checksum differs"
    # As one partition (the totals alone) the same files are equal.
    merged = TouchedFiles((PartitionFiles("all", (x, y), (x2, y2)),), None)
    assert compare_files(SCHEMA, merged).differs is None


def test_columns_are_read_by_field_id_renamed_widened_or_added_later(tmp_path: Path) -> None:
    old = Schema(
        NestedField(1, "id_before_rename", IntegerType(), required=False),
        NestedField(2, "x", FloatType(), required=False),
    )
    current = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "x", DoubleType(), required=False),
        NestedField(3, "added", StringType(), required=False),
    )
    before = write(tmp_path, [{"id_before_rename": 1, "x": 0.5}], old)
    same = write(tmp_path, [{"id": 1, "x": 0.5, "added": None}], current)
    compared = compare_files(current, one_partition([before], [same]))
    assert compared.differs is None and compared.before.rows == 1
    other = write(tmp_path, [{"id": 1, "x": 0.5, "added": "v"}], current)
    assert compare_files(current, one_partition([before], [other])).differs is not None


def test_counts_only_without_checksum(tmp_path: Path) -> None:
    changed = [dict(r, s="z") for r in ROWS]
    compared = compare_files(
        SCHEMA,
        one_partition([write(tmp_path, ROWS)], [write(tmp_path, changed)]),
        checksum=False,
    )
    assert compared.differs is None and compared.before.checksum == 0


def test_a_record_count_the_manifest_contradicts_is_never_a_verdict(tmp_path: Path) -> None:
    listed = write(tmp_path, ROWS)
    miscounted = ListedFile(listed.path, 3, "PARQUET")
    with pytest.raises(
        InProcessUnsupported, match="4 rows read from a data file whose manifest lists 3: "
    ):
        compare_files(SCHEMA, one_partition([listed], [miscounted]))


def test_a_missing_file_raises(tmp_path: Path) -> None:
    gone = ListedFile(f"file:{tmp_path}/gone.parquet", 1, "PARQUET")
    with pytest.raises(Exception, match=r"gone\.parquet"):
        compare_files(SCHEMA, one_partition([write(tmp_path, ROWS)], [gone]))


def listed(path: str, file_format: str = "PARQUET") -> TouchedFiles:
    return one_partition([ListedFile(path, 1, file_format)], [])


@pytest.mark.parametrize(
    ("schema", "properties", "files", "reason"),
    [
        (SCHEMA, {}, TouchedFiles((), "delete files in a touched partition"), "delete files"),
        (SCHEMA, {"schema.name-mapping.default": "[]"}, listed("/a.parquet"), "name mapping"),
        (
            Schema(NestedField(1, "xs", ListType(2, LongType()), required=False)),
            {},
            listed("/a.parquet"),
            "column 'xs'",
        ),
        (
            Schema(NestedField(1, "v", LongType(), required=False, initial_default=5)),
            {},
            listed("/a.parquet"),
            "initial default",
        ),
        (SCHEMA, {}, listed("/a.orc", "ORC"), "format ORC"),
        (SCHEMA, {}, listed("s3://bucket/a.parquet"), "not on the local file system"),
        # DuckDB expands globs; urlsplit drops an empty query or fragment.
        (SCHEMA, {}, listed("/t/f[1].parquet"), "not a plain absolute path"),
        (SCHEMA, {}, listed("/t/f*.parquet"), "not a plain absolute path"),
        (SCHEMA, {}, listed("/t/f.parquet?"), "not a plain absolute path"),
        (SCHEMA, {}, listed("file:/t/f.parquet#"), "not a plain absolute path"),
        (SCHEMA, {}, listed("/t/back\\slash.parquet"), "not a plain absolute path"),
        (SCHEMA, {}, listed("relative/a.parquet"), "not a plain absolute path"),
        # urlsplit would drop the tab, the leading space, an authority-less "//".
        (SCHEMA, {}, listed("file:/t/a\tb.parquet"), "not a plain absolute path"),
        (SCHEMA, {}, listed(" file:/t/a.parquet"), "not a plain absolute path"),
        (SCHEMA, {}, listed("file:////t/a.parquet"), "not a plain absolute path"),
        (SCHEMA, {}, listed("//host/t/a.parquet"), "not on the local file system"),
        (SCHEMA, {}, listed("file:/t/link/../a.parquet"), "not a plain absolute path"),
        (SCHEMA, {}, listed("/t/./a.parquet"), "not a plain absolute path"),
        (SCHEMA, {}, listed("/t//a.parquet"), "not a plain absolute path"),
        (SCHEMA, {}, listed("file://host/t/a.parquet"), "not on the local file system"),
    ],
)
def test_what_it_cannot_read_exactly_is_named(
    schema: Schema, properties: dict[str, Any], files: TouchedFiles, reason: str
) -> None:
    found = reader_blocker(schema, properties, files)
    assert found is not None and reason in found
    if not properties:  # the reader itself refuses too (it is not given the properties)
        with pytest.raises(InProcessUnsupported, match=reason):
            compare_files(schema, files)


def test_readable_files_have_no_blocker() -> None:
    assert reader_blocker(SCHEMA, {}, listed("file:/tmp/a.parquet")) is None
    assert reader_blocker(SCHEMA, {}, listed("/tmp/a b.parquet")) is None
    assert reader_blocker(SCHEMA, {}, listed("file:/tmp/p=it%27s/a.parquet")) is None
    assert reader_blocker(SCHEMA, {}, listed("file:///tmp/a.parquet")) is None
    assert reader_blocker(SCHEMA, {}, listed("file://localhost/tmp/a.parquet")) is None


@given(st.text())
def test_a_local_path_is_the_locations_own_text_after_its_prefix(location: str) -> None:
    """Whatever the text, the path read is the location's own tail, never a rewrite of it."""
    try:
        path = local_path(location)
    except InProcessUnsupported:
        return
    assert location.endswith(path) and path.startswith("/") and not path.startswith("//")
    assert "/../" not in path + "/" and "/./" not in path + "/"
    prefix = location[: len(location) - len(path)]
    assert prefix in ("", "file:", "file://", "file://localhost")


def test_a_percent_escape_in_a_location_names_the_file_by_its_text(tmp_path: Path) -> None:
    """Iceberg's file IO takes a location's text as the file's name (Spark writes the partition
    value ``it's`` as the directory ``p=it%27s``): the escape is never decoded, so a file that
    the decoded name would reach instead is not read."""
    (tmp_path / "p=it%27s").mkdir()
    (tmp_path / "p=it's").mkdir()
    escaped = tmp_path / "p=it%27s" / "f.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS[:2], schema=schema_to_pyarrow(SCHEMA)), escaped)
    decoy = tmp_path / "p=it's" / "f.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS[2:], schema=schema_to_pyarrow(SCHEMA)), decoy)
    location = ListedFile(f"file:{escaped}", 2, "PARQUET")
    same = compare_files(SCHEMA, one_partition([location], [write(tmp_path, ROWS[:2])]))
    assert same.differs is None and same.before.rows == 2
    other = compare_files(SCHEMA, one_partition([location], [write(tmp_path, ROWS[2:])]))
    assert other.differs is not None


VALUES = st.tuples(st.integers(-(2**63), 2**63 - 1), st.one_of(st.none(), st.text(max_size=5)))
FLAT = Schema(
    NestedField(1, "k", LongType(), required=False),
    NestedField(2, "v", StringType(), required=False),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(VALUES, min_size=1, max_size=12),
    cuts=st.lists(st.integers(0, 12), max_size=3),
    seed=st.randoms(use_true_random=False),
    victim=st.integers(0, 11),
    fault=st.sampled_from(["none", "drop", "duplicate"]),
)
def test_equal_exactly_when_the_multiset_of_rows_is_equal(
    tmp_path: Path,
    rows: list[tuple[int, str | None]],
    cuts: list[int],
    seed: random.Random,
    victim: int,
    fault: str,
) -> None:
    as_dicts = [{"k": k, "v": v} for k, v in rows]
    shuffled = list(as_dicts)
    seed.shuffle(shuffled)
    victim %= len(shuffled)
    if fault == "drop":
        shuffled.pop(victim)
    elif fault == "duplicate":
        shuffled.append(shuffled[victim])
    bounds = sorted({0, len(shuffled), *(c for c in cuts if c <= len(shuffled))})
    after = [write(tmp_path, shuffled[a:b], FLAT) for a, b in itertools.pairwise(bounds) if b > a]
    compared = compare_files(FLAT, one_partition([write(tmp_path, as_dicts, FLAT)], after))
    assert (compared.differs is None) == (fault == "none")


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_a_path_literal_reads_back_as_itself_or_is_refused(text: str) -> None:
    import duckdb

    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        with pytest.raises(InProcessUnsupported, match="control character"):
            duckdb_string_literal(text)
        return
    connection = duckdb.connect(":memory:")
    try:
        row = connection.execute(f"SELECT {duckdb_string_literal(text)}").fetchone()
        assert row is not None
        (value,) = row
    finally:
        connection.close()
    assert value == text


def test_a_file_whose_name_has_quotes_and_spaces_is_read(tmp_path: Path) -> None:
    odd = tmp_path / 'it\'s a "file" ;.parquet'
    pq.write_table(pa.Table.from_pylist(ROWS, schema=schema_to_pyarrow(SCHEMA)), odd)
    compared = compare_files(
        SCHEMA, one_partition([ListedFile(str(odd), 4, "PARQUET")], [write(tmp_path, ROWS)])
    )
    assert compared.differs is None and compared.before.rows == 4


def test_a_file_without_field_ids_is_refused_not_read_as_nulls(tmp_path: Path) -> None:
    """Iceberg reads such a file by column position; DuckDB's field-id map would read NULLs,
    so two different id-less files would compare equal."""
    plain = tmp_path / "no_ids.parquet"
    pq.write_table(pa.table({"k": [1, 2], "v": ["a", "b"]}), plain)
    files = one_partition([ListedFile(str(plain), 2, "PARQUET")], [])
    with pytest.raises(InProcessUnsupported, match="without a field id"):
        compare_files(FLAT, files)


def with_types(*fields: tuple[int, str, pa.DataType]) -> pa.Schema:
    return pa.schema(
        [pa.field(name, kind, metadata={"PARQUET:field_id": str(i)}) for i, name, kind in fields]
    )


@pytest.mark.parametrize(
    ("iceberg", "stored", "value"),
    [
        (FloatType(), pa.float64(), 0.1000000001),  # narrowed by the cast
        (DecimalType(10, 2), pa.decimal128(10, 3), Decimal("1.234")),  # rescaled
        (IntegerType(), pa.int64(), 5),  # a long where an int is declared
        (StringType(), pa.binary(), b"x"),  # not UTF-8 annotated
        (TimestamptzType(), pa.timestamp("us"), dt.datetime(2024, 3, 10, 2, 30)),
        (TimestampType(), pa.timestamp("ns"), dt.datetime(2024, 1, 1)),  # truncated
    ],
)
def test_a_one_sided_file_stored_otherwise_than_iceberg_reads_it_is_refused(
    tmp_path: Path, iceberg: IcebergType, stored: pa.DataType, value: object
) -> None:
    current = Schema(NestedField(1, "c", iceberg, required=False))
    odd = tmp_path / f"odd{next(_counter)}.parquet"
    pq.write_table(pa.Table.from_pylist([{"c": value}], schema=with_types((1, "c", stored))), odd)
    files = one_partition([ListedFile(str(odd), 1, "PARQUET")], [])
    with pytest.raises(InProcessUnsupported, match=r"field 1 \("):
        compare_files(current, files)
    # The same file on both sides adds the same rows to each: it is not checked.
    same = one_partition([ListedFile(str(odd), 1, "PARQUET")], [ListedFile(str(odd), 1, "PARQUET")])
    assert compare_files(current, same).differs is None


def test_a_side_of_empty_files_counts_zero(tmp_path: Path) -> None:
    empty = write(tmp_path, [])
    compared = compare_files(SCHEMA, one_partition([empty], [write(tmp_path, ROWS[:1])]))
    assert compared.before.rows == 0 and compared.before.checksum == 0
    assert compared.differs == 'partition spec 0 {"p":1}: 0 rows -> 1 rows'


def live(*entries: tuple[int, str, int, tuple[Any, ...], str | None]) -> Any:
    """A snapshot's live entries: (content, path, spec id, partition key, referenced file)."""
    from icepack_core.execution.verification.metadata_diff import Identity, _Live

    identities: list[Identity] = [
        (content, path, spec, key, 1, 10, 1, ref, None, None, None)
        for content, path, spec, key, ref in entries
    ]
    return _Live(identities, {}, {path: "PARQUET" for _, path, *_ in entries})


@pytest.mark.parametrize(
    ("delete", "blocker"),
    [
        (None, None),
        ((1, "/d/a-del", 0, ("a",), None), "delete files in a touched partition"),
        ((2, "/d/eq", 1, (), None), "equality delete files of an unpartitioned spec"),
        ((2, "/d/a-eq", 0, ("a",), None), "equality delete files in a touched partition"),
        ((1, "/d/b-del", 0, ("b",), "/d/a1"), "a delete file names a touched data file"),
        # In another partition, naming nothing by field: it may still name /d/a1 by its
        # file_path bounds, which readers honour in any partition.
        ((1, "/d/b-del", 0, ("b",), None), "a position delete file may name a touched data file"),
        ((2, "/d/b-eq", 0, ("b",), None), None),  # equality deletes stay in their partition
    ],
)
def test_touched_files_lists_each_side_and_names_what_deletes_block(
    delete: tuple[int, str, int, tuple[str], None]
    | tuple[int, str, int, tuple[()], None]
    | tuple[int, str, int, tuple[str], str]
    | None,
    blocker: str | None,
) -> None:
    from icepack_core.execution.verification.metadata_diff import touched_files

    before = [(0, "/d/a1", 0, ("a",), None), (0, "/d/a2", 0, ("a",), None)]
    before += [(0, "/d/b1", 0, ("b",), None)]
    after = [(0, "/d/a3", 0, ("a",), None), (0, "/d/b1", 0, ("b",), None)]
    extra = [delete] if delete is not None else []
    files = touched_files(
        live(*before, *extra),
        live(*after, *extra),
        {(0, ("a",)): "spec 0 a"},
        True,
        {0: frozenset({7})},
    )
    (partition,) = files.partitions
    assert partition.key == "spec 0 a" and partition.constant == frozenset({7})
    assert [f.path for f in partition.before] == ["/d/a1", "/d/a2"]
    assert [f.path for f in partition.after] == ["/d/a3"]
    assert files.blocker == blocker


def test_identity_partition_columns_are_the_partitions_constant_not_read(tmp_path: Path) -> None:
    """Iceberg's readers show an identity partition column's value from the partition tuple,
    whatever the file stores there; so does this reader, by not reading it."""
    stored_a = write(tmp_path, [{"k": 1, "v": "a"}], FLAT)
    stored_b = write(tmp_path, [{"k": 1, "v": "b"}], FLAT)
    constant_v = TouchedFiles(
        (PartitionFiles("p", (stored_a,), (stored_b,), frozenset({2})),), None
    )
    assert compare_files(FLAT, constant_v).differs is None
    read_v = TouchedFiles((PartitionFiles("p", (stored_a,), (stored_b,)),), None)
    assert compare_files(FLAT, read_v).differs == "partition p: 1 rows -> 1 rows, checksum differs"


def with_dropped_struct(tmp_path: Path, leaf_id: str | None) -> ListedFile:
    """A file of ``FLAT``'s columns plus a struct the table has since dropped (id 9), whose
    leaf carries ``leaf_id`` (None: no field id)."""
    metadata = {"PARQUET:field_id": leaf_id} if leaf_id is not None else None
    stored = pa.schema(
        [
            pa.field("k", pa.int64(), metadata={"PARQUET:field_id": "1"}),
            pa.field("v", pa.string(), metadata={"PARQUET:field_id": "2"}),
            pa.field(
                "gone",
                pa.struct([pa.field("x", pa.int32(), metadata=metadata)]),
                metadata={"PARQUET:field_id": "9"},
            ),
        ]
    )
    path = tmp_path / f"dropped{next(_counter)}.parquet"
    row = {"k": 1, "v": "a", "gone": {"x": 1}}
    pq.write_table(pa.Table.from_pylist([row], schema=stored), path)
    return ListedFile(str(path), 1, "PARQUET")


def test_a_nested_leaf_without_a_field_id_is_refused(tmp_path: Path) -> None:
    """A column the table dropped may survive in old files: its leaves need ids too, or the
    file was not written by an Iceberg writer."""
    files = one_partition([with_dropped_struct(tmp_path, None)], [])
    with pytest.raises(InProcessUnsupported, match="without a field id"):
        compare_files(FLAT, files)


def test_a_dropped_nested_column_with_ids_does_not_stop_the_read(tmp_path: Path) -> None:
    new = write(tmp_path, [{"k": 1, "v": "a"}], FLAT)
    compared = compare_files(FLAT, one_partition([with_dropped_struct(tmp_path, "10")], [new]))
    assert compared.differs is None and compared.after.rows == 1


def fingerprinted(schema: Schema, listed: ListedFile, *, checksum: bool = True) -> FileFingerprints:
    """``listed``'s fingerprint as a comparison of it against nothing reads it."""
    alone = compare_files(schema, one_partition([listed], []), checksum=checksum)
    return FileFingerprints(schema, checksum, {(frozenset(), listed.path): alone.before})


def test_a_known_file_is_not_read_again(tmp_path: Path) -> None:
    replaced = write(tmp_path, ROWS)
    known = fingerprinted(SCHEMA, replaced)
    Path(local_path(replaced.path)).unlink()  # any read of it would now fail
    compacted = write(tmp_path, ROWS[::-1])
    compared = compare_files(SCHEMA, one_partition([replaced], [compacted]), known=known)
    assert compared.differs is None and compared.before.rows == 4
    assert (compared.files_read, compared.files_prefetched) == (1, 1)
    short = write(tmp_path, ROWS[1:])
    lost = compare_files(SCHEMA, one_partition([replaced], [short]), known=known)
    assert lost.differs == 'partition spec 0 {"p":1}: 4 rows -> 3 rows'


@pytest.mark.parametrize("other", ["schema", "checksum", "columns left out"])
def test_a_fingerprint_of_another_reading_is_not_used(tmp_path: Path, other: str) -> None:
    replaced = write(tmp_path, ROWS)
    wider = Schema(*SCHEMA.fields, NestedField(99, "added", LongType(), required=False))
    known = fingerprinted(wider if other == "schema" else SCHEMA, replaced)
    if other == "checksum":
        known = fingerprinted(SCHEMA, replaced, checksum=False)
    files = one_partition([replaced], [write(tmp_path, ROWS)])
    if other == "columns left out":
        (partition,) = files.partitions
        files = TouchedFiles((PartitionFiles(partition.key, partition.before, partition.after,
                                             frozenset({1})),), None)  # fmt: skip
    Path(local_path(replaced.path)).unlink()
    with pytest.raises(Exception, match=r"No files found|does not exist|No such file"):
        compare_files(SCHEMA, files, known=known)


FILES = st.sampled_from([ListedFile(f"/d/{name}", n, "PARQUET") for name in "abcd" for n in (1, 2)])


@settings(max_examples=300, deadline=None)
@given(
    before=st.lists(FILES, max_size=8),
    after=st.lists(FILES, max_size=8),
    prints=st.dictionaries(FILES, st.integers(-(1 << 70), 1 << 70), min_size=8, max_size=8),
)
def test_leaving_out_files_on_both_sides_never_changes_the_verdict(
    before: list[ListedFile], after: list[ListedFile], prints: dict[ListedFile, int]
) -> None:
    def total(files: list[ListedFile]) -> tuple[int, int]:
        return sum(f.records for f in files), sum(prints[f] for f in files)

    only_before, only_after = one_sided(before, after)
    assert (total(before) == total(after)) == (total(only_before) == total(only_after))
    assert not set(only_before) & set(only_after)
    for kept, side in ((only_before, before), (only_after, after)):
        assert all(kept.count(f) <= side.count(f) for f in kept)
    assert len(before) - len(only_before) == len(after) - len(only_after)
