"""Small Iceberg tables written by Spark for the maintenance tests, and the oracles they check.

Every maintenance test compares the table's live contents before and after (row count and a
content checksum computed by Spark itself) and checks that no file referenced by any remaining
snapshot was deleted.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from icepack_core.spark.sql import qualified_name

CATALOG = "icepack"
_names = itertools.count()


def unique_name(prefix: str) -> str:
    return f"{prefix}_{next(_names)}"


def make_small_files_table(
    spark: Any,
    namespace: str,
    name: str,
    batches: int = 12,
    rows: int = 20,
    partitioned: bool = False,
    merge_on_read: bool = False,
    fmt_version: int = 2,
) -> str:
    """A table of ``batches`` tiny appends (one small file each, or more if partitioned)."""
    table = qualified_name(CATALOG, [namespace], name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], namespace)}")
    partition = "PARTITIONED BY (part)" if partitioned else ""
    props = [f"'format-version'='{fmt_version}'", "'write.target-file-size-bytes'='1048576'"]
    if merge_on_read:
        props += ["'write.delete.mode'='merge-on-read'", "'write.update.mode'='merge-on-read'"]
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, part STRING, payload STRING) USING iceberg "
        f"{partition} TBLPROPERTIES ({', '.join(props)})"
    )
    for b in range(batches):
        spark.sql(
            f"INSERT INTO {table} SELECT id, CASE WHEN id % 3 = 0 THEN 'a' ELSE 'b' END AS part, "
            f"concat('row-', id) AS payload FROM range({b * rows}, {(b + 1) * rows}) "
            "DISTRIBUTE BY part"
            if partitioned
            else f"INSERT INTO {table} SELECT id, 'a', concat('row-', id) "
            f"FROM range({b * rows}, {(b + 1) * rows})"
        )
    return table


def fingerprint(spark: Any, table: str) -> tuple[int, int]:
    row = spark.sql(
        f"SELECT count(*) AS n, coalesce(sum(cast(hash(*) AS BIGINT)), 0) AS h FROM {table}"
    ).first()
    return int(row["n"]), int(row["h"])


def data_file_count(spark: Any, table: str) -> int:
    return int(spark.sql(f"SELECT count(*) AS n FROM {table}.files WHERE content = 0").first()["n"])


def snapshot_count(spark: Any, table: str) -> int:
    return int(spark.sql(f"SELECT count(*) AS n FROM {table}.snapshots").first()["n"])


def local_path(location: str) -> Path:
    return Path(urlsplit(location).path) if location.startswith("file:") else Path(location)


def missing_referenced_files(spark: Any, table: str) -> list[str]:
    """Files any remaining snapshot still references (data, deletes, manifests, lists) that are
    gone from disk. Must always be empty."""
    paths = [
        r["file_path"] for r in spark.sql(f"SELECT file_path FROM {table}.all_files").collect()
    ]
    paths += [r["path"] for r in spark.sql(f"SELECT path FROM {table}.all_manifests").collect()]
    paths += [
        r["manifest_list"]
        for r in spark.sql(f"SELECT manifest_list FROM {table}.snapshots").collect()
    ]
    return [p for p in paths if not local_path(p).exists()]


def metadata_loader(settings: Any, namespace: str, name: str) -> Any:
    """The verifier's ``metadata`` loader as the executor builds it: the table loaded by the
    inspector through the configured catalog (``settings``), at call time."""
    from icepack_core.inspection.inspector import Inspector
    from icepack_core.types import TableRef

    inspector = Inspector(settings)
    ref = TableRef(CATALOG, namespace, name)

    async def load() -> Any:
        return (await inspector.load(ref)).table

    return load
