"""Polaris policy requests per discovery pass at fleet scale.

Registers ``--tables`` tables (default 10,000) in ``--namespaces`` namespaces (default 100) in
a stand-in for Apache Polaris 1.4.1 (``tests.support.polaris.standin``: Polaris cannot run
here, its Maven artifacts are not served to these machines and it needs Java 21+), attaches a
catalog policy, a policy to every tenth namespace and to every hundredth table, records the
tables in a fresh Icepack database, and runs ``polaris.refresh`` once per simulated discovery
interval (60 s) over two table periods (12 h with the defaults: 5 min namespace period, 6 h
table period, at most 500 table reads a pass), over real HTTP.

It prints the requests of the first pass, the most in any pass, and the mean per pass once
every table has been read (the steady state), beside the goal and the naive baseline of one
``applicable-policies`` request per table per pass. It checks that every table resolved to its
own policy at the end.

Run: ``uv run python -m bench.fleet.polaris [--tables N] [--namespaces N]`` (``bench.fleet``
runs it at its end with ``--polaris-tables``; 0 skips it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg

from bench.postgres import migrated_postgres
from icepack_core.db.pool import create_pool
from icepack_core.discovery.catalogs import gate_for
from icepack_core.polaris.client import PolarisClient
from icepack_core.polaris.refresh import refresh_policies
from icepack_core.settings import CatalogConfig, load_settings
from tests.support.polaris.standin import PolarisState, StoredPolicy, run_standin

INTERVAL_S = 60.0  # discovery's default pass interval
PREFIX = "bench_cat"
DC = "system.data-compaction"


def seed_policies(
    state: PolarisState, namespaces: list[str], tables: list[tuple[str, str]]
) -> None:
    """A catalog policy, one on every tenth namespace, one on every hundredth table (written
    into the stand-in's state directly: the bench measures reading, not writing)."""

    def policy(namespace: str, name: str, min_input_files: int) -> tuple[tuple[str, ...], str]:
        content = json.dumps({"enable": True, "config": {"min_input_files": min_input_files}})
        key = ((namespace,), name)
        state.policies[key] = StoredPolicy((namespace,), name, DC, None, content)
        return key

    state.mappings[("catalog", ())] = [policy(namespaces[0], "catalog_dc", 6)]
    for namespace in namespaces[::10]:
        state.mappings[("namespace", (namespace,))] = [policy(namespace, f"ns_dc_{namespace}", 7)]
    for namespace, name in tables[::100]:
        key = policy(namespace, f"t_dc_{name}", 8)
        state.mappings[("table-like", (namespace, name))] = [key]


async def run(tables: int, namespaces: int, dsn: str, data_dir: Path) -> None:
    ns_names = [f"ns{i:03d}" for i in range(namespaces)]
    names = [(ns_names[i % namespaces], f"t{i:05d}") for i in range(tables)]
    with run_standin(PREFIX) as polaris:
        for namespace, name in names:
            polaris.state.register((namespace,), name)
        seed_policies(polaris.state, ns_names, names)
        cfg = CatalogConfig(
            name="polaris_bench",
            type="rest",
            uri=polaris.uri,
            warehouse=PREFIX,
            credential=polaris.credential,
            polaris=True,
            max_requests_per_second=10_000.0,
        )
        settings = load_settings(database_url=dsn, data_dir=data_dir, catalogs=[cfg])
        pool = await create_pool(settings, "bench")
        await pool.copy_records_to_table(
            "tables",
            schema_name="icepack",
            columns=["catalog", "namespace", "name"],
            records=[(cfg.name, ns, n) for ns, n in names],
        )
        client = PolarisClient(cfg, gate_for(cfg))
        now = datetime(2026, 11, 27, tzinfo=UTC)
        passes = int(2 * cfg.polaris_table_ttl_seconds / INTERVAL_S)
        counts: list[int] = []
        all_read_after: int | None = None
        read = 0
        started = time.monotonic()
        for index in range(passes):
            result = await refresh_policies(pool, cfg, client, now)
            if result.error is not None:
                raise SystemExit(f"pass {index}: {result.error}")
            counts.append(result.requests)
            read += result.tables_read
            if all_read_after is None and read >= tables:
                all_read_after = index + 1
            now += timedelta(seconds=INTERVAL_S)
        seconds = time.monotonic() - started
        client.close()
        await check(pool, cfg, names)
        await pool.close()
    report(tables, namespaces, cfg, counts, all_read_after or passes, seconds)


async def check(pool: asyncpg.Pool, cfg: CatalogConfig, names: list[tuple[str, str]]) -> None:
    """Every hundredth table has its own policy, every tenth namespace its own."""
    rows = await pool.fetch(
        "SELECT scope, count(*) AS n FROM icepack.polaris_policies WHERE catalog = $1 "
        "GROUP BY scope",
        cfg.name,
    )
    found = {r["scope"]: r["n"] for r in rows}
    namespaces = sorted({n for n, _ in names})
    expected = {"catalog": 1, "namespace": len(namespaces[::10]), "table": len(names[::100])}
    if found != expected:
        raise SystemExit(f"policies kept {found}, expected {expected}")


def report(
    tables: int,
    namespaces: int,
    cfg: CatalogConfig,
    counts: list[int],
    all_read_after: int,
    seconds: float,
) -> None:
    steady = counts[all_read_after:]
    mean = sum(steady) / len(steady) if steady else float("nan")
    per_pass_tables = tables * INTERVAL_S / cfg.polaris_table_ttl_seconds
    per_pass_ns = (namespaces + 1) * INTERVAL_S / cfg.polaris_namespace_ttl_seconds
    goal = per_pass_tables + per_pass_ns
    print(
        f"polaris policies: {tables} tables in {namespaces} namespaces, {len(counts)} passes "
        f"{INTERVAL_S:g} s apart ({seconds:.0f} s wall)"
    )
    print(f"  first pass:                 {counts[0]:>6} requests")
    print(f"  every table read after:     {all_read_after:>6} passes")
    print(f"  most in one pass:           {max(counts):>6} requests")
    print(f"  most in one steady pass:    {max(steady, default=0):>6} requests")
    print(f"  steady state, mean a pass:  {mean:>9.1f} requests")
    print(
        f"  goal: <= (namespaces + 1) x {INTERVAL_S:g} s / {cfg.polaris_namespace_ttl_seconds:g} s"
        f" + tables x {INTERVAL_S:g} s / {cfg.polaris_table_ttl_seconds:g} s = {goal:.1f} a pass"
        f" (+ a token now and then), and never more than namespaces + 2 + "
        f"{cfg.polaris_max_table_reads_per_pass} in one pass"
    )
    print(f"  baseline (one request per table per pass): {tables:>6} requests a pass")


async def main(tables: int, namespaces: int) -> None:
    async with migrated_postgres("icepack-polaris-") as (dsn, root):
        await run(tables, namespaces, dsn, root / "data")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tables", type=int, default=10_000)
    parser.add_argument("--namespaces", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(main(args.tables, args.namespaces))
