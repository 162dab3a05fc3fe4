"""The verification's file diff read from metadata in Python equals the Spark ``entries`` query.

``diff_files`` (one Spark SQL query over the ``entries`` metadata table) is the oracle. The
property test appends hypothesis-generated rows of every identity-partitionable type to one
real table (one Spark write per example) and requires the Python diff of each append to name
the same partitions with byte-identical canonical texts. The rewrite tests run real
maintenance (compaction, position deletes, deletion vectors, unpartitioned) through
``TableMaintenance`` with the executor's metadata loader and compare both diffs on the very
snapshots that were verified.
"""

from __future__ import annotations

import math
import struct
from dataclasses import replace
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from icepack_core.errors import MetadataDiffUnsupported
from icepack_core.execution.maintenance import TableMaintenance
from icepack_core.execution.verification.metadata_diff import metadata_diff
from icepack_core.execution.verification.partition_text import decimal_text, timestamp_ntz_text
from icepack_core.execution.verification.scope import FileDiff, TableLayout, diff_files
from icepack_core.execution.verification.verifier import RewriteVerifier
from icepack_core.intents import parse_intent
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.spark.literals import SparkType, typed_literal
from icepack_core.spark.sql import qualified_name
from icepack_core.types import TableRef
from tests.execution.spark_tables import (
    CATALOG,
    fingerprint,
    make_small_files_table,
    metadata_loader,
    unique_name,
)
from tests.execution.verify_scope_support import make_partitioned_table
from tests.execution.verify_support import content, current_snapshot

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "metadata_diff"

# Every identity-partitionable type: (column, Spark type).
COLUMNS = [
    ("c_int", "int"),
    ("c_bigint", "bigint"),
    ("c_string", "string"),
    ("c_date", "date"),
    ("c_ts", "timestamp"),
    ("c_ntz", "timestamp_ntz"),
    ("c_dec", "decimal(38,10)"),
    ("c_double", "double"),
    ("c_float", "float"),
    ("c_bool", "boolean"),
    ("c_bin", "binary"),
]
_DEC = Decimal("9999999999999999999999999999.9999999999")
_VALUES = {
    "int": st.integers(-(2**31), 2**31 - 1),
    "bigint": st.integers(-(2**63), 2**63 - 1),
    "string": st.text(max_size=6),
    "date": st.dates(date(1, 1, 1), date(9999, 12, 31)),
    "timestamp": st.datetimes(datetime(1, 1, 2), datetime(9999, 12, 30), timezones=st.just(UTC)),
    "timestamp_ntz": st.datetimes(datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999)),
    "decimal(38,10)": st.decimals(-_DEC, _DEC, places=10, allow_nan=False),
    "double": st.floats(allow_nan=True, allow_infinity=True),
    "float": st.floats(width=32, allow_nan=True, allow_infinity=True),
    "boolean": st.booleans(),
    "binary": st.binary(max_size=6),
}
FLOAT32_TINY = struct.unpack("<f", b"\x01\x00\x00\x00")[0]  # the smallest float32 subnormal
ROW = st.tuples(*[st.none() | _VALUES[t] for _, t in COLUMNS])
SPECIAL = (
    7,
    -(2**63),
    "it's\n\t\u202e😀",
    date(1, 1, 1),
    datetime(1900, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
    datetime(2026, 1, 1, 10, 0, 0, 500000),
    Decimal("-0.0000000001"),
    -0.0,
    math.nan,
    False,
    b"",
)


@pytest.fixture(scope="module")
def engine(spark: Any, spark_catalog_settings: Settings) -> LocalEngine:
    return LocalEngine(spark_catalog_settings, session=spark)


@pytest.fixture(scope="module")
def every_type_table(spark: Any) -> tuple[str, str]:
    """One table identity-partitioned by a column of every type; each example appends to it."""
    name = unique_name("every_type")
    table = qualified_name(CATALOG, [NS], name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], NS)}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, {', '.join(f'{c} {t}' for c, t in COLUMNS)}) "
        f"USING iceberg PARTITIONED BY ({', '.join(c for c, _ in COLUMNS)}) "
        "TBLPROPERTIES ('format-version'='2')"
    )
    # A first snapshot to diff against.
    spark.sql(f"INSERT INTO {table} SELECT 0{', NULL' * len(COLUMNS)}")
    return name, table


async def both_diffs(
    verifier: RewriteVerifier, loader: Any, before: int, after: int, layout: TableLayout
) -> tuple[FileDiff, FileDiff]:
    spark_diff = await diff_files(
        verifier.engine, verifier.metadata_table("entries"), before, after, layout
    )
    python_diff = await metadata_diff(await loader(), verifier.engine, before, after, layout)
    return spark_diff, python_diff


