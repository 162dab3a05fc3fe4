"""Equality deletes written the way a Flink or Kafka Connect upsert sink writes them.

Shared by the tests and ``bench.stream`` (so it lives in ``bench``: bench never imports tests).

An upsert sink never reads the table: for every changed key it writes an *equality delete* on
the key columns and appends the new row, both in one ``RowDelta`` commit (the delete has the
same data sequence number as the new row, so it removes only older rows with that key). This
module does exactly that with Iceberg's own Java writers, which ship in the Iceberg Spark
runtime jar Icepack already loads, reached through the Spark JVM (``spark._jvm``):

- rows are made into Iceberg ``Record`` s by ``SparkValueConverter`` from Spark ``Row`` s built
  in the JVM (Py4J would hand a small Python int to Java as an ``Integer``, which a ``long``
  column's writer refuses);
- ``GenericAppenderFactory`` with the key's field ids gives the ``DataWriter`` and the
  ``EqualityDeleteWriter`` of each partition (``PartitionKey`` over ``InternalRecordWrapper``,
  so every partition transform works), files named by ``OutputFileFactory``;
- the commit is the Java ``Table`` 's ``newRowDelta()`` (``addRows`` + ``addDeletes``) with a
  summary property naming the writer, so its snapshots can be told apart afterwards.

``UpsertTable`` keeps the writer's own model of the logical contents (key -> row) as each
commit succeeds: after any maintenance, Spark's read of the table must equal it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from icepack_core.spark.sql import qualified_name

CATALOG = "icepack"
WRITER_PROPERTY = "icepack-test-writer"
# The upsert table: ``part`` is a function of ``id`` (as a sink's partition must be a function
# of its key for an equality delete to find the old row), and is part of the key when the
# table is partitioned, as Flink requires of an upsert table's partition source columns.
COLUMNS = "id BIGINT, part STRING, v STRING, ts TIMESTAMP"
PARTS = 3


@dataclass(frozen=True)
class Row:
    """One logical row of an upsert table."""

    id: int
    part: str
    v: str
    ts_seconds: int

    def sql(self) -> str:
        return (
            f"(CAST({self.id} AS BIGINT), '{self.part}', '{self.v}', "
            f"timestamp_seconds({self.ts_seconds}))"
        )


def part_of(key: int) -> str:
    return f"p{key % PARTS}"


def row(key: int, version: int) -> Row:
    """The row an upsert of ``key`` in round ``version`` writes (ts: one hour per version)."""
    return Row(key, part_of(key), f"v{version}-{key}", 1_767_225_600 + version * 3600 + key)


def create_upsert_table(
    spark: Any,
    namespace: str,
    name: str,
    *,
    version: int = 2,
    partition: str | None = None,
) -> str:
    """Create the upsert table (``partition``: a Spark ``PARTITIONED BY`` body such as
    ``part`` or ``bucket(4, id)``; None unpartitioned) and return its quoted name."""
    table = qualified_name(CATALOG, [namespace], name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], namespace)}")
    partitioned = f"PARTITIONED BY ({partition}) " if partition else ""
    spark.sql(
        f"CREATE TABLE {table} ({COLUMNS}) USING iceberg {partitioned}"
        f"TBLPROPERTIES ('format-version'='{version}', "
        "'write.target-file-size-bytes'='1048576', "
        "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read')"
    )
    return table


def java_table(spark: Any, namespace: str, name: str, catalog_name: str = CATALOG) -> Any:
    """The table as Iceberg's Java catalog (Spark's ``catalog_name``) loads it now (not
    Spark's cached copy)."""
    jvm = spark._jvm
    catalog = spark._jsparkSession.sessionState().catalogManager().catalog(catalog_name)
    levels = spark.sparkContext._gateway.new_array(jvm.String, 1)
    levels[0] = namespace  # Namespace.of is varargs: Py4J needs the array
    ident = jvm.org.apache.iceberg.catalog.TableIdentifier.of(
        jvm.org.apache.iceberg.catalog.Namespace.of(levels), name
    )
    return catalog.icebergCatalog().loadTable(ident)


def _records(spark: Any, schema: Any, rows: Sequence[Row], columns: Sequence[str]) -> list[Any]:
    """Iceberg ``Record`` s of ``rows`` (only ``columns``), converted inside the JVM."""
    values = ", ".join(r.sql() for r in rows)
    frame = spark.sql(f"SELECT {', '.join(columns)} FROM VALUES {values} AS t(id, part, v, ts)")
    jvm = spark._jvm
    records = [
        jvm.org.apache.iceberg.spark.SparkValueConverter.convert(schema, r)
        for r in frame._jdf.collectAsList()
    ]
    if "ts" in columns:
        # The converter leaves a timestamp in Spark's form (micros); Iceberg's generic writers
        # take an OffsetDateTime (a Py4J object, not converted to a Python value on the way).
        for record, r in zip(records, rows, strict=True):
            instant = jvm.java.time.Instant.ofEpochSecond(r.ts_seconds)
            utc = jvm.java.time.ZoneOffset.UTC
            record.setField("ts", jvm.java.time.OffsetDateTime.ofInstant(instant, utc))
    return records


@dataclass
class UpsertTable:
    """An upsert sink on one table: ``key`` are the equality columns (``id``, and ``part``
    when the table is partitioned). ``model`` is the logical contents after every commit this
    writer made (key id -> row); ``snapshots`` the ids of those commits."""

    spark: Any
    namespace: str
    name: str
    writer: str = "upsert-sink"
    catalog: str = CATALOG  # the Spark catalog the table is in
    model: dict[int, Row] = field(default_factory=dict)
    snapshots: list[int] = field(default_factory=list)
    _round: int = 0

    @property
    def qualified(self) -> str:
        return qualified_name(self.catalog, [self.namespace], self.name)

    def upsert(self, rows: Iterable[Row]) -> int:
        """Equality-delete each row's key and append the row, in one ``RowDelta`` commit;
        returns the snapshot id (recorded in ``snapshots``, ``model`` updated)."""
        rows = list(rows)
        if len({r.id for r in rows}) != len(rows):
            raise ValueError(f"one upsert names a key twice: {[r.id for r in rows]}")
        self._round += 1
        snapshot = self._commit(rows, deletes=True)
        self.model.update({r.id: r for r in rows})
        return snapshot

    def append(self, rows: Iterable[Row]) -> int:
        """Append rows with no delete (a sink's insert-only mode): keys must be new."""
        rows = list(rows)
        if clash := sorted({r.id for r in rows} & set(self.model)):
            raise ValueError(f"append of existing keys {clash[:5]} (use upsert)")
        self._round += 1
        snapshot = self._commit(rows, deletes=False)
        self.model.update({r.id: r for r in rows})
        return snapshot

    def _commit(self, rows: list[Row], *, deletes: bool) -> int:
        jvm = self.spark._jvm
        table = java_table(self.spark, self.namespace, self.name, self.catalog)
        schema, spec = table.schema(), table.spec()
        key = ["id", "part"] if spec.isPartitioned() else ["id"]
        delete_schema = schema.select(key)
        ids = self.spark.sparkContext._gateway.new_array(jvm.int, len(key))
        for i, column in enumerate(key):
            ids[i] = schema.findField(column).fieldId()
        factory = jvm.org.apache.iceberg.data.GenericAppenderFactory(
            schema, spec, ids, delete_schema, None
        ).setAll(table.properties())
        parquet = jvm.org.apache.iceberg.FileFormat.PARQUET
        files = (
            jvm.org.apache.iceberg.io.OutputFileFactory.builderFor(table, 1, self._round)
            .format(parquet)
            .operationId(f"{self.writer}-{uuid.uuid4()}")
            .build()
        )
        wrapper = jvm.org.apache.iceberg.data.InternalRecordWrapper(schema.asStruct())
        data = _records(self.spark, schema, rows, ["id", "part", "v", "ts"])
        keys = _records(self.spark, delete_schema, rows, key)
        groups: dict[str, tuple[Any, list[Any], list[Any]]] = {}
        for record, key_record in zip(data, keys, strict=True):
            partition = None
            path = ""
            if spec.isPartitioned():
                partition = jvm.org.apache.iceberg.PartitionKey(spec, schema)
                partition.partition(wrapper.wrap(record))
                path = str(partition.toPath())
            groups.setdefault(path, (partition, [], []))
            groups[path][1].append(record)
            groups[path][2].append(key_record)
        delta = table.newRowDelta()
        for partition, records, key_records in groups.values():
            out = files.newOutputFile(spec, partition) if partition else files.newOutputFile()
            writer = factory.newDataWriter(out, parquet, partition)
            for record in records:
                writer.write(record)
            writer.close()
            delta.addRows(writer.toDataFile())
            if deletes:
                out = files.newOutputFile(spec, partition) if partition else files.newOutputFile()
                eq = factory.newEqDeleteWriter(out, parquet, partition)
                for record in key_records:
                    eq.write(record)
                eq.close()
                delta.addDeletes(eq.toDeleteFile())
        delta.set(WRITER_PROPERTY, self.writer)
        delta.commit()
        committed = _find_snapshot(table, self.writer, self._round)
        self.snapshots.append(committed)
        return committed


def _find_snapshot(table: Any, writer: str, round_: int) -> int:
    """The id of this writer's newest commit (the table object was refreshed by the commit)."""
    table.refresh()
    newest = None
    for snapshot in table.snapshots():
        if snapshot.summary().get(WRITER_PROPERTY) == writer and (
            newest is None or snapshot.sequenceNumber() > newest.sequenceNumber()
        ):
            newest = snapshot
    if newest is None:
        raise AssertionError(f"{writer}'s commit of round {round_} is not in the table")
    return int(newest.snapshotId())


def logical_rows(spark: Any, table: str) -> list[tuple[int, str, str, int]]:
    """The table's live rows as Spark reads them (every delete applied), sorted."""
    spark.sql(f"REFRESH TABLE {table}")
    rows = spark.sql(
        f"SELECT id, part, v, CAST(unix_timestamp(ts) AS BIGINT) AS s FROM {table}"
    ).collect()
    return sorted((int(r["id"]), str(r["part"]), str(r["v"]), int(r["s"])) for r in rows)


def model_rows(model: dict[int, Row]) -> list[tuple[int, str, str, int]]:
    return sorted((r.id, r.part, r.v, r.ts_seconds) for r in model.values())


def delete_file_counts(spark: Any, table: str) -> dict[str, int]:
    """Live delete files by kind, from the ``delete_files`` metadata table."""
    spark.sql(f"REFRESH TABLE {table}")
    rows = spark.sql(
        f"SELECT content, file_format, count(*) AS n FROM {table}.delete_files "
        "GROUP BY content, file_format"
    ).collect()
    counts = {"equality": 0, "position": 0, "deletion_vector": 0}
    for r in rows:
        if int(r["content"]) == 2:
            counts["equality"] += int(r["n"])
        elif str(r["file_format"]).upper() == "PUFFIN":
            counts["deletion_vector"] += int(r["n"])
        else:
            counts["position"] += int(r["n"])
    return counts
