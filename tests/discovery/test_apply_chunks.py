"""A listing is recorded in chunks, one transaction each, against a real SQL catalog: new tables
are visible (and announced) before the pass ends, a row Postgres refuses costs that table alone,
and a change pushed after the listing was read is neither overwritten nor marked dropped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from icepack_core.discovery import refresh
from icepack_core.discovery.catalogs import list_table_locations
from icepack_core.discovery.refresh import Discovery, apply_change
from icepack_core.settings import CatalogConfig
from tests.discovery.test_discovery_sql import events, last_event_id, make_settings
from tests.plugins.catalogs import rows


def wrap_chunks(monkeypatch: pytest.MonkeyPatch, before_each: Any) -> None:
    """Run ``before_each(chunk_number)`` before each chunk's transaction writes."""
    real = refresh._apply_chunk
    calls = {"n": 0}

    async def chunk(*args: Any, **kwargs: Any) -> None:
        await before_each(calls["n"])
        calls["n"] += 1
        await real(*args, **kwargs)

    monkeypatch.setattr(refresh, "_apply_chunk", chunk)


async def test_new_tables_commit_chunk_by_chunk_each_with_its_event(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    for name in ("a", "b", "c", "d", "e"):
        catalog.create_table(("ns", name), rows(0).schema)
    monkeypatch.setattr(refresh, "APPLY_CHUNK", 2)
    visible: list[int] = []

    async def count_committed(_: int) -> None:  # read from another connection: commits only
        visible.append(await db.fetchval("SELECT count(*) FROM icepack.tables"))

    wrap_chunks(monkeypatch, count_committed)
    result = await Discovery(make_settings(database_url, tmp_path, cfg), db).run_once()

    assert (result.discovered, result.errors) == (5, {})
    assert visible == [0, 2, 4]
    assert await events(db) == [("table.discovered", f"ns.{n}") for n in "abcde"]
    recorded = await db.fetch(
        "SELECT t.name, t.metadata_location, e.payload FROM icepack.events e "
        "JOIN icepack.tables t ON t.id = e.table_id ORDER BY t.name"
    )
    for row in recorded:
        location = catalog.load_table(("ns", row["name"])).metadata_location
        assert row["metadata_location"] == location
        assert row["payload"] == {"metadata_location": location}

    mark = await last_event_id(db)
    again = await Discovery(make_settings(database_url, tmp_path, cfg), db).run_once()
    assert (again.discovered, again.changed, again.dropped) == (0, 0, 0)
    assert await events(db, mark) == []


async def test_a_row_postgres_refuses_in_a_new_batch_costs_that_table_alone(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    for name in ("a", "refused", "b"):
        catalog.create_table(("ns", name), rows(0).schema)
    # A real refusal that unfit_reason cannot foresee (a constraint of this database only).
    await db.execute(
        "ALTER TABLE icepack.tables ADD CONSTRAINT test_refuses CHECK (name <> 'refused')"
    )
    discovery = Discovery(make_settings(database_url, tmp_path, cfg), db)

    result = await discovery.run_once()
    assert (result.discovered, result.errors) == (2, {})
    assert await events(db) == [("table.discovered", "ns.a"), ("table.discovered", "ns.b")]
    (entry,) = result.catalogs[0].skipped
    assert entry["table"] == "ns.refused"
    assert entry["reason"].startswith("refused by Postgres: CheckViolationError")

    again = await discovery.run_once()
    assert (again.discovered, again.dropped) == (0, 0)
    assert len(again.catalogs[0].skipped) == 1


async def test_a_change_pushed_after_the_listing_was_read_is_kept(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    a = catalog.create_table(("ns", "a"), rows(0).schema)
    catalog.create_table(("ns", "b"), rows(0).schema)
    catalog.create_table(("ns", "d"), rows(0).schema)
    discovery = Discovery(make_settings(database_url, tmp_path, cfg), db)
    await discovery.run_once()
    monkeypatch.setattr(refresh, "APPLY_CHUNK", 1)
    real_listing = list_table_locations
    pushed: dict[str, str] = {}

    async def listing_then_pushes(*args: Any, **kwargs: Any) -> Any:
        """The listing, then pushes that land before the pass records it: the listing holds
        a's old location, no c, and no d (dropped before the listing, created again after)."""
        listed = await real_listing(*args, **kwargs)
        a.append(rows(2))
        pushed["a"] = catalog.load_table(("ns", "a")).metadata_location
        await apply_change(db, cfg, ("ns",), "a", pushed["a"], properties={})
        created = catalog.create_table(("ns", "c"), rows(0).schema)
        await apply_change(db, cfg, ("ns",), "c", created.metadata_location, properties={})
        again = catalog.create_table(("ns", "d"), rows(0).schema)
        await apply_change(db, cfg, ("ns",), "d", again.metadata_location, properties={})
        return listed

    monkeypatch.setattr(refresh, "list_table_locations", listing_then_pushes)
    mark = await last_event_id(db)
    catalog.drop_table(("ns", "b"))  # dropped before the listing: the pass must mark it
    catalog.drop_table(("ns", "d"))
    result = await discovery.run_once()

    assert (result.changed, result.dropped) == (0, 1)
    state = {
        r["name"]: (r["metadata_location"], r["dropped_at"] is not None)
        for r in await db.fetch("SELECT name, metadata_location, dropped_at FROM icepack.tables")
    }
    assert state["a"] == (pushed["a"], False)  # the push's newer location stands
    assert state["c"][1] is False  # created during the pass: not in the listing, not dropped
    assert state["b"][1] is True
    assert state["d"][1] is False  # its pushed location is newer than the listing that lacks it
    assert await events(db, mark) == [
        ("table.changed", "ns.a"),
        ("table.changed", "ns.d"),
        ("table.discovered", "ns.c"),
        ("table.dropped", "ns.b"),
    ]


LAST_SEEN = "SELECT name, last_seen_at FROM icepack.tables"


async def test_last_seen_moves_once_it_is_ten_minutes_old(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    """An unchanged table's row is not rewritten by every pass, only once ``last_seen_at`` is
    10 minutes old."""
    cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    for name in ("a", "b"):
        catalog.create_table(("ns", name), rows(0).schema)
    discovery = Discovery(make_settings(database_url, tmp_path, cfg), db)
    await discovery.run_once()
    await db.execute(
        "UPDATE icepack.tables SET first_seen_at = now() - interval '1 hour', "
        "last_seen_at = now() - interval '11 minutes' WHERE name = 'a'"
    )
    before = {r["name"]: r["last_seen_at"] for r in await db.fetch(LAST_SEEN)}

    await discovery.run_once()
    after = {r["name"]: r["last_seen_at"] for r in await db.fetch(LAST_SEEN)}
    assert after["a"] > before["a"] and after["b"] == before["b"]
