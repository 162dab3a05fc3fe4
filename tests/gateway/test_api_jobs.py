"""Jobs over HTTP: list/filter/page, detail with actions, submit with dedupe, cancel."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx
import pytest

from icepack_core.intents import RewriteManifests
from icepack_core.queue.jobs import JobQueue
from tests.gateway.seed import Fleet
from tests.support.stored_jobs import enqueue_hand_written

# A job to list or cancel; what it would run does not matter here.
NOOP = [RewriteManifests()]


async def test_jobs_list_newest_first_with_tables(client: httpx.AsyncClient, fleet: Fleet) -> None:
    items = (await client.get("/jobs")).json()["items"]
    assert [j["id"] for j in items] == sorted(fleet.jobs.values(), reverse=True)
    done = next(j for j in items if j["id"] == fleet.jobs["done"])
    assert done["table"]["name"] == "orders" and done["state"] == "succeeded"


@pytest.mark.parametrize(
    "query,key",
    [
        ("state=queued", "queued"),
        ("state=failed", "failed"),
        ("table=demo.sales.orders", "done"),
        ("state=succeeded&table=demo.sales.orders", "done"),
    ],
)
async def test_jobs_filters(client: httpx.AsyncClient, fleet: Fleet, query: str, key: str) -> None:
    items = (await client.get(f"/jobs?{query}")).json()["items"]
    assert [j["id"] for j in items] == [fleet.jobs[key]]


async def test_jobs_filter_by_table_id_and_unknown_table(
    client: httpx.AsyncClient, fleet: Fleet
) -> None:
    items = (await client.get(f"/jobs?table_id={fleet.tables['crm.users']}")).json()["items"]
    assert [j["id"] for j in items] == [fleet.jobs["failed"]]
    r = await client.get("/jobs?table=demo.no.such")
    assert r.status_code == 404 and r.json()["code"] == "TABLE_NOT_FOUND"
    r = await client.get("/jobs?table=justone")
    assert r.status_code == 422 and "'table'" in r.json()["message"]
    r = await client.get("/jobs?state=done")
    assert r.status_code == 422 and "'state'" in r.json()["message"]


async def test_jobs_cursor_walks_all(
    client: httpx.AsyncClient, db: asyncpg.Pool, fleet: Fleet
) -> None:
    queue = JobQueue(db)
    for i in range(23):
        await queue.enqueue(None, NOOP, dedupe_key=f"x{i}")
    seen, cursor = [], None
    while True:
        r = await client.get("/jobs?limit=4" + (f"&cursor={cursor}" if cursor else ""))
        page = r.json()
        seen += [j["id"] for j in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert len(seen) == len(set(seen)) == 26 and seen == sorted(seen, reverse=True)


async def test_answers_are_built_through_their_models(
    client: httpx.AsyncClient, db: asyncpg.Pool, fleet: Fleet
) -> None:
    """A job is answered through the Job model: its timestamps as ``isoformat`` writes them,
    and a stored value the model refuses is a 500 naming the model and field where it was
    built (not a 422 blaming the request, not a 200 the document does not describe)."""
    row = await db.fetchrow("SELECT created_at FROM icepack.jobs WHERE id = $1", fleet.jobs["done"])
    assert row is not None
    r = await client.get(f"/jobs/{fleet.jobs['done']}")
    assert r.status_code == 200 and r.json()["created_at"] == row["created_at"].isoformat()
    bad = await enqueue_hand_written(db, None, [{"action": "noop", "params": {}}], dedupe_key="bad")
    r = await client.get(f"/jobs/{bad.id}")
    assert r.status_code == 500 and r.json()["code"] == "INVALID_REPLY"
    assert "JobWithActions" in r.json()["message"] and "actions.0.action" in r.json()["message"]
    r = await client.get("/jobs?limit=1")
    assert r.status_code == 500 and "Job answer" in r.json()["message"]


async def test_job_detail_has_actions_sql_and_impact(
    client: httpx.AsyncClient, fleet: Fleet
) -> None:
    job = (await client.get(f"/jobs/{fleet.jobs['done']}")).json()
    assert [a["action"] for a in job["job_actions"]] == ["rewrite_data_files", "expire_snapshots"]
    first = job["job_actions"][0]
    assert first["sql_text"].startswith("CALL demo.system.rewrite_data_files")
    assert first["impact"]["after"]["data_file_count"] == 90
    assert first["duration_ms"] == 120_000
    assert first["output"]["rewritten_data_files_count"] == 150


@pytest.mark.parametrize(
    "path,status,code",
    [
        ("/jobs/999999", 404, "JOB_NOT_FOUND"),
        ("/jobs/abc", 422, "INVALID_PARAMETER"),
        ("/jobs/0", 422, "INVALID_PARAMETER"),
        ("/jobs/99999999999999999999", 422, "INVALID_PARAMETER"),
    ],
)
async def test_job_detail_errors(
    client: httpx.AsyncClient, path: str, status: int, code: str
) -> None:
    r = await client.get(path)
    assert r.status_code == status and r.json()["code"] == code


async def test_submit_creates_then_dedupes(
    client: httpx.AsyncClient, db: asyncpg.Pool, fleet: Fleet, auth: dict[str, str]
) -> None:
    body = {
        "catalog": "demo",
        "namespace": "crm",
        "table": "users",
        "actions": [{"action": "rewrite_manifests"}],
        "priority": 10,
    }
    first = await client.post("/jobs", json=body, headers=auth)
    assert first.status_code == 201, first.text
    job = first.json()["job"]
    assert first.json()["created"] is True
    assert job["trigger"] == "manual" and job["dedupe_key"] == f"table:{fleet.tables['crm.users']}"
    # Stored as the validated intent: defaults filled in, nothing else added.
    assert job["actions"] == [
        {"action": "rewrite_manifests", "params": {"use_caching": True}, "reason": ""}
    ]
    assert job["priority"] == 10 and job["state"] == "queued"
    again = await client.post("/jobs", json=body, headers=auth)
    assert again.status_code == 200 and again.json() == {"job": job, "created": False}
    topics = await db.fetch(
        "SELECT topic FROM icepack.events WHERE payload->>'job_id' = $1", str(job["id"])
    )
    assert [t["topic"] for t in topics] == ["job.enqueued"]


async def test_submit_for_a_table_with_an_active_planner_job_returns_it(
    client: httpx.AsyncClient, fleet: Fleet, auth: dict[str, str]
) -> None:
    r = await client.post(
        "/jobs", json={"catalog": "demo", "namespace": "web", "table": "clicks"}, headers=auth
    )
    assert r.status_code == 200 and r.json()["job"]["id"] == fleet.jobs["queued"]


async def test_submit_without_actions_copies_the_recommendation(
    client: httpx.AsyncClient, db: asyncpg.Pool, fleet: Fleet, auth: dict[str, str]
) -> None:
    await client.post(f"/jobs/{fleet.jobs['queued']}/cancel", headers=auth)
    r = await client.post(
        "/jobs", json={"catalog": "demo", "namespace": "web", "table": "clicks"}, headers=auth
    )
    assert r.status_code == 201, r.text
    # Exactly the intents of what the real planner recommended (Planner.plan in the seed).
    recommended = await db.fetchval(
        "SELECT actions FROM icepack.recommendations WHERE table_id = $1 ORDER BY id DESC LIMIT 1",
        fleet.tables["web.clicks"],
    )
    assert (
        [a["action"] for a in r.json()["job"]["actions"]]
        == [a["action"] for a in recommended["actions"]]
        != []
    )
    assert [a["reason"] for a in r.json()["job"]["actions"]] == [
        a["reason"] for a in recommended["actions"]
    ]
    # No recommendation to copy: the operator must say what to run.
    r = await client.post(
        "/jobs", json={"catalog": "demo", "namespace": "sales", "table": "orders"}, headers=auth
    )
    assert r.status_code == 409 and r.json()["code"] == "NOTHING_RECOMMENDED", r.text
    assert "sales.orders" in r.json()["message"]


@pytest.mark.parametrize(
    "body,where",
    [
        ({"catalog": "demo", "namespace": "crm"}, "table"),
        ({"catalog": "demo", "namespace": "crm", "table": "users", "actions": []}, "actions"),
        (
            {
                "catalog": "demo",
                "namespace": "crm",
                "table": "users",
                "actions": [{"action": "drop_table"}],
            },
            "actions",
        ),
        ({"catalog": "demo", "namespace": "crm", "table": "users", "priority": -1}, "priority"),
        ({"catalog": "demo", "namespace": "crm", "table": "users", "extra": 1}, "extra"),
        (
            {
                "catalog": "demo",
                "namespace": "crm",
                "table": "users",
                "actions": [{"action": "rewrite_manifests", "params": {"x": "a\u0000b"}}],
            },
            "body",
        ),
    ],
)
async def test_submit_validation(
    client: httpx.AsyncClient,
    db: asyncpg.Pool,
    fleet: Fleet,
    auth: dict[str, str],
    body: dict[str, Any],
    where: str,
) -> None:
    r = await client.post("/jobs", json=body, headers=auth)
    assert r.status_code == 422, r.text
    assert where in r.json()["message"]
    assert await db.fetchval("SELECT count(*) FROM icepack.jobs") == 3


async def test_submit_not_json_and_unknown_table(
    client: httpx.AsyncClient, fleet: Fleet, auth: dict[str, str]
) -> None:
    r = await client.post("/jobs", content=b"{nope", headers=auth)
    assert r.status_code == 422 and "'body'" in r.json()["message"]
    r = await client.post(
        "/jobs", json={"catalog": "demo", "namespace": "x", "table": "y"}, headers=auth
    )
    assert r.status_code == 404 and r.json()["code"] == "TABLE_NOT_FOUND"
    r = await client.post(
        "/jobs", json={"catalog": "demo", "namespace": "old", "table": "gone"}, headers=auth
    )
    assert r.status_code == 404 and "dropped" in r.json()["message"]


async def test_cancel_queued_running_and_finished(
    client: httpx.AsyncClient, db: asyncpg.Pool, fleet: Fleet, auth: dict[str, str]
) -> None:
    r = await client.post(f"/jobs/{fleet.jobs['queued']}/cancel", headers=auth)
    assert r.status_code == 200 and r.json()["cancelled"] is True
    assert r.json()["job"]["state"] == "cancelled"
    again = await client.post(f"/jobs/{fleet.jobs['queued']}/cancel", headers=auth)
    assert again.status_code == 200 and again.json()["cancelled"] is True
    r = await client.post(f"/jobs/{fleet.jobs['done']}/cancel", headers=auth)
    assert r.status_code == 409 and r.json()["code"] == "JOB_ALREADY_FINISHED"
    r = await client.post("/jobs/424242/cancel", headers=auth)
    assert r.status_code == 404 and r.json()["code"] == "JOB_NOT_FOUND"
    queue = JobQueue(db)
    await queue.enqueue(fleet.tables["crm.users"], NOOP, dedupe_key="run")
    running = await queue.claim("executor@test", 60)
    assert running is not None
    r = await client.post(f"/jobs/{running.id}/cancel", headers=auth)
    assert r.status_code == 200 and r.json()["cancelled"] is False
    job = r.json()["job"]
    assert job["state"] == "running" and job["cancel_requested_at"] is not None
