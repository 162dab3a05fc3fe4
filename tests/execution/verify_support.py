"""Helpers for the verification tests: an every-type Iceberg table, an independent content
oracle, and faulty "rewrites" committed through Iceberg's Java API as a buggy engine would."""

from __future__ import annotations

import math
from collections import Counter
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from icepack_core.spark.sql import qualified_name
from tests.execution.spark_tables import CATALOG


def _java_list(spark: Any, items: list[Any]) -> Any:
    out = spark._jvm.java.util.ArrayList()
    for item in items:
        out.add(item)
    return out


def make_all_types_table(spark: Any, namespace: str, name: str) -> str:
    """One column of every Iceberg type Spark 3.5 can read (uuid and fixed included, so the
    table is created through the Java API), nested maps at every depth, and five appends."""
    jvm = spark._jvm
    t = jvm.org.apache.iceberg.types.Types
    nf = t.NestedField

    def struct(*fields: Any) -> Any:
        return t.StructType.of(_java_list(spark, list(fields)))

    fields = [
        nf.optional(1, "id", t.LongType.get()),
        nf.optional(2, "flag", t.BooleanType.get()),
        nf.optional(3, "i", t.IntegerType.get()),
        nf.optional(4, "f", t.FloatType.get()),
        nf.optional(5, "d", t.DoubleType.get()),
        nf.optional(6, "dec", t.DecimalType.of(38, 10)),
        nf.optional(7, "small_dec", t.DecimalType.of(9, 2)),
        nf.optional(8, "s", t.StringType.get()),
        nf.optional(9, "u", t.UUIDType.get()),
        nf.optional(10, "bin", t.BinaryType.get()),
        nf.optional(11, "fx", t.FixedType.ofLength(4)),
        nf.optional(12, "dt", t.DateType.get()),
        nf.optional(13, "ts", t.TimestampType.withZone()),
        nf.optional(14, "ts_ntz", t.TimestampType.withoutZone()),
        nf.optional(15, "m", t.MapType.ofOptional(16, 17, t.StringType.get(), t.IntegerType.get())),
        nf.optional(
            18,
            "lm",
            t.ListType.ofOptional(
                19, t.MapType.ofOptional(20, 21, t.StringType.get(), t.LongType.get())
            ),
        ),
        nf.optional(
            22,
            "we:ird, col",
            struct(
                nf.optional(23, "a b", t.IntegerType.get()),
                nf.optional(
                    24,
                    "x:y, z",
                    t.MapType.ofOptional(25, 26, t.IntegerType.get(), t.StringType.get()),
                ),
            ),
        ),
        nf.optional(
            27,
            "mm",
            t.MapType.ofOptional(
                28,
                29,
                t.StringType.get(),
                t.MapType.ofOptional(30, 31, t.StringType.get(), t.DoubleType.get()),
            ),
        ),
        nf.optional(
            32,
            "mk",
            t.MapType.ofOptional(
                33,
                34,
                struct(nf.required(35, "k", t.IntegerType.get())),
                t.ListType.ofOptional(
                    36, t.MapType.ofOptional(37, 38, t.StringType.get(), t.BinaryType.get())
                ),
            ),
        ),
    ]
    schema = jvm.org.apache.iceberg.Schema(_java_list(spark, fields))
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], namespace)}")
    catalog = spark._jsparkSession.sessionState().catalogManager().catalog(CATALOG)
    ident = jvm.org.apache.iceberg.catalog.TableIdentifier.parse(f"{namespace}.{name}")
    catalog.icebergCatalog().createTable(ident, schema)
    table = qualified_name(CATALOG, [namespace], name)
    spark.sql(f"REFRESH TABLE {table}")
    values = [
        "(1, true, 1, float('NaN'), -0.0D, 12345678901234567890.0123456789BD, 1.23BD, "
        "'Zürich 😀 中文 e\u0301 \u05e9\u05dc\u05d5\u05dd', "
        "'0a1b2c3d-0000-4000-8000-00000000000a', X'00ff', X'01020304', DATE'2024-02-29', "
        "TIMESTAMP'2024-01-01 00:00:00.123456 UTC', TIMESTAMP_NTZ'1970-01-01 00:00:00.000001', "
        "map('b', 2, 'a', 1, 'c', NULL), array(map('x', 1L), NULL, map()), "
        "named_struct('a b', 1, 'x:y, z', map(2, 'two', 1, 'one')), "
        "map('outer', map('z', double('NaN'), 'y', -0.0D)), "
        "map(named_struct('k', 2), array(map('q', X'01')), named_struct('k', 1), NULL))",
        "(2, false, -2147483648, float('-Infinity'), 0.0D, -0.0000000001BD, -9999999.99BD, '', "
        "'ffffffff-ffff-4fff-bfff-ffffffffffff', X'', X'00000000', DATE'0001-01-01', "
        "TIMESTAMP'1900-01-01 00:00:00 UTC', TIMESTAMP_NTZ'9999-12-31 23:59:59.999999', "
        "map(), array(), named_struct('a b', NULL, 'x:y, z', NULL), map(), map())",
        "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
        "NULL, NULL, NULL, NULL, NULL)",
        "(4, true, 7, float('Infinity'), double('NaN'), 0BD, 0BD, concat('nul', char(0), 'x'), "
        "'0a1b2c3d-0000-4000-8000-00000000000b', X'ff00', X'ffffffff', DATE'2024-01-01', "
        "TIMESTAMP'2024-01-01 00:00:00.123457 UTC', TIMESTAMP_NTZ'2024-01-01 00:00:00', "
        "map('a', 1, 'b', 2), array(map('y', 2L, 'x', 1L)), "
        "named_struct('a b', 2, 'x:y, z', map(1, 'one', 2, 'two')), "
        "map('outer', map('y', 0.0D, 'z', double('NaN'))), "
        "map(named_struct('k', 1), array(map('q', X'02', 'p', NULL))))",
    ]
    for value in values:
        spark.sql(f"INSERT INTO {table} VALUES {value}")
    spark.sql(f"INSERT INTO {table} SELECT * FROM {table} WHERE id = 1")  # a duplicate row
    return table


