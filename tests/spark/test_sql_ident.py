"""sql_ident: every identifier and literal either fails clearly or means exactly what it says.

The oracle for "means exactly" is Spark's own parser (via Py4J on the shared session), never
this module: a quoted identifier must parse back to the same name, a literal must evaluate back
to the same value.
"""

from __future__ import annotations

import math
import unicodedata
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icepack_core.errors import InvalidIdentifier
from icepack_core.spark.sql import (
    ALLOWED_SPARK_CONFS,
    BigintArray,
    bigint_array_literal,
    procedure_call,
    qualified_name,
    quote_identifier,
    spark_conf_set,
    spark_conf_statements,
    sql_literal,
    sql_string_literal,
)
from icepack_core.types import TableRef, join_namespace

# Characters that break naive quoting, mixed with ordinary and non-ASCII ones.
NASTY = "`'\";\\-/*\n\r\t\x00 .aZ9_é中😀\u202e\x7f"
names = st.one_of(st.text(max_size=300), st.text(alphabet=NASTY, max_size=40))
spark_settings = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def parse_identifier(spark: Any, text: str) -> list[str]:
    """Spark's parser: multi-part identifier text -> its parts."""
    jvm = spark._jvm
    parser = spark._jsparkSession.sessionState().sqlParser()
    parts = parser.parseMultipartIdentifier(text)
    return list(jvm.scala.collection.JavaConverters.seqAsJavaList(parts))


def should_reject(name: str) -> bool:
    """The documented rejection rule, restated independently of the implementation."""
    bidi_and_separators = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029")
    return (
        not name
        or len(name) > 255
        or any(unicodedata.category(c) in ("Cc", "Cs") or c in bidi_and_separators for c in name)
    )


# ---- pure behaviour -------------------------------------------------------------------------


def test_quotes_plain_and_unicode_names() -> None:
    assert quote_identifier("orders") == "`orders`"
    assert quote_identifier("Bestellungen_ä中") == "`Bestellungen_ä中`"


def test_doubles_backticks_inside_names() -> None:
    assert quote_identifier("a`b") == "`a``b`"
    assert quote_identifier("`") == "````"


@pytest.mark.parametrize(
    "bad",
    ["", "a\x00b", "line\nbreak", "cr\rhere", "tab\there", "del\x7f", "\ud800lone", "bidi\u202e",
     "x" * 256],
)  # fmt: skip
def test_rejects_unusable_identifiers_naming_the_value(bad: str) -> None:
    with pytest.raises(InvalidIdentifier) as info:
        quote_identifier(bad)
    assert repr(bad[:40]) in str(info.value)


def test_accepts_the_longest_allowed_name() -> None:
    assert quote_identifier("x" * 255) == f"`{'x' * 255}`"


def test_qualified_name_quotes_every_part() -> None:
    assert qualified_name("cat", ["a.b", "c"], "t`1") == "`cat`.`a.b`.`c`.`t``1`"


def test_qualified_name_refuses_a_bare_string_namespace() -> None:
    with pytest.raises(InvalidIdentifier, match="sequence of levels"):
        qualified_name("cat", "db", "t")


def test_string_literal_escapes_quotes_and_backslashes() -> None:
    assert sql_string_literal("it's a\\b") == "'it\\'s a\\\\b'"


def test_string_literal_rejects_control_characters() -> None:
    with pytest.raises(InvalidIdentifier, match="control character"):
        sql_string_literal("a\nb")


def test_sql_literal_is_typed_bool_before_int() -> None:
    assert sql_literal(True) == "true"
    assert sql_literal(False) == "false"
    assert sql_literal(7) == "7"
    assert sql_literal(-2.5) == "-2.5D"
    assert sql_literal("x") == "'x'"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 2**63, -(2**63) - 5])
def test_sql_literal_rejects_non_finite_and_huge_numbers(bad: float) -> None:
    with pytest.raises(ValueError):
        sql_literal(bad)


def test_sql_literal_rejects_naive_datetimes_and_other_types() -> None:
    with pytest.raises(ValueError, match="naive"):
        sql_literal(datetime(2024, 1, 1))
    with pytest.raises(ValueError, match="cannot render"):
        sql_literal([1])  # type: ignore[arg-type]


