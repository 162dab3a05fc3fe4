"""Discovery and inspection against Apache Iceberg's own REST catalog server (the REST fixture,
``RESTCatalogServer`` 1.11.0), with OAuth2 client credentials: tables written through PyIceberg's
REST catalog, exact discovery events, nested namespaces, inspection checked against PyIceberg's
``inspect.files()``, and a server that goes away mid-session."""

from __future__ import annotations

import uuid
from pathlib import Path

import asyncpg
import pytest

from icepack_core.discovery.catalogs import load_catalog
from icepack_core.discovery.refresh import Discovery
from icepack_core.inspection.inspector import Inspector
from icepack_core.types import TableRef
from tests.discovery.test_catalog_servers import _discover_and_inspect
from tests.discovery.test_discovery_sql import events, last_event_id, make_settings
from tests.inspection.oracle import assert_matches_oracle
from tests.plugins.catalogs import SCHEMA, rows
from tests.plugins.rest_fixture import CLIENT_ID, IcebergRest, run_rest_fixture

pytestmark = pytest.mark.slow


def _namespace() -> str:
    return f"r{uuid.uuid4().hex[:8]}"


async def test_rest_fixture_discovery_events_and_inspection(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, iceberg_rest: IcebergRest
) -> None:
    ns = _namespace()
    # The server is shared by the session: discovery keeps to this test's namespace tree.
    cfg = iceberg_rest.config("rest", include=[ns, f"{ns}.*"])
    catalog = load_catalog(cfg)
    # The OAuth2 client-credentials exchange ran against the fixture's /v1/oauth/tokens.
    assert catalog._auth_manager.auth_header() == (  # type: ignore[attr-defined]
        f"Bearer client-credentials-token:sub={CLIENT_ID}"
    )

    catalog.create_namespace(ns)
    catalog.create_namespace((ns, "sub"))
    a = catalog.create_table(f"{ns}.a", SCHEMA)
    a.append(rows(3))
    a.append(rows(2, start=3))
    catalog.create_table(f"{ns}.b", SCHEMA)
    catalog.create_table((ns, "sub", "c"), SCHEMA).append(rows(4, cat="c"))
    settings = make_settings(database_url, tmp_path, cfg)
    discovery = Discovery(settings, db)

    first = await discovery.run_once()
    assert (first.discovered, first.changed, first.dropped, first.errors) == (3, 0, 0, {})
    assert await events(db) == [
        ("table.discovered", f"{ns}.a"),
        ("table.discovered", f"{ns}.b"),
        ("table.discovered", f"{ns}.sub.c"),
    ]
    known = {
        r["t"]: r["metadata_location"]
        for r in await db.fetch(
            "SELECT namespace || '.' || name AS t, metadata_location FROM icepack.tables"
        )
    }
    assert known == {
        f"{ns}.{t}": catalog.load_table(f"{ns}.{t}").metadata_location for t in ("a", "b", "sub.c")
    }

    # Inspection through the same REST catalog, checked against PyIceberg's metadata tables.
    inspector = Inspector(settings)
    status = await inspector.inspect(TableRef("rest", ns, "a"))
    assert (status.data_file_count, status.record_count, status.snapshot_count) == (2, 5, 2)
    assert status.metadata_location == known[f"{ns}.a"]
    assert_matches_oracle(status, catalog.load_table(f"{ns}.a"))
    nested = await inspector.inspect(TableRef("rest", f"{ns}.sub", "c"))
    assert (nested.data_file_count, nested.record_count) == (1, 4)
    assert_matches_oracle(nested, catalog.load_table((ns, "sub", "c")))
    empty = await inspector.inspect(TableRef("rest", ns, "b"))
    assert (empty.data_file_count, empty.snapshot_count) == (0, 0)
    assert_matches_oracle(empty, catalog.load_table(f"{ns}.b"))

    mark = await last_event_id(db)
    again = await discovery.run_once()
    assert (again.discovered, again.changed, again.dropped, again.errors) == (0, 0, 0, {})
    assert await events(db, mark) == []

    a.append(rows(1, start=9))
    catalog.drop_table(f"{ns}.b")
    catalog.create_table((ns, "sub", "d"), SCHEMA)
    mark = await last_event_id(db)
    third = await discovery.run_once()
    assert (third.discovered, third.changed, third.dropped, third.errors) == (1, 1, 1, {})
    assert await events(db, mark) == [
        ("table.changed", f"{ns}.a"),
        ("table.discovered", f"{ns}.sub.d"),
        ("table.dropped", f"{ns}.b"),
    ]
    row = await db.fetchrow(
        "SELECT metadata_location FROM icepack.tables WHERE namespace = $1 AND name = 'a'", ns
    )
    assert row is not None
    assert row["metadata_location"] == catalog.load_table(f"{ns}.a").metadata_location
    changed = await inspector.inspect(TableRef("rest", ns, "a"))
    assert (changed.data_file_count, changed.record_count, changed.snapshot_count) == (3, 6, 3)
    assert_matches_oracle(changed, catalog.load_table(f"{ns}.a"))
    status_row = await db.fetchrow("SELECT * FROM icepack.catalog_status WHERE catalog = 'rest'")
    assert status_row is not None
    assert status_row["last_error"] is None and status_row["table_count"] == 3


async def test_rest_fixture_stopped_mid_session_keeps_known_tables(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, rest_fixture_classpath: Path
) -> None:
    """A second, separate server (the shared one stays up): the same Glue/SeaweedFS checks,
    then the server stops and discovery records the error without dropping anything."""
    with run_rest_fixture(rest_fixture_classpath, "second instance") as server:
        ns = _namespace()
        cfg = server.config("rest_down")
        await _discover_and_inspect(db, database_url, tmp_path, cfg, ns)
        discovery = Discovery(make_settings(database_url, tmp_path, cfg), db)
        before = await discovery.run_once()  # loads (and keeps) the catalog client
        assert (before.discovered, before.changed, before.dropped, before.errors) == (0, 0, 0, {})
        server.stop()

        mark = await last_event_id(db)
        result = await discovery.run_once()
        assert set(result.errors) == {"rest_down"}
        assert (result.discovered, result.changed, result.dropped) == (0, 0, 0)
        assert "fixture-secret" not in result.errors["rest_down"]
        assert await events(db, mark) == []
        kept = await db.fetch(
            "SELECT namespace || '.' || name AS t FROM icepack.tables "
            "WHERE catalog = 'rest_down' AND dropped_at IS NULL ORDER BY 1"
        )
        assert [r["t"] for r in kept] == [f"{ns}.one"]  # `two` was dropped while it was up
        status = await db.fetchrow(
            "SELECT * FROM icepack.catalog_status WHERE catalog = 'rest_down'"
        )
        assert status is not None
        assert status["last_error"] and status["last_error_at"] is not None
        assert status["last_ok_at"] is not None and status["table_count"] == 1

        # A fresh client (no cached catalog) fails the same way: the initial config/token call.
        cold = await Discovery(make_settings(database_url, tmp_path, cfg), db).run_once()
        assert set(cold.errors) == {"rest_down"}
        assert (
            await db.fetchval(
                "SELECT count(*) FROM icepack.tables WHERE catalog = "
                "'rest_down' AND dropped_at IS NULL"
            )
            == 1
        )
