"""The Spark SQL term selecting exactly the rows of one partition value of one partition field.

A partition field is a transform of a source column. Its value in a manifest is what the
transform gives for every row of the partition, so a term on the *source column* that holds
exactly for the rows mapping to that value selects the partition, and Iceberg converts it:

- ``identity``: ``col = <literal of the column's type>``;
- ``year``/``month``/``day``/``hour`` (the value: years, months, days or hours since
  1970-01-01, UTC for ``timestamptz``): the half-open range ``col >= <start> AND col <
  <end>``, bounds written as literals of the source type: ``DATE`` for a date column,
  ``TIMESTAMP '...+00:00'`` (an instant: Iceberg's transforms of a ``timestamptz`` work on UTC)
  for ``timestamp``, ``TIMESTAMP_NTZ`` for ``timestamp_ntz`` (Iceberg's ``timestamp``, whose
  transforms work on the wall-clock value). A range on the source column is also projected
  onto every other partition spec of the table by Iceberg (inclusively), so files written
  under an older spec with another time granularity are selected when they may overlap it;
- ``bucket[N]``: ``<catalog>.system.bucket(N, col) = b``, Iceberg's own function: measured
  on Spark 3.5 with Iceberg 1.10, ``rewrite_data_files`` converts it (only catalog-qualified:
  ``system.bucket`` alone does not resolve) into Iceberg's ``bucket[N](col) = b`` predicate,
  which selects whole partitions of a spec with that bucket field;
- ``truncate[W]``: ``<catalog>.system.truncate(W, col) = <literal of the column's type>``,
  converted the same way;
- a NULL value: ``col IS NULL`` (every transform maps NULL, and only NULL, to NULL).

``void`` and any transform not listed raise ``UnsupportedLiteral``: the caller falls back to a
whole-table rewrite with the reason. ``time_bounds`` gives the range as Python values, so the
property tests check it against PyIceberg's transforms without an engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from icepack_core.errors import UnsupportedLiteral
from icepack_core.execution.verification.partition_text import timestamp_ntz_text
from icepack_core.spark.literals import PartitionValue, SparkType, typed_literal
from icepack_core.spark.sql import quote_identifier

TIME_TRANSFORMS = ("year", "month", "day", "hour")
_PARAMETERISED = re.compile(r"^(bucket|truncate)\[(\d{1,9})\]$")
_EPOCH_DAY = date(1970, 1, 1)
_EPOCH = datetime(1970, 1, 1)
# Integer results: the partition value of these transforms is an int, whatever the source.
_INT = SparkType("int")
_TIME_SOURCES = frozenset({"date", "timestamp", "timestamp_ntz"})


@dataclass(frozen=True, slots=True)
class Transform:
    """A parsed transform: ``name`` and its parameter (N of bucket, W of truncate)."""

    name: str
    param: int | None = None

    @classmethod
    def parse(cls, text: str) -> Transform:
        """``'bucket[8]'`` -> ``Transform('bucket', 8)``.

        Raises:
            UnsupportedLiteral: ``void`` or a transform this module cannot scope (named).
        """
        text = str(text).strip()
        if text == "identity" or text in TIME_TRANSFORMS:
            return cls(text)
        match = _PARAMETERISED.match(text)
        if match and int(match.group(2)) > 0:
            return cls(match.group(1), int(match.group(2)))
        raise UnsupportedLiteral(f"a {text} transform cannot be scoped exactly")


def value_type(transform: Transform, source: SparkType) -> SparkType:
    """The Spark type of the partition value as Spark's metadata tables show it: a date for
    ``day`` (Iceberg's day transform gives a date), an int for the other time transforms and
    bucket, the source column's type for identity and truncate. Canonical texts are the same
    either way for ``day``: epoch days (``canonical_text_expr``, ``partition_text``).

    Raises:
        UnsupportedLiteral: a time transform of a non-time source, or truncate of a type
            Iceberg cannot truncate.
    """
    if transform.name in TIME_TRANSFORMS:
        if source.name not in _TIME_SOURCES or (transform.name == "hour" and source.name == "date"):
            raise UnsupportedLiteral(f"an {transform.name} transform of a {source} column")
        return SparkType("date") if transform.name == "day" else _INT
    if transform.name == "bucket":
        return _INT
    if transform.name == "truncate" and source.name not in (
        "int",
        "bigint",
        "string",
        "binary",
        "decimal",
    ):
        raise UnsupportedLiteral(f"a truncate transform of a {source} column")
    return source


def _add_months(months: int) -> date:
    years, month = divmod(months, 12)
    return date(1970 + years, month + 1, 1)


def time_bounds(
    transform: str, value: int, source: SparkType
) -> tuple[date, date] | tuple[datetime, datetime]:
    """The half-open range ``[start, end)`` of source values whose ``transform`` is ``value``:
    dates for a ``date`` source, aware UTC datetimes for ``timestamp``, naive ones for
    ``timestamp_ntz``.

    Raises:
        UnsupportedLiteral: a bound outside years 1-9999, or ``hour`` of a date.
    """
    try:
        if transform == "hour":
            if source.name == "date":
                raise UnsupportedLiteral("an hour transform of a date column")
            start_ts = _EPOCH + timedelta(hours=value)
            end_ts = start_ts + timedelta(hours=1)
            return _instants(start_ts, end_ts, source)
        if transform == "day":
            start = _EPOCH_DAY + timedelta(days=value)
            end = start + timedelta(days=1)
        elif transform == "month":
            start, end = _add_months(value), _add_months(value + 1)
        elif transform == "year":
            start, end = date(1970 + value, 1, 1), date(1971 + value, 1, 1)
        else:
            raise UnsupportedLiteral(f"{transform} is not a time transform")
    except (OverflowError, ValueError) as exc:
        raise UnsupportedLiteral(
            f"{transform} partition value {value} is outside years 1-9999"
        ) from exc
    if source.name == "date":
        return start, end
    return _instants(
        datetime(start.year, start.month, start.day), datetime(end.year, end.month, end.day), source
    )


def _instants(start: datetime, end: datetime, source: SparkType) -> tuple[datetime, datetime]:
    if source.name == "timestamp":
        return start.replace(tzinfo=UTC), end.replace(tzinfo=UTC)
    return start, end


def system_function(catalog: str | None, name: str) -> str:
    """```catalog`.`system`.`name``` (Iceberg's functions resolve only catalog-qualified).

    Raises:
        UnsupportedLiteral: no catalog to qualify it with.
    """
    if not catalog:
        raise UnsupportedLiteral(f"no catalog to call system.{name} in")
    return ".".join(quote_identifier(part) for part in (catalog, "system", name))


@dataclass(frozen=True, slots=True)
class Term:
    """One field's term, and the literals in it with the canonical text each must read back
    as on the engine (``partition_filter`` checks them): (type, literal, expected text)."""

    sql: str
    literals: tuple[tuple[SparkType, str, str], ...] = ()


def field_term(
    column_sql: str,
    transform: Transform,
    source: SparkType,
    value: PartitionValue,
    catalog: str | None,
    expected: str | None = None,
    *,
    time_function: bool = False,
) -> Term:
    """The term selecting the partition value ``value`` (decoded as ``value_type``) of one
    field. ``expected`` is the value's canonical text, checked against the identity and
    truncate literal; range bounds carry their own expected texts.

    ``time_function``: a time value as Iceberg's function instead of a range
    (``<catalog>.system.hours(ts) = 1``; ``days`` returns a DATE). Measured on Spark 3.5 with
    Iceberg 1.10: on a table whose every spec has that transform, a scan filtered by it keeps
    no row-level ``Filter`` (Iceberg answers it from partition values), while a timestamp
    range keeps one for its lower bound; but unlike a range it selects nothing exactly in a
    spec with another granularity. The verification's scoped scan uses it (``EXPLAIN``
    decides), the compaction's filter the range.

    Raises:
        UnsupportedLiteral: see the module docstring.
    """
    if value is None:
        return Term(f"{column_sql} IS NULL")
    name = transform.name
    if name in ("identity", "truncate"):
        return _value_term(column_sql, transform, source, value, catalog, expected)
    if name == "day" and isinstance(value, date) and not isinstance(value, datetime):
        value = (value - _EPOCH_DAY).days  # a day value decoded as its value type
    if not isinstance(value, int) or isinstance(value, bool):
        raise UnsupportedLiteral(f"{name} partition value {value!r:.80} is not an integer")
    if name == "bucket":
        function = system_function(catalog, "bucket")
        return Term(f"{function}({transform.param}, {column_sql}) = {value}")
    if time_function:
        return _time_function(column_sql, name, value, catalog)
    start, end = time_bounds(name, value, source)
    low, high = typed_literal(source, start), typed_literal(source, end)
    bounds = tuple(
        (source, literal, bound_text(source, bound))
        for literal, bound in ((low, start), (high, end))
    )
    return Term(f"{column_sql} >= {low} AND {column_sql} < {high}", bounds)


def _value_term(
    column_sql: str,
    transform: Transform,
    source: SparkType,
    value: PartitionValue,
    catalog: str | None,
    expected: str | None,
) -> Term:
    """An identity or truncate field's term: the column (or its truncation) equal to the value's
    literal, checked against ``expected`` when given."""
    literal = typed_literal(source, value)
    checks: tuple[tuple[SparkType, str, str], ...] = (
        ((source, literal, expected),) if expected is not None else ()
    )
    if transform.name == "identity":
        return Term(f"{column_sql} = {literal}", checks)
    function = system_function(catalog, "truncate")
    return Term(f"{function}({transform.param}, {column_sql}) = {literal}", checks)


def bound_text(source: SparkType, bound: date | datetime) -> str:
    """``canonical_text_expr``'s text of a range bound (epoch days, epoch microseconds, or
    the ``timestamp_ntz`` text)."""
    if isinstance(bound, datetime):
        naive = bound.astimezone(UTC).replace(tzinfo=None) if bound.tzinfo else bound
        micros = (naive - _EPOCH) // timedelta(microseconds=1)
        return str(micros) if source.name == "timestamp" else timestamp_ntz_text(micros)
    return str((bound - _EPOCH_DAY).days)


def _time_function(column_sql: str, name: str, value: int, catalog: str | None) -> Term:
    function = system_function(catalog, f"{name}s")
    if name != "day":
        return Term(f"{function}({column_sql}) = {value}")
    try:
        day = _EPOCH_DAY + timedelta(days=value)
    except OverflowError as exc:
        raise UnsupportedLiteral(f"day partition value {value} is outside years 1-9999") from exc
    literal = typed_literal(SparkType("date"), day)
    return Term(
        f"{function}({column_sql}) = {literal}", ((SparkType("date"), literal, str(value)),)
    )
