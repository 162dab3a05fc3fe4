"""The canonical text of an identity partition value, computed in Python from the manifest.

``verification_scope.diff_files`` projects each identity partition column in Spark SQL through
``spark.literals.canonical_text_expr``. ``partition_text`` gives the same text from the value
as PyIceberg's Avro reader decodes it from a manifest's ``partition`` tuple (dates as epoch
days, timestamps as epoch microseconds, decimals as ``Decimal``, binary as ``bytes``):

- ``int`` / ``bigint``: the decimal integer; ``boolean``: ``true`` / ``false``;
- ``string``: the value itself; ``binary``: upper-case hex (``hex()``);
- ``date``: epoch days (``unix_date``); ``timestamp``: epoch microseconds (``unix_micros``);
- ``timestamp_ntz``: ``CAST AS STRING``, i.e. ``yyyy-MM-dd HH:mm:ss`` plus the fraction of a
  second without trailing zeros (none when it is zero), years 1-9999 only;
- ``decimal(p,s)``: ``CAST AS STRING``, Java's ``BigDecimal.toString`` at scale ``s`` (plain,
  or scientific when the adjusted exponent is below -6: ``-1E-10``, ``0E-10``);
- NULL: None.

``float`` and ``double`` are not rendered here: Spark's text is Java's
``Float.toString``/``Double.toString``, which before JDK 19 is not always the shortest
round-trip form (JDK-4511638), so it depends on the engine's JVM. ``FLOAT_TYPES`` are rendered
by the engine from exact literals (``metadata_diff``), never guessed. Any other type or an
unexpected value raises ``UnsupportedLiteral``; the caller then uses the Spark diff.

``tests/execution/test_metadata_diff.py`` checks these texts against Spark's on real tables.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Context, Decimal
from typing import Any

from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from icepack_core.errors import UnsupportedLiteral
from icepack_core.spark.literals import SparkType

FLOAT_TYPES = frozenset({"float", "double"})
_EPOCH = datetime(1970, 1, 1)
# Wide enough for decimal(38, s) without rounding (the default context keeps 28 digits).
_EXACT = Context(prec=100)
_SIMPLE: dict[type[IcebergType], str] = {
    BooleanType: "boolean",
    IntegerType: "int",
    LongType: "bigint",
    FloatType: "float",
    DoubleType: "double",
    DateType: "date",
    TimestamptzType: "timestamp",
    TimestampType: "timestamp_ntz",
    StringType: "string",
    BinaryType: "binary",
}


def spark_type_of(iceberg_type: IcebergType) -> SparkType:
    """The Spark type Spark reads an Iceberg source type as (``long`` -> ``bigint`` ...).

    Raises:
        UnsupportedLiteral: a type without a canonical text here (uuid, fixed, time, nested...).
    """
    if isinstance(iceberg_type, DecimalType):
        return SparkType("decimal", iceberg_type.precision, iceberg_type.scale)
    name = _SIMPLE.get(type(iceberg_type))
    if name is None:
        raise UnsupportedLiteral(f"partition source type {iceberg_type} has no canonical text here")
    return SparkType(name)


def _int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise UnsupportedLiteral(f"{what} partition value {value!r:.80} is not an integer")
    return value


def partition_text(spark_type: SparkType, value: Any) -> str | None:
    """``canonical_text_expr``'s text of a manifest partition value of ``spark_type``.

    Raises:
        UnsupportedLiteral: a float/double (rendered by the engine), a type not listed in the
            module docstring, or a value whose Python type does not fit.
    """
    if value is None:
        return None
    kind = spark_type.name
    if kind == "string":
        if not isinstance(value, str):
            raise UnsupportedLiteral(f"string partition value {value!r:.80} is not a str")
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise UnsupportedLiteral(f"boolean partition value {value!r:.80} is not a bool")
        return "true" if value else "false"
    if kind in ("int", "bigint", "date", "timestamp"):
        return str(_int(value, kind))
    if kind == "timestamp_ntz":
        return timestamp_ntz_text(_int(value, kind))
    if kind == "binary":
        if not isinstance(value, bytes | bytearray):
            raise UnsupportedLiteral(f"binary partition value {value!r:.80} is not bytes")
        return bytes(value).hex().upper()
    if kind == "decimal":
        return decimal_text(value, spark_type.scale)
    raise UnsupportedLiteral(f"{spark_type} partition values have no canonical text here")


def timestamp_ntz_text(micros: int) -> str:
    """Spark's ``CAST(timestamp_ntz AS STRING)`` of ``micros`` after the epoch.

    Raises:
        UnsupportedLiteral: outside years 1-9999 (Spark prints a sign or more digits there).
    """
    try:
        moment = _EPOCH + timedelta(microseconds=micros)
    except OverflowError as exc:
        raise UnsupportedLiteral(f"timestamp_ntz {micros} us is outside years 1-9999") from exc
    text = moment.strftime("%H:%M:%S")
    day = f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
    fraction = f".{moment.microsecond:06d}".rstrip("0") if moment.microsecond else ""
    return f"{day} {text}{fraction}"


def decimal_text(value: Any, scale: int) -> str:
    """Java's ``BigDecimal.toString`` of ``value`` at ``scale`` (what Spark's cast gives):
    plain digits unless the adjusted exponent is below -6, then scientific (``-1E-10``,
    ``0E-10``). Python's ``str(Decimal)`` follows the same rule (the General Decimal Arithmetic
    to-scientific-string), so the text is built as a ``Decimal`` with exactly that exponent.

    Raises:
        UnsupportedLiteral: not a finite ``Decimal``, or not exact at that scale.
    """
    if not isinstance(value, Decimal) or not value.is_finite():
        raise UnsupportedLiteral(f"decimal partition value {value!r:.80} is not a finite Decimal")
    unscaled = value.scaleb(scale, context=_EXACT)
    if unscaled != unscaled.to_integral_value():
        raise UnsupportedLiteral(f"decimal partition value {value} has more than {scale} places")
    number = int(unscaled)
    digits = tuple(int(d) for d in str(abs(number)))
    # BigDecimal has no negative zero: the sign comes from the unscaled integer.
    return str(Decimal((1 if number < 0 else 0, digits, -scale)))
