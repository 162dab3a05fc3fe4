"""Tables a catalog lists but does not maintain still count for the location checks (issue 28,
"Knowing every table").

A real SQL catalog (PyIceberg, its own Postgres database and warehouse), discovery's real pass,
real Postgres for Icepack, and the real confinement loader and orphan-removal overlap check.
The "maintained table whose manifests name the excluded table's files" is built for real with
``add_files``; its manifest paths are read back from its metadata.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import asyncpg
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from icepack_core.db.queries import load_query
from icepack_core.db.tables import TableRow
from icepack_core.discovery.refresh import Discovery
from icepack_core.discovery.unmaintained import UnmaintainedTable, record_unmaintained
from icepack_core.errors import ActionRefused, DeletionOutsideTable
from icepack_core.safety.admission import _target_location
from icepack_core.safety.confinement import confinement_of, refuse_foreign
from icepack_core.settings import CatalogConfig, load_settings
from tests.plugins.catalogs import rows

HIDDEN = "scratch.ns.hidden (not maintained: excluded)"


def discovery_of(db: Any, database_url: str, tmp_path: Path, cfg: CatalogConfig) -> Discovery:
    settings = load_settings(database_url=database_url, data_dir=tmp_path / "data", catalogs=[cfg])
    return Discovery(settings, db)


async def unmaintained(db: Any) -> dict[str, Any]:
    found = await db.fetch("SELECT * FROM icepack.unmaintained_tables ORDER BY namespace, name")
    return {f"{r['namespace']}.{r['name']}": r for r in found}


async def maintained(db: Any) -> set[str]:
    found = await db.fetch("SELECT namespace, name FROM icepack.tables WHERE dropped_at IS NULL")
    return {f"{r['namespace']}.{r['name']}" for r in found}


def data_paths(table: Any) -> list[str]:
    return sorted(table.inspect.files().column("file_path").to_pylist())


async def own_confinement(db: Any, catalog: Any, name: str) -> Any:
    table = catalog.load_table(("ns", name))
    tid = await db.fetchval("SELECT id FROM icepack.tables WHERE namespace='ns' AND name=$1", name)
    assert tid is not None, f"discovery did not register ns.{name}"
    return await confinement_of(
        db,
        tid,
        f"scratch.ns.{name}",
        location=table.metadata.location,
        metadata_location=table.metadata_location,
        properties=dict(table.metadata.properties),
    )


async def test_an_excluded_table_is_recorded_with_its_roots_and_never_maintained(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    cfg, catalog = scratch_catalog
    cfg = cfg.model_copy(update={"exclude": ["ns.hidden"]})
    catalog.create_namespace("ns")
    catalog.create_table("ns.kept", rows(0).schema)
    shared = (tmp_path / "warehouse" / "elsewhere").as_uri()
    hidden = catalog.create_table(
        "ns.hidden", rows(0).schema, properties={"write.data.path": shared}
    )
    hidden.append(rows(3))
    discovery = discovery_of(db, database_url, tmp_path, cfg)

    first = await discovery.run_once()

    assert first.errors == {} and first.catalogs[0].unmaintained == 1
    assert await maintained(db) == {"ns.kept"}  # never inspected, planned or maintained
    row = (await unmaintained(db))["ns.hidden"]
    hidden = catalog.load_table("ns.hidden")
    assert (row["reason"], row["load_error"]) == ("excluded", None)
    assert row["metadata_location"] == hidden.metadata_location
    assert row["location"] == hidden.metadata.location
    assert row["write_paths"] == {"write.data.path": shared}
    topics = await db.fetch("SELECT topic, payload FROM icepack.events")
    assert [r["topic"] for r in topics] == ["table.discovered"]  # ns.kept's alone
    assert "hidden" not in str(topics[0]["payload"])

    # Included again: it becomes a maintained table and its record goes; dropped: gone too.
    discovery.configs = [cfg.model_copy(update={"exclude": []})]
    await discovery.run_once()
    assert await unmaintained(db) == {} and await maintained(db) == {"ns.kept", "ns.hidden"}
    discovery.configs = [cfg]
    await discovery.run_once()
    assert set(await unmaintained(db)) == {"ns.hidden"}
    catalog.drop_table("ns.hidden")
    await discovery.run_once()
    assert await unmaintained(db) == {}


async def test_a_maintained_table_naming_an_excluded_table_s_files_is_refused_naming_it(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    """Old code: the excluded table was unknown, so its files passed as the sandbox's own
    foreign paths owned by nobody, or (under a write path) not at all."""
    cfg, catalog = scratch_catalog
    cfg = cfg.model_copy(update={"exclude": ["ns.hidden"]})
    catalog.create_namespace("ns")
    hidden_data = (tmp_path / "warehouse" / "hidden-data").as_uri()
    hidden = catalog.create_table(
        "ns.hidden", rows(0).schema, properties={"write.data.path": hidden_data}
    )
    hidden.append(rows(4))
    theirs = data_paths(catalog.load_table("ns.hidden"))
    sandbox = catalog.create_table("ns.sandbox", rows(0).schema)
    sandbox.add_files(theirs)  # the sandbox's manifests now name the excluded table's files
    named = data_paths(catalog.load_table("ns.sandbox"))
    assert named == theirs
    await discovery_of(db, database_url, tmp_path, cfg).run_once()

    confinement = await own_confinement(db, catalog, "sandbox")
    with pytest.raises(DeletionOutsideTable) as caught:
        refuse_foreign(confinement, named, "expire_snapshots")

    assert HIDDEN in str(caught.value)
    evidence = caught.value.evidence
    assert evidence["tables"] == [HIDDEN] and evidence["foreign_count"] == len(theirs)
    foreign = evidence["foreign"]
    assert isinstance(foreign, list)
    assert {f["root"] for f in foreign} == {hidden_data}
    assert await maintained(db) == {"ns.sandbox"}


async def test_orphan_removal_over_an_excluded_table_is_refused_naming_it(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    cfg, catalog = scratch_catalog
    cfg = cfg.model_copy(update={"exclude": ["ns.inner"]})
    catalog.create_namespace("ns")
    outer = catalog.create_table("ns.outer", rows(0).schema)
    catalog.create_table("ns.inner", rows(0).schema, location=f"{outer.metadata.location}/inner")
    await discovery_of(db, database_url, tmp_path, cfg).run_once()
    found = await db.fetchrow(load_query("table_get_by_name"), "scratch", "ns", "outer")
    assert found is not None
    await db.execute(load_query("table_set_location"), found["id"], outer.metadata.location)
    row = await db.fetchrow(load_query("table_get"), found["id"])
    assert row is not None

    with pytest.raises(ActionRefused) as caught:
        await _target_location(db, TableRow.from_record(row))

    assert caught.value.rule == "LOCATION_OVERLAP"
    assert "scratch.ns.inner (not maintained: excluded)" in str(caught.value)


async def test_an_unmaintained_table_with_no_known_location_refuses_naming_it(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    """A table whose metadata was never readable (a REST or Glue load failing from the first
    pass) is recorded without a location: the checks refuse rather than ignore it."""
    cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    catalog.create_table("ns.sandbox", rows(0).schema)
    await discovery_of(db, database_url, tmp_path, cfg).run_once()
    async with db.acquire() as conn:
        unread = UnmaintainedTable("ns", "hidden", "excluded", None, None, load_error="timeout")
        # record_unmaintained's annotation names a Connection; the services hand it a pooled one
        await record_unmaintained(cast(asyncpg.Connection, conn), "scratch", [unread])

    with pytest.raises(ActionRefused) as caught:
        await own_confinement(db, catalog, "sandbox")

    assert caught.value.rule == "LOCATION_UNKNOWN" and HIDDEN in str(caught.value)
