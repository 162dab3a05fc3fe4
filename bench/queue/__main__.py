"""Queue benchmark: claim+complete throughput with 8 claimers, and event wake-up latency.

Each figure is printed beside its baseline, measured in the same run on the same server:
* throughput: Icepack's SKIP LOCKED claim vs. a plain ``FOR UPDATE`` claim (claimers queue
  behind each other's row locks); then Icepack's claim with every job under one maintenance
  budget that never binds (claims of one budget scope are serialised by its advisory lock);
* latency (event insert committed -> handler called): LISTEN/NOTIFY wake-ups vs. polling only
  (1 s poll interval, the fallback when notifications are lost).

Run: ``make bench`` (or ``uv run python -m bench.queue [--jobs N] [--events N]``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import asyncpg

from icepack_core.db import pool as icedb
from icepack_core.db.migrate import migrate
from icepack_core.db.pool import Conn
from icepack_core.local.postgres import LocalPostgres
from icepack_core.queue.budgets import set_budget
from icepack_core.queue.events import Event, EventConsumer, Listener, publish, run_consumer
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import load_settings

CLAIMERS = 8
NAIVE_CLAIM = """
UPDATE icepack.jobs SET state = 'running', lease_owner = $1,
       lease_until = now() + interval '60 s', fence = fence + 1, attempts = attempts + 1
 WHERE id = (SELECT id FROM icepack.jobs WHERE state = 'queued' AND not_before <= now()
              ORDER BY priority, id FOR UPDATE LIMIT 1)
RETURNING id, fence
"""
NAIVE_COMPLETE = """
UPDATE icepack.jobs SET state = 'succeeded', finished_at = now(), lease_until = NULL
 WHERE id = $1 AND fence = $2 AND state = 'running'
"""


async def fill(pool: asyncpg.Pool, n: int) -> None:
    await pool.execute("TRUNCATE icepack.jobs, icepack.events CASCADE")
    await pool.execute(
        "INSERT INTO icepack.jobs (actions) SELECT '[]'::jsonb FROM generate_series(1, $1)", n
    )


async def icepack_throughput(pool: asyncpg.Pool, n: int) -> float:
    await fill(pool, n)
    queue = JobQueue(pool)

    async def claimer(i: int) -> None:
        while (job := await queue.claim(f"bench{i}", 60)) is not None:
            await queue.complete(job)

    start = time.perf_counter()
    await asyncio.gather(*(claimer(i) for i in range(CLAIMERS)))
    return n / (time.perf_counter() - start)


async def budgeted_throughput(pool: asyncpg.Pool, n: int) -> float:
    """Claim+complete with every job under a catalog budget that never binds (max_running =
    claimers, bytes far above use): the price of the per-scope lock and re-check alone."""
    await pool.execute("TRUNCATE icepack.tables, icepack.budgets CASCADE")  # jobs too
    await fill(pool, n)
    table_id = await pool.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('b', 'n', 't') RETURNING id"
    )
    await pool.execute("UPDATE icepack.jobs SET table_id = $1, rewrite_bytes = 1000", table_id)
    await set_budget(pool, "b", None, rewrite_bytes_per_hour=2**62, max_running=CLAIMERS)
    start = time.perf_counter()
    queue = JobQueue(pool)

    async def claimer(i: int) -> None:
        while (job := await queue.claim(f"bench{i}", 60)) is not None:
            await queue.complete(job)

    await asyncio.gather(*(claimer(i) for i in range(CLAIMERS)))
    elapsed = time.perf_counter() - start
    done = await pool.fetchval("SELECT count(*) FROM icepack.jobs WHERE state = 'succeeded'")
    assert done == n, f"{done} of {n} jobs ran"
    await pool.execute("TRUNCATE icepack.tables, icepack.budgets CASCADE")
    return n / elapsed


async def naive_throughput(pool: asyncpg.Pool, n: int) -> float:
    await fill(pool, n)

    async def claimer(i: int) -> None:
        while True:
            row = await pool.fetchrow(NAIVE_CLAIM, f"naive{i}")
            if row is None:
                return
            await pool.execute(NAIVE_COMPLETE, row["id"], row["fence"])

    start = time.perf_counter()
    await asyncio.gather(*(claimer(i) for i in range(CLAIMERS)))
    return n / (time.perf_counter() - start)


async def latency(pool: asyncpg.Pool, settings_dsn: str, n: int, notify: bool) -> list[float]:
    """Milliseconds from an event's commit to its handler, one event at a time."""
    settings = load_settings(database_url=settings_dsn)
    await pool.execute("TRUNCATE icepack.events, icepack.consumer_offsets")
    received: dict[int, float] = {}
    arrived = asyncio.Event()

    async def handler(_conn: Conn, event: Event) -> None:
        received[event.id] = time.perf_counter()
        arrived.set()

    consumer = EventConsumer(pool, f"bench-{notify}", handler)
    await consumer.drain()
    stop = asyncio.Event()
    listener = Listener(lambda: icedb.connect(settings, "bench-listen"))
    tasks = []
    if notify:
        tasks.append(asyncio.create_task(listener.run(stop)))
        await asyncio.wait_for(listener.connected.wait(), 10)
    else:
        listener.connected.set()
    tasks.append(asyncio.create_task(run_consumer(consumer, listener, stop, poll_interval=1.0)))
    samples = []
    try:
        for _ in range(n):
            arrived.clear()
            async with pool.acquire() as conn:  # publish takes a connection, not the pool
                event_id = await publish(conn, "table.changed")
            committed = time.perf_counter()
            await asyncio.wait_for(arrived.wait(), 10)
            samples.append((received[event_id] - committed) * 1000)
            await asyncio.sleep(0.01)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    return samples


def pct(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


async def main(jobs: int, events: int, poll_events: int) -> None:
    with tempfile.TemporaryDirectory(prefix="icepack-bench-") as root:
        server = LocalPostgres(Path(root), durable=True)
        dsn = server.start()
        try:
            conn = await asyncpg.connect(dsn)
            await migrate(conn)
            await conn.close()
            settings = load_settings(database_url=dsn, db_pool_max=CLAIMERS + 2)
            pool = await icedb.create_pool(settings, "bench")
            ours = await icepack_throughput(pool, jobs)
            naive = await naive_throughput(pool, jobs)
            budgeted = await budgeted_throughput(pool, jobs)
            print(f"claim+complete, {CLAIMERS} claimers, {jobs} jobs (fsync on):")
            print(f"  icepack SKIP LOCKED claim : {ours:8.0f} jobs/s   (goal >= 1000)")
            print(f"  baseline FOR UPDATE claim : {naive:8.0f} jobs/s")
            print(f"  icepack claim, budgeted   : {budgeted:8.0f} jobs/s   (one catalog budget)")
            notified = await latency(pool, dsn, events, notify=True)
            polled = await latency(pool, dsn, poll_events, notify=False)
            print(f"event insert -> handler latency ({events} / {poll_events} events):")
            print(
                f"  LISTEN/NOTIFY : p50 {pct(notified, 50):7.1f} ms  p99 "
                f"{pct(notified, 99):7.1f} ms   (goal p99 <= 100 ms)"
            )
            print(
                f"  baseline poll : p50 {pct(polled, 50):7.1f} ms  p99 "
                f"{pct(polled, 99):7.1f} ms   (1 s poll interval)"
            )
            await pool.close()
        finally:
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--poll-events", type=int, default=30)
    args = parser.parse_args()
    asyncio.run(main(args.jobs, args.events, args.poll_events))
