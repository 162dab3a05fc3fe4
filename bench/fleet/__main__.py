"""Fleet benchmark: discovery, inspector and planner as real processes over a cloned fleet.

Printed, each beside its goal (and its baseline where the issue names one), in one run:
* time until every table has a status, a health assessment and a recommendation, one inspector
  (goal <= 20 min for 100,000 tables, i.e. >= 85 tables/s; baseline ~58 tables/s at 10,000);
* the same with 3 inspector processes sharing work items: the speed-up, and that no table was
  inspected twice for one metadata location;
* a steady-state discovery pass over the unchanged fleet (wall time; the SQL catalog is read
  with one locations query plus its namespace walk);
* reaction, commit -> new recommendation for the committed table, p50/p99 over commits spread
  on random tables, with push (``notify: true``) and with polling alone (default 60 s poll);
* peak RSS of each service process (VmHWM; goal <= 500 MiB);
* catalog calls per discovery pass with and without conditional loads, behind Apache Iceberg's
  REST fixture (``bench.fleet.conditional``, 1,000 tables);
* Polaris policy requests per pass at 10,000 tables, beside one request per table
  (``bench.fleet.polaris``, against a stand-in for Polaris: Polaris cannot run here).

Run: ``uv run python -m bench.fleet [--tables N] [--commits N] [--commit-seconds S]
[--conditional-tables N] [--polaris-tables N]`` (``make bench`` runs it with the defaults:
100,000 tables, 200 commits over 120 s, 1,000 tables behind the REST fixture, 10,000 Polaris
tables).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

from bench.fleet import conditional, polaris
from bench.fleet.clone import KINDS, build_fleet
from icepack_core.db.migrate import migrate
from icepack_core.db.pool import create_pool
from icepack_core.discovery.refresh import Discovery
from icepack_core.local.postgres import LocalPostgres
from icepack_core.settings import load_settings

GOAL_SECONDS_100K = 20 * 60
GOAL_RSS_MIB = 500
POLARIS_NAMESPACES = 100  # the Polaris figure's tables are spread over these
CONDITIONAL_CHANGES = 10  # tables changed before the conditional figure's last pass
BASELINE_TABLES_PER_S = 58.0  # icepack up, 10,000 tables, before this bench (issue's figure)


def run(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start a service process; its output goes to ``log`` (read when it dies early)."""
    with log.open("ab") as out:
        return subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def check_alive(procs: dict[str, subprocess.Popen[bytes]], logs: Path) -> None:
    for name, proc in procs.items():
        if proc.poll() is not None:
            tail = (logs / f"{name}.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{tail}")


