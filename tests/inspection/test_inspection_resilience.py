"""Inspection failures (issue #28, Low findings and finding 3's crash loop): a transient catalog
error is retried before a table is marked failed, a failure message is redacted before it is
stored and served, and a table whose inspection keeps killing its worker is parked with the
reason."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from icepack_core.discovery.refresh import Discovery
from icepack_core.inspection.process import TableInspections
from icepack_core.queue.work_items import WorkQueue
from icepack_core.settings import CatalogConfig, load_settings
from icepack_gateway.app import create_app
from tests.inspection.test_inspector_service import running_inspector
from tests.plugins.catalogs import ZOO_THRESHOLDS, rows
from tests.support.waiting import eventually


async def _table_ids(db: asyncpg.Pool) -> dict[str, int]:
    return {r["name"]: r["id"] for r in await db.fetch("SELECT id, name FROM icepack.tables")}


@pytest.mark.parametrize("retries", [0, 4])
async def test_a_dropped_catalog_connection_is_retried_and_the_table_recovers(
    db: asyncpg.Pool,
    database_url: str,
    pg_admin_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
    retries: int,
) -> None:
    """The SQL catalog's Postgres drops every connection (as a restart does) between two
    inspections: the next load meets ``OperationalError: server closed the connection
    unexpectedly``. Without retries (``retries=0``, as before) the table is marked failed;
    with them the load is retried and the table assessed."""
    cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    catalog.create_table("ns.t", rows(0).schema).append(rows(5))
    settings = load_settings(
        database_url=database_url,
        data_dir=tmp_path / "d",
        catalogs=[cfg],
        inspection_transient_retries=retries,
        inspection_retry_base_seconds=0.05,
    )
    await Discovery(settings, db).run_once()
    (table_id,) = (await _table_ids(db)).values()
    inspections = TableInspections(settings, db, ZOO_THRESHOLDS)
    first = await inspections.inspect_and_record(table_id, "table.discovered")
    assert first.status is not None  # the catalog's connection pool now holds a connection

    assert cfg.uri is not None
    catalog_db = urlsplit(cfg.uri).path.lstrip("/")
    admin = await asyncpg.connect(pg_admin_url)
    try:
        killed = await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1",
            catalog_db,
        )
    finally:
        await admin.close()
    assert killed >= 1

    again = await inspections.inspect_and_record(table_id, "table.changed")
    if retries == 0:
        assert again.status is None and again.assessment is not None
        (issue,) = again.assessment.issues
        assert issue.code == "INSPECTION_FAILED" and "OperationalError" in issue.message
    else:
        assert again.status is not None and again.status.data_file_count == 1
        assert again.assessment is not None and again.assessment.health != "unknown"


CLIENT_SECRET = "s3cr3t-client-value-0192"
TOKEN = "tok-7d1f0a9e5b3c4d2a8f6e"


class _EchoingCatalog(BaseHTTPRequestHandler):
    """A REST catalog that lists one table and fails its load with an error body quoting the
    request's bearer token and the client secret, as a misbehaving server's error page may."""

    def _answer(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/v1/config":
            self._answer(200, {"defaults": {}, "overrides": {}})
        elif path == "/v1/namespaces":
            self._answer(200, {"namespaces": [["ns"]]})
        elif path == "/v1/namespaces/ns/tables":
            self._answer(200, {"identifiers": [{"namespace": ["ns"], "name": "t"}]})
        else:
            auth = self.headers.get("Authorization", "")
            message = (
                f"cannot authorize request (Authorization: {auth}) for client "
                f"icepack:{CLIENT_SECRET}: backend unavailable"
            )
            self._answer(400, {"error": {"message": message, "type": "BadRequest", "code": 400}})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer(
            200,
            {
                "access_token": TOKEN,
                "token_type": "bearer",
                "expires_in": 3600,
                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            },
        )

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def echoing_catalog() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoingCatalog)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_secret_in_an_inspection_error_is_redacted_in_the_health_api(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, echoing_catalog: str
) -> None:
    """A stand-in REST catalog (a real HTTP server; Iceberg's REST fixture never quotes
    secrets) answers the table's load with an error body quoting the bearer token and the
    client secret. ``GET /tables/.../health`` serves the failure with both masked."""
    cfg = CatalogConfig(
        name="echo", type="rest", uri=echoing_catalog, credential=f"icepack:{CLIENT_SECRET}"
    )
    settings = load_settings(database_url=database_url, data_dir=tmp_path / "d", catalogs=[cfg])
    await Discovery(settings, db).run_once()
    (table_id,) = (await _table_ids(db)).values()
    outcome = await TableInspections(settings, db, ZOO_THRESHOLDS).inspect_and_record(
        table_id, "table.discovered"
    )
    assert outcome.status is None

    transport = httpx.ASGITransport(app=create_app(db))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        answer = await client.get("/tables/echo/ns/t/health")
    assert answer.status_code == 200, answer.text
    text = answer.text
    assert "INSPECTION_FAILED" in text and "cannot authorize request" in text
    assert CLIENT_SECRET not in text and TOKEN not in text
    assert "***" in text
    stored = await db.fetchval("SELECT issues::text FROM icepack.health_assessments")
    assert CLIENT_SECRET not in stored and TOKEN not in stored


async def test_a_table_whose_holders_keep_dying_is_parked_with_the_reason(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    """Two holders die with the table's work item (their leases expire); the third death is
    found by the running inspector service, which parks the item and records INSPECTION_FAILED
    for the table instead of inspecting it again. A new request gives it one more try."""
    cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    catalog.create_table("ns.t", rows(0).schema).append(rows(5))
    settings = load_settings(
        database_url=database_url,
        data_dir=tmp_path / "d",
        catalogs=[cfg],
        poll_interval_seconds=0.3,
        work_max_deaths=3,
        work_death_backoff_seconds=0,
    )
    await Discovery(settings, db).run_once()
    (table_id,) = (await _table_ids(db)).values()

    async def snapshots() -> int:
        count: int = await db.fetchval(
            "SELECT count(*) FROM icepack.status_snapshots WHERE table_id = $1", table_id
        )
        return count

    async def settled() -> bool:  # discovery's events handled, the table inspected
        left = await db.fetchval("SELECT count(*) FROM icepack.work_items")
        return await snapshots() >= 1 and left == 0

    async with running_inspector(settings, db):
        await eventually(settled, timeout=60, what="the first inspection")
    inspected = await snapshots()
    dying = WorkQueue(db, "inspector", "dying", lease_seconds=0.05, death_backoff_seconds=0)
    async with db.acquire() as conn:
        await dying.request(conn, table_id, "table.changed")
    for _ in range(2):
        (item,) = await eventually(dying.claim, timeout=10, what="claimed by a dying holder")
        assert item.table_id == table_id
        await eventually(dying.reap, timeout=10, what="its lease expired")  # the holder died
    (item,) = await eventually(dying.claim, timeout=10, what="claimed a third time")
    async with running_inspector(settings, db):

        async def parked() -> asyncpg.Record | None:
            return await db.fetchrow(
                "SELECT h.issues FROM icepack.health_assessments h "
                "JOIN icepack.work_items w ON w.table_id = h.table_id AND w.parked_at IS NOT NULL "
                "WHERE h.table_id = $1 AND h.health = 'unknown' ORDER BY h.id DESC LIMIT 1",
                table_id,
            )

        row = await eventually(parked, timeout=30, what="the item parked and the table failed")
        assert row is not None
        (issue,) = json.loads(row["issues"]) if isinstance(row["issues"], str) else row["issues"]
        assert issue["code"] == "INSPECTION_FAILED"
        assert "stopped 3 times" in issue["message"] and "dying" in issue["message"]
        assert await snapshots() == inspected  # parked: not inspected again

        async with db.acquire() as conn:  # the table changed: one more try, which succeeds
            await WorkQueue(db, "inspector", "x").request(conn, table_id, "table.changed")

        async def inspected_again() -> bool:
            return await snapshots() == inspected + 1

        await eventually(inspected_again, timeout=60, what="inspected after the new request")
