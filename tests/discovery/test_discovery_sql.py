"""Discovery against a real SQL catalog: exact events per change, errors never wipe the fleet."""

from __future__ import annotations

from pathlib import Path

import asyncpg
from pyiceberg.catalog.sql import SqlCatalog

from icepack_core.discovery.catalogs import CatalogSet
from icepack_core.discovery.refresh import Discovery, refresh_table
from icepack_core.inspection.process import TableInspections
from icepack_core.settings import CatalogConfig, Settings, load_settings
from tests.plugins.catalogs import rows


async def events(db: asyncpg.Pool, after: int = 0) -> list[tuple[str, str]]:
    recs = await db.fetch(
        "SELECT e.topic, t.namespace || '.' || t.name AS t FROM icepack.events e "
        "JOIN icepack.tables t ON t.id = e.table_id WHERE e.id > $1 ORDER BY e.id",
        after,
    )
    return sorted((r["topic"], r["t"]) for r in recs)


async def last_event_id(db: asyncpg.Pool) -> int:
    last: int = await db.fetchval("SELECT coalesce(max(id), 0) FROM icepack.events")
    return last


def make_settings(database_url: str, tmp_path: Path, *catalogs: CatalogConfig) -> Settings:
    return load_settings(
        database_url=database_url, data_dir=tmp_path / "data", catalogs=list(catalogs)
    )


async def test_discovery_emits_exactly_one_event_per_change(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    catalog.create_namespace(("ns", "sub"))
    a = catalog.create_table("ns.a", rows(0).schema)
    catalog.create_table("ns.b", rows(0).schema)
    catalog.create_table(("ns", "sub", "c"), rows(0).schema)
    discovery = Discovery(make_settings(database_url, tmp_path, cfg), db)

    first = await discovery.run_once()
    assert (first.discovered, first.changed, first.dropped, first.errors) == (3, 0, 0, {})
    assert await events(db) == [
        ("table.discovered", "ns.a"),
        ("table.discovered", "ns.b"),
        ("table.discovered", "ns.sub.c"),
    ]

    mark = await last_event_id(db)
    again = await discovery.run_once()
    assert (again.discovered, again.changed, again.dropped) == (0, 0, 0)
    assert await events(db, mark) == []

    a.append(rows(3))
    catalog.drop_table("ns.b")
    catalog.create_table("ns.d", rows(0).schema)
    mark = await last_event_id(db)
    third = await discovery.run_once()
    assert (third.discovered, third.changed, third.dropped) == (1, 1, 1)
    assert await events(db, mark) == [
        ("table.changed", "ns.a"),
        ("table.discovered", "ns.d"),
        ("table.dropped", "ns.b"),
    ]
    row = await db.fetchrow(
        "SELECT metadata_location, dropped_at FROM icepack.tables WHERE name = 'a'"
    )
    assert row is not None
    assert row["metadata_location"] == catalog.load_table("ns.a").metadata_location
    assert await db.fetchval("SELECT dropped_at IS NOT NULL FROM icepack.tables WHERE name='b'")

    catalog.create_table("ns.b", rows(0).schema)
    mark = await last_event_id(db)
    fourth = await discovery.run_once()
    assert await events(db, mark) == [("table.discovered", "ns.b")]
    assert fourth.discovered == 1
    assert await db.fetchval("SELECT dropped_at IS NULL FROM icepack.tables WHERE name='b'")
    status = await db.fetchrow("SELECT * FROM icepack.catalog_status WHERE catalog='scratch'")
    assert status is not None
    assert status["last_error"] is None and status["table_count"] == 4


async def test_include_and_exclude_patterns_select_tables(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    cfg, catalog = scratch_catalog
    for ns in ("keep", "skip"):
        catalog.create_namespace(ns)
        catalog.create_table(f"{ns}.t1", rows(0).schema)
        catalog.create_table(f"{ns}.tmp_x", rows(0).schema)
    cfg = cfg.model_copy(update={"include": ["keep"], "exclude": ["*.tmp_*"]})
    await Discovery(make_settings(database_url, tmp_path, cfg), db).run_once()
    names = [
        r["n"]
        for r in await db.fetch(
            "SELECT namespace || '.' || name AS n FROM icepack.tables ORDER BY 1"
        )
    ]
    assert names == ["keep.t1"]


async def test_a_broken_catalog_records_an_error_and_keeps_its_tables(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    catalog.create_table("ns.a", rows(0).schema)
    down_rest = CatalogConfig(
        name="down", type="rest", uri="http://127.0.0.1:9/catalog", credential="id:secret-value"
    )
    ok = await Discovery(make_settings(database_url, tmp_path, cfg, down_rest), db).run_once()
    assert ok.discovered == 1
    assert set(ok.errors) == {"down"}
    assert "secret-value" not in ok.errors["down"]

    broken = cfg.model_copy(update={"uri": "postgresql://postgres@127.0.0.1:9/nowhere"})
    mark = await last_event_id(db)
    result = await Discovery(make_settings(database_url, tmp_path, broken), db).run_once()
    assert set(result.errors) == {"scratch"}
    assert await events(db, mark) == []
    assert await db.fetchval("SELECT count(*) FROM icepack.tables WHERE dropped_at IS NULL") == 1
    status = await db.fetchrow("SELECT * FROM icepack.catalog_status WHERE catalog='scratch'")
    assert status is not None
    assert status["last_error"] and status["last_ok_at"] is not None
    down = await db.fetchrow("SELECT * FROM icepack.catalog_status WHERE catalog='down'")
    assert down is not None
    assert down["last_ok_at"] is None and down["last_error"]


async def test_a_commit_seen_by_a_sql_listing_keeps_the_stored_properties(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    """A SQL catalog's listing (and a targeted refresh of it) carries no properties. The stored
    ones come from the inspector and are what the planner and admission read (an opt-out, the
    write paths of the overlap check, gc.enabled): a commit must not wipe them."""
    cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    table = catalog.create_table(
        "ns.opted_out", rows(0).schema, properties={"icepack.maintenance.enabled": "false"}
    )
    settings = make_settings(database_url, tmp_path, cfg)
    discovery = Discovery(settings, db)
    await discovery.run_once()
    table_id = await db.fetchval("SELECT id FROM icepack.tables WHERE name = 'opted_out'")
    await TableInspections(settings, db).inspect_and_record(table_id)
    stored = await db.fetchval("SELECT properties FROM icepack.tables WHERE id = $1", table_id)
    assert stored["icepack.maintenance.enabled"] == "false"

    table.append(rows(3))
    assert (await discovery.run_once()).changed == 1
    table.append(rows(3))
    pushed = await refresh_table(db, CatalogSet([cfg]), cfg, ("ns",), "opted_out")
    assert pushed.changed == 1

    row = await db.fetchrow(
        "SELECT metadata_location, properties FROM icepack.tables WHERE id = $1", table_id
    )
    assert row is not None
    assert row["metadata_location"] == catalog.load_table("ns.opted_out").metadata_location
    assert row["properties"] == stored
