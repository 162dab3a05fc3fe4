"""Spark SQL literals rendered from a column's type, for every type an identity partition can have.

``sql_ident.sql_literal`` renders procedure arguments from the Python value's type. A partition
value must instead become a literal *of the partition column's type* (a ``float`` column needs a
FLOAT literal, a ``decimal(38,10)`` column keeps its precision and scale, a ``timestamp_ntz``
column a zone-less literal), and must work whichever engine fetched it. So values travel in two
steps, both driven by the Spark type ``DESCRIBE TABLE`` prints for the column:

1. ``canonical_text_expr(type, expr)`` is a SQL expression that turns a value of that type into
   a STRING exactly, independently of the engine and of the session time zone (dates as epoch
   days, instants as epoch microseconds, binary as hex, floats as Java's shortest decimal).
   ``decode_canonical`` parses that text back into a Python value.
2. ``typed_literal(type, value)`` renders the Python value as a literal of exactly that type.

Applying ``canonical_text_expr`` to the rendered literal must give back the same text: callers
check that round trip on the engine itself before trusting a literal (``partition_filter``),
except where Spark's grammar alone fixes the answer (``reads_back_by_grammar``: plain strings,
booleans, canonical integers).

Iceberg types as Spark sees them (iceberg-spark 1.10): boolean, int, long (``bigint``), float,
double, decimal(P,S), date, string, binary map one to one; ``timestamptz`` is ``timestamp``,
``timestamp`` (no zone) is ``timestamp_ntz``; ``uuid`` is ``string`` and ``fixed[L]`` is
``binary`` (Iceberg converts the string / binary literal to the column's type, checking the
length; but see ``partition_filter`` on uuid partitions). ``time``, ``timestamp_ns`` and
``variant`` have no Spark type: ``SparkType.parse`` rejects every type not listed in
``SUPPORTED_TYPES``.
"""

from __future__ import annotations

import math
import re
import struct
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Context, Decimal, InvalidOperation

from icepack_core.errors import UnsupportedLiteral
from icepack_core.spark.sql import MAX_STRING_LITERAL_LENGTH

