"""Spark-written tables: merge-on-read position deletes (v2) and deletion vectors (v3).

Our metrics are checked against Spark's own metadata tables (an independent oracle) and the
expected health issues.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from icepack_core.discovery.catalogs import load_catalog
from icepack_core.inspection.go_inspector import DEFAULT_BINARY, inspect_with_go
from icepack_core.inspection.health import assess
from icepack_core.inspection.inspector import MemoryManifestCache, inspect_table
from icepack_core.settings import Settings
from tests.inspection.oracle import assert_matches_oracle
from tests.plugins.catalogs import ZOO_THRESHOLDS

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    # py4j drops gateway sockets without closing them (a ResourceWarning raised at GC time).
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

REPO = Path(__file__).resolve().parents[2]
# Ten rows, three deleted: the delete ratio (0.3) crosses DELETE_FILE_BUILDUP's 10 %.
SPARK_TABLES = {
    "mor": ("2", {"DELETE_FILE_BUILDUP"}),
    "dv": ("3", {"DELETE_FILE_BUILDUP"}),
}


@pytest.fixture(scope="session")
def spark_zoo(spark: Any, spark_catalog_settings: Settings) -> Iterator[SqlCatalog]:
    """The Spark tables, and a PyIceberg view of the same JDBC catalog."""
    spark.sql("CREATE NAMESPACE IF NOT EXISTS icepack.szoo")
    for name, (version, _) in SPARK_TABLES.items():
        spark.sql(f"DROP TABLE IF EXISTS icepack.szoo.{name}")
        spark.sql(
            f"CREATE TABLE icepack.szoo.{name} (id bigint, v string) USING iceberg "
            f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read', "
            "'write.update.mode'='merge-on-read', 'write.target-file-size-bytes'='8')"
        )
        values = ", ".join(f"({i}, 'v{i}')" for i in range(10))
        spark.sql(f"INSERT INTO icepack.szoo.{name} VALUES {values}")
        spark.sql(f"DELETE FROM icepack.szoo.{name} WHERE id < 3")
    catalog = load_catalog(spark_catalog_settings.effective_catalogs()[0])
    assert isinstance(catalog, SqlCatalog)
    try:
        yield catalog
    finally:
        catalog.engine.dispose()


def spark_oracle(spark: Any, name: str) -> dict[str, int]:
    files = spark.sql(
        f"SELECT content, upper(file_format) AS fmt, file_size_in_bytes AS size, record_count "
        f"FROM icepack.szoo.{name}.files"
    ).collect()
    manifests = spark.sql(f"SELECT length FROM icepack.szoo.{name}.manifests").collect()
    data = [f for f in files if f.content == 0]
    deletes = [f for f in files if f.content != 0]
    return {
        "data_file_count": len(data),
        "data_file_bytes": sum(f.size for f in data),
        "record_count": sum(f.record_count for f in data),
        "position_delete_file_count": sum(
            1 for f in deletes if f.content == 1 and f.fmt != "PUFFIN"
        ),
        "deletion_vector_count": sum(1 for f in deletes if f.content == 1 and f.fmt == "PUFFIN"),
        "equality_delete_file_count": sum(1 for f in deletes if f.content == 2),
        "delete_record_count": sum(f.record_count for f in deletes),
        "manifest_count": len(manifests),
        "manifest_bytes": sum(m.length for m in manifests),
    }


@pytest.mark.parametrize("name", list(SPARK_TABLES))
async def test_spark_table_metrics_match_spark_metadata_tables(
    spark: Any, spark_zoo: SqlCatalog, name: str
) -> None:
    table = spark_zoo.load_table(("szoo", name))
    status = await inspect_table(
        table, catalog="icepack", namespace="szoo", name=name, cache=MemoryManifestCache()
    )
    expected = spark_oracle(spark, name)
    assert {k: getattr(status, k) for k in expected} == expected
    assert status.format_version == int(SPARK_TABLES[name][0])
    if name == "dv":
        assert status.deletion_vector_count >= 1 and status.position_delete_file_count == 0
    else:
        assert status.position_delete_file_count >= 1 and status.deletion_vector_count == 0
    assert status.delete_record_count == 3 and status.record_count == 10
    assert_matches_oracle(status, table)


@pytest.mark.parametrize("name", list(SPARK_TABLES))
async def test_spark_table_shows_exactly_its_expected_issues(
    spark_zoo: SqlCatalog, name: str
) -> None:
    table = spark_zoo.load_table(("szoo", name))
    status = await inspect_table(table, catalog="icepack", namespace="szoo", name=name)
    assert assess(status, ZOO_THRESHOLDS).issue_codes() == SPARK_TABLES[name][1]


@pytest.mark.skipif(not (REPO / DEFAULT_BINARY).is_file(), reason="go-inspector is not built")
@pytest.mark.parametrize("name", list(SPARK_TABLES))
async def test_go_inspector_agrees_on_spark_tables(spark_zoo: SqlCatalog, name: str) -> None:
    table = spark_zoo.load_table(("szoo", name))
    ours = await inspect_table(table, catalog="icepack", namespace="szoo", name=name)
    theirs = await inspect_with_go(
        table.metadata_location,
        catalog="icepack",
        namespace="szoo",
        table=name,
        binary=REPO / DEFAULT_BINARY,
    )
    assert theirs.table_metrics() == ours.table_metrics()
