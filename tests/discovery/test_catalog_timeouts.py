"""Every catalog request ends. PyIceberg sets no timeout, and discovery and inspection share
worker threads: one catalog that never answers held a thread per request for ever, until no
thread was left for any other catalog."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest
import requests
from pyiceberg.catalog.sql import SqlCatalog

from icepack_core.discovery import catalogs
from icepack_core.settings import CatalogConfig


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server that accepts connections and never sends a byte (a hung catalog)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


async def test_a_rest_catalog_that_never_answers_times_out(
    silent_server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalogs, "REQUEST_TIMEOUT", (1.0, 1.0))
    cfg = CatalogConfig(name="hung", type="rest", uri=f"http://127.0.0.1:{silent_server}")
    # Before: the config request waited for ever (this deadline only turns that into a failure).
    with pytest.raises(requests.exceptions.ReadTimeout):
        await asyncio.wait_for(asyncio.to_thread(catalogs.load_catalog, cfg), 30)


def test_a_sql_catalog_session_has_a_statement_timeout(
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    """The catalog's own queries (the listing's one query over iceberg_tables, a table's row)
    are bounded by the server, however long a lock on the catalog table is held."""
    from sqlalchemy import text

    cfg, _ = scratch_catalog
    catalog = catalogs.load_catalog(cfg)
    try:
        with catalog.engine.connect() as conn:  # type: ignore[attr-defined]
            timeout = conn.execute(text("SHOW statement_timeout")).scalar()
    finally:
        catalog.engine.dispose()  # type: ignore[attr-defined]
    assert timeout == "1min"
