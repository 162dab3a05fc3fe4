"""An adversarial table zoo, written by the real writers (Spark SQL, and PyIceberg for the types
Spark cannot declare), every table with small files so that the planner wants to compact it:

- every Iceberg primitive type Spark 3.5 can write, as an identity partition (with NULL, NaN,
  ±Infinity, -0.0, quotes, backslashes, newlines, tabs and non-BMP Unicode among the values);
- fixed and uuid columns written by PyIceberg;
- nested struct / list / map columns (maps inside lists and structs);
- format v1, v2 and v3; merge-on-read position deletes (v2) and deletion vectors (v3);
- a table whose location is inside another table's location;
- a table name with every awkward character;
- continuously written tables (``STREAMS``), one per kind of writer: an appender into an
  ``hours(ts)`` partition spec, a copy-on-write deleter, and an upsert sink writing equality
  deletes (``bench.upserts``); ``tests.support.stream_writer`` keeps writing to them
  from another process while the pipeline maintains them.

``content_digest`` is the oracle: every live row collected to Python, put in a canonical form
(maps sorted, NaN named, floats by their bits) and hashed: independent of Spark's own hash().
"""

from __future__ import annotations

import hashlib
import math
import struct
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from functools import partial
from typing import Any

from bench.upserts import UpsertTable, create_upsert_table, row
from icepack_core.spark.sql import qualified_name
from tests.execution.spark_tables import CATALOG

NAMESPACE = "adv"
BATCHES = 6  # one small file per partition per batch: >= min-input-files (5)

# Spark type -> SQL literals of the partition values (several per batch, NULL included).
PARTITION_TYPES: dict[str, tuple[str, list[str]]] = {
    "boolean": ("BOOLEAN", ["true", "false", "NULL"]),
    "int": ("INT", ["1", "-2147483648", "NULL"]),
    "bigint": ("BIGINT", ["9223372036854775807", "-1"]),
    "float": ("FLOAT", ["CAST('NaN' AS FLOAT)", "CAST(1.5 AS FLOAT)", "CAST(-0.0 AS FLOAT)"]),
    "double": (
        "DOUBLE",
        [
            "CAST('NaN' AS DOUBLE)",
            "CAST('Infinity' AS DOUBLE)",
            "CAST('-Infinity' AS DOUBLE)",
            "CAST(2.25 AS DOUBLE)",
        ],
    ),
    "decimal": (
        "DECIMAL(10,2)",
        ["CAST(12.34 AS DECIMAL(10,2))", "CAST(-0.01 AS DECIMAL(10,2))", "NULL"],
    ),
    "date": ("DATE", ["DATE'2026-01-01'", "DATE'1970-01-01'", "NULL"]),
    "timestamp": (
        "TIMESTAMP",
        ["TIMESTAMP'2026-01-01 10:00:00.123456 UTC'", "TIMESTAMP'1969-12-31 23:59:59 UTC'"],
    ),
    "timestamp_ntz": (
        "TIMESTAMP_NTZ",
        ["TIMESTAMP_NTZ'2026-01-01 10:00:00.5'", "TIMESTAMP_NTZ'2000-02-29 00:00:00'"],
    ),
    "string": (
        "STRING",
        ["'it''s'", "'back\\\\slash'", "'new\\nline\\ttab'", "'ünï 🧊 \u4e2d'", "''", "NULL"],
    ),
    "binary": ("BINARY", ["X'00FF10'", "X''", "NULL"]),
}


@dataclass(frozen=True)
class ZooTable:
    """One zoo table: its Spark name, what it exercises, and whether it is partitioned."""

    name: str
    kind: str
    partitioned: bool = False

    @property
    def qualified(self) -> str:
        return qualified_name(CATALOG, [NAMESPACE], self.name)


def _props(version: int, extra: dict[str, str] | None = None) -> str:
    props = {
        "format-version": str(version),
        "write.target-file-size-bytes": "1048576",
        **(extra or {}),
    }
    return ", ".join(f"'{k}'='{v}'" for k, v in props.items())


