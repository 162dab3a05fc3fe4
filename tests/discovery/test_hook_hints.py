"""The catalog event hook end to end: real HTTP to the gateway process, then discovery.

The gateway process runs with a hook token and the test's SQL catalog; events are posted over
HTTP with the token checks a catalog's listener meets; discovery's hint consumer then refreshes
exactly the named table (no listing: a second table in the catalog stays undiscovered).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import asyncpg
import httpx
from pyiceberg.catalog.sql import SqlCatalog

from icepack_core.access.tokens import TokenStore
from icepack_core.discovery.catalogs import CatalogSet
from icepack_core.discovery.hints import HintConsumer, record_hint
from icepack_core.local.ports import free_port
from icepack_core.settings import CatalogConfig, load_settings
from icepack_gateway.app import create_app
from tests.plugins.catalogs import rows

HOOK_TOKEN = "hook-token-for-tests"


def event(table: str, **data: object) -> dict[str, object]:
    return {
        "specversion": "1.0",
        "id": f"e-{table}",
        "source": "/catalog",
        "type": "update",
        "data": {"catalog": "scratch", "namespace": "ns", "table": table, **data},
    }


async def topics(db: asyncpg.Pool, name: str) -> list[str]:
    return [
        r["topic"]
        for r in await db.fetch(
            "SELECT e.topic FROM icepack.events e JOIN icepack.tables t ON t.id = e.table_id "
            "WHERE t.name = $1 ORDER BY e.id",
            name,
        )
    ]


async def wait_ready(client: httpx.AsyncClient, deadline: float) -> None:
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = await client.get("/readyz")
            if last.status_code == 200:
                return
        except httpx.TransportError as exc:
            last = exc
        await asyncio.sleep(0.1)
    raise AssertionError(f"the gateway never got ready: {last!r}")


async def test_hook_over_http_then_discovery_loads_only_the_named_table(
    db: asyncpg.Pool, database_url: str, scratch_catalog: tuple[CatalogConfig, SqlCatalog]
) -> None:
    cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    catalog.create_table("ns.hooked", rows(0).schema)
    catalog.create_table("ns.other", rows(0).schema)
    operator, _ = await TokenStore(db).create("operator")
    port = free_port()
    env = {
        **os.environ,
        "ICEPACK_DATABASE_URL": database_url,
        "ICEPACK_HTTP_PORT": str(port),
        "ICEPACK_LOG_LEVEL": "warning",
        "ICEPACK_GATEWAY_HOOK_TOKEN": HOOK_TOKEN,
        "ICEPACK_CATALOGS": json.dumps([cfg.model_dump(mode="json")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "icepack_core.cli.app", "service", "gateway"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            await wait_ready(client, time.monotonic() + 60)
            url = "/hooks/catalog-events"
            cloud = {"content-type": "application/cloudevents+json"}
            for headers in (
                {},
                {"authorization": f"Bearer {operator}"},
                {"authorization": "Bearer wrong"},
            ):
                refused = await client.post(url, json=event("hooked"), headers=headers)
                assert refused.status_code == 401
                assert refused.json()["code"] == "HOOK_TOKEN_INVALID"
            hook = {**cloud, "authorization": f"Bearer {HOOK_TOKEN}"}
            first = await client.post(url, content=json.dumps(event("hooked")), headers=hook)
            again = await client.post(url, content=json.dumps(event("hooked")), headers=hook)
            assert first.status_code == again.status_code == 202
            assert (first.json()["coalesced"], again.json()["coalesced"]) == (False, True)
            assert again.json()["received"] == 2
            bad = await client.post(
                url, json={**event("hooked"), "specversion": "0.3"}, headers=hook
            )
            assert bad.status_code == 422 and "specversion" in bad.text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert await db.fetchval("SELECT count(*) FROM icepack.catalog_hints") == 1
    assert (
        await db.fetchval("SELECT count(*) FROM icepack.events WHERE topic = 'catalog.hinted'") == 2
    )

    consumer = HintConsumer(db, CatalogSet([cfg]), {cfg.name: cfg})
    assert await consumer.drain() == 1
    assert await topics(db, "hooked") == ["table.discovered"]
    assert await db.fetchval("SELECT count(*) FROM icepack.tables WHERE name = 'other'") == 0
    assert await db.fetchval("SELECT count(*) FROM icepack.catalog_hints") == 0

    # A hint carrying the location Icepack already has costs no catalog call and no event.
    location = catalog.load_table("ns.hooked").metadata_location
    async with db.acquire() as conn, conn.transaction():
        await record_hint(conn, "scratch", ("ns",), "hooked", location)
    assert await consumer.drain() == 1
    assert consumer.loads_saved == 1 and await topics(db, "hooked") == ["table.discovered"]

    # A table its catalog no longer has is marked dropped.
    catalog.drop_table("ns.hooked")
    async with db.acquire() as conn, conn.transaction():
        await record_hint(conn, "scratch", ("ns",), "hooked", None)
    await consumer.drain()
    assert await topics(db, "hooked") == ["table.discovered", "table.dropped"]


async def test_a_hint_whose_catalog_fails_is_retried_later_then_given_up(db: asyncpg.Pool) -> None:
    broken = CatalogConfig(
        name="broken", type="sql", uri=f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"
    )
    consumer = HintConsumer(db, CatalogSet([broken]), {broken.name: broken})
    async with db.acquire() as conn, conn.transaction():
        await record_hint(conn, "broken", ("ns",), "t", None)
        await record_hint(conn, "gone", ("ns",), "t", None)  # a catalog discovery lacks
    assert await consumer.drain() == 2
    row = await db.fetchrow(
        "SELECT attempts, last_error, not_before > now() AS later "
        "FROM icepack.catalog_hints WHERE catalog = 'broken'"
    )
    assert row is not None
    assert row["attempts"] == 1 and row["later"] and "OperationalError" in row["last_error"]
    assert (
        await db.fetchval("SELECT count(*) FROM icepack.catalog_hints WHERE catalog = 'gone'") == 0
    )
    # Made due again until the attempts run out: then it is dropped, never retried forever.
    for _ in range(10):
        await db.execute("UPDATE icepack.catalog_hints SET not_before = now()")
        await consumer.drain()
    assert await db.fetchval("SELECT count(*) FROM icepack.catalog_hints") == 0


async def test_the_hook_is_disabled_without_a_hook_token(
    db: asyncpg.Pool, database_url: str
) -> None:
    app = create_app(db, settings=load_settings(database_url=database_url))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        response = await client.post("/hooks/catalog-events", json=event("t"))
    assert response.status_code == 403 and response.json()["code"] == "HOOK_DISABLED"
