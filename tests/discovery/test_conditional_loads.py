"""Conditional REST table loads against Apache Iceberg's REST fixture (1.11.0, which sends an
``ETag`` with every ``loadTable`` answer and answers a matching ``If-None-Match`` with 304):
an unchanged table costs a 304, a committed one exactly one full load and its ``table.changed``,
a catalog without conditional loads (or a table without a stored ETag) falls back to full loads,
and an unexpected answer costs only that table."""

from __future__ import annotations

import http.server
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import pytest

from icepack_core.discovery.catalogs import (
    ListedTable,
    StoredEtag,
    gate_for,
    list_table_locations,
    load_catalog,
)
from icepack_core.discovery.limits import CatalogCalls
from icepack_core.discovery.refresh import Discovery, apply_change, apply_listing, refresh_table
from icepack_core.settings import CatalogConfig
from icepack_core.types import TableRef
from tests.discovery.test_discovery_sql import events, last_event_id, make_settings
from tests.plugins.catalogs import SCHEMA, rows
from tests.plugins.rest_fixture import IcebergRest

pytestmark = pytest.mark.slow
TABLES = ("a", "b", "c")


def _namespace() -> str:
    return f"e{uuid.uuid4().hex[:8]}"


def _fixture_tables(
    iceberg_rest: IcebergRest, name: str, **extra: object
) -> tuple[CatalogConfig, str]:
    ns = _namespace()
    cfg = iceberg_rest.config(name, include=[ns], **extra)
    catalog = load_catalog(cfg)
    catalog.create_namespace(ns)
    for t in TABLES:
        catalog.create_table(f"{ns}.{t}", SCHEMA)
    return cfg, ns


async def _stored(db: asyncpg.Pool, catalog: str) -> dict[str, tuple[str | None, str | None]]:
    return {
        r["name"]: (r["metadata_location"], r["catalog_etag"])
        for r in await db.fetch(
            "SELECT name, metadata_location, catalog_etag FROM icepack.tables WHERE catalog = $1",
            catalog,
        )
    }


async def _status_calls(db: asyncpg.Pool, catalog: str) -> dict[str, int]:
    return dict(
        await db.fetchval(
            "SELECT last_pass_calls FROM icepack.catalog_status WHERE catalog = $1", catalog
        )
    )


def loads(calls: dict[str, int]) -> dict[str, int]:
    """The table-load calls of a pass (its ``list`` calls, and its ``unmaintained_load`` calls
    of the tables include/exclude leave out, depend on what the shared server holds, other
    tests' tables included)."""
    return {kind: n for kind, n in calls.items() if kind not in ("list", "unmaintained_load")}


async def test_unchanged_tables_answer_304_and_a_commit_costs_one_full_load(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, iceberg_rest: IcebergRest
) -> None:
    cfg, ns = _fixture_tables(iceberg_rest, "rest_etag")
    discovery = Discovery(make_settings(database_url, tmp_path, cfg), db)

    first = (await discovery.run_once()).catalogs[0]
    assert (first.discovered, first.error) == (3, None)
    assert loads(first.calls) == {"load": 3}  # nothing stored yet: full loads
    stored = await _stored(db, cfg.name)
    assert all(loc and etag for loc, etag in stored.values()), stored

    mark = await last_event_id(db)
    second = (await discovery.run_once()).catalogs[0]
    # Every table answered 304: no full load at all, and no event.
    assert loads(second.calls) == {"conditional": 3, "not_modified": 3}
    assert await _status_calls(db, cfg.name) == second.calls
    assert (second.discovered, second.changed, second.dropped) == (0, 0, 0)
    assert await events(db, mark) == []
    assert await _stored(db, cfg.name) == stored

    catalog = load_catalog(cfg)
    catalog.load_table(f"{ns}.b").append(rows(2))
    now_b = catalog.load_table(f"{ns}.b").metadata_location
    mark = await last_event_id(db)
    third = (await discovery.run_once()).catalogs[0]
    # Exactly the committed table came back in full; the other two stayed 304.
    assert loads(third.calls) == {"conditional": 3, "not_modified": 2, "load": 1}
    assert await _status_calls(db, cfg.name) == third.calls
    assert (third.discovered, third.changed, third.dropped) == (0, 1, 0)
    assert await events(db, mark) == [("table.changed", f"{ns}.b")]
    after = await _stored(db, cfg.name)
    assert after["b"][0] == now_b and after["b"][1] not in (None, stored["b"][1])
    assert {t: after[t] for t in ("a", "c")} == {t: stored[t] for t in ("a", "c")}

    fourth = (await discovery.run_once()).catalogs[0]
    assert loads(fourth.calls) == {"conditional": 3, "not_modified": 3}


