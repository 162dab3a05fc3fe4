"""Typed partition literals, with Spark's parser and evaluator as the oracle.

For every supported type, a literal must parse, have exactly the column's type (``typeof``) and
evaluate to the same value; the canonical text Spark computes for it must decode back to that
value (the round trip ``partition_filter`` relies on); and a string literal must survive being
embedded in the ``where`` argument of a procedure call.
"""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from icepack_core.errors import UnsupportedLiteral
from icepack_core.spark.literals import (
    SparkType,
    canonical_text_expr,
    decode_canonical,
    reads_back_by_grammar,
    string_literal,
    typed_literal,
)
from icepack_core.spark.sql import sql_string_literal

pytestmark = pytest.mark.spark
spark_settings = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Characters that break naive quoting or escaping, and characters beyond ASCII and the BMP.
NASTY = "'\\\"`\n\r\t\x00\x1a\x7f%_ aZ9é中😀\u202e\u2028\u200b\ufeff"
ZONES = [UTC, timezone(timedelta(hours=-7)), timezone(timedelta(hours=5, minutes=45))]
DECIMAL_TYPES = [(38, 10), (10, 2), (38, 0), (38, 38), (1, 0), (5, 5)]


def decimals_of(precision: int, scale: int) -> st.SearchStrategy[Decimal]:
    # The largest value of decimal(p,s), written out: arithmetic in the default 28-digit
    # context would round it.
    bound = Decimal(("9" * (precision - scale) or "0") + ("." + "9" * scale if scale else ""))
    # Hypothesis works out its bounds in that same 28-digit context and can step one unit past
    # them (-10**28 for decimal(38,10)): keep only values that truly fit (exact comparison).
    return st.decimals(
        min_value=-bound, max_value=bound, places=scale, allow_nan=False, allow_infinity=False
    ).filter(lambda d: abs(d) <= bound)


VALUES: dict[str, st.SearchStrategy[Any]] = {
    "boolean": st.booleans(),
    "tinyint": st.integers(-(2**7), 2**7 - 1),
    "smallint": st.integers(-(2**15), 2**15 - 1),
    "int": st.integers(-(2**31), 2**31 - 1),
    "bigint": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(width=32),
    "double": st.floats(),
    "date": st.dates(),
    "timestamp": st.datetimes(timezones=st.sampled_from(ZONES)),
    "timestamp_ntz": st.datetimes(),
    "string": st.one_of(st.text(), st.text(alphabet=NASTY)),
    "binary": st.binary(max_size=64),
}


def same(expected: Any, got: Any) -> bool:
    if isinstance(expected, float):
        if math.isnan(expected):
            return isinstance(got, float) and math.isnan(got)
        return got == expected and math.copysign(1, got) == math.copysign(1, expected)
    if isinstance(expected, bytes):
        return isinstance(got, bytes | bytearray) and bytes(got) == expected
    return bool(got == expected) and type(got) is type(expected)


def check_literal(spark: Any, spark_type: SparkType, value: Any) -> None:
    try:
        literal = typed_literal(spark_type, value)
    except UnsupportedLiteral:
        # Only an aware datetime whose UTC instant falls outside years 1-9999 may be refused.
        assert spark_type.name == "timestamp" and value.year in (1, 9999), value
        assume(False)
        return
    canonical = canonical_text_expr(spark_type, literal)
    instant = spark_type.name == "timestamp"
    # PySpark hands timestamps back as naive local time (and fails before year 1 local):
    # compare the instant instead.
    shown = f"unix_micros({literal})" if instant else literal
    row = spark.sql(f"SELECT typeof({literal}) AS ty, {shown} AS v, {canonical} AS c").first()
    assert row["ty"] == str(spark_type), literal
    if instant:
        assert row["v"] == (value - EPOCH) // timedelta(microseconds=1), literal
    else:
        assert same(value, row["v"]), (literal, row["v"])
    decoded = decode_canonical(spark_type, row["c"])
    assert same(value.astimezone(UTC) if spark_type.name == "timestamp" else value, decoded)


@pytest.mark.parametrize("type_text", sorted(VALUES))
@spark_settings
@given(data=st.data())
@example(data=None)  # the edge values below, first
def test_literals_evaluate_to_the_same_value_of_the_same_type(
    spark: Any, type_text: str, data: st.DataObject | None
) -> None:
    spark_type = SparkType.parse(type_text)
    if data is None:
        for value in EDGES.get(type_text, []):
            check_literal(spark, spark_type, value)
        return
    check_literal(spark, spark_type, data.draw(VALUES[type_text]))


