"""Helpers for the partition-scoped verification tests: a table whose partitions differ in how
many small files they hold, and faulty "rewrites" that replace whole partitions with files
whose rows are given by SQL, committed through Iceberg's Java API as a buggy engine would."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from icepack_core.execution.verification.fingerprint import checksum_expression, parse_columns
from icepack_core.spark.sql import qualified_name
from tests.execution.spark_tables import CATALOG, local_path, unique_name
from tests.execution.verify_support import live_data_files, load

HOT = ("p0", "p1")  # four small files each: compacted by min-input-files 2
COLD = ("p2", "p3")  # one file each: left alone


def make_partitioned_table(
    spark: Any, namespace: str, name: str, partitioned_by: str = "part", merge_on_read: bool = False
) -> str:
    """``(id, part, payload, ts)`` with 12 rows in each of ``p0``..``p3``: four appends of
    3 rows each into the HOT partitions, one append of 12 rows into each COLD one.
    ``partitioned_by`` is the ``PARTITIONED BY`` list (``part``, ``days(ts)``...; empty for an
    unpartitioned table)."""
    table = qualified_name(CATALOG, [namespace], name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], namespace)}")
    props = ["'format-version'='2'", "'write.distribution-mode'='hash'"]
    if merge_on_read:
        props += ["'write.delete.mode'='merge-on-read'", "'write.update.mode'='merge-on-read'"]
    partition = f"PARTITIONED BY ({partitioned_by}) " if partitioned_by else ""
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, part STRING, payload STRING, ts TIMESTAMP) "
        f"USING iceberg {partition}"
        f"TBLPROPERTIES ({', '.join(props)})"
    )

    def rows(part: str, start: int, n: int) -> str:
        return (
            f"SELECT id, '{part}' AS part, concat('row-', id) AS payload, "
            f"TIMESTAMP'2024-01-01 00:00:00' + make_interval(0, 0, 0, {int(part[1:])}, 0, 0, "
            f"0) AS ts FROM range({start}, {start + n})"
        )

    for batch in range(4):
        spark.sql(
            f"INSERT INTO {table} "
            + " UNION ALL ".join(rows(p, 1000 * int(p[1:]) + 3 * batch, 3) for p in HOT)
        )
    spark.sql(
        f"INSERT INTO {table} " + " UNION ALL ".join(rows(p, 1000 * int(p[1:]), 12) for p in COLD)
    )
    return table


def commit_replacing_partitions(
    spark: Any, namespace: str, name: str, replacements: dict[str, str]
) -> int:
    """A "replace" that swaps every live data file of each identity partition ``part = key``
    for one file holding the rows of ``replacements[key]`` (a SELECT over the table's
    columns), labelled as that partition whatever its rows say. Returns the snapshot id."""
    jvm = spark._jvm
    iceberg = load(spark, namespace, name)
    spec = iceberg.spec()
    rewrite = iceberg.newRewrite()
    gone = [
        f
        for f in live_data_files(spark, name, namespace)
        if any(f"/part={key}/" in f.location() for key in replacements)
    ]
    # Iceberg refuses a replace that declares more records than it removes, so a file with
    # extra rows declares at most what it replaces (a buggy engine's miscount); reads count
    # the rows actually in the file.
    allowance = sum(int(f.recordCount()) for f in gone)
    for key, query in replacements.items():
        staging = unique_name("staging")
        spark.sql(
            f"CREATE TABLE {qualified_name(CATALOG, [namespace], staging)} USING iceberg "
            f"AS SELECT /*+ COALESCE(1) */ * FROM ({query})"
        )  # one file
        for staged in live_data_files(spark, staging, namespace):
            declared = min(int(staged.recordCount()), allowance)
            allowance -= declared
            rewrite.addFile(
                jvm.org.apache.iceberg.DataFiles.builder(spec)
                .withPath(staged.location())
                .withFormat(staged.format())
                .withFileSizeInBytes(staged.fileSizeInBytes())
                .withRecordCount(declared)
                .withPartitionPath(f"part={key}")
                .build()
            )
    for file in gone:
        rewrite.deleteFile(file)
    rewrite.commit()
    return int(iceberg.currentSnapshot().snapshotId())


def position_delete_for_another_partition(
    spark: Any, namespace: str, name: str, row_id: int, label: str
) -> Any:
    """A position delete file deleting row ``row_id``, labelled as partition ``part = label``
    although the data file it names (``referenced_data_file``) is in another one. Written by a
    real ``DELETE`` that is then rolled back, so the file exists but is not live."""
    iceberg = load(spark, namespace, name)
    start = int(iceberg.currentSnapshot().snapshotId())
    existing = {str(d.location()) for d in live_delete_files(spark, namespace, name)}
    spark.sql(f"DELETE FROM {qualified_name(CATALOG, [namespace], name)} WHERE id = {row_id}")
    iceberg.refresh()
    found = []
    tasks = iceberg.newScan().planFiles().iterator()
    while tasks.hasNext():
        task = tasks.next()
        found += [
            (delete, task.file().location())
            for delete in task.deletes()
            if str(delete.location()) not in existing
        ]
    ((delete, data_path),) = found
    iceberg.manageSnapshots().rollbackTo(start).commit()
    return (
        spark._jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(iceberg.spec())
        .copy(delete)
        .withPartitionPath(f"part={label}")
        .withReferencedDataFile(data_path)
        .build()
    )


def live_delete_files(spark: Any, namespace: str, name: str) -> list[Any]:
    """The live delete files, each once."""
    iceberg = load(spark, namespace, name)
    found: dict[str, Any] = {}
    tasks = iceberg.newScan().planFiles().iterator()
    while tasks.hasNext():
        for delete in tasks.next().deletes():
            found[str(delete.location())] = delete
    return list(found.values())


def commit_rewriting_deletes(spark: Any, namespace: str, name: str, aside: Path, extra: Any) -> int:
    """A "replace" that rewrites every live delete file into a byte-identical copy (a faithful
    rewrite) and also adds the delete file ``extra``. Returns the snapshot id."""
    iceberg = load(spark, namespace, name)
    rewrite = iceberg.newRewrite()
    aside.mkdir(parents=True, exist_ok=True)
    for delete in live_delete_files(spark, namespace, name):
        source = local_path(delete.location())
        copy = aside / f"copy-{source.name}"
        shutil.copy(source, copy)
        rewrite.deleteFile(delete)
        rewrite.addFile(
            spark._jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(iceberg.spec())
            .copy(delete)
            .withPath(f"file:{copy}")
            .build()
        )
    rewrite.addFile(extra)
    rewrite.commit()
    return int(iceberg.currentSnapshot().snapshotId())


def partition_fingerprint(
    spark: Any, table: str, snapshot_id: int, parts: tuple[str, ...]
) -> tuple[int, int]:
    """Rows and Icepack's checksum of the rows with ``part`` in ``parts`` at a snapshot,
    computed by a plain filtered query (the value the scoped evidence must report)."""
    ddl = spark.sql(f"SHOW CREATE TABLE {table}").first()[0]
    checksum = checksum_expression(parse_columns(ddl))
    listed = ", ".join(f"'{p}'" for p in parts)
    row = spark.sql(
        f"SELECT count(*) AS n, {checksum} AS h FROM {table} VERSION AS OF "
        f"{int(snapshot_id)} WHERE part IN ({listed})"
    ).first()
    return int(row["n"]), int(row["h"])


class HiddenFiles:
    """Moves the data files of some partitions away (any read of them then fails) and back."""

    def __init__(
        self, spark: Any, namespace: str, name: str, parts: tuple[str, ...], aside: Path
    ) -> None:
        self.paths = [
            local_path(f.location())
            for f in live_data_files(spark, name, namespace)
            if any(f"/part={p}/" in f.location() for p in parts)
        ]
        self.aside = aside
        self.moved: list[tuple[Path, Path]] = []

    def hide(self) -> None:
        self.aside.mkdir(parents=True, exist_ok=True)
        for i, path in enumerate(self.paths):
            target = self.aside / f"{i}-{path.name}"
            shutil.move(path, target)
            self.moved.append((target, path))

    def restore(self) -> None:
        for target, path in self.moved:
            shutil.move(target, path)
        self.moved = []