async def test_without_conditional_loads_or_a_stored_etag_tables_are_loaded_in_full(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, iceberg_rest: IcebergRest
) -> None:
    cfg, _ = _fixture_tables(iceberg_rest, "rest_plain", conditional_loads=False)
    plain = Discovery(make_settings(database_url, tmp_path, cfg), db)
    for _ in range(2):
        result = (await plain.run_once()).catalogs[0]
        assert loads(result.calls) == {"load": 3}
    # PyIceberg's own load_table: nothing is stored, nothing is sent conditionally.
    assert {etag for _, etag in (await _stored(db, cfg.name)).values()} == {None}

    on = cfg.model_copy(update={"conditional_loads": True})
    discovery = Discovery(make_settings(database_url, tmp_path, on), db)
    assert loads((await discovery.run_once()).catalogs[0].calls) == {"load": 3}
    # A table whose ETag is absent (a server that sent none) is loaded in full; the others 304.
    await db.execute(
        "UPDATE icepack.tables SET catalog_etag = NULL WHERE catalog = $1 AND name = 'a'", cfg.name
    )
    result = (await discovery.run_once()).catalogs[0]
    assert loads(result.calls) == {"load": 1, "conditional": 2, "not_modified": 2}
    assert (result.changed, result.discovered) == (0, 0)
    assert (await _stored(db, cfg.name))["a"][1] is not None  # stored again from that load