def test_procedure_call_renders_table_options_and_scalars() -> None:
    call = procedure_call(
        "icepack",
        "rewrite_data_files",
        {
            "table": TableRef("c", "db", "t"),
            "strategy": "binpack",
            "options": {"min-input-files": "2", "partial-progress.enabled": "true"},
        },
    )
    assert call == (
        "CALL `icepack`.`system`.`rewrite_data_files`(table => '`icepack`.`db`.`t`', "
        "strategy => 'binpack', options => map('min-input-files', '2', "
        "'partial-progress.enabled', 'true'))"
    )


def test_procedure_call_omits_an_empty_options_map() -> None:
    call = procedure_call(
        "c", "rewrite_manifests", {"table": TableRef("c", "d", "t"), "options": {}}
    )
    assert call == "CALL `c`.`system`.`rewrite_manifests`(table => '`c`.`d`.`t`')"


def test_procedure_call_refuses_unknown_procedures() -> None:
    with pytest.raises(InvalidIdentifier, match="'migrate' is not allowed"):
        procedure_call("c", "migrate", {"table": TableRef("c", "d", "t")})


@pytest.mark.parametrize("arg", ["Table", "table; DROP", "x-y", "", "1a"])
def test_procedure_call_refuses_bad_argument_names(arg: str) -> None:
    with pytest.raises(InvalidIdentifier, match="argument name"):
        procedure_call("c", "expire_snapshots", {arg: 1})


def test_procedure_call_wants_a_table_ref_for_table() -> None:
    with pytest.raises(ValueError, match="TableRef"):
        procedure_call("c", "expire_snapshots", {"table": "db.t"})


def test_procedure_call_refuses_non_string_map_entries() -> None:
    with pytest.raises(ValueError, match="str -> str"):
        procedure_call("c", "rewrite_data_files", {"options": {"a": 1}})  # type: ignore[dict-item]


def test_spark_conf_set_allows_listed_confs_with_plain_values() -> None:
    assert spark_conf_set("spark.sql.shuffle.partitions", "8") == (
        "SET spark.sql.shuffle.partitions=8"
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("spark.sql.catalog.icepack.uri", "jdbc:x"),
        ("spark.sql.warehouse.dir", "/tmp"),
        ("spark.sql.shuffle.partitions", "8; DROP TABLE t"),
        ("spark.sql.shuffle.partitions", ""),
        ("spark.sql.shuffle.partitions", "1" * 201),
    ],
)
def test_spark_conf_set_refuses_other_confs_and_values_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(InvalidIdentifier, match=key.replace(".", r"\.")):
        spark_conf_set(key, value)


def test_table_properties_become_sorted_set_statements() -> None:
    props = {
        "icepack.spark.sql.shuffle.partitions": "16",
        "icepack.spark.sql.adaptive.enabled": "false",
        "write.target-file-size-bytes": "1",
    }
    assert spark_conf_statements(props) == [
        "SET spark.sql.adaptive.enabled=false",
        "SET spark.sql.shuffle.partitions=16",
    ]
    with pytest.raises(InvalidIdentifier, match=r"spark\.sql\.catalogImplementation"):
        spark_conf_statements({"icepack.spark.sql.catalogImplementation": "hive"})


def test_allowlist_holds_only_session_sql_confs() -> None:
    assert all(key.startswith("spark.sql.") for key in ALLOWED_SPARK_CONFS)


# ---- Spark is the oracle ----------------------------------------------------------------------


@pytest.mark.spark
@spark_settings
@given(name=names)
def test_quoted_identifiers_parse_back_to_the_same_name(spark: Any, name: str) -> None:
    try:
        quoted = quote_identifier(name)
    except InvalidIdentifier:
        assert should_reject(name)
        return
    assert parse_identifier(spark, quoted) == [name]


@pytest.mark.spark
@spark_settings
@given(parts=st.lists(st.text(alphabet=NASTY, min_size=1, max_size=12), min_size=3, max_size=5))
def test_qualified_names_parse_back_to_the_same_parts(spark: Any, parts: list[str]) -> None:
    try:
        text = qualified_name(parts[0], parts[1:-1], parts[-1])
    except InvalidIdentifier:
        return
    assert parse_identifier(spark, text) == parts