EDGES: dict[str, list[Any]] = {
    "float": [
        math.nan,
        math.inf,
        -math.inf,
        -0.0,
        0.0,
        1.100000023841858,
        3.4028234663852886e38,
        1.401298464324817e-45,
    ],
    "double": [math.nan, math.inf, -math.inf, -0.0, 5e-324, 1.7976931348623157e308, 1e16],
    "date": [date(1, 1, 1), date(9999, 12, 31), date(1582, 10, 4), date(1970, 1, 1)],
    "timestamp": [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(1900, 1, 1, tzinfo=ZONES[2]),
    ],
    "timestamp_ntz": [
        datetime(1, 1, 1),
        datetime(9999, 12, 31, 23, 59, 59, 999999),
        datetime(2026, 1, 1, 10, 0, 0, 500000),
    ],
    "string": ["", "it's", "a\\b", "\\'", "new\nline\ttab", "中文😀", "\u202e", "\x00", "\\u0041"],
    "binary": [b"", b"\x00", bytes(range(256))],
    "bigint": [-(2**63), 2**63 - 1],
}


@pytest.mark.parametrize(("precision", "scale"), DECIMAL_TYPES)
@spark_settings
@given(data=st.data())
def test_decimal_literals_keep_precision_and_scale(
    spark: Any, precision: int, scale: int, data: st.DataObject
) -> None:
    spark_type = SparkType("decimal", precision, scale)
    check_literal(spark, spark_type, data.draw(decimals_of(precision, scale)))


@pytest.mark.spark
@spark_settings
@given(value=st.one_of(st.text(), st.text(alphabet=NASTY)))
@example(value="x' OR true OR 'y")
@example(value="\\' OR true --")
def test_string_values_survive_the_where_argument(spark: Any, value: str) -> None:
    """``procedure_call`` embeds the filter with ``sql_string_literal``; Iceberg parses what
    that evaluates to. The predicate must come out intact and its literal mean ``value``."""
    where = f"`s` = {string_literal(value)}"
    embedded = spark.sql("SELECT " + sql_string_literal(where)).first()[0]
    assert embedded == where
    parsed = spark._jsparkSession.sessionState().sqlParser().parseExpression(embedded)
    assert parsed.getClass().getSimpleName() == "EqualTo"
    assert parsed.left().sql() == "s"
    assert spark.sql("SELECT " + parsed.right().sql()).first()[0] == value


PLAIN = "ABCXYZabcxyz0189_.:/+ -"


@spark_settings
@given(
    text=st.one_of(
        st.text(alphabet=PLAIN),
        st.sampled_from(["", " ", "-", "0", "2026-01-01", "a/b:c+d e_f.g"]),
    )
)
def test_a_plain_string_reads_back_by_grammar_and_on_spark(spark: Any, text: str) -> None:
    """``partition_filter`` skips the engine's round trip for these: Spark must agree."""
    string = SparkType.parse("string")
    assert reads_back_by_grammar(string, text)
    literal = typed_literal(string, decode_canonical(string, text))
    assert spark.sql(f"SELECT {canonical_text_expr(string, literal)}").first()[0] == text


@pytest.mark.parametrize("type_text", ["tinyint", "smallint", "int", "bigint", "boolean"])
@spark_settings
@given(data=st.data())
def test_canonical_integers_and_booleans_read_back_by_grammar_and_on_spark(
    spark: Any, type_text: str, data: st.DataObject
) -> None:
    kind = SparkType.parse(type_text)
    text = str(data.draw(VALUES[type_text])).lower()
    assert reads_back_by_grammar(kind, text)
    literal = typed_literal(kind, decode_canonical(kind, text))
    assert spark.sql(f"SELECT {canonical_text_expr(kind, literal)}").first()[0] == text


@pytest.mark.parametrize(
    ("type_text", "text"),
    [
        ("string", "it's"),
        ("string", "a\\b"),
        ("string", "new\nline"),
        ("string", "é"),
        ("string", "%27"),
        ("string", "x' OR true OR 'y"),
        ("int", "-0"),
        ("int", "007"),
        ("int", "+7"),
        ("int", "1e3"),
        ("boolean", "True"),
        ("date", "19000"),
        ("double", "1.0"),
        ("decimal(10,2)", "1.50"),
        ("timestamp", "0"),
        ("binary", "00FF"),
    ],
)
def test_anything_else_is_checked_on_the_engine(type_text: str, text: str) -> None:
    assert not reads_back_by_grammar(SparkType.parse(type_text), text)
