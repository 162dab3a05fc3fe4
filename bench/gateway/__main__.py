"""Gateway load benchmark: read latency at a fixed request rate over a 10,000-table fleet.

Seeds 10,000 tables (one status snapshot and one health assessment each) in a throw-away local
Postgres, starts the real gateway process (``python -m icepack_core.cli.app service gateway``), and
from this process drives each scenario open-loop at a fixed rate over loopback with httpx.
Latency is measured from each request's *scheduled* start, so a gateway that falls behind shows
up as latency instead of silently lowering the rate (no coordinated omission).

Run: ``make bench`` (or ``uv run python -m bench.gateway [--rate 200] [--seconds 15]``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import asyncpg
import httpx

from icepack_core.db.migrate import migrate
from icepack_core.db.queries import load_query
from icepack_core.local.ports import free_port
from icepack_core.local.postgres import LocalPostgres

TABLES = 10_000
GOAL_P99_MS = 100.0
MAX_IN_FLIGHT = 256  # beyond this the client counts a request as dropped instead of queueing

SEED = [
    """INSERT INTO icepack.tables (catalog, namespace, name, metadata_location)
       SELECT 'bench', 'ns' || (k % 20), 't' || lpad(k::text, 5, '0'), 'file:///bench/' || k
         FROM generate_series(1, $1) k""",
    """INSERT INTO icepack.status_snapshots (table_id, inspected_at, inspector, status)
       SELECT id, now() - make_interval(mins => (id % 600)::int), 'pyiceberg', jsonb_build_object(
              'catalog', catalog, 'namespace', namespace, 'table', name,
              'data_file_count', 50 + id % 5000, 'data_file_bytes', (50 + id % 5000) * 90000000,
              'record_count', id * 1000, 'small_file_count', id % 700,
              'small_file_bytes', (id % 700) * 1000000, 'snapshot_count', 1 + id % 400,
              'manifest_count', 1 + id % 150, 'position_delete_file_count', id % 11,
              'equality_delete_file_count', id % 3, 'deletion_vector_count', 0,
              'delete_record_count', id % 900, 'partition_count', 1 + id % 30,
              'max_files_in_partition', 10 + id % 300, 'avg_data_file_bytes', 90000000,
              'format_version', 2, 'metadata_log_count', id % 120, 'ref_count', 1)
         FROM icepack.tables""",
    """INSERT INTO icepack.health_assessments (table_id, status_snapshot_id, health, score, issues)
       SELECT s.table_id, s.id,
              CASE WHEN s.table_id % 9 = 0 THEN 'critical'
                   WHEN s.table_id % 4 = 0 THEN 'warning' ELSE 'healthy' END,
              (s.table_id * 7919) % 101,
              CASE WHEN s.table_id % 4 = 0 OR s.table_id % 9 = 0 THEN jsonb_build_array(
                   jsonb_build_object('code', 'SMALL_FILES', 'severity', 'warning',
                                      'value', s.table_id % 700, 'threshold', 5,
                                      'message', 'small files piling up')) ELSE '[]' END
         FROM icepack.status_snapshots s""",
    "ANALYZE",
]


async def seed(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
        await conn.execute(SEED[0], TABLES)
        for statement in SEED[1:-1]:
            await conn.execute(statement)
        # The read model record_inspection keeps current, filled by the same production query.
        ids = await conn.fetchval("SELECT array_agg(id) FROM icepack.health_assessments")
        await conn.execute(load_query("health_latest_upsert"), ids)
        await conn.execute(SEED[-1])
    finally:
        await conn.close()


async def wait_ready(client: httpx.AsyncClient, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            if (await client.get("/readyz")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError("the gateway did not become ready")


async def drive(
    client: httpx.AsyncClient, paths: list[str], rate: float, seconds: float
) -> dict[str, float]:
    """Send ``rate`` requests/s for ``seconds``; latency from each request's scheduled time."""
    total = int(rate * seconds)
    latencies: list[float] = []
    errors = dropped = 0
    in_flight = 0
    tasks: set[asyncio.Task[None]] = set()

    async def one(path: str, scheduled: float) -> None:
        nonlocal errors, in_flight
        try:
            response = await client.get(path)
            if response.status_code != 200:
                errors += 1
        except httpx.HTTPError:
            errors += 1
        finally:
            in_flight -= 1
        latencies.append((time.perf_counter() - scheduled) * 1000)

    start = time.perf_counter()
    for i in range(total):
        scheduled = start + i / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if in_flight >= MAX_IN_FLIGHT:
            dropped += 1
            continue
        in_flight += 1
        task = asyncio.create_task(one(paths[i % len(paths)], scheduled))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    return {
        "p50": q[49],
        "p99": q[98],
        "max": max(latencies),
        "sent": len(latencies),
        "rate": len(latencies) / elapsed,
        "errors": errors,
        "dropped": dropped,
    }


def report(name: str, r: dict[str, float], rate: float) -> None:
    verdict = "ok" if r["p99"] <= GOAL_P99_MS and not r["errors"] and not r["dropped"] else "MISS"
    print(
        f"  {name:<34} p50 {r['p50']:6.1f} ms  p99 {r['p99']:6.1f} ms  max {r['max']:6.1f} ms"
        f"  rate {r['rate']:5.1f}/{rate:g} req/s  errors {r['errors']:.0f}  dropped "
        f"{r['dropped']:.0f}   (goal p99 <= {GOAL_P99_MS:g} ms) {verdict}"
    )