@pytest.mark.spark
@pytest.mark.parametrize(
    "attack",
    ["x` ; DROP TABLE t; --", "x`.`y", "a'b", "`", "``", "x` UNION SELECT 1 --", "/*", "\\`"],
)
def test_injection_attempts_stay_one_identifier(spark: Any, attack: str) -> None:
    assert parse_identifier(spark, quote_identifier(attack)) == [attack]
    call = procedure_call(
        "icepack",
        "expire_snapshots",
        {"table": TableRef("icepack", join_namespace((attack,)), attack)},
    )
    plan = spark._jsparkSession.sessionState().sqlParser().parsePlan(call)
    assert "Call" in plan.getClass().getSimpleName()


@pytest.mark.spark
@spark_settings
@given(value=names)
def test_string_literals_evaluate_to_the_same_value(spark: Any, value: str) -> None:
    try:
        literal = sql_string_literal(value)
    except InvalidIdentifier:
        return
    assert spark.sql("SELECT " + literal).first()[0] == value


@pytest.mark.spark
@spark_settings
@given(
    value=st.one_of(
        st.booleans(),
        st.integers(min_value=-(2**63) + 1, max_value=2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
    )
)
def test_scalar_literals_evaluate_to_the_same_value(spark: Any, value: bool | int | float) -> None:
    result = spark.sql("SELECT " + sql_literal(value)).first()[0]
    assert result == value and type(result) is type(value)


@pytest.mark.spark
@pytest.mark.parametrize(
    "moment",
    [
        datetime(2024, 2, 29, 23, 59, 59, 123456, tzinfo=UTC),
        datetime(2021, 6, 30, 8, 0, tzinfo=timezone(timedelta(hours=-7))),
    ],
)
def test_timestamp_literals_mean_the_same_instant(spark: Any, moment: datetime) -> None:
    micros = spark.sql(f"SELECT unix_micros({sql_literal(moment)})").first()[0]
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert micros == (moment - epoch) // timedelta(microseconds=1)


@pytest.mark.spark
@spark_settings
@given(
    namespace=st.lists(st.text(alphabet=NASTY, min_size=1, max_size=10), min_size=1, max_size=3),
    table=st.text(alphabet=NASTY, min_size=1, max_size=10),
)
def test_table_argument_is_what_iceberg_parses_back(
    spark: Any, namespace: list[str], table: str
) -> None:
    """Iceberg reads `table => '...'` with parseMultipartIdentifier: check that whole chain."""
    try:
        call = procedure_call(
            "icepack",
            "expire_snapshots",
            {"table": TableRef("icepack", join_namespace(namespace), table)},
        )
    except InvalidIdentifier:
        return
    literal = call.split("table => ", 1)[1][:-1]
    text = spark.sql("SELECT " + literal).first()[0]
    assert parse_identifier(spark, text) == ["icepack", *namespace, table]


@pytest.mark.spark
@spark_settings
@given(values=st.lists(st.integers(min_value=-(2**63) + 1, max_value=2**63 - 1), min_size=1))
def test_bigint_arrays_evaluate_to_the_same_bigints(spark: Any, values: list[int]) -> None:
    """``snapshot_ids => array(...)``: Spark reads back the same ids, typed array<bigint>."""
    literal = bigint_array_literal(BigintArray(tuple(values)))
    row = spark.sql(f"SELECT {literal} AS a, typeof({literal}) AS t").first()
    assert list(row["a"]) == values and row["t"] == "array<bigint>"
    call = procedure_call("icepack", "expire_snapshots", {"snapshot_ids": BigintArray((7,))})
    assert call.endswith("(snapshot_ids => array(7L))")


@pytest.mark.parametrize("bad", [(), (True,), (1.5,), ("1",), (2**63,), (-(2**63) - 1,)], ids=repr)
def test_bad_bigint_arrays_are_refused_naming_the_value(
    bad: tuple[object, ...],
) -> None:
    with pytest.raises(ValueError) as exc:
        bigint_array_literal(BigintArray(bad))  # type: ignore[arg-type]
    if bad:
        assert repr(bad[0]) in str(exc.value) or str(bad[0]) in str(exc.value)
