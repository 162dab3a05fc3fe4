"""Discovery skips and records one bad table (a NUL byte in a property, a name Spark cannot be
sent) and refreshes the rest of its catalog; real SQL and REST catalogs."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from icepack_core.discovery.catalogs import load_catalog
from icepack_core.discovery.refresh import Discovery
from icepack_core.settings import CatalogConfig
from tests.discovery.test_discovery_sql import make_settings
from tests.plugins.catalogs import rows
from tests.plugins.rest_fixture import IcebergRest

BIDI = "bad\u202ename"  # a right-to-left override: sql_ident refuses to send it to Spark


async def table_names(db: asyncpg.Pool, catalog: str) -> dict[tuple[str, str], datetime | None]:
    recs = await db.fetch(
        "SELECT namespace, name, dropped_at FROM icepack.tables WHERE catalog = $1 ORDER BY name",
        catalog,
    )
    return {(r["namespace"], r["name"]): r["dropped_at"] for r in recs}


async def skipped(db: asyncpg.Pool, catalog: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = await db.fetchval(
        "SELECT skipped_tables FROM icepack.catalog_status WHERE catalog = $1", catalog
    )
    return entries


async def test_sql_catalog_table_with_an_invalid_name_is_skipped_and_recorded(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    for name in ("good_a", BIDI, "good_b"):
        catalog.create_table(("ns", name), rows(0).schema)
    discovery = Discovery(make_settings(database_url, tmp_path, cfg), db)

    result = await discovery.run_once()
    assert result.errors == {}
    assert set(await table_names(db, "scratch")) == {("ns", "good_a"), ("ns", "good_b")}
    (entry,) = await skipped(db, "scratch")
    assert entry["table"] == "ns.bad\\u202ename"
    assert entry["reason"].startswith("invalid name: ") and "\\u202e" in entry["reason"]

    again = await discovery.run_once()  # every pass: same answer, nothing dropped
    assert (again.errors, again.discovered, again.dropped) == ({}, 0, 0)
    assert len(await skipped(db, "scratch")) == 1


@pytest.mark.slow
async def test_rest_catalog_table_with_a_nul_property_is_skipped_the_rest_refreshed(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, iceberg_rest: IcebergRest
) -> None:
    ns = f"nul_{tmp_path.name[-20:].replace('-', '_').lower()}"
    cfg = iceberg_rest.config("rest", include=[ns])
    catalog = load_catalog(cfg)
    catalog.create_namespace(ns)
    catalog.create_table((ns, "good"), rows(0).schema)
    catalog.create_table((ns, "nul"), rows(0).schema, properties={"note": "a\x00b"})
    later = catalog.create_table((ns, "later"), rows(0).schema)
    assert catalog.load_table((ns, "nul")).properties["note"] == "a\x00b"  # as written
    discovery = Discovery(make_settings(database_url, tmp_path, cfg), db)

    first = await discovery.run_once()
    assert first.errors == {}
    assert set(await table_names(db, "rest")) == {(ns, "good"), (ns, "later")}
    (entry,) = await skipped(db, "rest")
    assert entry == {"table": f"{ns}.nul", "reason": "NUL byte in property 'note'"}

    # A known table that later gains a NUL property is skipped too, not dropped, and its row
    # is left as it was; the other tables are still refreshed in the same pass.
    with later.transaction() as tx:
        tx.set_properties(note="x\x00y")
    catalog.load_table((ns, "good")).append(rows(3))
    second = await discovery.run_once()
    assert second.errors == {} and second.changed == 1 and second.dropped == 0
    names = await table_names(db, "rest")
    assert names[(ns, "later")] is None
    assert sorted(e["table"] for e in await skipped(db, "rest")) == [f"{ns}.later", f"{ns}.nul"]
