"""Seed data for the gateway tests.

Tables are plain inserts (discovery's row); everything downstream is written by the real
producers, so the gateway is tested against the shapes production writes: each status through
``record_inspection`` (what the inspector runs: status snapshot, assessment,
``table_health_latest``, ``status.updated``), each recommendation by ``Planner.plan``, each job
and action by ``JobQueue`` (enqueue, claim, ``record_action``, complete/fail) with the output
and impact ``JobExecution`` stores.

``seed_fleet`` builds a small, readable fleet: three tables of different health with metric
history, a planner recommendation (and the job it queued), a finished job with actions, impact
and verification evidence, a failed job, events and a policy. ``seed_many`` adds N bare tables
(one status and health row each) for paging tests and the benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import asyncpg

from icepack_core.db.pool import Conn
from icepack_core.db.queries import load_query
from icepack_core.inspection.health import Assessment, Issue
from icepack_core.inspection.status import TableStatus
from icepack_core.inspection.store import record_inspection
from icepack_core.intents import (
    ExpireSnapshots,
    ExpireSnapshotsParams,
    RewriteDataFiles,
    RewriteDataFilesParams,
    RewriteManifests,
)
from icepack_core.planning.planner import Planner
from icepack_core.queue.jobs import JobQueue
from icepack_core.safety.verification import Evidence, SnapshotCheck
from icepack_core.settings import Settings

CATALOG = "demo"
T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)


def status_doc(namespace: str, table: str, **metrics: Any) -> dict[str, Any]:
    """A TableStatus document (docs/table-status.md) with plausible values."""
    doc: dict[str, Any] = {
        "catalog": CATALOG,
        "namespace": namespace,
        "table": table,
        "format_version": 2,
        "metadata_location": f"file:///wh/{namespace}/{table}/metadata/v1.metadata.json",
        "current_snapshot_id": 1,
        "inspected_at": T0.isoformat(),
        "inspector": "pyiceberg",
        "inspect_ms": 12,
        "manifests_read": 1,
        "manifests_cached": 0,
        "small_file_threshold_bytes": 67108864,
        "data_file_count": 10,
        "data_file_bytes": 10 * 400_000_000,
        "record_count": 1_000_000,
        "small_file_count": 0,
        "small_file_bytes": 0,
        "file_size_histogram": {
            "<1MiB": 0,
            "1MiB-8MiB": 0,
            "8MiB-32MiB": 0,
            "32MiB-128MiB": 0,
            "128MiB-512MiB": 10,
            ">=512MiB": 0,
        },
        "position_delete_file_count": 0,
        "equality_delete_file_count": 0,
        "deletion_vector_count": 0,
        "delete_record_count": 0,
        "manifest_count": 2,
        "manifest_bytes": 16000,
        "partition_count": 1,
        "max_files_in_partition": 10,
        "avg_data_file_bytes": 400_000_000,
        "snapshot_count": 3,
        "oldest_snapshot_at": T0.isoformat(),
        "current_snapshot_at": T0.isoformat(),
        "metadata_log_count": 2,
        "ref_count": 1,
    }
    doc.update(metrics)
    return doc


def issue(code: str, severity: str, value: float, threshold: float, message: str) -> dict[str, Any]:
    return {
        "code": code,
        "severity": severity,
        "value": value,
        "threshold": threshold,
        "message": message,
    }


@dataclass
class Fleet:
    tables: dict[str, int] = field(default_factory=dict)  # "ns.name" -> id
    jobs: dict[str, int] = field(default_factory=dict)  # "done" / "queued" / "failed" -> id


async def add_table(conn: Conn, namespace: str, name: str, catalog: str = CATALOG) -> int:
    table_id: int = await conn.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name, metadata_location) "
        "VALUES ($1, $2, $3, $4) RETURNING id",
        catalog,
        namespace,
        name,
        f"file:///wh/{namespace}/{name}/metadata/v1.metadata.json",
    )
    return table_id


async def add_status(
    conn: Conn,
    table_id: int,
    at: datetime,
    doc: dict[str, Any],
    health: str,
    score: int,
    issues: list[dict[str, Any]],
) -> int:
    """Record one inspection the way the inspector does; returns the status snapshot id."""
    status = TableStatus.model_validate({**doc, "inspected_at": at.isoformat()})
    assessment = Assessment(
        health=health, score=score, issues=[Issue.model_validate(i) for i in issues]
    )
    # record_inspection's annotation names a Connection; the inspector casts its pooled one too
    recorded = await record_inspection(cast(asyncpg.Connection, conn), table_id, status, assessment)
    assert recorded.status_snapshot_id is not None
    return recorded.status_snapshot_id


# What JobExecution stores for the demo's delete-applying compaction of sales.orders: the
# executor's impact (IMPACT_FIELDS before/after) and TableMaintenance's output (the procedure's
# result row plus its ``verification`` evidence, one record per rewrite snapshot it checked).
ORDERS_REWRITE_CHECK = SnapshotCheck(
    snapshot_id=7001,
    parent_id=7000,
    rows_before=256,
    rows_after=256,
    checksum_before="-4611686018427387904",
    checksum_after="-4611686018427387904",
    checked="parent",
    ok=True,
    scope="table",
    scope_reason="the table is not partitioned",
)
ORDERS_REWRITE_OUTPUT: dict[str, Any] = {
    "rewritten_data_files_count": 150,
    "added_data_files_count": 40,
    "rewritten_bytes_count": 52_428_800,
    "failed_data_files_count": 0,
    "removed_delete_files_count": 4,
    "verification": Evidence(
        status="verified", start_snapshot_id=7000, snapshots=[ORDERS_REWRITE_CHECK]
    ).to_json(),
}
ORDERS_REWRITE_IMPACT: dict[str, Any] = {
    "before": {
        "data_file_count": 200,
        "data_file_bytes": 52_428_800,
        "small_file_count": 120,
        "record_count": 320,
        "position_delete_file_count": 4,
        "equality_delete_file_count": 0,
        "deletion_vector_count": 0,
        "delete_record_count": 64,
        "manifest_count": 12,
        "snapshot_count": 40,
    },
    "after": {
        "data_file_count": 90,
        "data_file_bytes": 41_943_040,
        "small_file_count": 10,
        "record_count": 256,
        "position_delete_file_count": 0,
        "equality_delete_file_count": 0,
        "deletion_vector_count": 0,
        "delete_record_count": 0,
        "manifest_count": 12,
        "snapshot_count": 41,
    },
    "snapshot_before": 7000,
    "snapshot_after": 7001,
}
ORDERS_EXPIRE_IMPACT: dict[str, Any] = {
    "before": {**ORDERS_REWRITE_IMPACT["after"]},
    "after": {**ORDERS_REWRITE_IMPACT["after"], "snapshot_count": 10},
    "snapshot_before": 7001,
    "snapshot_after": 7001,
}


async def update_latest(conn: Conn, assessment_ids: list[int]) -> None:
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
            doc = status_doc(
                "web",
                "clicks",
                data_file_count=60 + 60 * i,
                small_file_count=small,
                snapshot_count=20 + 30 * i,
                position_delete_file_count=i * 3,
                manifest_count=5 + i,
            )
            crit = issue(
                "SMALL_FILES",
                "critical",
                small,
                101,
                f"{small} of {60 + 60 * i} data files are smaller than 67108864 bytes",
            )
            await add_status(
                conn,
                clicks,
                T0 + timedelta(hours=6 * i),
                doc,
                "critical" if i >= 1 else "warning",
                22 if i == 5 else 60,
                [crit],
            )
        # orders: a warning, then compacted by a finished job.
        for i, (files, small, health, score) in enumerate(
            [(200, 120, "warning", 55), (90, 10, "healthy", 97)]
        ):
            doc = status_doc(
                "sales",
                "orders",
                data_file_count=files,
                small_file_count=small,
                snapshot_count=40 - 30 * i,
                record_count=320 - 64 * i,
                position_delete_file_count=4 - 4 * i,
                delete_record_count=64 - 64 * i,
            )
            found = (
                [issue("SMALL_FILES", "warning", small, 40, f"{small} small files")]
                if health == "warning"
                else []
            )
            await add_status(conn, orders, T0 + timedelta(hours=12 * i), doc, health, score, found)
        # users: healthy, one inspection.
        await add_status(conn, users, T0, status_doc("crm", "users"), "healthy", 100, [])

        for topic, table_id in [("table.discovered", orders)]:
            await conn.execute(
                "INSERT INTO icepack.events (topic, table_id, payload) "
                "VALUES ($1, $2, '{}'::jsonb)",
                topic,
                table_id,
            )
        await conn.execute(
            "INSERT INTO icepack.policies (policy_type, scope, catalog, config) VALUES "
            "('system.snapshot-expiry', 'catalog', $1, '{\"retain_last\": 5}'::jsonb)",
            CATALOG,
        )
    queue = JobQueue(pool)
    fleet.jobs["done"] = await _finished_job(queue, orders)
    fleet.jobs["failed"] = await _failed_job(queue, users)
    # clicks: the planner's recommendation, and the job it queued.
    planned = await Planner(Settings(), pool, queue).plan(clicks)
    assert planned.job_id is not None and planned.job_created
    fleet.jobs["queued"] = planned.job_id
    return fleet


async def _finished_job(queue: JobQueue, table_id: int) -> int:
    """A planner job that compacted the table and expired snapshots, recorded as the executor
    records it (the action times are pinned so durations are exact)."""
    enqueued = await queue.enqueue(
        table_id,
        [
            RewriteDataFiles(
                params=RewriteDataFilesParams(strategy="binpack"),
                reason="120 small files (31457280 bytes) >= min_input_files 5",
            ),
            ExpireSnapshots(
                params=ExpireSnapshotsParams(older_than=T0, retain_last=5),
                reason="40 snapshots > retain_last 5",
            ),
        ],
        dedupe_key=f"table:{table_id}",
    )
    job = await queue.claim_id(enqueued.job.id, "executor@test:1", 600)
    assert job is not None
    t = T0 + timedelta(hours=11)
    await queue.record_action(
        job,
        action="rewrite_data_files",
        state="succeeded",
        started_at=t,
        finished_at=t + timedelta(minutes=2),
        procedure="rewrite_data_files",
        sql_text="CALL demo.system.rewrite_data_files(table => 'sales.orders')",
        output=ORDERS_REWRITE_OUTPUT,
        impact=ORDERS_REWRITE_IMPACT,
    )
    await queue.record_action(
        job,
        action="expire_snapshots",
        state="succeeded",
        started_at=t + timedelta(minutes=2),
        finished_at=t + timedelta(minutes=3),
        procedure="expire_snapshots",
        sql_text="CALL demo.system.expire_snapshots(table => 'sales.orders')",
        output={"deleted_data_files_count": 150, "deleted_manifest_files_count": 30},
        impact=ORDERS_EXPIRE_IMPACT,
    )
    done = await queue.complete(
        job,
        {
            "actions": [
                {"action": "rewrite_data_files", "rewritten_data_files_count": 150},
                {"action": "expire_snapshots", "deleted_data_files_count": 150},
            ]
        },
    )
    return done.id


async def _failed_job(queue: JobQueue, table_id: int) -> int:
    enqueued = await queue.enqueue(
        table_id,
        [RewriteManifests(reason="30 manifests")],
        dedupe_key=f"table:{table_id}",
    )
    job = await queue.claim_id(enqueued.job.id, "executor@test:1", 600)
    assert job is not None
    failed = await queue.fail(job, "Spark session lost", retryable=False)
    return failed.id


async def seed_many(pool: asyncpg.Pool, n: int, catalog: str = "bulk") -> None:
    """``n`` tables ``catalog.ns<k % 10>.t<k>``, each with one status and one assessment."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO icepack.tables (catalog, namespace, name, metadata_location) "
            "SELECT $1, 'ns' || (k % 10), 't' || lpad(k::text, 6, '0'), 'file:///x' "
            "FROM generate_series(1, $2) k",
            catalog,
            n,
        )
        await conn.execute(
            "INSERT INTO icepack.status_snapshots (table_id, inspected_at, inspector, status) "
            "SELECT id, now(), 'pyiceberg', jsonb_build_object('data_file_count', id % 500, "
            "'small_file_count', id % 97, 'snapshot_count', id % 50, 'record_count', id * 10, "
            "'data_file_bytes', id * 1000, 'manifest_count', 3, "
            "'position_delete_file_count', 0, 'equality_delete_file_count', 0, "
            "'deletion_vector_count', 0) FROM icepack.tables WHERE catalog = $1",
            catalog,
        )
        assessments = await conn.fetch(
            "INSERT INTO icepack.health_assessments (table_id, status_snapshot_id, health, "
            "score, issues) SELECT t.id, s.id, "
            "CASE WHEN t.id % 7 = 0 THEN 'critical' WHEN t.id % 3 = 0 THEN 'warning' "
            "ELSE 'healthy' END, (t.id * 37) % 101, "
            "CASE WHEN t.id % 3 = 0 THEN jsonb_build_array(jsonb_build_object('code', "
            "'SMALL_FILES', 'severity', 'warning', 'value', t.id % 97, 'threshold', 5, "
            "'message', 'small files')) ELSE '[]'::jsonb END "
            "FROM icepack.tables t JOIN icepack.status_snapshots s ON s.table_id = t.id "
            "WHERE t.catalog = $1 RETURNING id",
            catalog,
        )
        await update_latest(conn, [r["id"] for r in assessments])


async def seed_deletions(db: asyncpg.Pool, job_id: int, table_id: int) -> None:
    """Ledger rows of an orphan removal by ``job_id``: one file quarantined, one purged."""
    root = "file:///lake/sales/orders"
    held = f"{root}/data/_icepack_quarantine/job-{job_id}"
    await db.executemany(
        "INSERT INTO icepack.deletions (job_id, table_id, action, path, size_bytes, kind, reason,"
        " state, quarantine_path, purge_after) VALUES"
        " ($1, $2, 'remove_orphan_files', $3, $4, 'orphan', 'seed', $5, $6,"
        "  now() + make_interval(days => $7))",
        [
            (
                job_id,
                table_id,
                f"{root}/data/a.parquet",
                10,
                "quarantined",
                f"{held}/data/a.parquet",
                7,
            ),
            (
                job_id,
                table_id,
                f"{root}/data/b.parquet",
                20,
                "purged",
                f"{held}/data/b.parquet",
                -1,
            ),
        ],
    )