def comparable(diff: FileDiff, labels: bool = True) -> tuple[Any, ...]:
    """A diff with its touched partitions in a fixed order (SQL returns them unordered)."""
    touched = sorted(
        ((p.spec_id, p.texts, p.label if labels else "") for p in diff.touched), key=repr
    )
    return diff.partitions, touched, diff.unsound


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
)
@given(rows=st.lists(ROW, min_size=1, max_size=4))
@example(rows=[SPECIAL, (None,) * len(COLUMNS)])
@example(
    rows=[
        (
            0,
            0,
            "",
            date(1970, 1, 1),
            datetime(1970, 1, 1, tzinfo=UTC),
            datetime(9999, 12, 31),
            Decimal(0),
            v,
            f,
            True,
            b"\x00\xff",
        )
        for v, f in [
            (math.inf, -math.inf),
            (0.0, -0.0),
            (1e300, 1.100000023841858),
            (5e-324, FLOAT32_TINY),
        ]
    ]
)
async def test_partition_texts_equal_spark(
    rows: list[tuple[Any, ...]],
    engine: LocalEngine,
    spark: Any,
    spark_catalog_settings: Settings,
    every_type_table: tuple[str, str],
) -> None:
    name, table = every_type_table
    verifier = RewriteVerifier(engine, CATALOG, TableRef(CATALOG, NS, name))
    layout = await verifier.layout()
    assert [c.field_name for c in layout.columns or []] == [c for c, _ in COLUMNS]
    before = current_snapshot(spark, table)
    values = ", ".join(
        "(0, "
        + ", ".join(
            typed_literal(SparkType.parse(t), v) for (_, t), v in zip(COLUMNS, row, strict=True)
        )
        + ")"
        for row in rows
    )
    spark.sql(f"INSERT INTO {table} VALUES {values}")
    after = current_snapshot(spark, table)
    loader = metadata_loader(spark_catalog_settings, NS, name)
    spark_diff, python_diff = await both_diffs(verifier, loader, before, after, layout)
    assert spark_diff.touched, "an append touches the partitions it wrote"
    python, oracle = comparable(python_diff, labels=False), comparable(spark_diff, labels=False)
    assert python == oracle, f"python {python}\nspark  {oracle}"


def test_texts_by_rule() -> None:
    """The documented forms, independent of Spark (the property test proves them equal)."""
    assert timestamp_ntz_text(0) == "1970-01-01 00:00:00"
    assert timestamp_ntz_text(500_000) == "1970-01-01 00:00:00.5"
    assert timestamp_ntz_text(-62135596800_000_000) == "0001-01-01 00:00:00"
    assert decimal_text(Decimal("0E-10"), 10) == "0E-10"  # Java's BigDecimal.toString
    assert decimal_text(Decimal("-1E-10"), 10) == "-1E-10"
    assert decimal_text(Decimal("0.0001"), 10) == "0.0001000000"
    assert decimal_text(Decimal("1E-7"), 10) == "1.000E-7"
    assert decimal_text(Decimal("12"), 0) == "12"
    assert decimal_text(Decimal("-1234567890123456789012345678.1234567891"), 10) == (
        "-1234567890123456789012345678.1234567891"
    )


async def verified_snapshots(
    maintenance: TableMaintenance, action: dict[str, Any], spark: Any, table: str
) -> tuple[dict[str, Any], int, int]:
    """Run ``action``; check contents kept and that the metadata path ran; return the
    evidence record and the verified (before, after) snapshot ids."""
    rows_before, start = content(spark, table), current_snapshot(spark, table)
    outcome = await maintenance.run(parse_intent(action))
    assert content(spark, table) == rows_before
    assert outcome.verification is not None
    evidence = outcome.verification.to_json()
    records, end = evidence["snapshots"], current_snapshot(spark, table)
    assert bool(records) == (end != start), "every replace snapshot was verified"
    for record in records:
        assert record["ok"]
        assert record.get("files_diff") == "metadata", record.get("files_diff_fallback")
    return (records[-1] if records else {}), start, end


def maintenance_for(engine: LocalEngine, settings_: Settings, name: str) -> TableMaintenance:
    return TableMaintenance(
        engine, TableRef(CATALOG, NS, name), metadata=metadata_loader(settings_, NS, name)
    )


COMPACT = {"action": "rewrite_data_files", "params": {"options": {"min-input-files": "2"}}}


@pytest.mark.parametrize("partitioned_by", ["part", "ts, part", ""])
async def test_compaction_diff_equals_spark(
    partitioned_by: str, spark: Any, engine: LocalEngine, spark_catalog_settings: Settings
) -> None:
    name = unique_name("compact")
    table = make_partitioned_table(spark, NS, name, partitioned_by)
    maintenance = maintenance_for(engine, spark_catalog_settings, name)
    record, start, end = await verified_snapshots(maintenance, COMPACT, spark, table)
    layout = await maintenance.verifier.layout()
    spark_diff, python_diff = await both_diffs(
        maintenance.verifier, metadata_loader(spark_catalog_settings, NS, name), start, end, layout
    )
    # Labels are evidence only: Spark's ``to_json`` writes timestamps in the session zone.
    labels = partitioned_by == "part"
    assert comparable(python_diff, labels) == comparable(spark_diff, labels)
    assert python_diff.touched or not partitioned_by
    assert record["partitions_total"] == spark_diff.partitions