def peak_rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def service_pids(parent: int) -> dict[str, int]:
    """``icepack up``'s children by service name (from their command lines)."""
    found: dict[str, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            stat = (proc / "stat").read_text().split()
        except OSError:
            continue
        if int(stat[3]) == parent and b"service" in cmd:
            found[cmd[cmd.index(b"service") + 1].decode()] = int(proc.name)
    return found


async def counts(pool: asyncpg.Pool) -> tuple[int, int, int]:
    row = await pool.fetchrow(
        "SELECT (SELECT count(DISTINCT table_id) FROM icepack.status_snapshots) AS s, "
        "(SELECT count(*) FROM icepack.table_health_latest) AS h, "
        "(SELECT count(DISTINCT table_id) FROM icepack.recommendations) AS r"
    )
    assert row is not None
    return row["s"], row["h"], row["r"]


async def wait_all_planned(
    pool: asyncpg.Pool, tables: int, limit: float, check: Any = None
) -> float:
    start = time.monotonic()
    last = time.monotonic()
    while time.monotonic() - start < limit:
        if check is not None:
            check()
        s, h, r = await counts(pool)
        if min(s, h, r) >= tables:
            return time.monotonic() - start
        if time.monotonic() - last > 30:
            print(
                f"    ... {time.monotonic() - start:.0f} s: status {s}, health {h}, "
                f"recommendation {r} of {tables}",
                flush=True,
            )
            last = time.monotonic()
        # Every 5 s: the counts scan the growing status and recommendation tables, and polled
        # every second at 100,000 tables they took a tenth of a core from the services measured.
        await asyncio.sleep(5)
    raise TimeoutError(f"not every table planned after {limit:.0f} s: {await counts(pool)}")


async def reset(admin_dsn: str, database: str) -> str:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{database}"')
    finally:
        await conn.close()
    dsn = admin_dsn.rsplit("/", 1)[0] + f"/{database}"
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    return dsn


def env_for(dsn: str, catalog: dict[str, Any], data_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "ICEPACK_DATABASE_URL": dsn,
        "ICEPACK_CATALOGS": json.dumps([catalog]),
        "ICEPACK_DATA_DIR": str(data_dir),
        "ICEPACK_LOG_LEVEL": "warning",
    }


@contextlib.asynccontextmanager
async def stack(
    dsn: str, catalog: dict[str, Any], data_dir: Path, inspectors: int, label: str
) -> AsyncIterator[tuple[asyncpg.Pool, Callable[[], None], Callable[[], dict[str, float]]]]:
    """discovery + inspector + planner under ``icepack up`` (plus ``inspectors - 1`` more
    inspector processes) on ``dsn``; yields (pool, liveness check, peak RSS per service)."""
    env = env_for(dsn, catalog, data_dir)
    icepack = [sys.executable, "-m", "icepack_core.cli.app"]
    logs = data_dir / "logs" / label
    logs.mkdir(parents=True, exist_ok=True)
    up = run(
        [*icepack, "up", "-s", "discovery", "-s", "inspector", "-s", "planner"],
        env,
        logs / "up.log",
    )
    # More inspectors beside `icepack up`'s: each on its own (ephemeral) probe port.
    extra = [
        run(
            [*icepack, "service", "inspector"],
            {**env, "ICEPACK_HTTP_PORT": "0"},
            logs / f"inspector{i}.log",
        )
        for i in range(2, inspectors + 1)
    ]
    procs = {"up": up, **{f"inspector{i}": p for i, p in enumerate(extra, start=2)}}

    def rss() -> dict[str, float]:
        found = {name: peak_rss_mib(pid) for name, pid in service_pids(up.pid).items()}
        return {
            **found,
            **{f"inspector{i}": peak_rss_mib(p.pid) for i, p in enumerate(extra, start=2)},
        }

    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    try:
        yield pool, lambda: check_alive(procs, logs), rss
    finally:
        await pool.close()
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(timeout=60)


async def inspected_twice(pool: asyncpg.Pool) -> int:
    """Tables with more than one status snapshot for one metadata location."""
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM (SELECT table_id, metadata_location FROM "
            "icepack.status_snapshots GROUP BY 1, 2 HAVING count(*) > 1) d"
        )
    )