def _partition_table(spark: Any, kind: str, spark_type: str, values: list[str]) -> ZooTable:
    table = ZooTable(f"p_{kind}", f"identity partition on {kind}", partitioned=True)
    spark.sql(
        f"CREATE TABLE {table.qualified} (id BIGINT, p {spark_type}, payload STRING) "
        f"USING iceberg PARTITIONED BY (p) TBLPROPERTIES ({_props(2)})"
    )
    for batch in range(BATCHES):
        rows = ", ".join(
            f"({batch * 100 + i}, {value}, 'row {batch}/{i}')" for i, value in enumerate(values)
        )
        spark.sql(f"INSERT INTO {table.qualified} VALUES {rows}")
    return table


def _nested_table(spark: Any) -> ZooTable:
    table = ZooTable("nested", "struct/list/map columns (maps inside lists and structs)")
    spark.sql(
        f"CREATE TABLE {table.qualified} (id BIGINT, "
        "s STRUCT<a: INT, m: MAP<STRING, ARRAY<INT>>>, "
        "l ARRAY<STRUCT<x: STRING, tags: MAP<STRING, STRING>>>, "
        "m MAP<STRING, STRING>, f DOUBLE, b BINARY) "
        f"USING iceberg TBLPROPERTIES ({_props(2)})"
    )
    for batch in range(BATCHES):
        spark.sql(
            f"INSERT INTO {table.qualified} VALUES "
            f"({batch * 10}, named_struct('a', {batch}, 'm', map('k{batch}', array(1, 2), "
            "'z', array())), "
            f"array(named_struct('x', 'é{batch}', 'tags', map('b', '2', 'a', '1'))), "
            f"map('y', 'b', 'x', 'a'), CAST('NaN' AS DOUBLE), X'00'), "
            f"({batch * 10 + 1}, NULL, array(), map(), -0.0, NULL)"
        )
    return table


def _plain_table(
    spark: Any,
    name: str,
    kind: str,
    version: int,
    extra: dict[str, str] | None = None,
    location: str | None = None,
) -> ZooTable:
    table = ZooTable(name, kind)
    where = f"LOCATION '{location}' " if location else ""
    spark.sql(
        f"CREATE TABLE {table.qualified} (id BIGINT, cat STRING, v DOUBLE) USING iceberg "
        f"{where}TBLPROPERTIES ({_props(version, extra)})"
    )
    for batch in range(BATCHES):
        spark.sql(
            f"INSERT INTO {table.qualified} SELECT id, concat('c', id % 3), id / 7.0 "
            f"FROM range({batch * 20}, {(batch + 1) * 20})"
        )
    return table


def _location(spark: Any, table: ZooTable) -> str:
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {table.qualified}").collect()
    return str(next(r["data_type"] for r in rows if r["col_name"] == "Location"))


