"""The one place where values become Spark SQL text.

Every identifier, literal, procedure call and ``SET`` statement Icepack sends to Spark is built
here. Names come from catalogs, table properties and HTTP requests, so nothing is trusted:
identifiers are validated and backtick-quoted, literals are typed and escaped, procedures and
Spark confs pass through allowlists. Callers never concatenate SQL themselves; engines only
execute what these functions return.

Quoting follows the Spark SQL grammar (``SqlBaseLexer.g4``): a backquoted identifier is
`` ` ( ~'`' | '``' )* ` `` and a string literal is ``' ( ~('\\''|'\\\\') | '\\\\' . )* '``
unescaped by ``ParserUtils.unescapeSQLString``. The tests check the output against Spark's own
parser, not against this module.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from icepack_core.errors import InvalidIdentifier
from icepack_core.types import Action, TableRef

# Catalogs and Hive-style metastores cap names well below this; 255 also keeps log lines sane.
MAX_IDENTIFIER_LENGTH = 255
# Large enough for any S3 URI or filter we generate, small enough to refuse pasted blobs.
MAX_STRING_LITERAL_LENGTH = 65_536
_INT64_MAX = 2**63 - 1

# Iceberg procedures Icepack runs (``CALL <catalog>.system.<name>``). Anything else, such as
# ``register_table`` or ``migrate``, changes more than maintenance should.
ALLOWED_PROCEDURES = frozenset({*Action, "rollback_to_snapshot"})

# Spark confs a table may tune through ``icepack.spark.sql.*`` properties. All are SQL-session
# scoped and only affect how the maintenance job plans and shuffles, never where data goes or
# what is committed (so no warehouse/catalog/WAP or `spark.sql.iceberg.merge-schema` keys).
ALLOWED_SPARK_CONFS = frozenset(
    {
        # Shuffle and input-split sizing: how many tasks a rewrite or manifest rewrite uses.
        "spark.sql.shuffle.partitions",
        "spark.sql.files.maxPartitionBytes",
        "spark.sql.files.openCostInBytes",
        "spark.sql.adaptive.enabled",
        "spark.sql.adaptive.coalescePartitions.enabled",
        "spark.sql.adaptive.advisoryPartitionSizeInBytes",
        # Iceberg planning (SparkSQLProperties in iceberg-spark-runtime-3.5 1.10): local vs
        # distributed planning for huge manifests, split grouping, locality lookups on HDFS.
        "spark.sql.iceberg.planning.preserve-data-grouping",
        "spark.sql.iceberg.data-planning-mode",
        "spark.sql.iceberg.delete-planning-mode",
        "spark.sql.iceberg.locality.enabled",
        "spark.sql.iceberg.advisory-partition-size",
        "spark.sql.iceberg.vectorization.enabled",
        # Output encoding of rewritten files.
        "spark.sql.iceberg.compression-codec",
        "spark.sql.iceberg.compression-level",
    }
)
TABLE_PROPERTY_PREFIX = "icepack.spark.sql."
_CONF_VALUE = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")
_ARGUMENT_NAME = re.compile(r"^[a-z_]+$")

# Bidirectional overrides render text in a different order than Spark parses it ("trojan
# source"); U+2028/U+2029 break log lines like a newline does.
_FORBIDDEN_FORMAT_CHARS = frozenset(
    "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"
)


ScalarValue = bool | int | float | str | datetime


@dataclass(frozen=True, slots=True)
class BigintArray:
    """A procedure argument of type ``array<bigint>`` (``snapshot_ids``), never empty: an empty
    ``array()`` has no element type, and an empty id list means "do not call" to Icepack."""

    values: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StringArray:
    """A procedure argument of type ``array<string>`` (``columns``), never empty (an empty
    list means "leave the argument out", the procedure's default)."""

    values: tuple[str, ...]


ProcedureValue = ScalarValue | TableRef | Mapping[str, str] | BigintArray | StringArray


def _reject_unsafe_chars(value: str, what: str) -> None:
    for ch in value:
        category = unicodedata.category(ch)
        if category == "Cs":
            raise InvalidIdentifier(f"{what} {value!r} contains a lone surrogate {ch!r}")
        if category == "Cc" or ch in _FORBIDDEN_FORMAT_CHARS:
            raise InvalidIdentifier(f"{what} {value!r} contains the control character {ch!r}")


def quote_identifier(name: str) -> str:
    """Quote one identifier part (catalog, namespace level, table, column) for Spark SQL.

    Args:
        name: the raw name, any Unicode text.

    Returns:
        The name in backticks with inner backticks doubled, e.g. ``my`t`` -> ```my``t```.

    Raises:
        InvalidIdentifier: the name is empty, longer than 255 characters, or contains a control
            character (NUL, newline, carriage return, ...), a line separator, a bidi override or
            a lone surrogate. The message shows the value with ``repr``.
    """
    if not isinstance(name, str):
        raise InvalidIdentifier(f"identifier must be a string, got {type(name).__name__}")
    if not name:
        raise InvalidIdentifier("identifier '' is empty")
    if len(name) > MAX_IDENTIFIER_LENGTH:
        raise InvalidIdentifier(
            f"identifier {name[:40]!r}... is {len(name)} characters long "
            f"(at most {MAX_IDENTIFIER_LENGTH})"
        )
    _reject_unsafe_chars(name, "identifier")
    return "`" + name.replace("`", "``") + "`"


def qualified_name(catalog: str, namespace_levels: Sequence[str], table: str) -> str:
    """``catalog.ns1.ns2.table`` with every part quoted.

    Raises:
        InvalidIdentifier: any part is invalid (see ``quote_identifier``), or ``namespace_levels``
            is a bare string (a common slip that would split it into characters).
    """
    if isinstance(namespace_levels, str):
        raise InvalidIdentifier(
            f"namespace_levels must be a sequence of levels, not the string {namespace_levels!r}"
        )
    parts = [catalog, *namespace_levels, table]
    return ".".join(quote_identifier(part) for part in parts)


def sql_string_literal(value: str) -> str:
    """A Spark SQL string literal whose parsed value is exactly ``value``.

    Backslashes and single quotes are backslash-escaped (Spark's default,
    ``spark.sql.parser.escapedStringLiterals=false``; that conf is not in the allowlist).

    Raises:
        InvalidIdentifier: the value contains a control character or a lone surrogate, or is
            longer than ``MAX_STRING_LITERAL_LENGTH``.
    """
    if not isinstance(value, str):
        raise InvalidIdentifier(f"string literal must be a str, got {type(value).__name__}")
    if len(value) > MAX_STRING_LITERAL_LENGTH:
        raise InvalidIdentifier(
            f"string literal {value[:40]!r}... is longer than {MAX_STRING_LITERAL_LENGTH}"
        )
    _reject_unsafe_chars(value, "string literal")
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_literal(value: ScalarValue) -> str:
    """A typed Spark SQL literal.

    ``bool`` -> ``true``/``false`` (checked before ``int``, which it subclasses); ``int`` ->
    decimal digits (INT or BIGINT by magnitude); ``float`` -> a DOUBLE literal (``1.5D``);
    ``str`` -> ``sql_string_literal``; ``datetime`` -> ``TIMESTAMP '...'`` in UTC (aware
    values only, so the session time zone cannot shift it).

    Raises:
        ValueError: NaN or infinite floats, integers outside the 64-bit range, naive datetimes,
            or an unsupported type (``InvalidIdentifier`` for bad strings).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if abs(value) > _INT64_MAX:
            raise ValueError(f"integer literal {value} is outside the 64-bit range")
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"float literal {value!r} is not finite")
        return f"{value!r}D"
    if isinstance(value, str):
        return sql_string_literal(value)
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"timestamp literal {value!r} is naive; pass an aware datetime")
        utc = value.astimezone(UTC).replace(tzinfo=None)
        return f"TIMESTAMP '{utc.isoformat(sep=' ')}+00:00'"
    raise ValueError(f"cannot render {type(value).__name__} {value!r} as a SQL literal")


def _map_literal(options: Mapping[str, str]) -> str:
    pairs: list[str] = []
    for key, item in options.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise ValueError(
                f"map entries must be str -> str, got {type(key).__name__} -> "
                f"{type(item).__name__} for {key!r}"
            )
        pairs += [sql_string_literal(key), sql_string_literal(item)]
    return f"map({', '.join(pairs)})"


def bigint_array_literal(values: BigintArray) -> str:
    """``array(1L, -2L, ...)``: each element a BIGINT literal (the ``L`` suffix), so the array is
    ``array<bigint>`` whatever the magnitudes.

    Raises:
        ValueError: no elements, an element that is not an ``int`` (``bool`` included) or is
            outside the 64-bit range.
    """
    if not values.values:
        raise ValueError("an array<bigint> argument needs at least one element")
    items = []
    for value in values.values:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"array<bigint> element {value!r} is not an int")
        if abs(value) > _INT64_MAX:
            raise ValueError(f"array<bigint> element {value} is outside the 64-bit range")
        items.append(f"{value}L")
    return f"array({', '.join(items)})"


def string_array_literal(values: StringArray) -> str:
    """``array('a', 'b', ...)``: each element a string literal (``sql_string_literal``).

    Raises:
        ValueError: no elements, or an element that is not a ``str``.
        InvalidIdentifier: an element ``sql_string_literal`` refuses.
    """
    if not values.values:
        raise ValueError("an array<string> argument needs at least one element")
    for value in values.values:
        if not isinstance(value, str):
            raise ValueError(f"array<string> element {value!r} is not a str")
    return f"array({', '.join(sql_string_literal(v) for v in values.values)})"


def procedure_call(catalog: str, procedure: str, args: Mapping[str, ProcedureValue]) -> str:
    """``CALL `catalog`.`system`.`procedure`(name => literal, ...)``.

    Args:
        catalog: the Spark catalog name the table lives in.
        procedure: one of ``ALLOWED_PROCEDURES``.
        args: named arguments, rendered in the given order. A ``TableRef`` (its namespace
            levels and name, in ``catalog``) becomes a string literal holding the quoted
            catalog-qualified name (the catalog is included so a namespace that happens to
            share a catalog's name is never misread); a mapping
            becomes ``map('k', 'v', ...)`` (an empty mapping is omitted, which is the
            procedures' default); a ``BigintArray`` becomes ``array(1L, ...)``, a
            ``StringArray`` ``array('a', ...)``; everything
            else goes through ``sql_literal``.

    Returns:
        One ``CALL`` statement, no trailing semicolon.

    Raises:
        InvalidIdentifier: unknown procedure, bad argument name, bad identifier or string.
        ValueError: an argument value of an unsupported type, or ``table`` given as a plain
            string instead of a ``TableRef``.
    """
    if procedure not in ALLOWED_PROCEDURES:
        raise InvalidIdentifier(
            f"procedure {procedure!r} is not allowed (allowed: {sorted(ALLOWED_PROCEDURES)})"
        )
    rendered: list[str] = []
    for name, value in args.items():
        if not isinstance(name, str) or not _ARGUMENT_NAME.match(name):
            raise InvalidIdentifier(f"procedure argument name {name!r} must match [a-z_]+")
        if isinstance(value, TableRef):
            table_name = qualified_name(catalog, value.levels, value.name)
            literal = sql_string_literal(table_name)
        elif name == "table":
            raise ValueError(f"argument 'table' must be a TableRef, got {value!r}")
        elif isinstance(value, Mapping):
            if not value:
                continue
            literal = _map_literal(value)
        elif isinstance(value, BigintArray):
            literal = bigint_array_literal(value)
        elif isinstance(value, StringArray):
            literal = string_array_literal(value)
        else:
            literal = sql_literal(value)
        rendered.append(f"{name} => {literal}")
    target = qualified_name(catalog, ["system"], procedure)
    return f"CALL {target}({', '.join(rendered)})"


_PLAIN_CONF_KEY = re.compile(r"^[A-Za-z0-9_.:]+$")  # Spark's grammar for an unquoted SET key
# What ``SET key`` answers for a conf that has no value in the session (nor a default).
SPARK_CONF_UNDEFINED = "<undefined>"


def _conf_key(key: str, allowed: Iterable[str]) -> str:
    """``key`` as ``SET``/``RESET`` accept it: plain, or backquoted when it has a ``-`` (Spark
    parses ``SET a.b-c=1`` as an error). Allowlisted keys contain no backquote."""
    if key not in allowed:
        raise InvalidIdentifier(f"Spark conf {key!r} is not in the allowlist of tunable confs")
    return key if _PLAIN_CONF_KEY.match(key) else f"`{key}`"


def spark_conf_set(key: str, value: str, allowlist: Iterable[str] = ALLOWED_SPARK_CONFS) -> str:
    """``SET key=value`` for one allowlisted, session-scoped Spark conf.

    Raises:
        InvalidIdentifier: ``key`` is not in ``allowlist``, or ``value`` is not 1-200 characters
            of ``[A-Za-z0-9_.:-]`` (the message names the key).
    """
    allowed = allowlist if isinstance(allowlist, frozenset | set) else frozenset(allowlist)
    quoted = _conf_key(key, allowed)
    if not isinstance(value, str) or not _CONF_VALUE.match(value):
        raise InvalidIdentifier(
            f"value {value!r} for Spark conf {key!r} must be 1-200 characters of "
            "letters, digits, '_', '.', ':' or '-'"
        )
    return f"SET {quoted}={value}"


def spark_conf_show(key: str, allowlist: Iterable[str] = ALLOWED_SPARK_CONFS) -> str:
    """``SET key``: one row ``(key, value)`` with the conf's current session value (or
    ``SPARK_CONF_UNDEFINED``). Raises ``InvalidIdentifier`` for a key outside ``allowlist``."""
    return f"SET {_conf_key(key, frozenset(allowlist))}"


def spark_conf_reset(key: str, allowlist: Iterable[str] = ALLOWED_SPARK_CONFS) -> str:
    """``RESET key``: back to the value the session started with (or unset).
    Raises ``InvalidIdentifier`` for a key outside ``allowlist``."""
    return f"RESET {_conf_key(key, frozenset(allowlist))}"


def spark_conf_settings(
    properties: Mapping[str, str], allowlist: Iterable[str] = ALLOWED_SPARK_CONFS
) -> list[tuple[str, str]]:
    """``(conf, value)`` for a table's ``icepack.spark.sql.*`` properties, sorted, validated
    as ``spark_conf_set`` does (raises ``InvalidIdentifier`` the same way)."""
    allowed = frozenset(allowlist)
    settings = []
    for prop in sorted(properties):
        if prop.startswith(TABLE_PROPERTY_PREFIX):
            conf = "spark.sql." + prop.removeprefix(TABLE_PROPERTY_PREFIX)
            spark_conf_set(conf, properties[prop], allowed)
            settings.append((conf, properties[prop]))
    return settings


def spark_conf_statements(
    properties: Mapping[str, str], allowlist: Iterable[str] = ALLOWED_SPARK_CONFS
) -> list[str]:
    """``SET`` statements for a table's ``icepack.spark.sql.*`` properties, sorted by key.

    ``icepack.spark.sql.shuffle.partitions=8`` becomes ``SET spark.sql.shuffle.partitions=8``;
    other properties are ignored.

    Raises:
        InvalidIdentifier: a matching property names a conf outside ``allowlist`` or has a bad
            value (the message names the conf).
    """
    allowed = frozenset(allowlist)
    return [
        spark_conf_set(conf, value, allowed)
        for conf, value in spark_conf_settings(properties, allowed)
    ]