async def reaction(
    pool: asyncpg.Pool, sql_catalog: SqlCatalog, commits: int, spread: float
) -> list[float]:
    """Seconds from each commit (on a random table, ``commits`` spread over ``spread``
    seconds) to the committed table's next recommendation, on a running, planned stack.

    One watcher polls for every pending commit at once (every 20 ms): a poller per commit
    made up to 200 queries each 20 ms, load that competed with the services it measured."""
    names = await pool.fetch(
        "SELECT id, namespace, name FROM icepack.tables WHERE namespace LIKE 'fleet%'"
    )
    rng = random.Random(7)
    chosen = [names[rng.randrange(len(names))] for _ in range(commits)]
    # (table id, newest recommendation id before the commit, commit time) -> latency
    pending: dict[tuple[int, int, float], asyncio.Future[float]] = {}
    results: list[asyncio.Future[float]] = []
    done_committing = asyncio.Event()
    watcher = asyncio.create_task(_watch(pool, pending, done_committing))
    try:
        for i, row in enumerate(chosen):
            await asyncio.sleep(spread / commits)
            table = await asyncio.to_thread(sql_catalog.load_table, (row["namespace"], row["name"]))
            before = await pool.fetchval(
                "SELECT coalesce(max(id), 0) FROM icepack.recommendations WHERE table_id = $1",
                row["id"],
            )
            rows = pa.table({"id": pa.array([i], pa.int64()), "name": pa.array([f"c{i}"])})
            await asyncio.to_thread(table.append, rows)
            future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
            pending[(row["id"], before, time.monotonic())] = future
            results.append(future)
        done_committing.set()
        return list(await asyncio.gather(*results))
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def _watch(
    pool: asyncpg.Pool,
    pending: dict[tuple[int, int, float], asyncio.Future[float]],
    done_committing: asyncio.Event,
) -> None:
    """Resolve each pending commit once its table has a newer recommendation (600 s: inf)."""
    while pending or not done_committing.is_set():
        if pending:
            newest: dict[int, int] = {
                r[0]: r[1]
                for r in await pool.fetch(
                    "SELECT table_id, max(id) FROM icepack.recommendations "
                    "WHERE table_id = ANY($1::bigint[]) GROUP BY table_id",
                    sorted({table_id for table_id, _, _ in pending}),
                )
            }
            now = time.monotonic()
            for key in list(pending):
                table_id, after, committed = key
                if newest.get(table_id, 0) > after:
                    pending.pop(key).set_result(now - committed)
                elif now - committed > 600:
                    pending.pop(key).set_result(float("inf"))
        await asyncio.sleep(0.02)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def main(
    tables: int, commits: int, spread: float, conditional_tables: int, polaris_tables: int
) -> None:
    await fleet(tables, commits, spread)
    if conditional_tables:
        # The last figure of the list, in the same run: catalog calls per pass with and
        # without conditional loads, behind the REST fixture (``bench.fleet.conditional``).
        await conditional.main(conditional_tables, CONDITIONAL_CHANGES)
    if polaris_tables:
        await polaris.main(polaris_tables, POLARIS_NAMESPACES)