def _pyiceberg_table(catalog: Any) -> ZooTable:
    """fixed(4) and uuid columns written by PyIceberg, unpartitioned: PyIceberg cannot
    partition by a uuid (pyarrow does not group uuid keys), and a fixed identity partition it
    writes is unreadable by Iceberg Java 1.10 ("Index -192 out of bounds for length 2" when
    planning a scan), so neither would be a table a real lake could have maintained."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import FixedType, LongType, NestedField, UUIDType

    table = ZooTable("py_fixed_uuid", "fixed and uuid columns written by PyIceberg")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "u", UUIDType(), required=False),
        NestedField(3, "fx", FixedType(4), required=False),
    )
    created = catalog.create_table(
        (NAMESPACE, table.name),
        schema=schema,
        properties={"write.target-file-size-bytes": "1048576"},
    )
    ids = [uuid.UUID(int=i * 7919) for i in range(2)]
    arrow = schema.as_arrow()
    for batch in range(BATCHES):
        created.append(
            pa.Table.from_pylist(
                [
                    {"id": batch * 10 + i, "u": u.bytes, "fx": bytes([i, 0, 0, 255])}
                    for i, u in enumerate(ids)
                ],
                schema=arrow,
            )
        )
    return table


def build_zoo(spark: Any, pyiceberg_catalog: Any) -> list[ZooTable]:
    """Create every zoo table in namespace ``adv`` (once per test session).

    Tables are written three at a time (one Spark session takes SQL from several threads):
    most of each append is the commit's round trips, not work for the cores."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], NAMESPACE)}")
    mor = {"write.delete.mode": "merge-on-read", "write.update.mode": "merge-on-read"}

    def merge_on_read(version: int, kind: str) -> list[ZooTable]:
        table = _plain_table(spark, f"mor_v{version}", kind, version, mor)
        spark.sql(f"DELETE FROM {table.qualified} WHERE id % 4 = 0")
        return [table]

    def nested_locations() -> list[ZooTable]:
        outer = _plain_table(spark, "outer_t", "holds another table's location", 2)
        inner_location = _location(spark, outer) + "/inner_t"
        inner = _plain_table(
            spark, "inner_t", "location inside another table's", 2, location=inner_location
        )
        return [outer, inner]

    builders: list[Callable[[], list[ZooTable]]] = [
        partial(lambda k, t, v: [_partition_table(spark, k, t, v)], kind, spark_type, values)
        for kind, (spark_type, values) in PARTITION_TYPES.items()
    ]
    builders += [
        lambda: [_nested_table(spark)],
        lambda: [_plain_table(spark, "v1", "format v1", 1)],
        lambda: [_plain_table(spark, "v3", "format v3", 3)],
        partial(merge_on_read, 2, "position deletes (v2)"),
        partial(merge_on_read, 3, "deletion vectors (v3)"),
        nested_locations,
        lambda: [_plain_table(spark, "we'ird `name`; -- ünï 🧊", "awkward name", 2)],
        lambda: [_pyiceberg_table(pyiceberg_catalog)],
    ]
    with ThreadPoolExecutor(max_workers=3) as pool:
        groups = list(pool.map(lambda build: build(), builders))
    return [table for group in groups for table in group]


# Continuously written tables: name -> (writer kind, partition spec, table properties).
STREAMS: dict[str, tuple[str, str | None, dict[str, str]]] = {
    "stream_append": ("append", "hours(ts)", {}),
    "stream_cow": (
        "cow_delete",
        None,
        {"write.delete.mode": "copy-on-write", "write.update.mode": "copy-on-write"},
    ),
    "stream_upsert": ("upsert", "part", {}),
}


def build_streams(spark: Any) -> list[ZooTable]:
    """The continuously written tables, each with small files (and the upsert table with
    equality deletes) before its writer starts; their writers are the test's to start."""
    tables = []
    for name, (kind, partition, props) in STREAMS.items():
        table = ZooTable(name, f"continuously written: {kind} writer", partitioned=bool(partition))
        create_upsert_table(spark, NAMESPACE, name, partition=partition)
        if props:
            listed = ", ".join(f"'{k}'='{v}'" for k, v in props.items())
            spark.sql(f"ALTER TABLE {table.qualified} SET TBLPROPERTIES ({listed})")
        sink = UpsertTable(spark, NAMESPACE, name, writer="seed")
        sink.append([row(k, 0) for k in range(12)])
        for r in range(1, BATCHES):
            if kind == "upsert":
                sink.upsert([row(k, r) for k in (r, r + 3, 20 + r)])
            else:
                sink.append([row(100 * r + k, r) for k in range(4)])
        tables.append(table)
    return tables


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return ("map", sorted((repr(_canonical(k)), _canonical(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return ("list", [_canonical(v) for v in value])
    if isinstance(value, float):
        return ("nan",) if math.isnan(value) else ("f", struct.pack(">d", value).hex())
    if isinstance(value, bytes | bytearray):
        return ("b", bytes(value).hex())
    if isinstance(value, Decimal | date | datetime | uuid.UUID):
        return (type(value).__name__, str(value))
    return value


def content_digest(spark: Any, table: ZooTable) -> tuple[int, str]:
    """Row count and a digest of the live rows, computed in Python from collected rows."""
    rows = spark.sql(f"SELECT * FROM {table.qualified}").collect()
    lines = sorted(repr(_canonical(r.asDict(recursive=True))) for r in rows)
    return len(rows), hashlib.sha256("\n".join(lines).encode()).hexdigest()
