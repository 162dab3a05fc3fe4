"""Both inspectors on real tables of every readable kind (tests/data/tables-icepack).

Spark-written v1, v2 (gzip metadata) and v3 (row lineage, a deletion vector), a PyIceberg-written
v2, a v1 table whose snapshots list their manifests inline and the v3 metadata as
``*.metadata.json.gz`` (both derived from the Spark tables), with relative plain and relative
``file://`` locations. The Python inspector and go-inspector must report the same contract on
each, matching the writer's own snapshot summary; what cannot be read fails with
INSPECTION_FAILED naming the file.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import ValidationError
from pyiceberg.table import StaticTable
from sqlalchemy import text

from icepack_core.discovery.refresh import Discovery
from icepack_core.inspection.go_inspector import DEFAULT_BINARY, inspect_with_go
from icepack_core.inspection.inspector import (
    InspectionFailed,
    Inspector,
    MemoryManifestCache,
    inspect_metadata_location,
    inspect_table,
)
from icepack_core.inspection.process import TableInspections
from icepack_core.inspection.status import TableStatus
from icepack_core.settings import CatalogConfig, load_settings
from icepack_core.types import TableRef
from tests.inspection.oracle import assert_matches_oracle, assert_matches_summary
from tests.plugins.catalogs import ZOO_THRESHOLDS

REPO = Path(__file__).resolve().parents[2]
TABLES = Path(
    os.environ.get("ICEPACK_TABLES_ICEPACK") or REPO / "tests" / "data" / "tables-icepack"
)
CASES: list[dict[str, Any]] = json.loads((TABLES / "tables.json").read_text())
BY_NAME = {c["name"]: c for c in CASES}
GO_BINARY = REPO / DEFAULT_BINARY
needs_go = pytest.mark.skipif(not GO_BINARY.is_file(), reason="go-inspector is not built")
# Read by PyIceberg's own model too (so its inspect.files() can serve as the oracle).
PYICEBERG_READS = {"spark_v1", "spark_v2", "spark_v3", "pyiceberg_v2"}


@pytest.fixture
def tables(monkeypatch: pytest.MonkeyPatch) -> Path:
    """This folder as the working directory: the tables' locations are relative to it."""
    monkeypatch.chdir(TABLES)
    return TABLES


def raw_metadata(location: str) -> dict[str, Any]:
    raw = Path(location).read_bytes()
    doc: dict[str, Any] = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return doc


def test_the_cases_cover_every_kind() -> None:
    kinds = {
        (raw_metadata(str(TABLES / c["metadata"]))["format-version"], c["name"]) for c in CASES
    }
    assert {v for v, _ in kinds} == {1, 2, 3}
    inline = raw_metadata(str(TABLES / BY_NAME["spark_v1_inline"]["metadata"]))
    assert all("manifests" in s and "manifest-list" not in s for s in inline["snapshots"])
    assert BY_NAME["spark_v2"]["metadata"].endswith(".gz.metadata.json")
    assert BY_NAME["spark_v3_gz"]["metadata"].endswith(".metadata.json.gz")
    v3 = raw_metadata(str(TABLES / BY_NAME["spark_v3"]["metadata"]))
    assert "next-row-id" in v3 and all("first-row-id" in s for s in v3["snapshots"])
    assert v3["location"].startswith("file://warehouse/")  # a relative file:// URI
    assert BY_NAME["pyiceberg_v2"]["writer"].startswith("PyIceberg")


@pytest.mark.parametrize("name", sorted(BY_NAME))
async def test_python_inspector_reads_the_table_as_its_writer_summarised(
    tables: Path, name: str
) -> None:
    case = BY_NAME[name]
    status = await inspect_metadata_location(case["metadata"], cache=MemoryManifestCache())
    doc = raw_metadata(case["metadata"])
    assert status.format_version == doc["format-version"]
    assert status.current_snapshot_id == doc["current-snapshot-id"]
    assert status.snapshot_count == len(doc["snapshots"])
    assert status.metadata_log_count == len(doc.get("metadata-log", []))
    assert status.data_file_count > 0 and status.manifests_read == status.manifest_count
    assert_matches_summary(status, case["summary"])
    assert status.table == Path(case["metadata"]).parts[-3]
    if name in PYICEBERG_READS:
        table = StaticTable.from_metadata(case["metadata"])
        assert_matches_oracle(status, table)
        # the PyIceberg model's view and this reader's view give the same contract
        through_model = await inspect_table(
            table, catalog="", namespace=status.namespace, name=status.table
        )
        assert through_model.table_metrics() == status.table_metrics()


def test_pyiceberg_model_rejects_the_derived_cases(tables: Path) -> None:
    """Why the Python inspector reads metadata itself: PyIceberg cannot load these."""
    for name in ("spark_v1_inline", "spark_v3_gz"):
        with pytest.raises((ValidationError, OSError)):  # the model; *.gz taken for a folder
            StaticTable.from_metadata(BY_NAME[name]["metadata"])


async def test_derived_cases_inspect_like_their_source(tables: Path) -> None:
    def metrics(status: TableStatus) -> dict[str, Any]:
        out = status.table_metrics()
        for key in ("metadata_location", "table"):
            out.pop(key)
        return out

    v1 = await inspect_metadata_location(BY_NAME["spark_v1"]["metadata"])
    inline = await inspect_metadata_location(BY_NAME["spark_v1_inline"]["metadata"])
    v1m, inm = metrics(v1), metrics(inline)
    # The inline copy's manifests name longer paths (spark_v1_inline): only their bytes differ.
    assert inm.pop("manifest_bytes") == sum(
        (TABLES / p).stat().st_size
        for p in raw_metadata(str(TABLES / BY_NAME["spark_v1_inline"]["metadata"]))["snapshots"][
            -1
        ]["manifests"]
    )
    v1m.pop("manifest_bytes")
    assert inm == v1m
    v3 = await inspect_metadata_location(BY_NAME["spark_v3"]["metadata"])
    v3_gz = await inspect_metadata_location(BY_NAME["spark_v3_gz"]["metadata"])
    assert metrics(v3_gz) == metrics(v3)


