"""What discovery sends a catalog: every request counted by kind (kept in catalog_status) and
held to the catalog's concurrency and rate limits."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import asyncpg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.catalog.sql import SqlCatalog

from icepack_core.discovery.limits import CatalogCalls, CatalogGate, TokenBucket
from icepack_core.discovery.refresh import Discovery
from icepack_core.settings import CatalogConfig
from tests.discovery.test_discovery_sql import make_settings
from tests.plugins.catalogs import SCHEMA, rows
from tests.plugins.rest_fixture import IcebergRest


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds


@given(rate=st.floats(0.5, 1000), takes=st.integers(1, 300))
@settings(max_examples=100, deadline=None)
def test_the_bucket_never_lets_more_than_burst_plus_rate_times_elapsed(
    rate: float, takes: int
) -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate, clock=clock, sleep=clock.sleep)
    for _ in range(takes):
        bucket.take()
    # In any run: takes <= burst + rate * elapsed (the bucket's promise), and it never waits
    # longer than needed (at most one token's time beyond the bound).
    assert takes <= bucket.burst + rate * clock.now + 1e-6
    assert clock.now <= max(0.0, (takes - bucket.burst) / rate) + 1 / rate + 1e-6


def test_the_gate_holds_concurrency_and_counts_by_kind() -> None:
    gate = CatalogGate("c", max_concurrent=2, per_second=1000)
    calls = CatalogCalls()
    release = threading.Event()

    def slow() -> None:
        release.wait(10)

    threads = [threading.Thread(target=gate.call, args=("load", calls, slow)) for _ in range(6)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while gate.peak_in_flight < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gate.peak_in_flight == 2  # two got in; four wait for a slot
    release.set()
    for thread in threads:
        thread.join(10)
    assert gate.peak_in_flight == 2
    assert calls.as_json() == {"load": 6}


async def test_a_sql_pass_is_one_query_plus_the_namespace_walk(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    cfg, catalog = scratch_catalog
    for ns in ("a", "b"):
        catalog.create_namespace(ns)
        catalog.create_table(f"{ns}.t", rows(0).schema)
    discovery = Discovery(make_settings(database_url, tmp_path, cfg), db)
    result = (await discovery.run_once()).catalogs[0]
    # list_namespaces() once, then list_tables + list_namespaces per namespace; no table loads.
    assert result.calls == {"list": 5, "query": 1}
    stored = await db.fetchval(
        "SELECT last_pass_calls FROM icepack.catalog_status WHERE catalog = $1", cfg.name
    )
    assert stored == result.calls


@pytest.mark.slow
async def test_a_rest_pass_loads_each_table_within_the_concurrency_limit(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, iceberg_rest: IcebergRest
) -> None:
    ns = f"l{uuid.uuid4().hex[:8]}"
    cfg = iceberg_rest.config("rest", include=[ns]).model_copy(
        update={"max_concurrent_requests": 2, "max_requests_per_second": 200.0}
    )
    from icepack_core.discovery.catalogs import load_catalog

    catalog = load_catalog(cfg)
    catalog.create_namespace(ns)
    for i in range(7):
        catalog.create_table(f"{ns}.t{i}", SCHEMA)
    discovery = Discovery(make_settings(database_url, tmp_path, cfg), db)
    result = (await discovery.run_once()).catalogs[0]
    assert result.discovered == 7
    assert result.calls["load"] == 7
    assert discovery.catalogs.gates["rest"].peak_in_flight <= 2
