"""The schema parser behind the content fingerprint: any Spark type, any field name, round trip."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icepack_core.errors import SchemaUnreadable
from icepack_core.execution.verification.fingerprint import (
    SparkType,
    canonical,
    checksum_expression,
    parse_columns,
    parse_type,
)
from icepack_core.spark.sql import _FORBIDDEN_FORMAT_CHARS

PRIMITIVES = [
    "BOOLEAN",
    "INT",
    "BIGINT",
    "FLOAT",
    "DOUBLE",
    "DATE",
    "TIMESTAMP",
    "TIMESTAMP_NTZ",
    "STRING",
    "BINARY",
    "DECIMAL(38,10)",
    "DECIMAL(9,2)",
]
# Any name Iceberg allows, including the characters that break naive parsing.
# (Less the characters quote_identifier refuses: such a table is refused, not fingerprinted.)
names = st.text(
    st.characters(
        blacklist_categories=["Cs", "Cc"], blacklist_characters=sorted(_FORBIDDEN_FORMAT_CHARS)
    ),
    min_size=1,
    max_size=12,
)


def spark_types() -> st.SearchStrategy[SparkType]:
    leaves = st.sampled_from(PRIMITIVES).map(
        lambda t: SparkType(t.split("(")[0], params=t[len(t.split("(")[0]) :])
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            inner.map(lambda t: SparkType("ARRAY", (t,))),
            st.tuples(inner, inner).map(lambda kv: SparkType("MAP", kv)),
            st.lists(st.tuples(names, inner), min_size=1, max_size=4, unique_by=lambda f: f[0]).map(
                lambda fs: SparkType("STRUCT", fields=tuple(fs))
            ),
        ),
        max_leaves=12,
    )


def quote_if_needed(name: str) -> str:
    # Spark's QuotingUtils.quoteIfNeeded: plain names stay bare.
    if name.replace("_", "a").isalnum() and name.isascii() and not name[0].isdigit():
        return name
    return "`" + name.replace("`", "``") + "`"


def render(kind: SparkType, comments: bool) -> str:
    """The type as Spark's ``DataType.sql`` (what SHOW CREATE TABLE prints)."""
    if kind.name == "ARRAY":
        return f"ARRAY<{render(kind.args[0], comments)}>"
    if kind.name == "MAP":
        return f"MAP<{render(kind.args[0], comments)}, {render(kind.args[1], comments)}>"
    if kind.name == "STRUCT":
        fields = []
        for name, field in kind.fields:
            suffix = " NOT NULL COMMENT 'a \\'c\\' \\\\x <,>:' ')'" if comments else ""
            fields.append(f"{quote_if_needed(name)}: {render(field, comments)}{suffix}")
        return f"STRUCT<{', '.join(fields)}>"
    return kind.name + kind.params


@settings(max_examples=300, deadline=None)
@given(spark_types(), st.booleans())
def test_every_rendered_type_parses_back_to_itself(kind: SparkType, comments: bool) -> None:
    assert parse_type(render(kind, comments)) == kind
    assert parse_type(kind.sql) == kind  # what the checksum casts to is the same type


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(names, spark_types()), min_size=1, max_size=5, unique_by=lambda c: c[0]))
def test_show_create_table_columns_parse_in_order(columns: list[tuple[str, SparkType]]) -> None:
    body = ",\n  ".join(f"{quote_if_needed(n)} {render(t, True)}" for n, t in columns)
    ddl = (
        f"CREATE TABLE icepack.`n s`.`t(1)` (\n  {body})\nUSING iceberg\n"
        "TBLPROPERTIES (\n  'format' = 'iceberg/parquet')\n"
    )
    assert parse_columns(ddl) == columns
    expression = checksum_expression(columns)  # every identifier quoted, nothing raises
    assert expression.startswith("coalesce(sum(cast(xxhash64(")


def test_maps_at_any_depth_become_sorted_entries() -> None:
    nested = parse_type("STRUCT<`a b`: INT, `x:y, z`: ARRAY<MAP<STRING, MAP<INT, DOUBLE>>>>")
    text = canonical("`c`", nested)
    assert text.count("array_sort(") == 2 and "map_entries(" in text
    assert "`c`.`x:y, z`" in text and "`c`.`a b`" in text
    assert canonical("`c`", parse_type("DECIMAL(9,2)")) == "`c`"  # a primitive: as is
    array = canonical("`c`", parse_type("ARRAY<STRUCT<s: STRING>>"))
    assert "size(`c`)" in array and "_e0 IS NULL" in array and "_e0.`s` IS NULL" in array


# Values Spark's xxhash64 alone hashes alike (it skips nested NULLs and does not count array
# elements); each pair must fingerprint differently.
NESTED_TWINS = [
    ("ARRAY<INT>", "array(1, CAST(NULL AS INT))", "array(1)"),
    ("ARRAY<INT>", "array(1, CAST(NULL AS INT))", "array(CAST(NULL AS INT), 1)"),
    ("ARRAY<INT>", "array()", "array(CAST(NULL AS INT))"),
    ("ARRAY<ARRAY<INT>>", "array(array(1), array(2))", "array(array(1, 2))"),
    (
        "STRUCT<a: INT, b: INT>",
        "named_struct('a', CAST(NULL AS INT), 'b', 1)",
        "named_struct('a', 1, 'b', CAST(NULL AS INT))",
    ),
    (
        "STRUCT<i: STRUCT<x: INT>>",
        "named_struct('i', CAST(NULL AS STRUCT<x: INT>))",
        "named_struct('i', named_struct('x', CAST(NULL AS INT)))",
    ),
    ("MAP<STRING, INT>", "map('a', CAST(NULL AS INT))", "map('a', 0)"),
    ("MAP<STRING, ARRAY<INT>>", "map('a', array(1, CAST(NULL AS INT)))", "map('a', array(1))"),
]


@pytest.mark.spark
@pytest.mark.parametrize(("kind", "left", "right"), NESTED_TWINS)
def test_nested_nulls_and_array_boundaries_change_the_checksum(
    spark: Any, kind: str, left: str, right: str
) -> None:
    columns = [("c", parse_type(kind))]

    def checksum(value: str) -> int:
        expression = checksum_expression(columns)
        row = spark.sql(f"SELECT {expression} AS h FROM (SELECT CAST({value} AS {kind}) AS c)")
        return int(row.first()["h"])

    assert checksum(left) == checksum(left)
    assert checksum(left) != checksum(right)


@pytest.mark.spark
def test_adjacent_array_columns_keep_their_boundary(spark: Any) -> None:
    """``c1=[1, 0], c2=[]`` against ``c1=[1], c2=[0]``: without sizes the chained hash agreed."""
    columns = [("c1", parse_type("ARRAY<INT>")), ("c2", parse_type("ARRAY<INT>"))]
    expression = checksum_expression(columns)

    def checksum(c1: str, c2: str) -> int:
        select = f"SELECT CAST({c1} AS ARRAY<INT>) AS c1, CAST({c2} AS ARRAY<INT>) AS c2"
        return int(spark.sql(f"SELECT {expression} AS h FROM ({select})").first()["h"])

    assert checksum("array(1, 0)", "array()") != checksum("array(1)", "array(0)")


@pytest.mark.parametrize(
    "bad", ["MAP<STRING>", "STRUCT<a INT>", "ARRAY<INT", "INT INT", "", "STRUCT<`a: INT>"]
)
def test_unparseable_types_are_named_in_the_error(bad: str) -> None:
    with pytest.raises(SchemaUnreadable):
        parse_type(bad)