async def fleet(tables: int, commits: int, spread: float) -> None:
    with tempfile.TemporaryDirectory(prefix="icepack-fleet-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        server = LocalPostgres(root / "pg", durable=False)
        server.start()
        try:
            catalog_dsn = server.admin_dsn("fleet_catalog")
            admin = await asyncpg.connect(server.admin_dsn())
            await admin.execute("CREATE DATABASE fleet_catalog")
            await admin.close()
            uri = catalog_dsn.replace("postgresql://", "postgresql+psycopg2://")
            warehouse = (root / "warehouse").as_uri()
            sql_catalog = SqlCatalog("fleet", uri=uri, warehouse=warehouse)
            print(f"fleet: cloning {tables} tables ...", flush=True)
            started = time.monotonic()
            kinds = await asyncio.to_thread(
                build_fleet, sql_catalog, root / "fleet", tables, _row_copier(catalog_dsn)
            )
            print(
                f"fleet: {tables} tables in {time.monotonic() - started:.0f} s "
                f"({', '.join(f'{k} {n}' for k, n in kinds.items())})",
                flush=True,
            )
            total = tables + len(KINDS)  # the templates are tables of the catalog too
            catalog = {"name": "fleet", "type": "sql", "uri": catalog_dsn, "warehouse": warehouse}
            dsn = await _measure(
                server, sql_catalog, catalog, root / "data", total, commits, spread
            )
            await _steady_discovery(dsn, catalog, root / "data", total)
        finally:
            server.stop()


def _row_copier(catalog_dsn: str) -> Callable[[list[tuple[str, str, str, str]]], None]:
    """``build_fleet``'s way to add catalog rows: one COPY into ``iceberg_tables`` (blocking)."""

    def copy_rows(rows: list[tuple[str, str, str, str]]) -> None:
        async def go() -> None:
            conn = await asyncpg.connect(catalog_dsn)
            try:
                await conn.copy_records_to_table(
                    "iceberg_tables",
                    records=rows,
                    columns=["catalog_name", "table_namespace", "table_name", "metadata_location"],
                )
            finally:
                await conn.close()

        asyncio.run(go())

    return copy_rows


async def _measure(
    server: LocalPostgres,
    sql_catalog: SqlCatalog,
    catalog: dict[str, Any],
    data_dir: Path,
    total: int,
    commits: int,
    spread: float,
) -> str:
    """Time to plan the whole fleet with one inspector and with three, each service's peak
    RSS, and commit -> recommendation latency pushed and polled; prints each beside its goal.
    Returns the database of the last runs (for the steady-state discovery pass)."""
    limit = 6 * 3600.0
    goal = GOAL_SECONDS_100K * total / 100_000
    dsn = await reset(server.admin_dsn(), "icepack_one")
    async with stack(dsn, catalog, data_dir, 1, "one") as (pool, alive, rss):
        one = await wait_all_planned(pool, total, limit, alive)
        rss_one = rss()
    print(
        f"all planned, 1 inspector: {one:.0f} s, {total / one:.0f} tables/s "
        f"(goal <= {goal:.0f} s at this size, >= 85 tables/s; baseline "
        f"{BASELINE_TABLES_PER_S:.0f} tables/s)",
        flush=True,
    )
    dsn = await reset(server.admin_dsn(), "icepack_three")
    pushed = {**catalog, "notify": True}
    async with stack(dsn, pushed, data_dir, 3, "three") as (pool, alive, rss):
        three = await wait_all_planned(pool, total, limit, alive)
        rss_three = rss()
        twice = await inspected_twice(pool)
        print(
            f"all planned, 3 inspectors: {three:.0f} s, {total / three:.0f} tables/s,"
            f" speed-up {one / three:.2f}x; tables inspected twice for one metadata "
            f"location: {twice} (goal 0)",
            flush=True,
        )
        push = await reaction(pool, sql_catalog, commits, spread)
    for name, mib in sorted(rss_one.items()):
        print(f"peak RSS {name}, 1 inspector: {mib:.0f} MiB (goal <= {GOAL_RSS_MIB} MiB)")
    for name, mib in sorted(rss_three.items()):
        print(f"peak RSS {name}, 3 inspectors: {mib:.0f} MiB (goal <= {GOAL_RSS_MIB} MiB)")
    async with stack(dsn, catalog, data_dir, 1, "polling") as (pool, alive, _rss):
        await wait_all_planned(pool, total, limit, alive)
        polled = await reaction(pool, sql_catalog, commits, spread)
    for label, lat, goal_text in (
        ("push", push, " (goal p99 <= 1 s)"),
        ("polling alone (60 s poll)", polled, ""),
    ):
        print(
            f"commit -> recommendation, {label}: p50 {percentile(lat, 50):.2f} s, "
            f"p99 {percentile(lat, 99):.2f} s over {len(lat)} commits{goal_text}",
            flush=True,
        )
    return dsn


async def _steady_discovery(dsn: str, catalog: dict[str, Any], data_dir: Path, total: int) -> None:
    """One discovery pass over the unchanged fleet: its time and how many tables it changed."""
    settings = load_settings(database_url=dsn, data_dir=data_dir, catalogs=[catalog])
    pool = await create_pool(settings, "bench")
    try:
        discovery = Discovery(settings, pool)
        started = time.monotonic()
        steady = await discovery.run_once()
        print(
            f"steady-state discovery pass over {total} unchanged tables: "
            f"{time.monotonic() - started:.2f} s, changed {steady.changed} (SQL: the "
            "namespace walk plus one locations query; goal: calls ~ changes)"
        )
    finally:
        await pool.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tables", type=int, default=100_000)
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--commit-seconds", type=float, default=120.0)
    parser.add_argument(
        "--conditional-tables",
        type=int,
        default=1000,
        help="tables behind the REST fixture for the conditional-load figure (0: skip it)",
    )
    parser.add_argument(
        "--polaris-tables",
        type=int,
        default=10_000,
        help="tables for the Polaris policy-requests figure (0: skip it)",
    )
    args = parser.parse_args()
    asyncio.run(
        main(
            args.tables,
            args.commits,
            args.commit_seconds,
            args.conditional_tables,
            args.polaris_tables,
        )
    )
