"""Catalog calls per discovery pass with and without conditional loads, behind the REST fixture.

Creates N small tables (``create_table`` only, spread over namespaces of 100) in Apache
Iceberg's REST fixture (``RESTCatalogServer`` 1.11.0, which sends ETags; started from
``.cache/rest-fixture`` as the tests do), then discovers them through two catalogs on that one
server, ``conditional_loads`` on and off, into one Icepack database:

1. a first pass each (every table is new: full loads either way);
2. a steady-state pass each over the unchanged fleet;
3. a pass each after commits (one append) to ``--changes`` tables.

It prints the calls by kind and the wall time of each pass side by side, beside the goal "calls
proportional to changes" (``load`` = tables whose metadata travelled). The gate's rate limit is
raised to 10,000 requests/s for both, so wall time is the catalog's and discovery's own work
(at the default 50/s either way sends one request per table, which takes N/50 s).

Run: ``uv run python -m bench.fleet.conditional [--tables N] [--changes K]`` (``make bench``
runs the defaults: 1,000 tables, 10 changes).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncpg

from bench.postgres import migrated_postgres
from icepack_core.db.pool import create_pool
from icepack_core.discovery.catalogs import CatalogSet, load_catalog
from icepack_core.discovery.refresh import CatalogResult, refresh_catalog
from icepack_core.settings import CatalogConfig, load_settings
from tests.plugins.catalogs import SCHEMA, rows
from tests.plugins.rest_fixture import (
    REPO_ROOT,
    REST_FIXTURE_DIR,
    IcebergRest,
    run_rest_fixture,
)

PER_NAMESPACE = 100
KINDS = ("list", "load", "conditional", "not_modified")


def create_tables(cfg: CatalogConfig, tables: int) -> list[str]:
    """``tables`` empty tables ``bench_NNN.tNNNN`` (four creating threads); their names."""
    catalog = load_catalog(cfg)
    names = [f"bench_{i // PER_NAMESPACE:03d}.t{i:05d}" for i in range(tables)]
    for ns in sorted({n.split(".")[0] for n in names}):
        catalog.create_namespace(ns)

    def create(name: str) -> None:
        for attempt in range(5):  # SQLite behind the fixture may be busy under concurrent writes
            try:
                catalog.create_table(name, SCHEMA)
                return
            except Exception:
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(create, names))
    return names


async def one_pass(
    pool: asyncpg.Pool, catalogs: CatalogSet, cfg: CatalogConfig
) -> tuple[CatalogResult, float]:
    started = time.monotonic()
    result = await refresh_catalog(pool, catalogs, cfg, time_limit=3600)
    if result.error is not None or result.skipped:
        raise RuntimeError(f"{cfg.name}: {result.error or result.skipped[:3]}")
    return result, time.monotonic() - started


def row(label: str, result: CatalogResult, seconds: float) -> str:
    calls = "  ".join(f"{kind} {result.calls.get(kind, 0):>5}" for kind in KINDS)
    events = f"discovered {result.discovered:>5}  changed {result.changed:>4}"
    return f"  {label:<34} {calls}   {events}   {seconds:6.2f} s"


async def passes(
    rest: IcebergRest, dsn: str, data_dir: Path, tables: int, changes: int
) -> list[str]:
    """One row per discovery pass: first, steady state, after ``changes`` commits; on and off."""
    limits = {"max_concurrent_requests": 8, "max_requests_per_second": 10_000.0}
    on = rest.config("rest_conditional", **limits)
    off = rest.config("rest_full", conditional_loads=False, **limits)
    print(f"conditional loads: creating {tables} tables in the REST fixture ...")
    started = time.monotonic()
    names = await asyncio.to_thread(create_tables, on, tables)
    print(f"conditional loads: {tables} tables in {time.monotonic() - started:.0f} s")
    catalogs = CatalogSet([on, off])
    settings = load_settings(database_url=dsn, data_dir=data_dir, catalogs=[on, off])
    pool = await create_pool(settings, "bench")
    lines: list[str] = []
    try:
        for label in ("first pass", "steady state"):
            for cfg in (on, off):
                result, seconds = await one_pass(pool, catalogs, cfg)
                mode = "on" if cfg.conditional_loads else "off"
                lines.append(row(f"{label}, conditional {mode}", result, seconds))
        catalog = load_catalog(on)
        for name in names[:: max(1, len(names) // changes)][:changes]:
            await asyncio.to_thread(catalog.load_table(name).append, rows(1))
        for cfg in (on, off):
            result, seconds = await one_pass(pool, catalogs, cfg)
            mode = "on" if cfg.conditional_loads else "off"
            lines.append(row(f"after {changes} commits, conditional {mode}", result, seconds))
    finally:
        await pool.close()
    return lines


async def main(tables: int, changes: int) -> None:
    fetch = [str(REPO_ROOT / "scripts" / "fetch-maven.sh"), "rest-fixture"]
    done = await asyncio.to_thread(subprocess.run, fetch, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"scripts/fetch-maven.sh rest-fixture failed:\n{done.stdout}{done.stderr}")
    async with migrated_postgres("icepack-conditional-") as (dsn, root):
        with run_rest_fixture(REST_FIXTURE_DIR, "bench") as rest:
            lines = await passes(rest, dsn, root / "data", tables, changes)
    print(f"catalog calls per discovery pass, {tables} tables behind the REST fixture:")
    for line in lines:
        print(line)
    print(
        "  goal: calls proportional to changes (steady state: load 0, every "
        "conditional answered not_modified; after K commits: load K)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--changes", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(main(args.tables, args.changes))
