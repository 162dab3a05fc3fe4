"""POST /policies/simulate/fleet: what proposed policies would change, writing nothing."""

from __future__ import annotations

import asyncpg
import httpx
import pytest


async def add_table(db: asyncpg.Pool, name: str, oldest: str) -> None:
    table_id = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('sim', 'db', $1) "
        "RETURNING id",
        name,
    )
    status = {
        "data_file_count": 3,
        "data_file_bytes": 300,
        "small_file_count": 0,
        "small_file_bytes": 0,
        "position_delete_file_count": 0,
        "equality_delete_file_count": 0,
        "deletion_vector_count": 0,
        "delete_record_count": 0,
        "manifest_count": 3,
        "manifest_bytes": 3000,
        "snapshot_count": 30,
        "partition_count": 1,
        "oldest_snapshot_at": oldest,
        "current_snapshot_at": oldest,
    }
    await db.execute(
        "INSERT INTO icepack.status_snapshots (table_id, inspected_at, inspector, "
        "status) VALUES ($1, now(), 'pyiceberg', $2::jsonb)",
        table_id,
        status,
    )


async def test_fleet_simulation_lists_changed_tables_and_writes_nothing(
    client: httpx.AsyncClient, db: asyncpg.Pool, auth: dict[str, str]
) -> None:
    await add_table(db, "ancient", "2020-01-01T00:00:00.000Z")
    await add_table(db, "fresh", "2999-01-01T00:00:00.000Z")
    body = {
        "catalog": "sim",
        "policies": [
            {
                "policy_type": "system.snapshot-expiry",
                "scope": "catalog",
                "config": {"max_snapshot_age_hours": 24, "retain_last": 10},
            }
        ],
    }
    jobs_before = await db.fetchval("SELECT count(*) FROM icepack.jobs")
    response = await client.post("/policies/simulate/fleet", json=body, headers=auth)
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["tables_evaluated"] == 2 and report["tables_changed"] == 1
    (change,) = report["changes"]
    assert change["table"] == "ancient" and change["proposed_actions"] == ["expire_snapshots"]
    assert report["totals"] == {"snapshots_expired_at_most": 20}
    assert await db.fetchval("SELECT count(*) FROM icepack.jobs") == jobs_before
    assert await db.fetchval("SELECT count(*) FROM icepack.policies") == 0
    assert report["skipped"] == []


async def test_fleet_simulation_rejects_a_bad_policy_naming_the_key(
    client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    body = {
        "catalog": "sim",
        "policies": [
            {
                "policy_type": "system.orphan-file-removal",
                "scope": "catalog",
                "config": {"older_than_hours": 1},
            }
        ],
    }
    response = await client.post("/policies/simulate/fleet", json=body, headers=auth)
    assert response.status_code == 422
    assert "older_than_hours" in response.json()["message"] + str(response.json()["detail"])


async def test_fleet_simulation_needs_a_token(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/policies/simulate/fleet", json={"catalog": "sim", "policies": []}
    )
    assert response.status_code == 401


async def test_a_status_row_missing_fields_is_skipped_with_its_reason_not_a_500(
    client: httpx.AsyncClient, db: asyncpg.Pool, auth: dict[str, str]
) -> None:
    # Regression (found by schemathesis): a stored status without `small_file_bytes`, as an
    # older writer or a hand-made row may leave, made the whole fleet simulation a 500.
    await add_table(db, "ancient", "2020-01-01T00:00:00.000Z")
    table_id = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('sim', 'db', 'partial') "
        "RETURNING id"
    )
    await db.execute(
        "INSERT INTO icepack.status_snapshots (table_id, inspected_at, inspector, status) "
        "VALUES ($1, now(), 'pyiceberg', '{\"data_file_count\": 9, \"small_file_count\": 9}')",
        table_id,
    )
    body = {
        "catalog": "sim",
        "policies": [{"policy_type": "system.data-compaction", "scope": "catalog"}],
    }
    response = await client.post("/policies/simulate/fleet", json=body, headers=auth)
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["tables_evaluated"] == 2
    (skipped,) = report["skipped"]
    assert skipped["table"] == "sim.db.partial" and "small_file_bytes" in skipped["reason"]


async def add_small_files_table(
    db: asyncpg.Pool, namespace: str, name: str, small_bytes: int, cadence_hours: str | None = None
) -> None:
    properties = (
        {} if cadence_hours is None else {"icepack.maintenance.cadence-hours": cadence_hours}
    )
    table_id = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name, properties) "
        "VALUES ('sim', $1, $2, $3::jsonb) RETURNING id",
        namespace,
        name,
        properties,
    )
    status = {
        "data_file_count": 50,
        "data_file_bytes": small_bytes,
        "small_file_count": 50,
        "small_file_bytes": small_bytes,
        "position_delete_file_count": 0,
        "equality_delete_file_count": 0,
        "deletion_vector_count": 0,
        "delete_record_count": 0,
        "manifest_count": 1,
        "manifest_bytes": 100,
        "snapshot_count": 1,
        "partition_count": 1,
        "oldest_snapshot_at": "2999-01-01T00:00:00.000Z",
        "current_snapshot_at": "2999-01-01T00:00:00.000Z",
    }
    await db.execute(
        "INSERT INTO icepack.status_snapshots (table_id, inspected_at, inspector, "
        "status) VALUES ($1, now(), 'pyiceberg', $2::jsonb)",
        table_id,
        status,
    )


async def test_fleet_simulation_reports_the_budget_the_policies_need(
    client: httpx.AsyncClient, db: asyncpg.Pool, auth: dict[str, str]
) -> None:
    # bytes_to_rewrite / max(cadence, 1 h), summed: 4800/24 + 1000/2 + 300/1 (0.5 h counts 1 h).
    await add_small_files_table(db, "sales", "orders", 4800)  # the default cadence: 24 h
    await add_small_files_table(db, "sales", "items", 1000, cadence_hours="2")
    await add_small_files_table(db, "web", "clicks", 300, cadence_hours="0.5")
    body = {
        "catalog": "sim",
        "policies": [
            {
                "policy_type": "system.data-compaction",
                "scope": "catalog",
                "config": {"min_input_files": 2},
            }
        ],
    }
    response = await client.post("/policies/simulate/fleet", json=body, headers=auth)
    assert response.status_code == 200, response.text
    need = response.json()["budget_needed"]
    assert need["rewrite_bytes_per_hour"] == 200 + 500 + 300
    assert need["backlog_bytes"] == 6100
    assert need["peak_concurrent_jobs"] == 3
    assert need["jobs_per_hour"] == pytest.approx(1 / 24 + 1 / 2 + 1)
    assert need["by_namespace"]["sales"]["rewrite_bytes_per_hour"] == 700
    assert need["by_namespace"]["web"] == {
        "rewrite_bytes_per_hour": 300,
        "backlog_bytes": 300,
        "jobs_per_hour": 1.0,
        "peak_concurrent_jobs": 1,
    }
