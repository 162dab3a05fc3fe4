"""Spark's JDBC catalog and PyIceberg's SqlCatalog are one catalog: same tables both ways."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from icepack_core.settings import Settings
from icepack_core.spark.sql import qualified_name

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def pyiceberg_catalog(spark_catalog_settings: Settings) -> SqlCatalog:
    """PyIceberg's view of the embedded catalog, built from the same Icepack settings."""
    (cfg,) = spark_catalog_settings.effective_catalogs()
    assert cfg.uri is not None and cfg.warehouse is not None
    # SQLAlchemy 2.x maps bare postgresql:// to psycopg 3; psycopg2 is what is installed.
    uri = cfg.uri.replace("postgresql://", "postgresql+psycopg2://", 1)
    return SqlCatalog(cfg.name, uri=uri, warehouse=cfg.warehouse)


def test_a_table_spark_writes_is_read_by_pyiceberg(
    spark: Any, pyiceberg_catalog: SqlCatalog
) -> None:
    table = qualified_name("icepack", ["shared_from_spark"], "orders")
    spark.sql("CREATE NAMESPACE IF NOT EXISTS icepack.shared_from_spark")
    spark.sql(f"CREATE TABLE {table} (id bigint, name string) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b'), (3, 'c')")

    assert ("shared_from_spark", "orders") in pyiceberg_catalog.list_tables("shared_from_spark")
    loaded = pyiceberg_catalog.load_table(("shared_from_spark", "orders"))
    rows = loaded.scan().to_arrow().sort_by("id").to_pylist()
    assert rows == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}]


def test_a_table_pyiceberg_writes_is_read_and_maintained_by_spark(
    spark: Any, pyiceberg_catalog: SqlCatalog
) -> None:
    pyiceberg_catalog.create_namespace_if_not_exists("shared_from_py")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "name", StringType(), required=False),
    )
    created = pyiceberg_catalog.create_table(("shared_from_py", "events"), schema=schema)
    for start in (0, 10):
        created.append(
            pa.table(
                {
                    "id": pa.array([start, start + 1], pa.int64()),
                    "name": pa.array(["x", "y"], pa.string()),
                }
            )
        )
    table = qualified_name("icepack", ["shared_from_py"], "events")
    assert spark.sql(f"SELECT sum(id) FROM {table}").first()[0] == 22

    # Spark commits on top of PyIceberg's snapshots; PyIceberg then sees Spark's commit.
    spark.sql(f"INSERT INTO {table} VALUES (100, 'z')")
    reloaded = pyiceberg_catalog.load_table(("shared_from_py", "events"))
    assert len(reloaded.snapshots()) == 3
    assert reloaded.scan().to_arrow().num_rows == 5
