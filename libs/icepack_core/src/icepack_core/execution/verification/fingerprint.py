"""A content fingerprint of an Iceberg table that works for every column type Spark can read.

``Fingerprint`` is the live row count plus an order-independent checksum: the sum (as
``DECIMAL(38,0)``, so it never overflows) of ``xxhash64`` over a canonical form of each row.
Spark's hash functions accept every type but maps (``DATATYPE_MISMATCH.HASH_MAP_TYPE``), and a
map's entry order is not part of its value, so the canonical form replaces every map, at any
depth, by its entries sorted (``array_sort(map_entries(m))``), recursing with ``transform`` into
arrays and by field into structs. Spark's hash skips NULLs inside arrays and structs and does
not count array elements, so every nested value carries its ``IS NULL`` flag and every array
and map its size (``canonical``). Each column is followed by its ``IS NULL`` flag too, so
``(NULL, 1)`` and ``(1, NULL)`` differ.

Floats: ``xxhash64`` hashes ``doubleToLongBits`` (every NaN the same) and maps ``-0.0`` to
``0.0``, so NaN payloads and the sign of zero are normalised; a rewrite never changes either.

The schema comes from ``SHOW CREATE TABLE``, whose column types are Spark's ``DataType.sql``
with every field name backquoted when needed. ``DESCRIBE TABLE`` is not used: its nested types
(``simpleString``) leave field names unquoted and truncate wide structs. This is plain SQL, so it
works the same on the local, Connect and Thrift engines. Every identifier goes through
``sql_ident.quote_identifier``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from icepack_core.errors import SchemaUnreadable
from icepack_core.spark.engine import SparkEngine
from icepack_core.spark.sql import quote_identifier


@dataclass(frozen=True)
class Fingerprint:
    """Live contents of a table at one snapshot: row count and an order-independent checksum."""

    rows: int
    checksum: int


@dataclass(frozen=True)
class SparkType:
    """A parsed Spark SQL type: ``name`` is upper case (``MAP``, ``DECIMAL``...); ``args`` are
    the element types (ARRAY: one, MAP: key and value); ``fields`` the struct's (name, type);
    ``params`` a primitive's parameters as written (``(10,2)`` of a ``DECIMAL``)."""

    name: str
    args: tuple[SparkType, ...] = ()
    fields: tuple[tuple[str, SparkType], ...] = ()
    params: str = ""

    @property
    def sql(self) -> str:
        """The type as Spark SQL text (field names quoted), e.g. for a ``CAST``."""
        if self.name == "ARRAY":
            return f"ARRAY<{self.args[0].sql}>"
        if self.name == "MAP":
            return f"MAP<{self.args[0].sql}, {self.args[1].sql}>"
        if self.name == "STRUCT":
            inner = ", ".join(f"{quote_identifier(n)}: {t.sql}" for n, t in self.fields)
            return f"STRUCT<{inner}>"
        return self.name + self.params


_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<quoted>`(?:[^`]|``)*`)
  | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<word>[A-Za-z0-9_.\-]+)
  | (?P<punct>[<>(),:=])
""",
    re.VERBOSE | re.DOTALL,
)


class _Tokens:
    def __init__(self, text: str) -> None:
        self.items: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if match is None:
                raise SchemaUnreadable(f"unexpected character {text[pos]!r} at {pos} in {text!r}")
            kind = match.lastgroup or ""
            if kind != "space":
                self.items.append((kind, match.group()))
            pos = match.end()
        self.pos = 0
        self.text = text

    def peek(self) -> tuple[str, str]:
        return self.items[self.pos] if self.pos < len(self.items) else ("end", "")

    def take(self, expected: str | None = None) -> tuple[str, str]:
        kind, value = self.peek()
        if kind == "end" or (expected is not None and value.upper() != expected):
            raise SchemaUnreadable(
                f"expected {expected or 'a token'}, found {value!r} in {self.text[:300]!r}"
            )
        self.pos += 1
        return kind, value

    def accept(self, word: str) -> bool:
        if self.peek()[1].upper() == word:
            self.pos += 1
            return True
        return False

    def name(self) -> str:
        kind, value = self.take()
        if kind == "quoted":
            return value[1:-1].replace("``", "`")
        if kind == "word":
            return value
        raise SchemaUnreadable(f"expected a name, found {value!r} in {self.text[:300]!r}")


def _type(tokens: _Tokens) -> SparkType:
    _, word = tokens.take()
    name = word.upper()
    if name == "ARRAY":
        tokens.take("<")
        element = _type(tokens)
        tokens.take(">")
        return SparkType(name, (element,))
    if name == "MAP":
        tokens.take("<")
        key = _type(tokens)
        tokens.take(",")
        value = _type(tokens)
        tokens.take(">")
        return SparkType(name, (key, value))
    if name == "STRUCT":
        tokens.take("<")
        fields: list[tuple[str, SparkType]] = []
        while not tokens.accept(">"):
            if fields:
                tokens.take(",")
            field = tokens.name()
            tokens.take(":")
            fields.append((field, _type(tokens)))
            _column_suffix(tokens)
        return SparkType(name, fields=tuple(fields))
    params: list[str] = []
    if tokens.accept("("):  # DECIMAL(p,s), VARCHAR(n)
        while not tokens.accept(")"):
            lexeme, text = tokens.take()
            if lexeme != "word" and text != ",":
                raise SchemaUnreadable(f"unexpected {text!r} in the parameters of {name}")
            params.append(text)
    return SparkType(name, params=f"({''.join(params)})" if params else "")