class _FaultyProxy(http.server.ThreadingHTTPServer):
    """Forwards every request to the REST fixture, except loads of the tables in ``faults``,
    answered with the status given there (the fixture's own answers otherwise)."""

    def __init__(self, upstream: str, faults: dict[str, int]) -> None:
        self.upstream = upstream
        self.faults = faults
        super().__init__(("127.0.0.1", 0), _ProxyHandler)


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    server: _FaultyProxy

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _forward(self) -> None:
        table = self.path.split("?", 1)[0].rstrip("/").rsplit("/tables/", 1)
        if self.command == "GET" and len(table) == 2 and table[1] in self.server.faults:
            self.send_response(self.server.faults[table[1]])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        request = urllib.request.Request(
            self.server.upstream + self.path, data=body, headers=headers, method=self.command
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                status, payload, answer_headers = answer.status, answer.read(), answer.headers
        except urllib.error.HTTPError as exc:
            status, payload, answer_headers = exc.code, exc.read(), exc.headers
            exc.close()
        self.send_response(status)
        for key, value in answer_headers.items():
            if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_HEAD = do_DELETE = _forward


@contextmanager
def _faulty_proxy(upstream: str, faults: dict[str, int]) -> Iterator[_FaultyProxy]:
    proxy = _FaultyProxy(upstream, faults)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()
        thread.join(10)


async def test_an_unexpected_answer_to_a_conditional_load_costs_only_that_table(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, iceberg_rest: IcebergRest
) -> None:
    cfg, ns = _fixture_tables(iceberg_rest, "rest_faulty")
    discovery = Discovery(make_settings(database_url, tmp_path, cfg), db)
    assert (await discovery.run_once()).catalogs[0].discovered == 3
    stored = await _stored(db, cfg.name)

    with _faulty_proxy(iceberg_rest.uri, {"a": 412, "b": 500}) as proxy:
        via = cfg.model_copy(update={"uri": f"http://127.0.0.1:{proxy.server_address[1]}"})
        catalog = load_catalog(via)
        known = {(ns, t): StoredEtag(*stored[t]) for t in TABLES}  # type: ignore[arg-type]
        calls = CatalogCalls()
        listed = {
            i.ref.name: i
            for i in await list_table_locations(catalog, via, gate_for(via), calls, known)
        }
        # Each failed table is listed with its error, never dropped; the third answered 304.
        assert listed["a"].metadata_location is None and "Precondition Failed" in (
            listed["a"].error or ""
        )
        assert listed["b"].metadata_location is None and "ServerError" in (listed["b"].error or "")
        assert listed["c"].not_modified and listed["c"].metadata_location == stored["c"][0]
        assert loads(calls.as_json()) == {"conditional": 3, "not_modified": 1}

        # A whole pass through the proxy: the catalog is refreshed, nothing dropped or changed.
        proxied = Discovery(make_settings(database_url, tmp_path, via), db)
        mark = await last_event_id(db)
        result = (await proxied.run_once()).catalogs[0]
        assert (result.error, result.changed, result.dropped, result.tables) == (None, 0, 0, 3)
        assert await events(db, mark) == []
        assert await _stored(db, cfg.name) == stored

    # A 304 to a load that sent no If-None-Match is refused, not taken for "unchanged".
    with _faulty_proxy(iceberg_rest.uri, {"c": 304}) as proxy:
        via = cfg.model_copy(update={"uri": f"http://127.0.0.1:{proxy.server_address[1]}"})
        catalog = load_catalog(via)
        listed = {i.ref.name: i for i in await list_table_locations(catalog, via, gate_for(via))}
        assert listed["c"].metadata_location is None
        assert "UnexpectedCatalogAnswer" in (listed["c"].error or "")
        assert listed["a"].metadata_location == stored["a"][0]


async def test_a_location_set_without_an_etag_clears_it_and_a_304_never_moves_a_table_back(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, iceberg_rest: IcebergRest
) -> None:
    cfg, ns = _fixture_tables(iceberg_rest, "rest_pushed")
    discovery = Discovery(make_settings(database_url, tmp_path, cfg), db)
    await discovery.run_once()
    before = await _stored(db, cfg.name)

    # A pushed change (a catalog hook's hint) records a's new location without an ETag: the
    # stored ETag belonged to the old location, so it goes, and the next pass loads a in full.
    table = load_catalog(cfg).load_table(f"{ns}.a")
    table.append(rows(1))
    moved = load_catalog(cfg).load_table(f"{ns}.a").metadata_location
    pushed = await apply_change(db, cfg, (ns,), "a", moved, properties={})
    assert pushed.changed == 1
    assert (await _stored(db, cfg.name))["a"] == (moved, None)
    mark = await last_event_id(db)
    result = (await discovery.run_once()).catalogs[0]
    assert loads(result.calls) == {"load": 1, "conditional": 2, "not_modified": 2}
    assert (result.changed, await events(db, mark)) == (0, [])
    assert (await _stored(db, cfg.name))["a"][0] == moved

    # A 304 read before a push landed confirms the row, whatever location it holds now: it is
    # never taken for a move back to the location the ETag was stored with.
    now = await _stored(db, cfg.name)
    listing = [
        ListedTable(TableRef(cfg.name, ns, t), loc, not_modified=True)
        for t, loc in (
            ("a", now["a"][0]),
            ("b", "file:/elsewhere.metadata.json"),
            ("c", now["c"][0]),
        )
    ]
    mark = await last_event_id(db)
    outcome = await apply_listing(db, cfg, listing, CatalogCalls())
    assert (outcome.changed, outcome.discovered, outcome.dropped) == (0, 0, 0)
    assert await events(db, mark) == []
    assert await _stored(db, cfg.name) == now
    assert now["b"] == before["b"]


async def test_a_targeted_refresh_stores_the_etag_so_the_next_poll_gets_a_304(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, iceberg_rest: IcebergRest
) -> None:
    """A hint or an SQS message refreshes one table by a full load (``refresh_table``); the
    ETag that load answered is stored, so the next poll's load of the table is a 304."""
    cfg, ns = _fixture_tables(iceberg_rest, "rest_targeted")
    discovery = Discovery(make_settings(database_url, tmp_path, cfg), db)
    await discovery.run_once()
    catalog = load_catalog(cfg)
    catalog.load_table(f"{ns}.b").append(rows(2))
    now_b = catalog.load_table(f"{ns}.b").metadata_location

    refreshed = await refresh_table(db, discovery.catalogs, cfg, (ns,), "b")
    assert refreshed.changed == 1
    location, etag = (await _stored(db, cfg.name))["b"]
    assert location == now_b and etag is not None

    mark = await last_event_id(db)
    after = (await discovery.run_once()).catalogs[0]
    assert loads(after.calls) == {"conditional": 3, "not_modified": 3}  # no full load of b
    assert await events(db, mark) == []
    assert (await refresh_table(db, discovery.catalogs, cfg, (ns,), "b")).changed == 0
    assert (await _stored(db, cfg.name))["b"] == (now_b, etag)  # unchanged: same ETag kept


async def test_an_excluded_rest_table_is_recorded_and_follows_its_commits(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, iceberg_rest: IcebergRest
) -> None:
    """A table ``exclude`` leaves out is recorded for the location checks from a real REST load
    (location and ETag); a commit to it moves the record (its conditional load is not a 304)."""
    cfg, ns = _fixture_tables(iceberg_rest, "rest_unmaintained")
    cfg = cfg.model_copy(update={"exclude": [f"{ns}.c"]})
    discovery = Discovery(make_settings(database_url, tmp_path, cfg), db)
    query = "SELECT * FROM icepack.unmaintained_tables WHERE catalog = $1 AND namespace = $2"

    first = (await discovery.run_once()).catalogs[0]
    assert (first.discovered, first.error) == (2, None) and set(await _stored(db, cfg.name)) == {
        "a",
        "b",
    }
    (row,) = await db.fetch(query, cfg.name, ns)
    table = load_catalog(cfg).load_table(f"{ns}.c")
    assert (row["name"], row["reason"], row["load_error"]) == ("c", "excluded", None)
    assert row["metadata_location"] == table.metadata_location
    assert row["location"] == table.metadata.location and row["catalog_etag"]

    table.append(rows(2))
    await discovery.run_once()
    (moved,) = await db.fetch(query, cfg.name, ns)
    assert moved["metadata_location"] == load_catalog(cfg).load_table(f"{ns}.c").metadata_location
    assert moved["metadata_location"] != row["metadata_location"]
    assert moved["catalog_etag"] not in (None, row["catalog_etag"])
