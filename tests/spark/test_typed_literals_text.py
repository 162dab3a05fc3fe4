"""Typed partition literals and DESCRIBE parsing, without Spark: forms, ranges and refusals.

Whether the literals *mean* the values is checked against Spark's parser in
``tests/spark/test_typed_literals.py``; here are the exact texts and the refusals.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from icepack_core.errors import UnsupportedLiteral
from icepack_core.execution.scoping.partition_filter import (
    PartitionColumn,
    identity_columns,
    partition_predicate,
    split_described_name,
)
from icepack_core.spark.literals import (
    PartitionValue,
    SparkType,
    decode_canonical,
    string_literal,
    typed_literal,
)


def t(text: str) -> SparkType:
    return SparkType.parse(text)


@pytest.mark.parametrize(
    ("type_text", "value", "literal"),
    [
        ("date", date(2026, 1, 1), "DATE '2026-01-01'"),
        ("date", date(1, 1, 1), "DATE '0001-01-01'"),
        ("timestamp", datetime(2026, 1, 1, 10, tzinfo=UTC),
         "TIMESTAMP '2026-01-01 10:00:00.000000+00:00'"),
        ("timestamp", datetime(2026, 1, 1, 3, tzinfo=timezone(timedelta(hours=-7))),
         "TIMESTAMP '2026-01-01 10:00:00.000000+00:00'"),
        ("timestamp_ntz", datetime(2026, 1, 1, 10, 0, 0, 5),
         "TIMESTAMP_NTZ '2026-01-01 10:00:00.000005'"),
        ("decimal(10,2)", Decimal("-1.5"), "CAST(-1.50BD AS DECIMAL(10,2))"),
        ("decimal(38,10)", Decimal("0E-10"), "CAST(0.0000000000BD AS DECIMAL(38,10))"),
        ("decimal(5,0)", Decimal("1E+3"), "CAST(1000BD AS DECIMAL(5,0))"),
        ("decimal(38,10)", Decimal("-1234567890123456789012345678.1234567891"),
         "CAST(-1234567890123456789012345678.1234567891BD AS DECIMAL(38,10))"),
        ("decimal(38,0)", 10**38 - 1, f"CAST({10**38 - 1}BD AS DECIMAL(38,0))"),
        ("binary", b"\x00\xff", "X'00FF'"),
        ("binary", b"", "X''"),
        ("boolean", True, "true"),
        ("bigint", -(2**63), "-9223372036854775808L"),
        ("tinyint", -128, "-128Y"),
        ("smallint", 7, "7S"),
        ("int", 2**31 - 1, "2147483647"),
        ("float", 1.5, "1.5F"),
        ("float", -0.0, "-0.0F"),
        ("float", math.nan, "CAST('NaN' AS FLOAT)"),
        ("double", -math.inf, "CAST('-Infinity' AS DOUBLE)"),
        ("double", math.inf, "CAST('Infinity' AS DOUBLE)"),
        ("double", -0.0, "-0.0D"),
        ("double", 1e300, "1e+300D"),
        ("string", "it's a\\b", "'it\\'s a\\\\b'"),
        ("string", "new\nline\ttab\u202e中😀", "'new\\u000Aline\\u0009tab\\u202E中😀'"),
        ("string", None, "CAST(NULL AS STRING)"),
    ],
)  # fmt: skip
def test_literal_forms(type_text: str, value: PartitionValue, literal: str) -> None:
    assert typed_literal(t(type_text), value) == literal


@pytest.mark.parametrize(
    ("type_text", "value", "message"),
    [
        ("int", 2**31, "outside the range of int"),
        ("tinyint", -129, "outside the range"),
        ("bigint", True, "cannot render bool"),
        ("float", 1.1, "not exactly representable as a float"),
        ("float", 1e300, "not exactly representable"),
        ("decimal(10,2)", Decimal("1.005"), "more than 2 decimal places"),
        ("decimal(4,2)", Decimal("123.4"), r"does not fit decimal\(4,2\)"),
        ("decimal(38,0)", 10**38, r"does not fit decimal\(38,0\)"),
        ("decimal(10,2)", Decimal("NaN"), "not finite"),
        ("timestamp", datetime(2026, 1, 1), "naive"),
        ("timestamp", datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))), "out of range"),
        ("timestamp_ntz", datetime(2026, 1, 1, tzinfo=UTC), "has a time zone"),
        ("date", datetime(2026, 1, 1), "cannot render datetime"),
        ("string", "lone \ud800", "lone surrogate"),
        ("string", 5, "cannot render int"),
        ("binary", "00", "cannot render str"),
    ],
)  # fmt: skip
def test_values_that_cannot_be_exact_are_refused_by_name(
    type_text: str, value: PartitionValue, message: str
) -> None:
    with pytest.raises(UnsupportedLiteral, match=message):
        typed_literal(t(type_text), value)


@pytest.mark.parametrize(
    "text",
    ["time", "timestamp_ns", "struct<x:int>", "decimal(39,2)", "decimal(5,6)", "void", "decimal"],
)
def test_types_without_a_literal_form_are_refused(text: str) -> None:
    with pytest.raises(UnsupportedLiteral, match="type"):
        SparkType.parse(text)


def test_types_parse_case_and_space_insensitively() -> None:
    assert SparkType.parse("DECIMAL(10, 2)") == SparkType("decimal", 10, 2)
    assert str(SparkType.parse("decimal(38,0)")) == "decimal(38,0)"
    assert SparkType.parse(" BigInt ") == SparkType("bigint")


@pytest.mark.parametrize(
    ("type_text", "text", "value"),
    [
        ("date", "20454", date(2026, 1, 1)),
        ("date", "-719162", date(1, 1, 1)),
        ("timestamp", "1767261600123456", datetime(2026, 1, 1, 10, 0, 0, 123456, tzinfo=UTC)),
        ("timestamp_ntz", "2026-01-01 10:00:00.5", datetime(2026, 1, 1, 10, 0, 0, 500000)),
        ("decimal(38,10)", "1E-10", Decimal("0.0000000001")),
        ("binary", "00FF", b"\x00\xff"),
        ("boolean", "false", False),
        ("float", "1.1", 1.100000023841858),
        ("double", "1.0E300", 1e300),
        ("double", "-Infinity", -math.inf),
        ("string", "x\ny", "x\ny"),
        ("int", None, None),
    ],
)  # fmt: skip
def test_canonical_text_decodes_by_column_type(
    type_text: str, text: str | None, value: object
) -> None:
    assert decode_canonical(t(type_text), text) == value


@pytest.mark.parametrize(
    ("type_text", "text"),
    [
        ("date", "2932897"),
        ("timestamp", str(300_000 * 366 * 86400 * 10**6)),
        ("boolean", "yes"),
        ("timestamp_ntz", "+10000-01-01 00:00:00"),
        ("binary", "0"),
        ("decimal(10,2)", "x"),
    ],
)
def test_undecodable_text_is_refused_naming_the_type(type_text: str, text: str) -> None:
    with pytest.raises(UnsupportedLiteral, match=r"value text"):
        decode_canonical(t(type_text), text)


def test_nan_and_negative_zero_decode_exactly() -> None:
    assert math.isnan(decode_canonical(t("float"), "NaN"))  # type: ignore[arg-type]
    assert math.copysign(1, decode_canonical(t("double"), "-0.0")) == -1  # type: ignore[arg-type]


def test_string_literal_stays_on_one_printable_line() -> None:
    literal = string_literal("a\r\n\x00\u2028\u200b")
    assert literal == "'a\\u000D\\u000A\\u0000\\u2028\\u200B'"


@pytest.mark.parametrize(
    ("text", "parts"),
    [("p", ("p",)), ("st.x", ("st", "x")), ("`we ird`", ("we ird",)), ("`a.b`.c", ("a.b", "c")),
     ("`x``y`", ("x`y",)), ("`中`", ("中",))],
)  # fmt: skip
def test_described_names_split_like_spark_quotes_them(
    text: str, parts: tuple[str] | tuple[str, str]
) -> None:
    assert split_described_name(text) == parts


@pytest.mark.parametrize("bad", ["`open", "a..b", ""])
def test_malformed_described_names_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="cannot split"):
        split_described_name(bad)


def describe(*partition_rows: tuple[str, str], transform: bool = False) -> list[dict[str, str]]:
    rows = [{"col_name": "id", "data_type": "bigint"}, {"col_name": "d", "data_type": "date"}]
    if transform:
        rows += [
            {"col_name": "", "data_type": ""},
            {"col_name": "# Partitioning", "data_type": ""},
            {"col_name": "Part 0", "data_type": "days(ts)"},
        ]
    elif partition_rows:
        rows += [
            {"col_name": "# Partition Information", "data_type": ""},
            {"col_name": "# col_name", "data_type": "data_type"},
        ]
        rows += [{"col_name": n, "data_type": ty} for n, ty in partition_rows]
    rows += [
        {"col_name": "", "data_type": ""},
        {"col_name": "# Metadata Columns", "data_type": ""},
        {"col_name": "_spec_id", "data_type": "int"},
    ]
    return rows


def test_identity_columns_come_with_their_types() -> None:
    columns = identity_columns(
        describe(("d", "date"), ("`we ird`", "decimal(10,2)"), ("st.x", "int"))
    )
    assert columns == [
        PartitionColumn(("d",), "date"),
        PartitionColumn(("we ird",), "decimal(10,2)"),
        PartitionColumn(("st", "x"), "int"),
    ]
    assert [c.sql for c in columns] == ["`d`", "`we ird`", "`st`.`x`"]
    assert [c.field_name for c in columns] == ["d", "we ird", "st.x"]


def test_other_transforms_and_unpartitioned_tables() -> None:
    assert identity_columns(describe(transform=True)) is None
    assert identity_columns(describe()) == []


def test_predicate_joins_typed_terms_and_nulls() -> None:
    columns = [PartitionColumn(("d",), "date"), PartitionColumn(("s",), "string")]
    types = [t("date"), t("string")]
    assert (
        partition_predicate(columns, types, [date(2026, 1, 1), None])
        == "(`d` = DATE '2026-01-01' AND `s` IS NULL)"
    )
