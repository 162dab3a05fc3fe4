"""``GET /jobs/{id}/deletions`` and ``POST /jobs/{id}/restore``: the ledger read as it is stored,
and a restore that only enqueues a ``restore_quarantine`` job (the gateway touches no storage)."""

from __future__ import annotations

import asyncpg
import httpx

from tests.gateway.seed import Fleet, seed_deletions


async def test_deletions_lists_the_ledger_with_totals_per_state(
    client: httpx.AsyncClient, db: asyncpg.Pool, fleet: Fleet, auth: dict[str, str]
) -> None:
    job = fleet.jobs["done"]
    await seed_deletions(db, job, fleet.tables["sales.orders"])
    body = (await client.get(f"/jobs/{job}/deletions", headers=auth)).json()
    assert [(r["path"].rsplit("/", 1)[-1], r["state"]) for r in body["items"]] == [
        ("a.parquet", "quarantined"),
        ("b.parquet", "purged"),
    ]
    assert body["totals"] == {"files": 2, "bytes": 30}
    assert body["by_state"] == {
        "quarantined": {"files": 1, "bytes": 10},
        "purged": {"files": 1, "bytes": 20},
    }
    # A job that deleted nothing has an empty ledger, not a 404.
    empty = (await client.get(f"/jobs/{fleet.jobs['queued']}/deletions", headers=auth)).json()
    assert empty["items"] == [] and empty["totals"] == {"files": 0, "bytes": 0}


async def test_restore_enqueues_a_restore_job_or_says_why_not(
    client: httpx.AsyncClient, db: asyncpg.Pool, fleet: Fleet, auth: dict[str, str]
) -> None:
    job = fleet.jobs["done"]
    nothing = await client.post(f"/jobs/{job}/restore", headers=auth)
    assert nothing.status_code == 409
    assert "recorded no deletions" in nothing.json()["message"]

    await seed_deletions(db, job, fleet.tables["sales.orders"])
    created = await client.post(f"/jobs/{job}/restore", headers=auth)
    assert created.status_code == 201, created.text
    restore = created.json()["job"]
    (action,) = restore["actions"]
    assert action["action"] == "restore_quarantine" and action["params"] == {"job_id": job}
    assert restore["table"]["id"] == fleet.tables["sales.orders"]
    assert restore["state"] == "queued" and restore["trigger"] == "manual"
    again = await client.post(f"/jobs/{job}/restore", headers=auth)
    assert again.status_code == 200 and again.json()["job"]["id"] == restore["id"]
    # The gateway moved nothing: the ledger still says quarantined.
    states = await db.fetch("SELECT state FROM icepack.deletions WHERE job_id = $1", job)
    assert sorted(r["state"] for r in states) == ["purged", "quarantined"]

    await db.execute("UPDATE icepack.deletions SET state = 'restored' WHERE state = 'quarantined'")
    gone = await client.post(f"/jobs/{job}/restore", headers=auth)
    assert gone.status_code == 409
    assert "no quarantined files (1 purged, 1 restored)" in gone.json()["message"]
    assert (await client.post("/jobs/424242/restore", headers=auth)).status_code == 404
