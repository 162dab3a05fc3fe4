"""``table_health_latest``: the read model the fleet listing ranks by, kept current by
``record_inspection`` and backfilled by migration 0006 from the same history."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from typing import Any, cast

import asyncpg
import httpx

from icepack_core.db.queries import load_query
from icepack_core.inspection.health import Assessment, inspection_failed
from icepack_core.inspection.status import TableStatus
from icepack_core.inspection.store import Recorded, record_inspection
from icepack_core.types import Health
from tests.gateway.seed import add_table, seed_fleet, seed_many, status_doc

LATEST = "SELECT * FROM icepack.table_health_latest WHERE table_id = $1"
# Each table's newest assessment and newest status, straight from the history.
FROM_HISTORY = """
SELECT t.id AS table_id, h.id AS assessment_id, h.status_snapshot_id, h.health, h.score,
       h.issues, h.assessed_at, s.id AS status_id, s.inspected_at, s.status
  FROM icepack.tables t
  JOIN LATERAL (SELECT * FROM icepack.health_assessments ha WHERE ha.table_id = t.id
                 ORDER BY ha.id DESC LIMIT 1) h ON true
  LEFT JOIN LATERAL (SELECT * FROM icepack.status_snapshots ss WHERE ss.table_id = t.id
                      ORDER BY ss.id DESC LIMIT 1) s ON true
 ORDER BY t.id"""


async def _record(
    db: asyncpg.Pool, table_id: int, status: TableStatus | None, assessment: Assessment
) -> Recorded:
    async with db.acquire() as conn, conn.transaction():
        return await record_inspection(cast(asyncpg.Connection, conn), table_id, status, assessment)


async def test_record_inspection_keeps_the_latest_row_current(
    db: asyncpg.Pool, client: httpx.AsyncClient
) -> None:
    async with db.acquire() as conn:
        table_id = await add_table(conn, "sales", "orders")
    status = TableStatus.model_validate(status_doc("sales", "orders", small_file_count=7))
    first = await _record(
        db, table_id, status, Assessment(health=Health.WARNING, score=40, issues=[])
    )
    row = await db.fetchrow(LATEST, table_id)
    assert row is not None
    assert (row["assessment_id"], row["status_snapshot_id"], row["status_id"]) == (
        first.health_assessment_id,
        first.status_snapshot_id,
        first.status_snapshot_id,
    )
    assert (row["health"], row["score"], row["status"]["small_file_count"]) == ("warning", 40, 7)

    # A failed inspection: the assessment changes, the last good status stays.
    failed = await _record(db, table_id, None, inspection_failed("metadata unreadable"))
    row = await db.fetchrow(LATEST, table_id)
    assert row is not None
    assert row["assessment_id"] == failed.health_assessment_id
    assert (row["health"], row["score"], row["status_snapshot_id"]) == ("unknown", 0, None)
    assert row["status_id"] == first.status_snapshot_id
    assert row["issues"][0]["code"] == "INSPECTION_FAILED"

    # An older assessment (a late or repeated upsert) never replaces a newer one.
    await db.execute(load_query("health_latest_upsert"), [first.health_assessment_id])
    latest = await db.fetchrow(LATEST, table_id)
    assert latest is not None and dict(latest) == dict(row)
    assert [dict(r) for r in await db.fetch(FROM_HISTORY)] == [dict(row)]

    # The gateway answers from it.
    item = (await client.get("/tables")).json()["items"][0]
    assert (item["health"], item["score"], item["metrics"]["small_file_count"]) == ("unknown", 0, 7)
    detail = (await client.get("/tables/demo/sales/orders")).json()
    assert detail["health"]["id"] == failed.health_assessment_id
    assert detail["health"]["status_snapshot_id"] is None
    assert detail["status"]["id"] == first.status_snapshot_id


async def test_the_read_model_matches_the_history_and_the_migration_backfill(
    db: asyncpg.Pool,
) -> None:
    await seed_fleet(db)
    await seed_many(db, 40)
    maintained = [
        dict(r)
        for r in await db.fetch("SELECT * FROM icepack.table_health_latest ORDER BY table_id")
    ]
    assert maintained == [dict(r) for r in await db.fetch(FROM_HISTORY)]
    assert len(maintained) == 3 + 40  # old.gone was never assessed: no row

    migration = (
        resources.files("icepack_core.db")
        .joinpath("migrations/0006_table_health_latest.sql")
        .read_text(encoding="utf-8")
    )
    backfill = migration[migration.index("INSERT INTO icepack.table_health_latest") :]
    async with db.acquire() as conn, conn.transaction():
        await conn.execute("DELETE FROM icepack.table_health_latest")
        await conn.execute(backfill)
    assert [
        dict(r)
        for r in await db.fetch("SELECT * FROM icepack.table_health_latest ORDER BY table_id")
    ] == maintained


# The listing's order and filters, computed from the history the slow way (the gateway's
# queries before table_health_latest): the oracle for the keyset pages.
REFERENCE = """
SELECT t.catalog, t.namespace, t.name, coalesce(h.health, 'unknown') AS health, h.score,
       coalesce(h.issues, '[]'::jsonb) AS issues, s.status IS NOT NULL AS inspected
  FROM icepack.tables t
  LEFT JOIN LATERAL (SELECT * FROM icepack.health_assessments ha WHERE ha.table_id = t.id
                      ORDER BY ha.id DESC LIMIT 1) h ON true
  LEFT JOIN LATERAL (SELECT * FROM icepack.status_snapshots ss WHERE ss.table_id = t.id
                      ORDER BY ss.id DESC LIMIT 1) s ON true
 WHERE t.dropped_at IS NULL
 ORDER BY CASE $1::text WHEN 'score' THEN coalesce(h.score, 101)
                        WHEN '-score' THEN -coalesce(h.score, -1) ELSE 0 END,
          t.catalog, t.namespace, t.name"""


async def _pages(client: httpx.AsyncClient, query: str, limit: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        url = f"/tables?{query}&limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        body = (await client.get(url)).json()
        items += body["items"]
        cursor = body["next_cursor"]
        if cursor is None:
            return items


async def test_pages_match_the_history_with_never_assessed_and_failed_tables(
    db: asyncpg.Pool, client: httpx.AsyncClient
) -> None:
    await seed_fleet(db)
    await seed_many(db, 25)
    async with db.acquire() as conn:
        for name in ("a_new", "z_new"):  # discovered, never inspected
            await add_table(conn, "fresh", name)
        # Inspected but never assessed (not something record_inspection writes): the listing
        # still shows its metrics, as before.
        orphan = await add_table(conn, "fresh", "m_orphan")
        await conn.execute(
            "INSERT INTO icepack.status_snapshots (table_id, inspected_at, inspector, status) "
            "VALUES ($1, now(), 'pyiceberg', $2::jsonb)",
            orphan,
            status_doc("fresh", "m_orphan", small_file_count=3),
        )
        failing = await add_table(conn, "fresh", "broken")
    await _record(db, failing, None, inspection_failed("no metadata"))

    for sort in ("score", "-score", "name"):
        reference = [dict(r) for r in await db.fetch(REFERENCE, sort)]
        filtered: list[tuple[str, Callable[[dict[str, Any]], bool]]] = [
            ("", lambda r: True),
            ("health=unknown", lambda r: r["health"] == "unknown"),
            ("namespace=fresh", lambda r: r["namespace"] == "fresh"),
            ("issue=SMALL_FILES", lambda r: any(i["code"] == "SMALL_FILES" for i in r["issues"])),
            ("q=T00001", lambda r: "t00001" in f"{r['catalog']}.{r['namespace']}.{r['name']}"),
        ]
        for filters, keep in filtered:
            expected = [
                (r["catalog"], r["namespace"], r["name"], r["health"], r["score"], r["inspected"])
                for r in reference
                if keep(r)
            ]
            for limit in (1, 4, 50):
                got = [
                    (
                        i["catalog"],
                        i["namespace"],
                        i["name"],
                        i["health"],
                        i["score"],
                        i["metrics"] is not None,
                    )
                    for i in await _pages(client, f"sort={sort}&{filters}", limit)
                ]
                assert got == expected, (sort, filters, limit)