SUPPORTED_TYPES = frozenset(
    {
        "boolean",
        "tinyint",
        "smallint",
        "int",
        "bigint",
        "float",
        "double",
        "decimal",
        "date",
        "timestamp",
        "timestamp_ntz",
        "string",
        "binary",
    }
)
_INT_RANGES = {"tinyint": 8, "smallint": 16, "int": 32, "bigint": 64}
# Spark's typed integer literals (``SqlBaseLexer``): 1Y tinyint, 1S smallint, 1 int, 1L bigint.
_INT_SUFFIXES = {"tinyint": "Y", "smallint": "S", "int": "", "bigint": "L"}
_DECIMAL = re.compile(r"^decimal\((\d{1,2}),(\d{1,2})\)$")
_DECIMAL_DIGITS = 80  # more than Spark's 38, so arithmetic on any decimal(p,s) value is exact
_EPOCH_DAY = date(1970, 1, 1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Spark prints non-finite floats as Java does; CAST from these strings gives them back.
_NON_FINITE = {"NaN", "Infinity", "-Infinity"}
# Characters written as \uNNNN escapes instead of raw: control characters, format characters
# (bidi overrides, zero-width ...) and line/paragraph separators. Spark's unescapeSQLString
# turns the escape back into the character, and the SQL text stays one printable line.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})

PartitionValue = None | bool | int | float | Decimal | str | bytes | date | datetime


@dataclass(frozen=True, slots=True)
class SparkType:
    """A Spark scalar type as ``DESCRIBE TABLE`` prints it (``DataType.simpleString``)."""

    name: str
    precision: int = 0
    scale: int = 0

    @classmethod
    def parse(cls, text: str) -> SparkType:
        """``'decimal(10,2)'`` -> ``SparkType('decimal', 10, 2)``.

        Raises:
            UnsupportedLiteral: a type outside ``SUPPORTED_TYPES`` (named in the message).
        """
        name = str(text).strip().lower()
        match = _DECIMAL.match(name.replace(" ", ""))
        if match:
            precision, scale = int(match.group(1)), int(match.group(2))
            if not 1 <= precision <= 38 or scale > precision:
                raise UnsupportedLiteral(f"type {text!r} is not a valid decimal")
            return cls("decimal", precision, scale)
        if name not in SUPPORTED_TYPES or name == "decimal":
            raise UnsupportedLiteral(f"type {text!r} has no supported literal form")
        return cls(name)

    def __str__(self) -> str:
        return f"decimal({self.precision},{self.scale})" if self.name == "decimal" else self.name


def canonical_text_expr(spark_type: SparkType, expr: str) -> str:
    """A SQL expression giving the value of ``expr`` (of ``spark_type``) as exact STRING text.

    The text does not depend on the session time zone or on how an engine transports typed
    values: date -> epoch days, timestamp -> epoch microseconds, binary -> upper-case hex,
    float/double -> Java's shortest round-trip form (``NaN``, ``-Infinity``, ``-0.0``,
    ``1.0E-7``), timestamp_ntz -> ``yyyy-MM-dd HH:mm:ss[.ffffff]``, others -> ``CAST AS STRING``.
    NULL stays NULL.
    """
    if spark_type.name == "string":
        return expr
    if spark_type.name == "date":
        return f"CAST(unix_date({expr}) AS STRING)"
    if spark_type.name == "timestamp":
        return f"CAST(unix_micros({expr}) AS STRING)"
    if spark_type.name == "binary":
        return f"hex({expr})"
    return f"CAST({expr} AS STRING)"


def decode_canonical(spark_type: SparkType, text: str | None) -> PartitionValue:
    """The Python value behind ``canonical_text_expr`` text (None for NULL).

    float -> the float32 value as a Python float; timestamp -> an aware UTC datetime;
    timestamp_ntz -> a naive datetime; decimal -> ``Decimal``; binary -> ``bytes``.

    Raises:
        UnsupportedLiteral: the text does not parse, or the value is outside Python's range
            (dates and timestamps before year 1 or after 9999).
    """
    if text is None:
        return None
    text = str(text)
    try:
        return _DECODERS.get(spark_type.name, str)(text)
    except (ValueError, OverflowError, InvalidOperation, struct.error) as exc:
        raise UnsupportedLiteral(
            f"{spark_type} value text {text[:60]!r} cannot be decoded ({exc})"
        ) from exc


def _decode_boolean(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError(text)
    return text == "true"


def _decode_timestamp_ntz(text: str) -> datetime:
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is not None:
        raise ValueError(text)
    return parsed


# Canonical text -> Python value, by Spark type name (a string's text is its value).
_DECODERS: dict[str, Callable[[str], PartitionValue]] = {
    "boolean": _decode_boolean,
    **dict.fromkeys(_INT_RANGES, int),
    "float": lambda text: _to_float32(float(text)),
    "double": float,
    "decimal": Decimal,
    "date": lambda text: _EPOCH_DAY + timedelta(days=int(text)),
    "timestamp": lambda text: _EPOCH + timedelta(microseconds=int(text)),
    "timestamp_ntz": _decode_timestamp_ntz,
    "binary": bytes.fromhex,
}


def typed_literal(spark_type: SparkType, value: PartitionValue) -> str:
    """A Spark SQL literal of exactly ``spark_type`` whose value is ``value``.

    Forms: ``true``; ``42Y``/``42S``/``42``/``42L`` (range-checked for the type);
    ``1.5F`` / ``1.5D``, ``CAST('NaN' AS FLOAT)`` for non-finite values (``-0.0`` keeps its sign);
    ``CAST(-1.50BD AS DECIMAL(10,2))``; ``DATE '2026-01-01'``;
    ``TIMESTAMP '2026-01-01 10:00:00.000001+00:00'`` (an instant, so the session zone cannot
    shift it); ``TIMESTAMP_NTZ '2026-01-01 10:00:00.000001'``; ``X'00FF'``; strings quoted with
    backslash escapes, control/format characters as ``\\uNNNN``; None ->
    ``CAST(NULL AS type)``.

    Raises:
        UnsupportedLiteral: the value's Python type does not fit ``spark_type``, or it cannot be
            represented exactly (out of range, too many digits, naive instant, float not
            representable as float32, lone surrogate, string over the length limit).
    """
    if value is None:
        return f"CAST(NULL AS {str(spark_type).upper()})"
    literal = _number_literal(spark_type, value)
    if literal is None:
        literal = _other_literal(spark_type.name, value)
    if literal is None:
        raise UnsupportedLiteral(
            f"cannot render {type(value).__name__} {value!r:.80} as a {spark_type} literal"
        )
    return literal


def _number_literal(spark_type: SparkType, value: PartitionValue) -> str | None:
    """``typed_literal`` of a boolean, integer, float or decimal type (None: not one of these,
    or ``value`` is not of a Python type that fits it)."""
    kind = spark_type.name
    if kind == "boolean" and isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bool):
        return None
    if kind in _INT_RANGES and isinstance(value, int):
        bits = _INT_RANGES[kind]
        if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise UnsupportedLiteral(f"{value} is outside the range of {kind}")
        return f"{value}{_INT_SUFFIXES[kind]}"
    if kind in ("float", "double") and isinstance(value, int | float):
        return _float_literal(kind, float(value))
    if kind == "decimal" and isinstance(value, Decimal | int):
        return _decimal_literal(spark_type, Decimal(value))
    return None


def _other_literal(kind: str, value: PartitionValue) -> str | None:
    """``typed_literal`` of a date, timestamp, binary or string type (None: not one of these,
    or ``value`` is not of a Python type that fits it)."""
    if kind == "date" and isinstance(value, date) and not isinstance(value, datetime):
        return f"DATE '{value.isoformat()}'"
    if kind == "timestamp" and isinstance(value, datetime):
        return _timestamp_literal(value)
    if kind == "timestamp_ntz" and isinstance(value, datetime):
        if value.tzinfo is not None:
            raise UnsupportedLiteral(f"timestamp_ntz value {value!r} has a time zone")
        return f"TIMESTAMP_NTZ '{value.isoformat(sep=' ', timespec='microseconds')}'"
    if kind == "binary" and isinstance(value, bytes | bytearray):
        return f"X'{bytes(value).hex().upper()}'"
    if kind == "string" and isinstance(value, str):
        return string_literal(value)
    return None


def _timestamp_literal(value: datetime) -> str:
    """An instant's TIMESTAMP literal, written in UTC (the session zone cannot shift it)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise UnsupportedLiteral(f"timestamp value {value!r} is naive (needs a zone)")
    try:
        utc = value.astimezone(UTC).replace(tzinfo=None)
    except OverflowError as exc:
        raise UnsupportedLiteral(f"timestamp value {value!r} is out of range in UTC") from exc
    return f"TIMESTAMP '{utc.isoformat(sep=' ', timespec='microseconds')}+00:00'"


# Canonical texts whose literal no Spark engine can read otherwise: strings of characters with
# no escape or parser setting attached (no quote, backslash, control or non-ASCII character),
# integers exactly as ``str(int)`` writes them.
_PLAIN_STRING = re.compile(r"[A-Za-z0-9_.:/+ \-]*")
_CANONICAL_INTEGER = re.compile(r"0|-?[1-9][0-9]*")


def reads_back_by_grammar(spark_type: SparkType, text: str) -> bool:
    """Whether the round trip of canonical ``text`` (its ``typed_literal`` through
    ``canonical_text_expr``) can only give ``text`` back, on any engine and under any session
    setting, so evaluating it there would learn nothing: a string of ASCII letters, digits and
    ``_.:/+ -`` (rendered ``'text'``), ``true``/``false``, or an integer in canonical form
    (``typed_literal`` refuses one outside its type's range). Every other text, and every other
    type, is checked on the engine (``tests/spark/test_typed_literals.py`` holds Spark to
    this)."""
    kind = spark_type.name
    if kind == "string":
        return _PLAIN_STRING.fullmatch(text) is not None
    if kind == "boolean":
        return text in ("true", "false")
    if kind in _INT_RANGES:
        return _CANONICAL_INTEGER.fullmatch(text) is not None
    return False


def string_literal(value: str) -> str:
    """A STRING literal of any Unicode text, on one printable line.

    Unlike ``sql_ident.sql_string_literal`` (which refuses control characters in names and
    options), data values may hold newlines, tabs, bidi marks...: those are written as
    ``\\uNNNN`` escapes, quotes and backslashes are backslash-escaped.

    Raises:
        UnsupportedLiteral: a lone surrogate, or longer than ``MAX_STRING_LITERAL_LENGTH``.
    """
    if len(value) > MAX_STRING_LITERAL_LENGTH:
        raise UnsupportedLiteral(
            f"string value {value[:40]!r}... is longer than {MAX_STRING_LITERAL_LENGTH}"
        )
    out = ["'"]
    for ch in value:
        category = unicodedata.category(ch)
        if category == "Cs":
            raise UnsupportedLiteral(f"string value {value[:60]!r} contains a lone surrogate")
        if ch in ("'", "\\"):
            out.append("\\" + ch)
        elif category in _ESCAPED_CATEGORIES:
            out.append(f"\\u{ord(ch):04X}")  # all of these are in the BMP
        else:
            out.append(ch)
    out.append("'")
    return "".join(out)


def _to_float32(value: float) -> float:
    """The float32 nearest ``value`` (non-finite values unchanged)."""
    if not math.isfinite(value):
        return value
    result: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return result


def _float_literal(kind: str, value: float) -> str:
    spark_name = kind.upper()
    if math.isnan(value):
        return f"CAST('NaN' AS {spark_name})"
    if math.isinf(value):
        return f"CAST('{'-' if value < 0 else ''}Infinity' AS {spark_name})"
    if kind == "float":
        try:
            exact = _to_float32(value) == value
        except OverflowError:
            exact = False
        if not exact:
            raise UnsupportedLiteral(f"{value!r} is not exactly representable as a float")
        # repr is the shortest text that parses to this double; the double is a float32
        # value, so parsing the text straight to float32 (Spark) lands on it too.
        return f"{value!r}F"
    return f"{value!r}D"


def _decimal_literal(spark_type: SparkType, value: Decimal) -> str:
    if not value.is_finite():
        raise UnsupportedLiteral(f"decimal value {value} is not finite")
    # The default context keeps 28 digits; decimal(38,s) needs 38 (and quantize must not trap).
    context = Context(prec=_DECIMAL_DIGITS)
    try:
        quantized = value.quantize(Decimal(1).scaleb(-spark_type.scale), context=context)
    except InvalidOperation as exc:
        raise UnsupportedLiteral(f"{value} does not fit {spark_type}") from exc
    if quantized != value:
        raise UnsupportedLiteral(f"{value} has more than {spark_type.scale} decimal places")
    # Digits before the point must fit precision - scale (adjusted() is negative below 1).
    if quantized and quantized.adjusted() + 1 > spark_type.precision - spark_type.scale:
        raise UnsupportedLiteral(f"{value} does not fit {spark_type}")
    return f"CAST({quantized:f}BD AS DECIMAL({spark_type.precision},{spark_type.scale}))"
