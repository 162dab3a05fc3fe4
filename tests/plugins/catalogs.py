"""pytest fixtures: catalogs (session-scoped real components).

* ``zoo``: small Iceberg tables written by PyIceberg into a SQL catalog on the test Postgres,
  each with the health issues it must show (under ``ZOO_THRESHOLDS``, scaled to tiny tables);
* ``moto_glue``: a Glue emulator (``moto_server``) subprocess;
* ``seaweed``: SeaweedFS ``weed mini`` (S3 on one port, Iceberg REST catalog on another).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg2
import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from icepack_core.discovery.catalogs import load_catalog
from icepack_core.inspection.health import Thresholds
from icepack_core.local.object_store import (
    LocalSeaweed,
    ObjectStore,
    WeedNotInstalled,
    stop_process,
    wait_for_port,
)
from icepack_core.local.ports import free_port
from icepack_core.settings import CatalogConfig

# Thresholds scaled to tables of a handful of files (the defaults are for production tables).
ZOO_THRESHOLDS = Thresholds(
    snapshots_warning=20,
    manifests_warning=12,
    metadata_log_warning=30,
    skew_ratio=2.5,
    skew_min_files=6,
)
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "cat", StringType(), required=False),
    NestedField(3, "v", DoubleType(), required=False),
)
ARROW_SCHEMA = SCHEMA.as_arrow()
NO_SMALL_FILES = {"write.target-file-size-bytes": "8"}  # threshold 1 byte: nothing is small


def rows(n: int, cat: str = "a", start: int = 0) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": start + i, "cat": cat, "v": float(i)} for i in range(n)], schema=ARROW_SCHEMA
    )


def create_database_sync(admin_url: str, name: str) -> str:
    conn = psycopg2.connect(admin_url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
            cur.execute(f"CREATE DATABASE {name}")
    finally:
        conn.close()
    return urlunsplit(urlsplit(admin_url)._replace(path=f"/{name}"))


@dataclass
class Zoo:
    """The zoo: its catalog, config, and each table's expected issue codes."""

    config: CatalogConfig
    catalog: SqlCatalog
    warehouse: Path
    expected: dict[str, set[str]] = field(default_factory=dict)

    def table(self, name: str) -> Table:
        return self.catalog.load_table(("zoo", name))


def _append(table: Table, data: pa.Table) -> Table:
    table.append(data)
    return table


def build_zoo(catalog: SqlCatalog) -> dict[str, set[str]]:
    """Write the zoo tables; returns each table's expected issues under ``ZOO_THRESHOLDS``."""
    catalog.create_namespace("zoo")
    expected: dict[str, set[str]] = {}

    # Six one-row appends under the default 512 MiB target: six small files.
    t = catalog.create_table("zoo.small_files", SCHEMA)
    for i in range(6):
        _append(t, rows(1, start=i))
    expected["small_files"] = {"SMALL_FILES"}

    # Two appends of files larger than target/8 (a 2 KiB target: files >= 256 B are fine).
    t = catalog.create_table(
        "zoo.healthy", SCHEMA, properties={"write.target-file-size-bytes": "2048"}
    )
    _append(t, rows(50))
    _append(t, rows(50, start=50))
    expected["healthy"] = set()

    # 21 commits, manifests merged as they go: many snapshots, few manifests.
    t = catalog.create_table(
        "zoo.many_snapshots",
        SCHEMA,
        properties={
            **NO_SMALL_FILES,
            "commit.manifest-merge.enabled": "true",
            "commit.manifest.min-count-to-merge": "2",
        },
    )
    for i in range(21):
        _append(t, rows(1, start=i))
    expected["many_snapshots"] = {"TOO_MANY_SNAPSHOTS"}

    # 13 fast appends: one manifest each.
    t = catalog.create_table("zoo.many_manifests", SCHEMA, properties=NO_SMALL_FILES)
    for i in range(13):
        _append(t, rows(1, start=i))
    expected["many_manifests"] = {"TOO_MANY_MANIFESTS"}

    # Partitioned by cat: a, b, c hold one file each, d six.
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "cat"))
    t = catalog.create_table("zoo.skewed", SCHEMA, partition_spec=spec, properties=NO_SMALL_FILES)
    _append(t, pa.concat_tables([rows(1, c) for c in "abcd"]))
    for i in range(5):
        _append(t, rows(1, "d", start=10 + i))
    expected["skewed"] = {"PARTITION_SKEW"}

    # 31 property updates, no data: only the metadata log grows.
    t = catalog.create_table("zoo.metadata_log", SCHEMA)
    for i in range(31):
        with t.transaction() as tx:
            tx.set_properties({"zoo.touch": str(i)})
    expected["metadata_log"] = {"METADATA_LOG_GROWTH"}

    catalog.create_table("zoo.empty", SCHEMA)
    expected["empty"] = set()
    return expected


@pytest.fixture(scope="session")
def zoo(pg_admin_url: str) -> Iterator[Zoo]:
    """The PyIceberg-written zoo in its own database and warehouse (read-only for tests)."""
    url = create_database_sync(pg_admin_url, f"icepack_zoo_{os.getpid()}")
    warehouse = Path(tempfile.mkdtemp(prefix="icepack-zoo-"))
    config = CatalogConfig(name="zoo", type="sql", uri=url, warehouse=warehouse.as_uri())
    catalog = load_catalog(config)
    assert isinstance(catalog, SqlCatalog)
    expected = build_zoo(catalog)
    try:
        yield Zoo(config, catalog, warehouse, expected)
    finally:
        catalog.engine.dispose()
        shutil.rmtree(warehouse, ignore_errors=True)


@pytest.fixture
def scratch_catalog(
    pg_admin_url: str, tmp_path: Path
) -> Iterator[tuple[CatalogConfig, SqlCatalog]]:
    """A fresh, empty SQL catalog (own database and warehouse) for tests that change tables."""
    url = create_database_sync(pg_admin_url, f"icepack_scratch_{os.getpid()}_{time.monotonic_ns()}")
    config = CatalogConfig(
        name="scratch", type="sql", uri=url, warehouse=(tmp_path / "warehouse").as_uri()
    )
    catalog = load_catalog(config)
    assert isinstance(catalog, SqlCatalog)
    try:
        yield config, catalog
    finally:
        catalog.engine.dispose()


@contextmanager
def running_moto() -> Iterator[str]:
    """``moto_server`` on a free port until the block ends; yields its endpoint URL."""
    exe = shutil.which("moto_server")
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("moto_server is not installed")
        pytest.skip("moto_server is not installed")
    port = free_port()
    proc = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


@pytest.fixture(scope="session")
def moto_glue() -> Iterator[str]:
    """A Glue emulator shared by the session: ``moto_server``; yields its endpoint URL."""
    with running_moto() as endpoint:
        yield endpoint


Seaweed = ObjectStore  # the fixture's value; the name older tests import


@pytest.fixture(scope="session")
def seaweed() -> Iterator[ObjectStore]:
    """SeaweedFS ``weed mini``: S3 and an Iceberg REST catalog with a ``warehouse`` table bucket
    (started as ``icepack demo --object-store`` starts it)."""
    data = Path(tempfile.mkdtemp(prefix="icepack-weed-"))
    try:
        with LocalSeaweed(data) as store:
            yield store
    except WeedNotInstalled as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    finally:
        shutil.rmtree(data, ignore_errors=True)