def _cpu_seconds(pid: int, children: bool = False) -> float:
    """CPU time a process used (Linux /proc), optionally with its reaped children's."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = (
        int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    )
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_sample(gateway: int, postmaster: int | None) -> dict[str, float] | None:
    """CPU seconds so far of the gateway, Postgres (postmaster + backends), this client and the
    whole machine; None where /proc is not there. The machine figure shows whether something
    else was competing for the same CPUs."""
    try:
        pg = 0.0
        if postmaster is not None:
            pg = _cpu_seconds(postmaster, children=True)
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    try:
                        stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                        if int(stat[1]) == postmaster:
                            pg += _cpu_seconds(int(entry.name))
                    except (OSError, ValueError):
                        continue
        jiffies = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        busy = sum(jiffies) - jiffies[3] - (jiffies[4] if len(jiffies) > 4 else 0)
        return {
            "gateway": _cpu_seconds(gateway),
            "postgres": pg,
            "client": _cpu_seconds(os.getpid()),
            "machine": busy / os.sysconf("SC_CLK_TCK"),
            "t": time.perf_counter(),
        }
    except OSError:
        return None


def report_cpu(
    before: dict[str, float] | None, after: dict[str, float] | None, requests: float
) -> None:
    if before is None or after is None:
        return
    elapsed = after["t"] - before["t"]
    used = {k: (after[k] - before[k]) / elapsed for k in before if k != "t"}
    other = max(0.0, used["machine"] - used["gateway"] - used["postgres"] - used["client"])
    per = {k: used[k] * elapsed * 1000 / max(requests, 1) for k in ("gateway", "postgres")}
    print(
        f"  {'':<34} CPU (cores of {os.cpu_count()}): gateway {used['gateway']:.2f}  postgres "
        f"{used['postgres']:.2f}  load client {used['client']:.2f}  other processes "
        f"{other:.2f};  per request: gateway {per['gateway']:.2f} ms  postgres "
        f"{per['postgres']:.2f} ms"
    )


async def scenario(
    client: httpx.AsyncClient,
    name: str,
    paths: list[str],
    rate: float,
    seconds: float,
    gateway: int,
    postmaster: int | None,
) -> None:
    before = cpu_sample(gateway, postmaster)
    result = await drive(client, paths, rate, seconds)
    after = cpu_sample(gateway, postmaster)
    report(name, result, rate)
    report_cpu(before, after, result["sent"])


def postmaster_pid(data: Path) -> int | None:
    try:
        return int((data / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


async def scenarios(
    client: httpx.AsyncClient, rate: float, seconds: float, pids: tuple[int, int | None]
) -> None:
    """Warm up, then the two open-loop scenarios (the worst list page, random table details);
    ``pids``: the gateway's and the postmaster's, whose CPU each scenario reports."""
    rng = random.Random(7)
    details = [
        f"/tables/bench/ns{k % 20}/t{k:05d}" for k in (rng.randint(1, TABLES) for _ in range(2000))
    ]
    await drive(client, ["/tables?limit=50", *details[:50]], 50, 2)  # warm-up
    print(
        f"gateway, {TABLES} tables, open loop at {rate:g} req/s for {seconds:g} s "
        "each, loopback, 1 gateway process:"
    )
    cpus = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"  note: the load client, Postgres and the gateway share this machine's "
        f"{cpus} CPUs (1-min load average {load:.1f} before the run); 'other "
        "processes' below is CPU taken by anything else meanwhile, and when the "
        "CPUs are saturated the latencies measure the machine, not the gateway."
    )
    gateway, pm = pids
    await scenario(
        client,
        "GET /tables?limit=50 (worst first)",
        ["/tables?limit=50"],
        rate,
        seconds,
        gateway,
        pm,
    )
    await scenario(client, "GET /tables/{c}/{ns}/{t} (random)", details, rate, seconds, gateway, pm)


async def main(rate: float, seconds: float) -> None:
    with tempfile.TemporaryDirectory(prefix="icepack-bench-gw-") as root:
        server = LocalPostgres(Path(root), durable=False)
        dsn = server.start()
        gateway = None
        try:
            t0 = time.perf_counter()
            await seed(dsn)
            print(f"seeded {TABLES} tables in {time.perf_counter() - t0:.1f} s")
            port = free_port()
            env = {
                **os.environ,
                "ICEPACK_DATABASE_URL": dsn,
                "ICEPACK_HTTP_PORT": str(port),
                "ICEPACK_LOG_LEVEL": "warning",
            }
            gateway = subprocess.Popen(  # noqa: ASYNC220 - a long-lived child, started once
                [sys.executable, "-m", "icepack_core.cli.app", "service", "gateway"], env=env
            )
            limits = httpx.Limits(max_connections=MAX_IN_FLIGHT, max_keepalive_connections=64)
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", timeout=10, limits=limits
            ) as client:
                await wait_ready(client, time.monotonic() + 60)
                pids = (gateway.pid, postmaster_pid(server.data))
                await scenarios(client, rate, seconds, pids)
        finally:
            if gateway is not None:
                gateway.terminate()
                gateway.wait(timeout=20)
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    asyncio.run(main(args.rate, args.seconds))
