"""The range and term builders of ``transform_predicates`` against PyIceberg's transforms.

A time range ``[start, end)`` selects exactly one partition value ``v`` when every source
value in it transforms to ``v`` and none outside does. Iceberg's time transforms are monotone,
so it is enough (and the properties check it) that ``start`` and ``end - 1`` map to ``v``,
``start - 1`` to ``v - 1`` and ``end`` to ``v + 1``; the random-point property checks the same
membership directly. No engine: the Spark side of the terms is in
``test_transform_scope.py``.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.transforms import (
    DayTransform,
    HourTransform,
    MonthTransform,
    TimeTransform,
    YearTransform,
)
from pyiceberg.types import DateType, TimestampType, TimestamptzType

from icepack_core.errors import UnsupportedLiteral
from icepack_core.execution.scoping.transform_predicates import (
    Transform,
    bound_text,
    field_term,
    time_bounds,
    value_type,
)
from icepack_core.spark.literals import SparkType

_TRANSFORMS: dict[str, TimeTransform[Any]] = {
    "year": YearTransform(),
    "month": MonthTransform(),
    "day": DayTransform(),
    "hour": HourTransform(),
}
# Spark type -> (Iceberg type, its unit in the manifest: days or microseconds)
_SOURCES = {
    "date": DateType(),
    "timestamp": TimestamptzType(),
    "timestamp_ntz": TimestampType(),
}
_EPOCH_DAY = date(1970, 1, 1)
_EPOCH = datetime(1970, 1, 1)
# Partition values whose ranges, and the points around them that
# ``test_a_point_is_in_the_range_iff_it_transforms_to_the_value`` draws (up to two widths or,
# for a date source, 2,000 days either side: 5.5 years), stay within years 1-9999, which
# PyIceberg's transforms (Python's datetime) can compute.
_LOW_DAY, _HIGH_DAY = (date(8, 1, 1) - _EPOCH_DAY).days, (date(9991, 1, 1) - _EPOCH_DAY).days
_LIMITS = {
    "year": (8 - 1970, 9991 - 1970),
    "month": ((8 - 1970) * 12, (9991 - 1970) * 12),
    "day": (_LOW_DAY, _HIGH_DAY),
    "hour": (_LOW_DAY * 24, _HIGH_DAY * 24),
}
_PAIRS = [(t, s) for t in _TRANSFORMS for s in _SOURCES if not (t == "hour" and s == "date")]


def _physical(bound: date | datetime) -> int:
    """The Iceberg representation of a bound: epoch days or epoch microseconds."""
    if isinstance(bound, datetime):
        naive = bound.astimezone(UTC).replace(tzinfo=None) if bound.tzinfo else bound
        return (naive - _EPOCH) // timedelta(microseconds=1)
    return (bound - _EPOCH_DAY).days


def _apply(transform: str, source: str, physical: int) -> int:
    result = _TRANSFORMS[transform].transform(_SOURCES[source])(physical)
    assert isinstance(result, int)
    return result


@st.composite
def partition(draw: st.DrawFn) -> tuple[str, str, int]:
    transform, source = draw(st.sampled_from(_PAIRS))
    low, high = _LIMITS[transform]
    return transform, source, draw(st.integers(low, high))


@given(partition())
def test_a_time_range_is_exactly_the_partition(case: tuple[str, str, int]) -> None:
    transform, source, value = case
    start, end = time_bounds(transform, value, SparkType(source))
    low, high = _physical(start), _physical(end)
    assert low < high
    assert _apply(transform, source, low) == value
    assert _apply(transform, source, high - 1) == value
    assert _apply(transform, source, low - 1) == value - 1
    assert _apply(transform, source, high) == value + 1
    # The bound is of the source's kind: aware only for timestamp (timestamptz), UTC.
    if source == "date":
        assert type(start) is date and type(end) is date
    else:
        assert isinstance(start, datetime)
        assert (start.tzinfo is not None) == (source == "timestamp")
        if start.tzinfo is not None:
            assert start.utcoffset() == timedelta(0)


@given(partition(), st.integers(-2000, 2000), st.floats(0, 1))
def test_a_point_is_in_the_range_iff_it_transforms_to_the_value(
    case: tuple[str, str, int], offset: int, fraction: float
) -> None:
    """Points inside and up to two widths around the range agree with PyIceberg."""
    transform, source, value = case
    start, end = time_bounds(transform, value, SparkType(source))
    low, high = _physical(start), _physical(end)
    width = high - low
    point = low + int(fraction * width) + offset * max(1, width // 1000)
    inside = low <= point < high
    assert inside == (_apply(transform, source, point) == value)


@given(partition())
def test_bound_texts_are_the_canonical_texts(case: tuple[str, str, int]) -> None:
    """Epoch days, epoch microseconds, or the timestamp_ntz text, as Spark projects them."""
    transform, source, value = case
    start, _ = time_bounds(transform, value, SparkType(source))
    text = bound_text(SparkType(source), start)
    if source == "timestamp_ntz":
        assert datetime.fromisoformat(text) == start
    else:
        assert int(text) == _physical(start)


def test_void_and_unknown_transforms_are_refused_with_the_transform_named() -> None:
    for text in ("void", "bucket[0]", "zorder", "truncate[x]"):
        with pytest.raises(UnsupportedLiteral, match="cannot be scoped exactly"):
            Transform.parse(text)
    assert Transform.parse("bucket[16]") == Transform("bucket", 16)
    assert Transform.parse("truncate[4]") == Transform("truncate", 4)


def test_value_types_and_invalid_sources() -> None:
    assert value_type(Transform("hour"), SparkType("timestamp")) == SparkType("int")
    assert value_type(Transform("day"), SparkType("timestamp")) == SparkType("date")
    assert value_type(Transform("bucket", 8), SparkType("string")) == SparkType("int")
    assert value_type(Transform("truncate", 4), SparkType("string")) == SparkType("string")
    with pytest.raises(UnsupportedLiteral):
        value_type(Transform("hour"), SparkType("date"))
    with pytest.raises(UnsupportedLiteral):
        value_type(Transform("day"), SparkType("bigint"))
    with pytest.raises(UnsupportedLiteral):
        value_type(Transform("truncate", 4), SparkType("double"))


def test_terms_are_written_on_the_source_column() -> None:
    ts = SparkType("timestamp")
    term = field_term("`ts`", Transform("hour"), ts, 1, "icepack")
    assert term.sql == (
        "`ts` >= TIMESTAMP '1970-01-01 01:00:00.000000+00:00' AND "
        "`ts` < TIMESTAMP '1970-01-01 02:00:00.000000+00:00'"
    )
    assert [expected for _, _, expected in term.literals] == ["3600000000", "7200000000"]
    ntz = field_term("`ts`", Transform("day"), SparkType("timestamp_ntz"), -1, "icepack")
    assert ntz.sql == (
        "`ts` >= TIMESTAMP_NTZ '1969-12-31 00:00:00.000000' AND "
        "`ts` < TIMESTAMP_NTZ '1970-01-01 00:00:00.000000'"
    )
    month = field_term("`d`", Transform("month"), SparkType("date"), 13, "icepack")
    assert month.sql == "`d` >= DATE '1971-02-01' AND `d` < DATE '1971-03-01'"
    bucket = field_term("`id`", Transform("bucket", 8), SparkType("bigint"), 3, "my`cat")
    assert bucket.sql == "`my``cat`.`system`.`bucket`(8, `id`) = 3"
    truncate = field_term("`s`", Transform("truncate", 4), SparkType("string"), "ab'c", "c")
    assert truncate.sql == "`c`.`system`.`truncate`(4, `s`) = 'ab\\'c'"
    assert field_term("`s`", Transform("bucket", 8), SparkType("string"), None, "c").sql == (
        "`s` IS NULL"
    )
    with pytest.raises(UnsupportedLiteral, match="no catalog"):
        field_term("`id`", Transform("bucket", 8), SparkType("bigint"), 3, None)
    with pytest.raises(UnsupportedLiteral, match="outside years"):
        field_term("`d`", Transform("year"), SparkType("date"), 9000, "c")


def test_time_values_as_iceberg_functions() -> None:
    ts = SparkType("timestamp")
    assert field_term("`ts`", Transform("hour"), ts, 5, "c", time_function=True).sql == (
        "`c`.`system`.`hours`(`ts`) = 5"
    )
    day = field_term("`ts`", Transform("day"), ts, -1, "c", time_function=True)
    assert day.sql == "`c`.`system`.`days`(`ts`) = DATE '1969-12-31'"
    assert day.literals == ((SparkType("date"), "DATE '1969-12-31'", "-1"),)
    as_date = field_term("`ts`", Transform("day"), ts, date(1969, 12, 31), "c")
    assert as_date.sql == field_term("`ts`", Transform("day"), ts, -1, "c").sql
    assert field_term(
        "`d`", Transform("year"), SparkType("date"), 56, "c", time_function=True
    ).sql == ("`c`.`system`.`years`(`d`) = 56")


def test_the_open_rule_and_the_cap() -> None:
    """``choose`` without an engine: open below the bound skipped, over it compacted, a quiet
    period of 0 opens nothing, the cap keeps the partitions with the most small files."""
    from icepack_core.execution.scoping.metadata_scope import OpenRule, PartitionActivity, choose

    def part(key: str, small: int, last: int | None) -> PartitionActivity:
        return PartitionActivity(0, (key,), {1000: key}, small + 1, small, last)

    parts = [
        part("closed", 5, 1_000),
        part("open", 50, 9_500),
        part("flooded", 101, 9_900),
        part("rewritten", 7, None),
        part("healthy", 1, 1_000),
    ]
    rule = OpenRule(quiet_seconds=1, max_small_files=100)
    picked = choose(parts, min_files=2, max_partitions=10, rule=rule, now_ms=10_000)
    assert [p.key for p in picked.selected] == [("flooded",), ("rewritten",), ("closed",)]
    assert [p.key for p in picked.open_skipped] == [("open",)] and picked.deferred == 0
    capped = choose(parts, min_files=2, max_partitions=2, rule=rule, now_ms=10_000)
    assert [p.key for p in capped.selected] == [("flooded",), ("rewritten",)]
    assert capped.deferred == 1
    for no_rule in (None, OpenRule(quiet_seconds=0)):
        every = choose(parts, min_files=2, max_partitions=10, rule=no_rule, now_ms=0)
        assert len(every.selected) == 4 and not every.open_skipped
