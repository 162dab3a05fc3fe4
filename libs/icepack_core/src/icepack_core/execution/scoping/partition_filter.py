"""A ``where`` filter selecting exactly the identity partitions worth compacting.

``scope_partitions`` reads the ``files`` metadata table, picks the partitions with at least
``min_files`` undersized data files and turns each into ``col = <typed literal>`` terms (``IS
NULL`` for null), one parenthesised conjunction per partition, OR-ed together. Anything that
cannot be expressed exactly raises ``ScopeFallback`` with a reason naming the column and type;
the caller then rewrites the whole table (binpack's ``min-input-files`` skips healthy groups),
so a table is never stuck behind a value Icepack cannot write down.

Why partition values are not read from the ``partition`` struct itself: each engine returns it
differently. Local PySpark gives Python objects, but timestamps as *naive local-time*
datetimes (the Python process's zone, not the session's). Spark Connect converts through Arrow
with its own zone rules. The Thrift server (HiveServer2) sends the struct as Hive-style text
that merely looks like JSON: measured on Spark 3.5 with Iceberg 1.10 it gives
``{"d":2026-01-01,"ts":2026-01-01 10:00:00.123456,"tn":2026-01-01 10:00:00.5,
"dec":0.0000000001,"b":<raw bytes>,"bo":true,"l":9223372036854775807,"f":NaN,"db":-0.0,
"s":"its\\n\\t"ü","st.x":3}`` -- dates and timestamps unquoted (timestamps in the session zone,
no offset), binary as raw undecoded bytes, strings quoted but not escaped (a quote or newline
in a value breaks the syntax), NaN/Infinity bare, decimals as exact digits (which ``json.loads``
would round to a float) and null as ``null``. So instead each partition column is projected in
SQL to exact text by ``typed_literals.canonical_text_expr`` (epoch days, epoch microseconds,
hex, Java float text ...), which every engine returns as a plain string, and decoded according
to the column's Spark type from ``DESCRIBE TABLE EXTENDED``.

Every literal is then checked on the engine before use: the canonical text of the rendered
literal must equal the canonical text read from the table (one extra ``SELECT`` of constants).

Known fallbacks (measured with Iceberg 1.10): a ``uuid`` partition column cannot be read from
the ``files`` table at all (``PartitionData.get``: "Wrong class, expected CharSequence, but was
UUID"), and an identity field renamed away from its source column is not found in the
``partition`` struct; both surface as "partition scoping failed: ..." and rewrite the whole
table. Dates and timestamps outside years 1-9999 have no Python value and fall back too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from icepack_core.errors import ScopeFallback, UnsupportedLiteral
from icepack_core.execution.scoping.transform_predicates import Transform, field_term, value_type
from icepack_core.spark.engine import SparkEngine
from icepack_core.spark.literals import (
    PartitionValue,
    SparkType,
    canonical_text_expr,
    decode_canonical,
    reads_back_by_grammar,
    typed_literal,
)
from icepack_core.spark.sql import MAX_STRING_LITERAL_LENGTH, quote_identifier


@dataclass(frozen=True, slots=True)
class PartitionColumn:
    """One partition field as a filter addresses it: its source column's name path and Spark
    type text, and the field's transform as PyIceberg prints it (``identity``, ``year``,
    ``month``, ``day``, ``hour``, ``bucket[N]``, ``truncate[W]``; see
    ``transform_predicates``). ``catalog`` names the Iceberg catalog whose ``system``
    functions a ``bucket``/``truncate`` term calls; ``name`` the partition field's name when
    it is known (from the spec; else the identity naming, ``field_name``)."""

    path: tuple[str, ...]
    type_text: str
    transform: str = "identity"
    catalog: str | None = None
    name: str | None = None

    @property
    def sql(self) -> str:
        """The column as a quoted (possibly nested) reference: ```st`.`x```."""
        return ".".join(quote_identifier(part) for part in self.path)

    @property
    def field_name(self) -> str:
        """The partition field's name: Iceberg names an identity field after the source
        column's full dotted name (``st.x``); a renamed field is not found in ``files`` and the
        scoping falls back."""
        return self.name if self.name is not None else ".".join(self.path)

    def __str__(self) -> str:
        if self.transform == "identity":
            return f"{self.sql} ({self.type_text})"
        return f"{self.transform}({self.sql}) ({self.type_text})"


def split_described_name(text: str) -> tuple[str, ...]:
    """Parts of a name as ``DESCRIBE`` prints it: Spark's ``quoteIfNeeded`` parts joined by
    ``.``, so ``st.x`` -> ``('st', 'x')`` and ```a.b`.c`` -> ``('a.b', 'c')``.

    Raises:
        ValueError: unbalanced backticks or an empty part.
    """
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    i = 0
    while i < len(text):
        ch = text[i]
        if quoted:
            if ch == "`" and text[i + 1 : i + 2] == "`":
                current.append("`")
                i += 1
            elif ch == "`":
                quoted = False
            else:
                current.append(ch)
        elif ch == "`":
            quoted = True
        elif ch == ".":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current))
    if quoted or any(not part for part in parts):
        raise ValueError(f"cannot split the column name {text!r}")
    return tuple(parts)


def identity_columns(describe_rows: Sequence[Mapping[str, Any]]) -> list[PartitionColumn] | None:
    """The identity partition columns in ``DESCRIBE TABLE EXTENDED`` output.

    Spark (``DescribeTableExec``) lists identity-only partitioning under ``# Partition
    Information`` (name and type per column) and any other transform under ``# Partitioning``
    (``days(ts)`` ...). Returns None for the latter, ``[]`` for an unpartitioned table.
    """
    columns: list[PartitionColumn] = []
    section = False
    for row in describe_rows:
        label = str(row.get("col_name") or "").strip()
        if label == "# Partitioning":
            return None
        if label == "# Partition Information":
            section = True
            continue
        if not section or label == "# col_name":
            continue
        if not label or label.startswith("#"):
            break
        try:
            path = split_described_name(label)
        except ValueError:
            return None
        columns.append(PartitionColumn(path, str(row.get("data_type") or "")))
    return columns


# ``DESCRIBE``'s transform text -> (PyIceberg's transform name, Iceberg's default field suffix).
_DESCRIBED_TRANSFORMS = {
    "years": ("year", "_year"),
    "months": ("month", "_month"),
    "days": ("day", "_day"),
    "hours": ("hour", "_hour"),
    "bucket": ("bucket", "_bucket"),
    "truncate": ("truncate", "_trunc"),
}


def transform_columns(
    describe_rows: Sequence[Mapping[str, Any]], catalog: str | None
) -> list[PartitionColumn] | None:
    """The current spec's fields from ``DESCRIBE TABLE EXTENDED``'s ``# Partitioning`` section
    (``days(ts)``, ``bucket(4, id)``, ``part`` ...), each with its source column's type and the
    name Iceberg gives such a field by default (``ts_day``, ``id_bucket``, ``s_trunc``). None
    when a row is not one of those (a nested or unknown column, another transform). A field
    renamed from its default is not found in the ``partition`` struct and the caller's query
    fails: the comparison is then table-wide, never wrongly scoped."""
    types: dict[str, str] = {}
    fields: list[str] = []
    section = None
    for row in describe_rows:
        label = str(row.get("col_name") or "").strip()
        text = str(row.get("data_type") or "").strip()
        if label.startswith("#"):
            section = label
            continue
        if section is None and label:
            types.setdefault(label, text)
        elif section == "# Partitioning" and label.startswith("Part "):
            fields.append(text)
        elif section == "# Partitioning" and not label:
            break
    columns = []
    for text in fields:
        column = _described_field(text, types, catalog)
        if column is None:
            return None
        columns.append(column)
    return columns or None


def _described_field(
    text: str, types: Mapping[str, str], catalog: str | None
) -> PartitionColumn | None:
    if text in types:  # identity: the bare column name
        return PartitionColumn((text,), types[text])
    name, _, rest = text.partition("(")
    args = [a.strip() for a in rest.rstrip(")").split(",")]
    if name not in _DESCRIBED_TRANSFORMS or not rest.endswith(")") or args[-1] not in types:
        return None
    transform, suffix = _DESCRIBED_TRANSFORMS[name]
    if transform in ("bucket", "truncate"):
        if len(args) != 2 or not args[0].isdigit():
            return None
        transform = f"{transform}[{int(args[0])}]"
    elif len(args) != 1:
        return None
    source = args[-1]
    return PartitionColumn((source,), types[source], transform, catalog, source + suffix)


@dataclass(frozen=True)
class PartitionScope:
    """The filter and what it covers. ``where`` is ``"false"`` when nothing qualifies.

    From the manifests (``metadata_scope``) also: qualifying partitions ``deferred`` to a later
    run by the per-run cap, open partitions skipped (``open_skipped``: the first few named,
    ``open_skipped_count`` all of them), and how many partition specs other than the current
    one the selection spans (``older_specs``)."""

    where: str
    selected: int
    total: int
    deferred: int = 0
    open_skipped: tuple[str, ...] = ()
    open_skipped_count: int = 0
    older_specs: int = 0
    # The selected partitions as (spec id, partition tuple), from the manifests only: what
    # ``metadata_scope.left_behind`` checks after the rewrite.
    keys: tuple[tuple[int, tuple[Any, ...]], ...] = ()


def _column_types(columns: Sequence[PartitionColumn]) -> list[SparkType]:
    types = []
    for column in columns:
        try:
            types.append(SparkType.parse(column.type_text))
        except UnsupportedLiteral as exc:
            raise ScopeFallback(f"partition column {column}: {exc}") from exc
    return types


def partition_predicate(
    columns: Sequence[PartitionColumn], types: Sequence[SparkType], values: Sequence[PartitionValue]
) -> str:
    """``(`a` = 1 AND `b` IS NULL)`` for one partition.

    Raises:
        UnsupportedLiteral: a value has no exact literal of its column's type.
    """
    terms = []
    for column, spark_type, value in zip(columns, types, values, strict=True):
        if value is None:
            terms.append(f"{column.sql} IS NULL")
        else:
            terms.append(f"{column.sql} = {typed_literal(spark_type, value)}")
    return "(" + " AND ".join(terms) + ")"


async def scope_partitions(
    engine: SparkEngine,
    files_table: str,
    columns: Sequence[PartitionColumn],
    *,
    undersized_bytes: int,
    min_files: int,
    max_partitions: int,
) -> PartitionScope:
    """The filter selecting the partitions with ``>= min_files`` data files under
    ``undersized_bytes``.

    Raises:
        ScopeFallback: an unsupported column type, a value that cannot be decoded or rendered
            exactly or fails the round trip on the engine, more than ``max_partitions``
            partitions qualifying, or a filter too long to pass as a procedure argument.
    """
    types = _column_types(columns)
    partition = quote_identifier("partition")
    keys = [f"v{i}" for i in range(len(columns))]
    # Canonical texts are computed per file and grouped as strings: grouping the float-typed
    # struct itself would merge -0.0 with 0.0 (Spark normalises floating grouping keys), which
    # Iceberg keeps as two partitions.
    per_file = (
        "SELECT "
        + ", ".join(
            f"{canonical_text_expr(t, f'{partition}.{quote_identifier(c.field_name)}')} AS {k}"
            for c, t, k in zip(columns, types, keys, strict=True)
        )
        + f", content, file_size_in_bytes FROM {files_table}"
    )
    rows = await engine.sql(
        f"SELECT {', '.join(keys)}, count(*) AS files FROM ({per_file}) "
        f"WHERE content = 0 AND file_size_in_bytes < {int(undersized_bytes)} "
        f"GROUP BY {', '.join(keys)} HAVING count(*) >= {int(min_files)}"
    )
    total_rows = await engine.sql(
        f"SELECT count(*) AS n FROM (SELECT DISTINCT {', '.join(keys)} FROM ({per_file}))"
    )
    total = int(total_rows[0]["n"]) if total_rows else 0
    if len(rows) > max_partitions:
        raise ScopeFallback(f"{len(rows)} partitions qualify (at most {max_partitions} scoped)")
    texts = [tuple(None if row[k] is None else str(row[k]) for k in keys) for row in rows]
    if not texts:
        return PartitionScope("false", 0, total)
    where = await partitions_where(engine, columns, texts)
    if len(where) > MAX_STRING_LITERAL_LENGTH // 2:  # escaping can double it as an argument
        raise ScopeFallback(f"the partition filter is {len(where)} characters long")
    return PartitionScope(where, len(texts), total)


async def partitions_where(
    engine: SparkEngine,
    columns: Sequence[PartitionColumn],
    texts: Sequence[Sequence[str | None]],
    *,
    time_function: bool = False,
) -> str:
    """The filter ``(a = x AND b IS NULL) OR ...`` selecting the partitions given as canonical
    texts of their partition values (``typed_literals.canonical_text_expr`` of each field's
    value type, ``transform_predicates.value_type``; None for NULL), one term per field
    (``transform_predicates.field_term``), each literal checked on the engine by a round trip
    unless Spark's grammar alone fixes what it reads back as (``reads_back_by_grammar``).
    ``time_function``: time values as Iceberg's functions, not ranges (``field_term``).

    Raises:
        ScopeFallback: an unsupported column type or transform, or a value that cannot be
            decoded or rendered exactly or fails the round trip.
    """
    fields = _fields(columns)
    predicates = []
    checks: list[tuple[PartitionColumn, SparkType, str, str]] = []
    for partition_texts in texts:
        terms = []
        for column, (transform, source, kind), text in zip(
            columns, fields, partition_texts, strict=True
        ):
            try:
                value = decode_canonical(kind, text)
                term = field_term(
                    column.sql,
                    transform,
                    source,
                    value,
                    column.catalog,
                    text,
                    time_function=time_function,
                )
            except UnsupportedLiteral as exc:
                raise ScopeFallback(f"partition column {column}: {exc}") from exc
            terms.append(term.sql)
            checks += [
                (column, literal_type, expected, literal)
                for literal_type, literal, expected in term.literals
                if not reads_back_by_grammar(literal_type, expected)
            ]
        predicates.append("(" + " AND ".join(terms) + ")")
    await _check_round_trip(engine, checks)
    # Sorted: the same partitions give the same filter text, whatever order they came in.
    return " OR ".join(sorted(predicates))


def value_types(columns: Sequence[PartitionColumn]) -> list[SparkType]:
    """The Spark type of each column's partition value (``transform_predicates.value_type``).

    Raises:
        ScopeFallback: an unsupported column type or transform.
    """
    return [kind for _, _, kind in _fields(columns)]


def _fields(columns: Sequence[PartitionColumn]) -> list[tuple[Transform, SparkType, SparkType]]:
    """Per column: its transform, its source type and its partition value's type."""
    fields = []
    for column, source in zip(columns, _column_types(columns), strict=True):
        try:
            transform = Transform.parse(column.transform)
            fields.append((transform, source, value_type(transform, source)))
        except UnsupportedLiteral as exc:
            raise ScopeFallback(f"partition column {column}: {exc}") from exc
    return fields


async def _check_round_trip(
    engine: SparkEngine, checks: Sequence[tuple[PartitionColumn, SparkType, str, str]]
) -> None:
    """Evaluate every literal on the engine: its canonical text must be the one read."""
    if not checks:
        return
    exprs = [
        f"{canonical_text_expr(t, literal)} AS r{i}" for i, (_, t, _, literal) in enumerate(checks)
    ]
    (row,) = await engine.sql("SELECT " + ", ".join(exprs))
    for i, (column, spark_type, text, literal) in enumerate(checks):
        back = row[f"r{i}"]
        if back is None or str(back) != text:
            raise ScopeFallback(
                f"partition column {column}: the {spark_type} literal {literal[:80]} reads back "
                f"as {str(back)[:60]!r}, not {text[:60]!r}"
            )