async def test_v1_compaction_diff_equals_spark(
    spark: Any, engine: LocalEngine, spark_catalog_settings: Settings
) -> None:
    """Format v1 manifests have no content field and no sequence numbers (inherited as 0)."""
    name = unique_name("v1")
    table = make_small_files_table(spark, NS, name, batches=4, partitioned=True, fmt_version=1)
    maintenance = maintenance_for(engine, spark_catalog_settings, name)
    _, start, end = await verified_snapshots(maintenance, COMPACT, spark, table)
    assert start != end
    layout = await maintenance.verifier.layout()
    loader = metadata_loader(spark_catalog_settings, NS, name)
    spark_diff, python_diff = await both_diffs(maintenance.verifier, loader, start, end, layout)
    assert comparable(python_diff) == comparable(spark_diff) and python_diff.touched


@pytest.mark.parametrize("fmt_version", [2, 3])
async def test_delete_rewrites_diff_equals_spark(
    fmt_version: int, spark: Any, engine: LocalEngine, spark_catalog_settings: Settings
) -> None:
    """Position deletes (v2) and deletion vectors (v3): rewriting the data files applies them,
    rewriting the delete files replaces them; both diffs agree on every step."""
    name = unique_name(f"deletes_v{fmt_version}")
    table = make_small_files_table(
        spark, NS, name, batches=4, partitioned=True, merge_on_read=True, fmt_version=fmt_version
    )
    spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0")
    spark.sql(f"DELETE FROM {table} WHERE id % 5 = 0")
    vectors = spark.sql(
        f"SELECT count(*) AS n FROM {table}.delete_files WHERE content_offset IS NOT NULL"
    ).first()["n"]
    assert (vectors > 0) == (fmt_version == 3), "v3 deletes are deletion vectors"
    maintenance = maintenance_for(engine, spark_catalog_settings, name)
    loader = metadata_loader(spark_catalog_settings, NS, name)
    layout = await maintenance.verifier.layout()
    compared = 0
    for action in (
        {"action": "rewrite_position_delete_files", "params": {"options": {"rewrite-all": "true"}}},
        {"action": "rewrite_data_files", "params": {"options": {"rewrite-all": "true"}}},
    ):
        n_before = fingerprint(spark, table)
        _, start, end = await verified_snapshots(maintenance, action, spark, table)
        assert fingerprint(spark, table) == n_before
        if start == end:
            continue  # nothing to rewrite at this step
        spark_diff, python_diff = await both_diffs(maintenance.verifier, loader, start, end, layout)
        assert comparable(python_diff) == comparable(spark_diff)
        compared += 1
    assert compared, "at least one rewrite committed"


async def test_unknown_layout_column_falls_back(
    spark: Any, engine: LocalEngine, spark_catalog_settings: Settings
) -> None:
    """A layout naming a column the metadata does not have as an identity field is refused,
    never guessed; the verifier then uses the Spark diff and says why."""
    name = unique_name("fallback")
    table = make_partitioned_table(spark, NS, name)
    maintenance = maintenance_for(engine, spark_catalog_settings, name)
    layout = await maintenance.verifier.layout()
    assert layout.columns
    wrong = replace(layout, columns=[replace(layout.columns[0], type_text="bigint")])
    start = current_snapshot(spark, table)
    with pytest.raises(MetadataDiffUnsupported, match="metadata says string"):
        await metadata_diff(
            await metadata_loader(spark_catalog_settings, NS, name)(), engine, start, start, wrong
        )
    diff, source = await maintenance.verifier.file_diff(start, start, wrong)
    assert source.files_diff == "engine" and "metadata says" in (source.files_diff_fallback or "")
    assert diff.touched == () and diff.partitions == 4


def test_doubles_are_read_exactly() -> None:
    """PyIceberg 0.12's Cython decoder rounds doubles to float32; the manifest reader does not."""
    from pyiceberg.avro.decoder import new_decoder
    from pyiceberg.avro.reader import DoubleReader, OptionReader

    from icepack_core.inspection.exact_doubles import exact_doubles

    reader = exact_doubles(OptionReader(DoubleReader()))
    for value in (1e300, 5e-324, 0.1, -0.0):
        data = b"\x02" + struct.pack("<d", value) + b"\x00"
        decoder = new_decoder(data)
        assert struct.pack("<d", reader.read(decoder)) == struct.pack("<d", value)
        assert reader.read(decoder) is None and decoder.tell() == len(data)