def _canon(value: Any) -> Any:
    if isinstance(value, dict):
        return ("map", tuple(sorted(((_canon(k), _canon(v)) for k, v in value.items()), key=repr)))
    if isinstance(value, list | tuple):
        return tuple(_canon(v) for v in value)
    if hasattr(value, "asDict"):
        return ("struct", tuple(_canon(v) for v in value))
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, bytearray | bytes):
        return bytes(value)
    if isinstance(value, Decimal | datetime | date):
        return repr(value)
    return value


def content(spark: Any, table: str) -> Counter[str]:
    """The table's live rows as a multiset of canonical values, computed in Python (maps as
    sorted entries, NaN as one value): an oracle independent of Icepack's checksum."""
    spark.sql(f"REFRESH TABLE {table}")
    return Counter(repr(_canon(row)) for row in spark.sql(f"SELECT * FROM {table}").collect())


def live_data_files(spark: Any, name: str, namespace: str) -> list[Any]:
    iceberg = load(spark, namespace, name)
    tasks = iceberg.newScan().includeColumnStats().planFiles().iterator()
    files = []
    while tasks.hasNext():
        files.append(tasks.next().file())
    return files


def load(spark: Any, namespace: str, name: str) -> Any:
    return spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, f"{CATALOG}.{namespace}.{name}"
    )


def commit_dropping_a_file(spark: Any, namespace: str, name: str) -> int:
    """A "replace" that deletes one data file and adds nothing. Returns its snapshot id."""
    iceberg = load(spark, namespace, name)
    rewrite = iceberg.newRewrite()
    rewrite.deleteFile(live_data_files(spark, name, namespace)[0])
    rewrite.commit()
    return int(iceberg.currentSnapshot().snapshotId())


def commit_swapping_a_file(spark: Any, namespace: str, name: str) -> int:
    """A "replace" that keeps the row count but not the contents: one data file is replaced
    by a second reference to another file with as many rows. Returns its snapshot id."""
    files = live_data_files(spark, name, namespace)
    # Two files with as many rows and different smallest ids (field 1), so contents differ.
    gone, kept = next(
        (a, b)
        for a in files
        for b in files
        if a.recordCount() == b.recordCount()
        and not a.lowerBounds().get(1).equals(b.lowerBounds().get(1))
    )
    iceberg = load(spark, namespace, name)
    rewrite = iceberg.newRewrite()
    rewrite.deleteFile(gone)
    rewrite.addFile(kept)
    rewrite.commit()
    return int(iceberg.currentSnapshot().snapshotId())


def current_snapshot(spark: Any, table: str) -> int:
    spark.sql(f"REFRESH TABLE {table}")
    return int(
        spark.sql(
            f"SELECT snapshot_id FROM {table}.history WHERE is_current_ancestor "
            "ORDER BY made_current_at DESC LIMIT 1"
        ).first()["snapshot_id"]
    )
