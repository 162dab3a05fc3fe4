"""``/budgets``: set, list with use, clear; bad limits are 422 naming the value."""

from __future__ import annotations

import asyncpg
import httpx

from icepack_core.queue.jobs import JobQueue


async def test_budgets_round_trip_with_use_and_oversized_jobs(
    client: httpx.AsyncClient, auth: dict[str, str], db: asyncpg.Pool
) -> None:
    table_id = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('c', 'ns', 't') RETURNING id"
    )
    queue = JobQueue(db)
    small = (await queue.enqueue(table_id, [], rewrite_bytes=100)).job.id
    huge = (await queue.enqueue(table_id, [], rewrite_bytes=5000)).job.id
    put = await client.put(
        "/budgets/c", json={"rewrite_bytes_per_hour": 1000, "max_running": 2}, headers=auth
    )
    assert put.status_code == 200, put.text
    assert put.json()["oversized_jobs"] == [huge]
    claimed = await queue.claim("e", 60)
    assert claimed is not None and claimed.id == small
    put = await client.put("/budgets/c", json={"namespace": "ns", "max_running": 1}, headers=auth)
    assert put.status_code == 200, put.text
    items = (await client.get("/budgets")).json()["items"]
    assert [(b["catalog"], b["namespace"]) for b in items] == [("c", None), ("c", "ns")]
    assert items[0] | {"updated_at": None} == {
        "catalog": "c",
        "namespace": None,
        "rewrite_bytes_per_hour": 1000,
        "max_running": 2,
        "running": 1,
        "charged_bytes_last_hour": 100,
        "oversized_jobs": [huge],
        "updated_at": None,
    }
    assert (items[1]["running"], items[1]["rewrite_bytes_per_hour"]) == (1, None)
    bad = await client.put("/budgets/c", json={"max_running": -3}, headers=auth)
    assert bad.status_code == 422 and "max_running" in bad.text and "-3" in bad.text
    none = await client.put("/budgets/c", json={"namespace": "x"}, headers=auth)
    assert none.status_code == 422
    assert "rewrite_bytes_per_hour" in none.json()["message"]
    gone = await client.delete("/budgets/c", params={"namespace": "ns"}, headers=auth)
    assert gone.status_code == 200 and gone.json()["cleared"] is True
    again = await client.delete("/budgets/c", params={"namespace": "ns"}, headers=auth)
    assert again.status_code == 404 and "BUDGET_NOT_FOUND" in again.text
    assert len((await client.get("/budgets")).json()["items"]) == 1


async def test_metrics_expose_budget_use_per_scope(
    client: httpx.AsyncClient, auth: dict[str, str], db: asyncpg.Pool
) -> None:
    table_id = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('c', 'ns', 't') RETURNING id"
    )
    queue = JobQueue(db)
    await queue.enqueue(table_id, [], rewrite_bytes=300)
    await queue.enqueue(table_id, [], rewrite_bytes=300)
    await queue.enqueue(table_id, [], rewrite_bytes=9000)
    await client.put("/budgets/c", json={"rewrite_bytes_per_hour": 1000}, headers=auth)
    await client.put("/budgets/c", json={"namespace": "ns", "max_running": 3}, headers=auth)
    assert await queue.claim("e", 60) is not None
    text = (await client.get("/metrics")).text
    for line in [
        'icepack_budget_running_jobs{catalog="c",namespace=""} 1.0',
        'icepack_budget_running_jobs{catalog="c",namespace="ns"} 1.0',
        'icepack_budget_charged_bytes{catalog="c",namespace=""} 300.0',
        'icepack_budget_rewrite_bytes_per_hour{catalog="c",namespace=""} 1000.0',
        'icepack_budget_max_running_jobs{catalog="c",namespace="ns"} 3.0',
        'icepack_budget_oversized_jobs{catalog="c",namespace=""} 1.0',
        "icepack_queue_claimable_jobs 1.0",  # 300 more fit in 1000; 9000 never does
    ]:
        assert line in text, line
    assert 'icepack_budget_max_running_jobs{catalog="c",namespace=""}' not in text
