"""Scoped compaction and scoped verification on every partition transform, on the real engine.

Each table has a *hot* partition (three small files, values on both edges of the partition) and
a *cold* one (one file, starting exactly where the hot partition ends). The compaction,
scoped from the manifests (``metadata_scope``) with terms from ``transform_predicates``, must
rewrite the hot files only: the cold file is still live afterwards, the contents (rows and a
checksum) are unchanged, no referenced file is missing, and the verification compared only
the touched partition. The property test evaluates the terms themselves on Spark against
PyIceberg's transform of each value, under a non-UTC session time zone.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    MonthTransform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import DateType, LongType, StringType, TimestampType, TimestamptzType

from icepack_core.execution.maintenance import TableMaintenance
from icepack_core.execution.scoping.transform_predicates import Transform, field_term
from icepack_core.intents import parse_intent
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.spark.literals import SparkType, typed_literal
from icepack_core.spark.sql import qualified_name
from icepack_core.types import TableRef
from tests.execution.spark_tables import (
    CATALOG,
    fingerprint,
    metadata_loader,
    missing_referenced_files,
    unique_name,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "transform_scope"
_EPOCH = datetime(1970, 1, 1)


@pytest.fixture(scope="module")
def engine(spark: Any, spark_catalog_settings: Settings) -> LocalEngine:
    return LocalEngine(spark_catalog_settings, session=spark)


@pytest.fixture
def new_york(spark: Any) -> Iterator[None]:
    """A session zone far from UTC: a term that depended on it would select the wrong hour."""
    spark.sql("SET spark.sql.session.timeZone=America/New_York")
    try:
        yield
    finally:
        spark.sql("SET spark.sql.session.timeZone=UTC")


def scoped(reader_options: dict[str, Any] | None = None, **params: Any) -> dict[str, Any]:
    return {
        "action": "rewrite_data_files",
        "params": {
            "strategy": "binpack",
            "scope": "partitions",
            "options": {"min-input-files": "2"},
            "open_quiet_seconds": 0,
            **params,
        },
    }


def files(spark: Any, table: str) -> set[str]:
    rows = spark.sql(f"SELECT file_path FROM {table}.files WHERE content = 0").collect()
    return {r["file_path"] for r in rows}


@dataclass(frozen=True)
class Case:
    """A column, its partitioning, and SQL literals in the hot and in the cold partition."""

    column: str
    partitioned_by: str
    hot: tuple[str, ...]
    cold: str
    where_has: str  # a fragment of the compaction's filter

    @property
    def name(self) -> str:
        return self.partitioned_by.split("(")[0]


_BUCKET = BucketTransform[int](8).transform(LongType())
_HOT_IDS = [i for i in range(200) if _BUCKET(i) == 3][:3]
_COLD_ID = next(i for i in range(200) if _BUCKET(i) == 5)
CASES = [
    Case("v STRING", "v", ("'a'", "'a'", "'a'"), "'b'", "`v` = 'a'"),
    Case(
        "v DATE",
        "years(v)",
        ("DATE '2025-01-01'", "DATE '2025-06-30'", "DATE '2025-12-31'"),
        "DATE '2026-01-01'",
        "`v` >= DATE '2025-01-01' AND `v` < DATE '2026-01-01'",
    ),
    Case(
        "v TIMESTAMP",
        "months(v)",
        (
            "TIMESTAMP '2026-02-01 00:00:00+00:00'",
            "TIMESTAMP '2026-02-14 12:00:00+00:00'",
            "TIMESTAMP '2026-02-28 23:59:59.999999+00:00'",
        ),
        "TIMESTAMP '2026-03-01 00:00:00+00:00'",
        "`v` >= TIMESTAMP '2026-02-01 00:00:00.000000+00:00'",
    ),
    Case(
        "v TIMESTAMP_NTZ",
        "days(v)",
        (
            "TIMESTAMP_NTZ '2026-01-01 00:00:00'",
            "TIMESTAMP_NTZ '2026-01-01 12:00:00'",
            "TIMESTAMP_NTZ '2026-01-01 23:59:59.999999'",
        ),
        "TIMESTAMP_NTZ '2026-01-02 00:00:00'",
        "`v` < TIMESTAMP_NTZ '2026-01-02 00:00:00.000000'",
    ),
    Case(
        "v TIMESTAMP",
        "hours(v)",
        (
            "TIMESTAMP '2026-01-01 10:00:00+00:00'",
            "TIMESTAMP '2026-01-01 10:30:00+00:00'",
            "TIMESTAMP '2026-01-01 10:59:59.999999+00:00'",
        ),
        "TIMESTAMP '2026-01-01 11:00:00+00:00'",
        "`v` < TIMESTAMP '2026-01-01 11:00:00.000000+00:00'",
    ),
    Case(
        "v BIGINT",
        "bucket(8, v)",
        tuple(f"{i}L" for i in _HOT_IDS),
        f"{_COLD_ID}L",
        "`icepack`.`system`.`bucket`(8, `v`) = 3",
    ),
    Case(
        "v STRING",
        "truncate(4, v)",
        ("'abcd'", "'abcdef'", "'abcdzz'"),
        "'abce'",
        "`icepack`.`system`.`truncate`(4, `v`) = 'abcd'",
    ),
    Case("v BIGINT", "truncate(10, v)", ("10L", "15L", "19L"), "20L", "(10, `v`) = 10L"),
]


def make_table(spark: Any, case: Case) -> tuple[str, str, set[str], set[str]]:
    """The table, its hot files (one insert per hot value) and its cold file."""
    name = unique_name(f"t_{case.name}")
    table = qualified_name(CATALOG, [NS], name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], NS)}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, {case.column}, payload STRING) USING iceberg "
        f"PARTITIONED BY ({case.partitioned_by}) "
        "TBLPROPERTIES ('format-version'='2', 'write.distribution-mode'='none')"
    )
    for i, value in enumerate(case.hot):
        spark.sql(f"INSERT INTO {table} VALUES ({i}, {value}, 'hot-{i}')")
    hot = files(spark, table)
    spark.sql(f"INSERT INTO {table} VALUES (9, {case.cold}, 'cold')")
    return name, table, hot, files(spark, table) - hot


@pytest.mark.parametrize("reader", ["in_process", "engine"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.partitioned_by)
async def test_each_transform_compacts_only_the_hot_partition(
    case: Case,
    reader: str,
    spark: Any,
    engine: LocalEngine,
    spark_catalog_settings: Settings,
    new_york: None,
) -> None:
    name, table, hot, cold = make_table(spark, case)
    assert len(hot) == 3 and len(cold) == 1
    before = fingerprint(spark, table)
    outcome = await TableMaintenance(
        engine,
        TableRef(CATALOG, NS, name),
        metadata=metadata_loader(spark_catalog_settings, NS, name),
        in_process_reader=reader == "in_process",
    ).run(parse_intent(scoped()))
    spark.sql(f"REFRESH TABLE {table}")
    assert outcome.output["scope"] == "partitions", outcome.output
    assert outcome.output["scope_source"] == "metadata"
    assert (outcome.output["partitions_selected"], outcome.output["partitions_total"]) == (1, 2)
    assert case.where_has.replace("'", "\\'") in outcome.sql[-1], outcome.sql[-1]
    assert outcome.output["rewritten_data_files_count"] == 3
    after = files(spark, table)
    assert cold <= after and not hot & after and len(after) == 2
    assert fingerprint(spark, table) == before
    assert missing_referenced_files(spark, table) == []
    assert outcome.verification is not None
    (record,) = outcome.verification.to_json()["snapshots"]
    assert record["ok"] and record["scope"] == "partitions", record
    assert (record["partitions_total"], record["partitions_proven"]) == (2, 1)
    assert record["reader"] == reader
    assert record["rows_before"] == record["rows_after"] == 3


# Each transform with its source type: a hypothesis value strategy, the Spark type, PyIceberg's
# transform of the Iceberg value, and the Iceberg value of a Python one.
_MICROS = st.integers(-(2**40), 2**52)


def _micros(value: datetime) -> int:
    naive = value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
    return (naive - _EPOCH) // timedelta(microseconds=1)


_TZ = st.builds(lambda m: (_EPOCH + timedelta(microseconds=m)).replace(tzinfo=UTC), _MICROS)
_NTZ = st.builds(lambda m: _EPOCH + timedelta(microseconds=m), _MICROS)
_DATES = st.dates(date(1000, 1, 1), date(3000, 1, 1))
_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8)
TERM_CASES: dict[str, tuple[Any, str, Any, Any]] = {
    "hour(timestamp)": (
        _TZ,
        "timestamp",
        HourTransform().transform(TimestamptzType()),
        _micros,
    ),
    "day(timestamp_ntz)": (
        _NTZ,
        "timestamp_ntz",
        DayTransform().transform(TimestampType()),
        _micros,
    ),
    "month(date)": (
        _DATES,
        "date",
        MonthTransform().transform(DateType()),
        lambda d: (d - date(1970, 1, 1)).days,
    ),
    "year(timestamp)": (_TZ, "timestamp", YearTransform().transform(TimestamptzType()), _micros),
    "bucket[16](bigint)": (
        st.integers(-(2**63), 2**63 - 1),
        "bigint",
        BucketTransform[int](16).transform(LongType()),
        lambda v: v,
    ),
    "bucket[4](string)": (_TEXT, "string", BucketTransform[str](4).transform(StringType()), str),
    "truncate[3](string)": (
        _TEXT,
        "string",
        TruncateTransform[str](3).transform(StringType()),
        str,
    ),
    "truncate[7](bigint)": (
        st.integers(-(2**40), 2**40),
        "bigint",
        TruncateTransform[int](7).transform(LongType()),
        lambda v: v,
    ),
}


@pytest.mark.parametrize("time_function", [False, True], ids=["range", "function"])
@pytest.mark.parametrize("kind", list(TERM_CASES))
@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_a_term_holds_exactly_for_the_values_of_its_partition(
    kind: str, time_function: bool, data: st.DataObject, spark: Any, new_york: None
) -> None:
    """Values near one drawn value (a partition likely to hold several of them) and random
    ones: Spark evaluates the term of the first value's partition on every value, and it is
    true exactly where PyIceberg's transform gives that partition."""
    strategy, type_text, transform, physical = TERM_CASES[kind]
    if time_function and not kind.startswith(("hour", "day", "month", "year")):
        return
    values = data.draw(st.lists(strategy, min_size=2, max_size=12))
    spark_type = SparkType(type_text)
    target = transform(physical(values[0]))
    term = field_term(
        "x",
        Transform.parse(kind.split("(")[0]),
        spark_type,
        target,
        CATALOG,
        time_function=time_function,
    )
    rows = ", ".join(f"({i}, {typed_literal(spark_type, v)})" for i, v in enumerate(values))
    got = spark.sql(
        f"SELECT i, ({term.sql}) AS hit FROM VALUES {rows} AS t(i, x) ORDER BY i"
    ).collect()
    expected = [transform(physical(v)) == target for v in values]
    assert [bool(r["hit"]) for r in got] == expected, (term.sql, values)