def _column_suffix(tokens: _Tokens) -> None:
    """Skip ``NOT NULL`` and ``COMMENT '...'`` after a column or field type."""
    while True:
        if tokens.accept("NOT"):
            tokens.take("NULL")
        elif tokens.accept("COMMENT"):
            if tokens.take()[0] != "string":
                raise SchemaUnreadable(f"COMMENT without a string in {tokens.text[:300]!r}")
            while tokens.peek()[0] == "string":  # 'a' 'b' is one literal in Spark SQL
                tokens.take()
        else:
            return


def parse_type(text: str) -> SparkType:
    """Parse one Spark SQL type (``MAP<STRING, ARRAY<STRUCT<`a b`: INT>>>``).

    Raises:
        SchemaUnreadable: the text is not a type (the message quotes it).
    """
    tokens = _Tokens(text)
    parsed = _type(tokens)
    if tokens.peek()[0] != "end":
        raise SchemaUnreadable(f"unexpected {tokens.peek()[1]!r} after the type in {text!r}")
    return parsed


def parse_columns(ddl: str) -> list[tuple[str, SparkType]]:
    """The columns of a ``SHOW CREATE TABLE`` statement, in order.

    Raises:
        SchemaUnreadable: the statement has no column list or a column cannot be parsed.
    """
    tokens = _Tokens(ddl)
    while tokens.peek()[0] != "end" and tokens.peek()[1] != "(":
        tokens.take()  # CREATE TABLE `cat`.`ns`.`t`
    tokens.take("(")
    columns: list[tuple[str, SparkType]] = []
    while not tokens.accept(")"):
        if columns:
            tokens.take(",")
        column = tokens.name()
        columns.append((column, _type(tokens)))
        _column_suffix(tokens)
    if not columns:
        raise SchemaUnreadable(f"no columns in {ddl[:300]!r}")
    return columns


def canonical(expr: str, kind: SparkType, depth: int = 0) -> str:
    """``expr`` (of type ``kind``) as an expression Spark's hashes accept, equal exactly for
    equal values.

    Spark's ``xxhash64`` skips a NULL inside an array or a struct and chains array elements
    without their count, so ``[1, NULL]``, ``[NULL, 1]`` and ``[1]``, ``[[1], [2]]`` and
    ``[[1, 2]]``, or a NULL struct and a struct of NULLs would hash alike: every nested value is
    paired with its ``IS NULL`` flag and every array and map with its size. Maps (which Spark
    refuses to hash) become their entries sorted by key (keys are unique, so the order is
    total). Primitives are hashed as they are."""
    if kind.name not in ("ARRAY", "MAP", "STRUCT"):
        return expr
    var = f"_e{depth}"
    if kind.name == "MAP":
        key, value = kind.args
        entries = (
            f"transform(map_entries({expr}), {var} -> struct("
            f"{canonical(f'{var}.key', key, depth + 1)}, "
            f"{canonical(f'{var}.value', value, depth + 1)}, {var}.value IS NULL))"
        )
        return f"if({expr} IS NULL, NULL, struct(size({expr}), array_sort({entries})))"
    if kind.name == "ARRAY":
        (element,) = kind.args
        items = (
            f"transform({expr}, {var} -> struct("
            f"{canonical(var, element, depth + 1)}, {var} IS NULL))"
        )
        return f"if({expr} IS NULL, NULL, struct(size({expr}), {items}))"
    parts: list[str] = []
    for name, field in kind.fields:
        ref = f"{expr}.{quote_identifier(name)}"
        parts += [canonical(ref, field, depth), f"{ref} IS NULL"]
    return f"if({expr} IS NULL, NULL, struct({', '.join(parts)}))"


def checksum_expression(columns: list[tuple[str, SparkType]]) -> str:
    """The aggregate: ``coalesce(sum(xxhash64(<canonical row>)), 0)`` as ``DECIMAL(38,0)``.

    Each column is cast to its type in ``columns`` (the table's current schema) first. A time
    travel read uses the snapshot's own schema, so a parent committed before a type was widened
    (``int`` to ``bigint``, ``float`` to ``double``, a wider ``decimal``) reads the old type,
    whose hash differs for the same value; the cast is exact for every widening Iceberg allows,
    and Spark drops it where the type already is the current one."""
    terms: list[str] = []
    for name, kind in columns:
        ident = quote_identifier(name)
        terms += [canonical(f"(CAST({ident} AS {kind.sql}))", kind), f"{ident} IS NULL"]
    return (
        "coalesce(sum(cast(xxhash64(" + ", ".join(terms) + ") AS DECIMAL(38,0))), "
        "CAST(0 AS DECIMAL(38,0)))"
    )


def as_int(value: Any) -> int:
    """A count or checksum as returned by any engine (int, Decimal, or text over Thrift)."""
    return int(Decimal(str(value)))


async def table_columns(engine: SparkEngine, qualified: str) -> list[tuple[str, SparkType]]:
    """The table's columns as Spark sees them now (``qualified`` is already quoted)."""
    rows = await engine.sql(f"SHOW CREATE TABLE {qualified}")
    if not rows:
        raise SchemaUnreadable(f"SHOW CREATE TABLE {qualified} returned nothing")
    return parse_columns(str(next(iter(rows[0].values()))))


async def fingerprint(
    engine: SparkEngine,
    qualified: str,
    snapshot_id: int | None,
    columns: list[tuple[str, SparkType]] | None,
) -> Fingerprint:
    """Row count and checksum of the live rows (deletes applied) at ``snapshot_id`` (current
    when None). ``columns`` None counts rows only (checksum 0)."""
    version = f" VERSION AS OF {int(snapshot_id)}" if snapshot_id is not None else ""
    checksum = checksum_expression(columns) if columns is not None else "0"
    rows = await engine.sql(f"SELECT count(*) AS n, {checksum} AS h FROM {qualified}{version}")
    return Fingerprint(as_int(rows[0]["n"]), as_int(rows[0]["h"]))
