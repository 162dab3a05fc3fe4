"""The inspector service end to end in-process: discovery pass -> status + health for every table;
broken tables become INSPECTION_FAILED while the rest are still inspected."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import structlog
from pyiceberg.catalog.sql import SqlCatalog

from icepack_core.db import pool as dbmod
from icepack_core.discovery.refresh import Discovery
from icepack_core.inspection.inspector import InspectionFailed, Inspector
from icepack_core.inspection.process import TableInspections
from icepack_core.queue.events import Listener
from icepack_core.queue.work_items import WorkQueue
from icepack_core.runtime.service import ServiceContext
from icepack_core.settings import CatalogConfig, Settings, load_settings
from icepack_core.types import TableRef
from icepack_inspector.service import InspectorService
from tests.plugins.catalogs import ZOO_THRESHOLDS, Zoo, rows
from tests.support.waiting import eventually


@contextlib.asynccontextmanager
async def running_inspector(
    settings: Settings, pool: asyncpg.Pool
) -> AsyncIterator[ServiceContext]:
    stop = asyncio.Event()
    listener = Listener(lambda: dbmod.connect(settings, "inspector-listen"))
    ctx = ServiceContext(
        "inspector",
        settings,
        pool,
        listener,
        stop,
        "inspector@test",
        structlog.get_logger("icepack.inspector"),
    )
    tasks = [
        asyncio.create_task(listener.run(stop)),
        asyncio.create_task(InspectorService(ZOO_THRESHOLDS).run(ctx)),
    ]
    try:
        yield ctx
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)


async def test_every_discovered_table_gets_status_and_health(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, zoo: Zoo
) -> None:
    settings = load_settings(
        database_url=database_url,
        data_dir=tmp_path / "d",
        catalogs=[zoo.config],
        poll_interval_seconds=0.5,
    )
    async with running_inspector(settings, db):
        result = await Discovery(settings, db).run_once()
        assert result.discovered == len(zoo.expected)

        async def all_assessed() -> bool:
            n = await db.fetchval(
                "SELECT count(DISTINCT t.id) FROM icepack.tables t "
                "JOIN icepack.status_snapshots s ON s.table_id = t.id "
                "JOIN icepack.health_assessments h ON h.status_snapshot_id = s.id"
            )
            return bool(n == len(zoo.expected))

        await eventually(all_assessed, timeout=60, what="every zoo table assessed")
    got = {
        r["name"]: {i["code"] for i in r["issues"]}
        for r in await db.fetch(
            "SELECT DISTINCT ON (t.id) t.name, h.issues FROM icepack.tables t "
            "JOIN icepack.health_assessments h ON h.table_id = t.id ORDER BY t.id, h.id DESC"
        )
    }
    assert got == zoo.expected
    updated = await db.fetch("SELECT payload FROM icepack.events WHERE topic='status.updated'")
    assert len(updated) >= len(zoo.expected)
    assert all(p["payload"]["status_snapshot_id"] for p in updated)
    cached = await db.fetchval("SELECT count(*) FROM icepack.manifest_stats")
    assert cached > 0


async def test_age_refresh_reassesses_without_reading_manifests(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, zoo: Zoo
) -> None:
    settings = load_settings(
        database_url=database_url, data_dir=tmp_path / "d", catalogs=[zoo.config]
    )
    await Discovery(settings, db).run_once()
    inspections = TableInspections(settings, db, ZOO_THRESHOLDS)
    table_id = await db.fetchval("SELECT id FROM icepack.tables WHERE name = 'healthy'")
    await inspections.inspect_and_record(table_id, "table.discovered")
    queue = WorkQueue(db, "inspector", "w")
    import datetime as dt

    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=6)
    assert await inspections.request_refresh(queue, 3600, now=later) == len(zoo.expected)
    outcome = await inspections.inspect_and_record(table_id, "refresh", now=later)
    assert outcome.status is not None and outcome.assessment is not None
    assert (outcome.status.manifests_read, outcome.status.manifests_cached) == (0, 0)
    assert outcome.assessment.issue_codes() == {"OLD_SNAPSHOTS"}


async def test_age_refresh_leaves_out_a_table_that_already_has_a_work_item(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, zoo: Zoo
) -> None:
    """A table waiting for (or in) its event-driven inspection is not also queued for the age
    refresh: that request would re-do an inspection of the same metadata."""
    import datetime as dt

    settings = load_settings(
        database_url=database_url, data_dir=tmp_path / "d", catalogs=[zoo.config]
    )
    await Discovery(settings, db).run_once()
    inspections = TableInspections(settings, db, ZOO_THRESHOLDS)
    queue = WorkQueue(db, "inspector", "w")
    pending = await db.fetchval("SELECT id FROM icepack.tables WHERE name = 'healthy'")
    async with db.acquire() as conn:
        await queue.request(conn, pending, "table.discovered")
    (claimed,) = await queue.claim(1)

    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=6)
    assert await inspections.request_refresh(queue, 3600, now=later) == len(zoo.expected) - 1
    item = await db.fetchrow(
        "SELECT reason, generation FROM icepack.work_items WHERE table_id = $1", pending
    )
    assert item is not None
    assert (item["reason"], item["generation"]) == ("table.discovered", claimed.generation)
    assert await queue.complete(claimed)  # nothing asked again: done once


def _break_tables(catalog: SqlCatalog) -> dict[str, str]:
    """Three broken tables and one good one; returns name -> the file that is broken."""
    catalog.create_namespace("bad")
    broken: dict[str, str] = {}
    for name in ("truncated", "not_json", "no_manifest", "good"):
        t = catalog.create_table(f"bad.{name}", rows(0).schema)
        t.append(rows(5))
        t = catalog.load_table(f"bad.{name}")
        meta = Path(t.metadata_location.removeprefix("file://"))
        if name == "truncated":
            text = meta.read_text()
            meta.write_text(text[: len(text) // 2])
            broken[name] = str(meta)
        elif name == "not_json":
            meta.write_text("this is not json")
            broken[name] = str(meta)
        elif name == "no_manifest":
            snapshot = t.current_snapshot()
            assert snapshot is not None
            (manifest,) = snapshot.manifests(t.io)
            Path(manifest.manifest_path.removeprefix("file://")).unlink()
            broken[name] = Path(manifest.manifest_path).name
    return broken


async def test_broken_tables_fail_with_their_cause_and_others_carry_on(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    cfg, catalog = scratch_catalog
    broken = _break_tables(catalog)
    settings = load_settings(database_url=database_url, data_dir=tmp_path / "d", catalogs=[cfg])
    inspector = Inspector(settings)
    for name, path in broken.items():
        with pytest.raises(InspectionFailed) as info:
            await inspector.inspect(TableRef("scratch", "bad", name))
        assert path in str(info.value) or Path(path).name in str(info.value)

    await Discovery(settings, db).run_once()
    inspections = TableInspections(settings, db, ZOO_THRESHOLDS)
    outcomes = {}
    for r in await db.fetch("SELECT id, name FROM icepack.tables"):
        outcomes[r["name"]] = await inspections.inspect_and_record(r["id"], "table.discovered")
    assert outcomes["good"].status is not None
    assert outcomes["good"].status.data_file_count == 1
    for name in broken:
        o = outcomes[name]
        assert o.status is None and o.assessment is not None
        assert o.assessment.health == "unknown"
        (issue,) = o.assessment.issues
        assert issue.code == "INSPECTION_FAILED"
        assert Path(broken[name]).name in issue.message
    rows_ = await db.fetch("SELECT issues FROM icepack.health_assessments WHERE health='unknown'")
    assert len(rows_) == 3 and all(json.dumps(r["issues"]) for r in rows_)


@pytest.mark.parametrize(
    ("properties", "named"),
    [({"note": "a\x00b"}, "'note'"), ({"ok": "x", "n\x00te": "b"}, "property name 'n\\x00te'")],
)
async def test_a_property_postgres_cannot_store_fails_the_table_not_the_worker(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
    properties: dict[str, Any],
    named: str,
) -> None:
    """A SQL catalog's listing carries no properties, so discovery records the table; the
    inspector reads them from the metadata. Postgres refuses a NUL: the table gets an
    INSPECTION_FAILED naming the property instead of an exception retried every 30 s."""
    cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    catalog.create_table("ns.nul", rows(0).schema, properties=properties)
    catalog.create_table("ns.fine", rows(0).schema)
    settings = load_settings(database_url=database_url, data_dir=tmp_path / "d", catalogs=[cfg])
    await Discovery(settings, db).run_once()
    inspections = TableInspections(settings, db, ZOO_THRESHOLDS)
    ids = {r["name"]: r["id"] for r in await db.fetch("SELECT id, name FROM icepack.tables")}

    failed = await inspections.inspect_and_record(ids["nul"], "table.discovered")
    fine = await inspections.inspect_and_record(ids["fine"], "table.discovered")

    assert failed.status is None and failed.assessment is not None
    (issue,) = failed.assessment.issues
    assert issue.code == "INSPECTION_FAILED" and named in issue.message and "NUL" in issue.message
    assert fine.status is not None