@needs_go
@pytest.mark.parametrize("name", sorted(BY_NAME))
async def test_go_inspector_agrees_on_every_kind(tables: Path, name: str) -> None:
    location = BY_NAME[name]["metadata"]
    ours = await inspect_metadata_location(location)
    theirs = await inspect_with_go(
        location, catalog="", namespace=ours.namespace, table=ours.table, binary=GO_BINARY
    )
    assert theirs.inspector == "iceberg-go"
    assert theirs.table_metrics() == ours.table_metrics()


def copy_tables(tmp_path: Path) -> Path:
    dest = tmp_path / "tables"
    shutil.copytree(TABLES / "warehouse", dest / "warehouse")
    return dest


async def test_unreadable_tables_fail_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = copy_tables(tmp_path)
    monkeypatch.chdir(root)
    inline = BY_NAME["spark_v1_inline"]["metadata"]
    v2 = BY_NAME["spark_v2"]["metadata"]
    doc = raw_metadata(inline)

    async def failure(location: str) -> str:
        with pytest.raises(InspectionFailed) as info:
            await inspect_metadata_location(location)
        return info.value.message

    missing = "warehouse/db/spark_v1/metadata/v99.metadata.json"
    assert missing in await failure(missing)
    bad = root / "warehouse/db/spark_v1/metadata/v5.metadata.json"
    bad.write_text('{"format-version": 1, "snapshots": [')
    message = await failure(str(bad))
    assert str(bad) in message and "not valid table metadata JSON" in message
    bad_gz = root / "warehouse/db/spark_v1/metadata/v6.metadata.json.gz"
    bad_gz.write_bytes(gzip.compress(b"{ nope")[:12])
    assert str(bad_gz) in await failure(str(bad_gz))
    # A manifest of the inline snapshot is gone.
    gone = doc["snapshots"][-1]["manifests"][0]
    (root / gone).unlink()
    message = await failure(inline)
    assert "cannot read manifest" in message and gone in message
    # A truncated manifest list (the projecting read gives up, PyIceberg's reader fails).
    v3 = BY_NAME["spark_v3"]["metadata"]
    v3_doc = raw_metadata(v3)
    (current,) = (
        s for s in v3_doc["snapshots"] if s["snapshot-id"] == v3_doc["current-snapshot-id"]
    )
    v3_list = root / current["manifest-list"].removeprefix("file://")
    v3_list.write_bytes(v3_list.read_bytes()[:300])
    message = await failure(v3)
    assert "cannot read manifest list" in message and current["manifest-list"] in message
    # A manifest list is gone.
    listing = raw_metadata(v2)["snapshots"][-1]["manifest-list"]
    (root / listing).unlink()
    message = await failure(v2)
    assert "cannot read manifest list" in message and listing in message


def register(catalog: SqlCatalog, name: str, location: str) -> None:
    """A SQL catalog row pointing at ``location`` (PyIceberg's register_table would load the
    metadata through its model, which rejects some of these tables)."""
    with catalog.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, "
                "metadata_location, previous_metadata_location) VALUES (:c, 'db', :n, :m, NULL)"
            ),
            {"c": catalog.name, "n": name, "m": location},
        )


async def test_the_service_inspects_what_pyiceberg_rejects_and_records_failures(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    cfg, catalog = scratch_catalog
    root = copy_tables(tmp_path)
    monkeypatch.chdir(root)
    catalog.create_namespace("db")
    register(catalog, "inline", BY_NAME["spark_v1_inline"]["metadata"])
    register(catalog, "v3_gz", BY_NAME["spark_v3_gz"]["metadata"])
    register(catalog, "v2", BY_NAME["spark_v2"]["metadata"])
    missing = "warehouse/db/spark_v1/metadata/v42.metadata.json"
    register(catalog, "missing", missing)
    not_json = root / "warehouse/db/spark_v1/metadata/v43.metadata.json"
    not_json.write_text("[1, 2")
    register(catalog, "not_json", str(not_json))
    settings = load_settings(database_url=database_url, data_dir=tmp_path / "d", catalogs=[cfg])

    inspector = Inspector(settings)
    loaded = await inspector.load(TableRef("scratch", "db", "inline"))
    assert loaded.table is None and loaded.location() == "warehouse/db/spark_v1_inline"

    await Discovery(settings, db).run_once()
    inspections = TableInspections(settings, db, ZOO_THRESHOLDS)
    outcomes = {}
    for r in await db.fetch("SELECT id, name FROM icepack.tables"):
        outcomes[r["name"]] = await inspections.inspect_and_record(r["id"], "table.discovered")
    for name, case in (("inline", "spark_v1_inline"), ("v3_gz", "spark_v3_gz"), ("v2", "spark_v2")):
        status = outcomes[name].status
        assert status is not None, outcomes[name].assessment
        assert_matches_summary(status, BY_NAME[case]["summary"])
        assert status.table_metrics() | {"catalog": "", "namespace": "db", "table": case} == (
            await inspect_metadata_location(BY_NAME[case]["metadata"])
        ).table_metrics() | {"catalog": "", "namespace": "db", "table": case}
    for name, path in (("missing", missing), ("not_json", str(not_json))):
        o = outcomes[name]
        assert o.status is None and o.assessment is not None
        (issue,) = o.assessment.issues
        assert issue.code == "INSPECTION_FAILED" and path in issue.message
