"""Scrape cost of the gateway's ``/metrics`` alerting gauges on a month of history.

Seeds, in a throw-away local Postgres, 10,000 tables in 4 catalogs and 30 days of jobs at
10,000 a day (300,000: 90 % succeeded with one succeeded action each, 5 % failed for good, 3 %
cancelled, the rest queued), 2,000 held tables, 100,000 outbox events behind 4 consumers,
200,000 quarantined files and 1,000 webhook deliveries; then times, on one connection, the
reads one scrape makes: the fleet gauges that were there before (``read_fleet``, the baseline)
and the alerting gauges (``read_alerting``). Median of 9 runs after 2 warm-ups.

Goal: the alerting read stays under 1 s at this size (a 60 s scrape interval, 30 s timeout).

Run: ``uv run python -m bench.metrics``.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg

from icepack_core.db.migrate import migrate
from icepack_core.local.postgres import LocalPostgres
from icepack_gateway.alert_metrics import read_alerting
from icepack_gateway.metrics import read_fleet
from icepack_gateway.state import AlertInputs

GOAL_SECONDS = 1.0
RUNS, WARMUP = 9, 2

SEED = [
    """INSERT INTO icepack.tables (catalog, namespace, name, maintenance_hold)
       SELECT 'c' || (k % 4), 'ns' || (k % 50), 't' || k,
              CASE WHEN k % 5 = 0 THEN '{"reason": "bench"}'::jsonb END
         FROM generate_series(1, 10000) k""",
    """INSERT INTO icepack.jobs (table_id, state, actions, attempts, not_before, created_at,
                                started_at, finished_at, error, error_code, lease_owner)
       SELECT 1 + k % 10000, s.state, '[{"action": "rewrite_data_files"}]'::jsonb, 1,
              now() - make_interval(secs => k * 8.64), now() - make_interval(secs => k * 8.64),
              CASE WHEN s.state <> 'queued' THEN now() - make_interval(secs => k * 8.64 - 5) END,
              CASE WHEN s.state <> 'queued' THEN now() - make_interval(secs => k * 8.64 - 60)
              END,
              CASE WHEN s.state = 'failed' THEN 'bench failure' END,
              CASE WHEN s.state = 'failed' THEN 'VERIFICATION_FAILED' END, NULL
         FROM generate_series(1, 300000) k,
              LATERAL (SELECT CASE WHEN k % 100 < 90 THEN 'succeeded'
                                   WHEN k % 100 < 95 THEN 'failed'
                                   WHEN k % 100 < 98 THEN 'cancelled'
                                   ELSE 'queued' END AS state) s""",
    """INSERT INTO icepack.job_actions (job_id, fence, action, state, started_at, finished_at)
       SELECT id, 0, 'rewrite_data_files', 'succeeded', started_at, finished_at
         FROM icepack.jobs WHERE state = 'succeeded'""",
    """INSERT INTO icepack.events (topic, table_id, payload)
       SELECT 'status.updated', 1 + k % 10000, '{}'::jsonb FROM generate_series(1, 100000) k""",
    """INSERT INTO icepack.consumer_offsets (consumer, last_xid, last_event_id)
       SELECT c, (SELECT xid FROM icepack.events ORDER BY id LIMIT 1), 50000
         FROM unnest(ARRAY['inspector', 'planner', 'executor', 'webhooks']) c""",
    """INSERT INTO icepack.deletions (job_id, table_id, action, path, size_bytes, kind, reason,
                                     state, quarantine_path, purge_after)
       SELECT 1, 1 + k % 10000, 'remove_orphan_files', 's3://b/' || k, 1000, 'orphan', 'bench',
              'quarantined', 's3://b/q/' || k, now() + make_interval(hours => k % 200 - 100)
         FROM generate_series(1, 200000) k""",
    """INSERT INTO icepack.webhook_deliveries (event_id, type, body, state, finished_at)
       SELECT k, 'table.held', '{}'::jsonb, CASE WHEN k % 2 = 0 THEN 'delivered' ELSE 'pending' END,
              CASE WHEN k % 2 = 0 THEN now() END
         FROM generate_series(1, 1000) k""",
    "ANALYZE",
]


async def median_seconds(read: Callable[[], Awaitable[object]]) -> float:
    times = []
    for i in range(WARMUP + RUNS):
        start = time.perf_counter()
        await read()
        if i >= WARMUP:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="icepack-bench-metrics-") as tmp:
        pg = LocalPostgres(Path(tmp), durable=False)
        url = pg.start()
        try:
            conn = await asyncpg.connect(url)
            await migrate(conn)
            started = time.perf_counter()
            for statement in SEED:
                await conn.execute(statement)
            print(f"seeded in {time.perf_counter() - started:.1f} s")
            await conn.close()
            pool = await asyncpg.create_pool(url, min_size=1, max_size=2)
            assert pool is not None
            catalogs = frozenset({"c0", "c1", "c2", "c3"})
            fleet = await median_seconds(lambda: read_fleet(pool))
            alerting = await median_seconds(lambda: read_alerting(pool, AlertInputs(), catalogs))
            await pool.close()
        finally:
            pg.stop()
    print(f"baseline: fleet gauges read {fleet * 1000:.0f} ms (median of {RUNS})")
    verdict = "ok" if alerting < GOAL_SECONDS else "OVER GOAL"
    print(
        f"alerting gauges read {alerting * 1000:.0f} ms (median of {RUNS}); "
        f"goal < {GOAL_SECONDS * 1000:.0f} ms: {verdict}"
    )


if __name__ == "__main__":
    asyncio.run(main())
