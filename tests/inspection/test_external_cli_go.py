"""Tables written elsewhere, the read-only CLI, and parity with go-inspector."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pyiceberg.table import StaticTable
from typer.testing import CliRunner

from icepack_core.cli.app import app
from icepack_core.inspection.go_inspector import DEFAULT_BINARY, inspect_with_go
from icepack_core.inspection.inspector import (
    MemoryManifestCache,
    inspect_metadata_location,
    inspect_table,
)
from tests.inspection.oracle import assert_matches_oracle, assert_matches_summary
from tests.plugins.catalogs import Zoo

REPO = Path(__file__).resolve().parents[2]
# Vendored in the repository (tests/data/tables-external/README.md); ICEPACK_TABLES_EXTERNAL
# points at another copy.
EXTERNAL = Path(
    os.environ.get("ICEPACK_TABLES_EXTERNAL") or REPO / "tests" / "data" / "tables-external"
)
EXTERNAL_TABLES = [
    "data/persistent/equality_deletes/warehouse/mydb/mytable/metadata/v7.metadata.json",
    "data/persistent/equality_deletes/warehouse/mydb/mytable_partitioned/metadata/v6.metadata.json",
    "data/persistent/equality_delete_cross_partition/warehouse/ns/t/metadata/vfinal.metadata.json",
]
GO_BINARY = REPO / DEFAULT_BINARY


@pytest.fixture
def external(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The external tables' folder as the working directory (their paths are relative)."""
    assert EXTERNAL.is_dir(), f"{EXTERNAL} is missing"
    monkeypatch.chdir(EXTERNAL)
    return EXTERNAL


@pytest.mark.parametrize("location", EXTERNAL_TABLES)
async def test_external_table_counts_match_the_writers_summary(
    external: Path, location: str
) -> None:
    status = await inspect_metadata_location(location, cache=MemoryManifestCache())
    table = StaticTable.from_metadata(location)
    snapshot = table.metadata.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    summary = snapshot.summary.additional_properties
    assert status.equality_delete_file_count > 0
    assert_matches_summary(status, summary)
    assert_matches_oracle(status, table)
    assert status.catalog == "" and status.table == location.split("/")[-3]


def _zoo_env(zoo: Zoo) -> dict[str, str]:
    catalog = {
        "name": "zoo",
        "type": "sql",
        "uri": zoo.config.uri,
        "warehouse": zoo.config.warehouse,
    }
    return {"ICEPACK_CATALOGS": json.dumps([catalog])}


def test_cli_reads_status_health_and_tables_from_the_catalog(zoo: Zoo) -> None:
    runner = CliRunner()
    env = _zoo_env(zoo)
    res = runner.invoke(app, ["status", "zoo.healthy", "--json"], env=env)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["data_file_count"] == 2

    res = runner.invoke(app, ["health", "zoo.zoo.small_files", "--json"], env=env)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["health"] == "warning" and [i["code"] for i in doc["issues"]] == ["SMALL_FILES"]

    res = runner.invoke(app, ["tables", "--json"], env=env)
    assert res.exit_code == 0, res.output
    assert {t["table"] for t in json.loads(res.stdout)["tables"]} == set(zoo.expected)

    res = runner.invoke(app, ["health", "--all", "--json"], env=env)
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout)["tables"]) == len(zoo.expected)

    res = runner.invoke(app, ["health", "--all"], env=env)
    assert res.exit_code == 0 and "small_files" in res.stdout


def test_cli_failures_name_the_cause_without_a_traceback(zoo: Zoo, tmp_path: Path) -> None:
    runner = CliRunner()
    bad = tmp_path / "ns" / "t" / "metadata" / "v1.metadata.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{ not json")
    res = runner.invoke(app, ["status", "--metadata-location", str(bad), "--json"])
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert doc["error"]["code"] == "INSPECTION_FAILED" and str(bad) in doc["error"]["message"]
    assert "Traceback" not in res.output

    res = runner.invoke(app, ["health", "zoo.no_such_table"], env=_zoo_env(zoo))
    assert res.exit_code == 1 and "INSPECTION_FAILED" in res.output
    assert "Traceback" not in res.output


needs_go = pytest.mark.skipif(not GO_BINARY.is_file(), reason="go-inspector is not built")


@needs_go
async def test_go_inspector_reports_the_same_metrics_on_the_zoo(zoo: Zoo) -> None:
    for name in zoo.expected:
        table = zoo.table(name)
        ours = await inspect_table(table, catalog="zoo", namespace="zoo", name=name)
        theirs = await inspect_with_go(
            table.metadata_location, catalog="zoo", namespace="zoo", table=name, binary=GO_BINARY
        )
        assert theirs.inspector == "iceberg-go"
        assert theirs.table_metrics() == ours.table_metrics(), name


@needs_go
# The third table's snapshot-id 9876543210123456789 exceeds int64: both inspectors read it.
@pytest.mark.parametrize("location", EXTERNAL_TABLES)
async def test_go_inspector_agrees_on_external_tables(external: Path, location: str) -> None:
    ours = await inspect_metadata_location(location)
    theirs = await inspect_with_go(
        location, catalog="", namespace=ours.namespace, table=ours.table, binary=GO_BINARY
    )
    assert theirs.table_metrics() == ours.table_metrics()
