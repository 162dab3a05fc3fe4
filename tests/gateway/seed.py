"""Seed data for the gateway tests, written with plain SQL inserts (plus the production
``health_latest_upsert`` query that keeps ``table_health_latest`` current, as
``record_inspection`` runs it after each assessment).

``seed_fleet`` builds a small, readable fleet: three tables of different health with metric
history, a recommendation, a finished job with actions and impact, a queued and a failed job,
events and a policy. ``seed_many`` adds N bare tables (one status and health row each) for
paging tests and the benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from icepack_core.queries import load_query
from icepack_core.recommendation import ActionIntent, Recommendation, Skip

CATALOG = "demo"
T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)


def status_doc(namespace: str, table: str, **metrics: Any) -> dict[str, Any]:
    """A TableStatus document (docs/table-status.md) with plausible values."""
    doc: dict[str, Any] = {
        "catalog": CATALOG, "namespace": namespace, "table": table, "format_version": 2,
        "metadata_location": f"file:///wh/{namespace}/{table}/metadata/v1.metadata.json",
        "current_snapshot_id": 1, "inspected_at": T0.isoformat(), "inspector": "pyiceberg",
        "inspect_ms": 12, "manifests_read": 1, "manifests_cached": 0,
        "small_file_threshold_bytes": 67108864, "data_file_count": 10,
        "data_file_bytes": 10 * 400_000_000, "record_count": 1_000_000, "small_file_count": 0,
        "small_file_bytes": 0,
        "file_size_histogram": {"<1MiB": 0, "1MiB-8MiB": 0, "8MiB-32MiB": 0,
                                "32MiB-128MiB": 0, "128MiB-512MiB": 10, ">=512MiB": 0},
        "position_delete_file_count": 0, "equality_delete_file_count": 0,
        "deletion_vector_count": 0, "delete_record_count": 0, "manifest_count": 2,
        "manifest_bytes": 16000, "partition_count": 1, "max_files_in_partition": 10,
        "avg_data_file_bytes": 400_000_000, "snapshot_count": 3,
        "oldest_snapshot_at": T0.isoformat(), "current_snapshot_at": T0.isoformat(),
        "metadata_log_count": 2, "ref_count": 1,
    }
    doc.update(metrics)
    return doc


def issue(code: str, severity: str, value: float, threshold: float, message: str
          ) -> dict[str, Any]:
    return {"code": code, "severity": severity, "value": value, "threshold": threshold,
            "message": message}


@dataclass
class Fleet:
    tables: dict[str, int] = field(default_factory=dict)  # "ns.name" -> id
    jobs: dict[str, int] = field(default_factory=dict)  # "done" / "queued" / "failed" -> id


async def add_table(conn: asyncpg.Connection, namespace: str, name: str,
                    catalog: str = CATALOG) -> int:
    table_id: int = await conn.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name, metadata_location) "
        "VALUES ($1, $2, $3, $4) RETURNING id",
        catalog, namespace, name, f"file:///wh/{namespace}/{name}/metadata/v1.metadata.json")
    return table_id


async def add_status(conn: asyncpg.Connection, table_id: int, at: datetime,
                     doc: dict[str, Any], health: str, score: int,
                     issues: list[dict[str, Any]]) -> int:
    snap: int = await conn.fetchval(
        "INSERT INTO icepack.status_snapshots (table_id, inspected_at, inspector, status) "
        "VALUES ($1, $2, 'pyiceberg', $3::jsonb) RETURNING id", table_id, at, doc)
    assessment: int = await conn.fetchval(
        "INSERT INTO icepack.health_assessments "
        "(table_id, status_snapshot_id, health, score, issues, assessed_at) "
        "VALUES ($1, $2, $3, $4, $5::jsonb, $6) RETURNING id",
        table_id, snap, health, score, issues, at)
    await update_latest(conn, [assessment])
    return snap


async def update_latest(conn: asyncpg.Connection, assessment_ids: list[int]) -> None:
    """What ``record_inspection`` does after inserting assessments: make them the tables'
    ``table_health_latest`` rows (the read model the gateway lists from)."""
    await conn.execute(load_query("health_latest_upsert"), assessment_ids)


async def seed_fleet(pool: asyncpg.Pool) -> Fleet:
    fleet = Fleet()
    async with pool.acquire() as conn, conn.transaction():
        orders = await add_table(conn, "sales", "orders")
        clicks = await add_table(conn, "web", "clicks")
        users = await add_table(conn, "crm", "users")
        fleet.tables = {"sales.orders": orders, "web.clicks": clicks, "crm.users": users}
        await add_table(conn, "old", "gone")
        await conn.execute("UPDATE icepack.tables SET dropped_at = now() WHERE name = 'gone'")

        # clicks: small files piling up over six inspections -> critical, score 22.
        for i in range(6):
            small = 40 + 60 * i
            doc = status_doc("web", "clicks", data_file_count=60 + 60 * i, small_file_count=small,
                             snapshot_count=20 + 30 * i, position_delete_file_count=i * 3,
                             manifest_count=5 + i)
            crit = issue("SMALL_FILES", "critical", small, 101,
                         f"{small} of {60 + 60 * i} data files are smaller than 67108864 bytes")
            last = await add_status(conn, clicks, T0 + timedelta(hours=6 * i), doc,
                                    "critical" if i >= 1 else "warning", 22 if i == 5 else 60,
                                    [crit])
        await conn.execute(
            "INSERT INTO icepack.recommendations (table_id, status_snapshot_id, actions) "
            "VALUES ($1, $2, $3::jsonb)", clicks, last,
            # Serialised by the planner's own type, as Planner.plan stores it.
            Recommendation(
                actions=[ActionIntent("rewrite_data_files", "340 small files (threshold 101)",
                                      {"strategy": "binpack"}, {"files_removed": 330})],
                skipped=[Skip("expire_snapshots", "50 snapshots, none older than 120 h")],
            ).to_json())
        # orders: a warning, then compacted by a finished job.
        for i, (files, small, health, score) in enumerate(
                [(200, 120, "warning", 55), (90, 10, "healthy", 97)]):
            doc = status_doc("sales", "orders", data_file_count=files, small_file_count=small,
                             snapshot_count=40 - 30 * i)
            found = [issue("SMALL_FILES", "warning", small, 40, f"{small} small files")] \
                if health == "warning" else []
            await add_status(conn, orders, T0 + timedelta(hours=12 * i), doc, health, score,
                             found)
        # users: healthy, one inspection.
        await add_status(conn, users, T0, status_doc("crm", "users"), "healthy", 100, [])

        done = await conn.fetchval(
            "INSERT INTO icepack.jobs (table_id, state, actions, attempts, fence, trigger, "
            "lease_owner, started_at, finished_at, result) VALUES ($1, 'succeeded', $2::jsonb, "
            "1, 1, 'planner', 'executor@test:1', $3, $4, '{}'::jsonb) RETURNING id",
            orders, [{"action": "rewrite_data_files"}, {"action": "expire_snapshots"}],
            T0 + timedelta(hours=11), T0 + timedelta(hours=11, minutes=3))
        await conn.execute(
            "INSERT INTO icepack.job_actions (job_id, fence, action, procedure, sql_text, state,"
            " output, impact, started_at, finished_at) VALUES "
            "($1, 1, 'rewrite_data_files', 'system.rewrite_data_files', "
            "'CALL demo.system.rewrite_data_files(table => ''sales.orders'')', 'succeeded', "
            "$2::jsonb, $3::jsonb, $4, $5),"
            "($1, 1, 'expire_snapshots', 'system.expire_snapshots', "
            "'CALL demo.system.expire_snapshots(table => ''sales.orders'')', 'succeeded', "
            "'{}'::jsonb, $6::jsonb, $5, $7)",
            done, {"rewritten_data_files_count": 150, "added_data_files_count": 40},
            {"before": {"data_file_count": 200, "small_file_count": 120},
             "after": {"data_file_count": 90, "small_file_count": 10}},
            T0 + timedelta(hours=11), T0 + timedelta(hours=11, minutes=2),
            {"before": {"snapshot_count": 40}, "after": {"snapshot_count": 10}},
            T0 + timedelta(hours=11, minutes=3))
        failed = await conn.fetchval(
            "INSERT INTO icepack.jobs (table_id, state, actions, attempts, trigger, error, "
            "finished_at) VALUES ($1, 'failed', '[{\"action\": \"rewrite_manifests\"}]'::jsonb,"
            " 3, 'planner', 'Spark session lost', now()) RETURNING id", users)
        queued = await conn.fetchval(
            "INSERT INTO icepack.jobs (table_id, actions, trigger, dedupe_key) "
            "VALUES ($1, '[{\"action\": \"rewrite_data_files\"}]'::jsonb, 'planner', $2) "
            "RETURNING id", clicks, f"table:{clicks}")
        fleet.jobs = {"done": done, "failed": failed, "queued": queued}
        for topic, table_id in [("table.discovered", orders), ("status.updated", clicks),
                                ("job.finished", orders), ("job.enqueued", clicks)]:
            await conn.execute("INSERT INTO icepack.events (topic, table_id, payload) "
                               "VALUES ($1, $2, '{}'::jsonb)", topic, table_id)
        await conn.execute(
            "INSERT INTO icepack.policies (policy_type, scope, catalog, config) VALUES "
            "('system.snapshot-expiry', 'catalog', $1, '{\"retain_last\": 5}'::jsonb)", CATALOG)
    return fleet


async def seed_many(pool: asyncpg.Pool, n: int, catalog: str = "bulk") -> None:
    """``n`` tables ``catalog.ns<k % 10>.t<k>``, each with one status and one assessment."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO icepack.tables (catalog, namespace, name, metadata_location) "
            "SELECT $1, 'ns' || (k % 10), 't' || lpad(k::text, 6, '0'), 'file:///x' "
            "FROM generate_series(1, $2) k", catalog, n)
        await conn.execute(
            "INSERT INTO icepack.status_snapshots (table_id, inspected_at, inspector, status) "
            "SELECT id, now(), 'pyiceberg', jsonb_build_object('data_file_count', id % 500, "
            "'small_file_count', id % 97, 'snapshot_count', id % 50, 'record_count', id * 10, "
            "'data_file_bytes', id * 1000, 'manifest_count', 3, "
            "'position_delete_file_count', 0, 'equality_delete_file_count', 0, "
            "'deletion_vector_count', 0) FROM icepack.tables WHERE catalog = $1", catalog)
        assessments = await conn.fetch(
            "INSERT INTO icepack.health_assessments (table_id, status_snapshot_id, health, "
            "score, issues) SELECT t.id, s.id, "
            "CASE WHEN t.id % 7 = 0 THEN 'critical' WHEN t.id % 3 = 0 THEN 'warning' "
            "ELSE 'healthy' END, (t.id * 37) % 101, "
            "CASE WHEN t.id % 3 = 0 THEN jsonb_build_array(jsonb_build_object('code', "
            "'SMALL_FILES', 'severity', 'warning', 'value', t.id % 97, 'threshold', 5, "
            "'message', 'small files')) ELSE '[]'::jsonb END "
            "FROM icepack.tables t JOIN icepack.status_snapshots s ON s.table_id = t.id "
            "WHERE t.catalog = $1 RETURNING id", catalog)
        await update_latest(conn, [r["id"] for r in assessments])
