"""Operator writes: tokens (missing, wrong, revoked), policies, events, OpenAPI coverage."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import asyncpg
import httpx
import pytest
from starlette.routing import Mount, Route

from icepack_core.access.tokens import TokenStore
from icepack_gateway.app import create_app
from tests.gateway.seed import Fleet

JOB = {
    "catalog": "demo",
    "namespace": "crm",
    "table": "users",
    "actions": [{"action": "rewrite_manifests"}],
}
POLICY = "/policies/catalog/demo/system.data-compaction"
WRITES = [
    ("post", "/jobs", JOB),
    ("post", "/jobs/1/cancel", None),
    ("put", POLICY, {"config": {"min_input_files": 5}}),
    ("delete", POLICY, None),
    ("post", "/policies/simulate", {"catalog": "demo", "namespace": "crm", "table": "users"}),
    ("post", "/tables/demo/crm/users/hold/release", {"reason": "checked"}),
]


async def counts(db: asyncpg.Pool) -> tuple[int, ...]:
    row = await db.fetchrow(
        "SELECT (SELECT count(*) FROM icepack.jobs), (SELECT count(*) FROM icepack.policies), "
        "(SELECT count(*) FROM icepack.events), "
        "(SELECT count(*) FROM icepack.jobs WHERE state = 'cancelled')"
    )
    assert row is not None
    return tuple(row)


async def _send(
    client: httpx.AsyncClient, method: str, path: str, body: Any, headers: dict[str, str]
) -> httpx.Response:
    return await client.request(method, path, json=body, headers=headers)


@pytest.mark.parametrize("method,path,body", WRITES)
async def test_writes_refuse_missing_wrong_and_revoked_tokens(
    client: httpx.AsyncClient, db: asyncpg.Pool, fleet: Fleet, method: str, path: str, body: Any
) -> None:
    store = TokenStore(db)
    revoked, _ = await store.create("old-op")
    await store.revoke("old-op")
    live, _ = await store.create("op")
    before = await counts(db)
    cases = [
        ({}, 401, "AUTH_REQUIRED"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, 401, "AUTH_REQUIRED"),
        ({"Authorization": "Bearer nonsense"}, 401, "INVALID_TOKEN"),
        ({"Authorization": f"Bearer {live[:-3]}xyz"}, 401, "INVALID_TOKEN"),
        ({"Authorization": f"Bearer {revoked}"}, 403, "TOKEN_REVOKED"),
    ]
    for headers, status, code in cases:
        r = await _send(client, method, path, body, headers)
        assert r.status_code == status, (headers, r.text)
        assert r.json()["code"] == code
        if status == 401:
            assert r.headers["www-authenticate"] == "Bearer"
    assert await counts(db) == before


async def test_token_store_create_verify_revoke(db: asyncpg.Pool) -> None:
    store = TokenStore(db)
    token, info = await store.create("ci-bot")
    assert token.startswith(f"icepack_{info.key_id}_")
    stored = await db.fetchval("SELECT token_hash FROM icepack.api_tokens WHERE id = $1", info.id)
    assert token.encode() not in bytes(stored) and len(stored) == 32
    assert (await store.verify(token)).name == "ci-bot"
    from icepack_core.errors import TokenNameTaken, TokenNotFound, TokenRevoked

    with pytest.raises(TokenNameTaken):
        await store.create("ci-bot")
    await store.revoke("ci-bot")
    with pytest.raises(TokenRevoked):
        await store.verify(token)
    with pytest.raises(TokenNotFound):
        await store.revoke("ci-bot")
    with pytest.raises(ValueError):
        await store.create("bad name!")
    again, _ = await store.create("ci-bot")  # the name is free again once revoked
    assert again != token


async def test_policies_put_replace_list_delete(
    client: httpx.AsyncClient, db: asyncpg.Pool, fleet: Fleet, auth: dict[str, str]
) -> None:
    r = await client.put(
        POLICY, json={"config": {"target_file_size_bytes": 268435456}}, headers=auth
    )
    assert r.status_code == 201, r.text
    assert r.json()["policy"]["config"] == {"target_file_size_bytes": 268435456}
    r = await client.put(
        POLICY, json={"enabled": False, "config": {"min_input_files": 8}}, headers=auth
    )
    assert r.status_code == 200 and r.json()["created"] is False
    assert r.json()["policy"]["enabled"] is False
    r = await client.put(
        "/policies/table/demo/sales/orders/system.snapshot-expiry",
        json={"config": {"retain_last": 2}},
        headers=auth,
    )
    assert r.status_code == 201
    r = await client.put(
        "/policies/namespace/demo/sales/system.orphan-file-removal",
        json={"config": {"older_than_hours": 96}},
        headers=auth,
    )
    assert r.status_code == 201
    items = (await client.get("/policies")).json()["items"]
    assert len(items) == 4
    only = (await client.get("/policies?scope=table")).json()["items"]
    assert [(p["table_name"], p["config"]) for p in only] == [("orders", {"retain_last": 2})]
    assert (await client.delete(POLICY, headers=auth)).status_code == 204
    r = await client.delete(POLICY, headers=auth)
    assert r.status_code == 404 and r.json()["code"] == "POLICY_NOT_FOUND"


@pytest.mark.parametrize(
    "path,body,where",
    [
        ("/policies/catalog/demo/system.nope", {"config": {}}, "policy_type"),
        (POLICY, {"config": {"bogus": 1}}, "bogus"),
        (POLICY, {"config": {"min_input_files": 0}}, "min_input_files"),
        (POLICY, {"config": {"min_input_files": 5}, "extra": 1}, "extra"),
        (POLICY, {"enabled": "maybe"}, "enabled"),
        (
            "/policies/catalog/demo/system.orphan-file-removal",
            {"config": {"older_than_hours": 1}},
            "allow_unsafe_older_than",
        ),
    ],
)
async def test_policy_validation(
    client: httpx.AsyncClient,
    db: asyncpg.Pool,
    fleet: Fleet,
    auth: dict[str, str],
    path: str,
    body: dict[str, Any],
    where: str,
) -> None:
    before = await counts(db)
    r = await client.put(path, json=body, headers=auth)
    assert r.status_code == 422, r.text
    assert where in r.json()["message"]
    assert await counts(db) == before


async def test_table_policy_for_unknown_table_is_404(
    client: httpx.AsyncClient, fleet: Fleet, auth: dict[str, str]
) -> None:
    r = await client.put(
        "/policies/table/demo/no/such/system.snapshot-expiry", json={"config": {}}, headers=auth
    )
    assert r.status_code == 404 and r.json()["code"] == "TABLE_NOT_FOUND"


async def test_simulate_resolves_policies_and_recommends_without_writing(
    client: httpx.AsyncClient, db: asyncpg.Pool, fleet: Fleet, auth: dict[str, str]
) -> None:
    pytest.importorskip("icepack_core.planning.recommendation")
    before = await counts(db)
    body: dict[str, Any] = {"catalog": "demo", "namespace": "web", "table": "clicks"}
    r = await client.post("/policies/simulate", json=body, headers=auth)
    assert r.status_code == 200, r.text
    result = r.json()
    assert result["effective_policy"]["sources"]["system.snapshot-expiry"] == "catalog"
    assert result["effective_policy"]["policies"]["system.snapshot-expiry"]["retain_last"] == 5
    assert result["effective_policy"]["policies"]["system.orphan-file-removal"] is None
    assert "rewrite_data_files" in [a["action"] for a in result["recommendation"]["actions"]]
    # A proposed table-level policy wins over the stored catalog one, and is not stored.
    proposed: list[dict[str, Any]] = [
        {
            "policy_type": "system.data-compaction",
            "scope": "table",
            "namespace": "web",
            "table": "clicks",
            "enabled": False,
        }
    ]
    body["policies"] = proposed
    r = await client.post("/policies/simulate", json=body, headers=auth)
    result = r.json()
    assert result["effective_policy"]["sources"]["system.data-compaction"] == "table"
    assert "rewrite_data_files" not in [a["action"] for a in result["recommendation"]["actions"]]
    proposed[0]["config"] = {"nope": 1}
    r = await client.post("/policies/simulate", json=body, headers=auth)
    assert r.status_code == 422 and "nope" in r.json()["message"]
    r = await client.post("/policies/simulate", json=body | {"table": "missing"}, headers=auth)
    assert r.status_code == 404
    assert await counts(db) == before


async def test_events_tail_filters_and_pages(client: httpx.AsyncClient, fleet: Fleet) -> None:
    items = (await client.get("/events")).json()["items"]
    topics = [e["topic"] for e in items]
    # Newest first: the planner's recommendation and job, the two executor runs, then the
    # discovery and inspection events of the seed.
    assert (
        topics
        == [
            "recommendation.created",
            "job.enqueued",
            "job.finished",
            "job.started",
            "job.enqueued",
            "job.finished",
            "job.started",
            "job.enqueued",
            "table.discovered",
        ]
        + ["status.updated"] * 9
    )
    only = (await client.get("/events?topic=job.finished")).json()["items"]
    assert [e["table"]["name"] for e in only] == ["users", "orders"]
    orders = (await client.get("/events?table=demo.sales.orders")).json()["items"]
    assert {e["topic"] for e in orders} == {
        "job.enqueued",
        "job.started",
        "job.finished",
        "table.discovered",
        "status.updated",
    }
    first = (await client.get("/events?limit=3")).json()
    rest = (await client.get(f"/events?limit=3&cursor={first['next_cursor']}")).json()
    assert [e["topic"] for e in rest["items"]] == topics[3:6]
    assert (await client.get("/events?topic=JOB")).status_code == 422


def test_every_route_is_documented_and_every_documented_route_exists(db: asyncpg.Pool) -> None:
    from icepack_gateway.app import OPENAPI

    paths = OPENAPI["paths"]
    served: set[tuple[str, str]] = set()
    for route in create_app(db).routes:
        if isinstance(route, Mount):
            continue  # /ui static files
        assert isinstance(route, Route)
        for method in route.methods or ():
            if method != "HEAD":
                served.add((route.path, method.lower()))
    documented = {(p, m) for p, ops in paths.items() for m in ops}
    assert served == documented


async def test_openapi_is_served(client: httpx.AsyncClient) -> None:
    body = (await client.get("/openapi.json")).json()
    assert body["openapi"].startswith("3.1") and "/tables" in body["paths"]
    refs = {v for v in _refs(body)}
    assert all(
        r.removeprefix("#/components/schemas/") in body["components"]["schemas"] for r in refs
    )


def _refs(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


async def test_readyz_is_503_when_the_database_is_unreachable() -> None:
    import asyncpg
    import httpx

    from icepack_core.local.ports import free_port

    pool = await asyncpg.create_pool(
        f"postgresql://postgres@127.0.0.1:{free_port()}/x", min_size=0, max_size=1
    )
    try:
        transport = httpx.ASGITransport(app=create_app(pool))
        async with httpx.AsyncClient(transport=transport, base_url="http://g") as c:
            r = await c.get("/readyz")
            assert r.status_code == 503 and "database unreachable" in r.json()["reason"]
            assert (await c.get("/healthz")).status_code == 200
            r = await c.get("/tables")
            assert r.status_code == 503 and r.json()["code"] == "DATABASE_UNAVAILABLE"
    finally:
        await pool.close()


async def test_the_table_statistics_policy_is_stored_validated_and_simulated(
    client: httpx.AsyncClient, db: asyncpg.Pool, fleet: Fleet, auth: dict[str, str]
) -> None:
    """Icepack's own type beside Polaris' (migration 0030 admits ``icepack.*`` types)."""
    path = "/policies/namespace/demo/web/icepack.table-statistics"
    r = await client.put(path, json={"config": {"columns": ["bad\ncolumn"]}}, headers=auth)
    assert r.status_code == 422 and "columns[0]" in r.json()["message"], r.text
    r = await client.put(
        path, json={"config": {"columns": ["id"], "stale_after_snapshots": 10}}, headers=auth
    )
    assert r.status_code == 201, r.text
    stored = await db.fetchval("SELECT policy_type FROM icepack.policies WHERE namespace = 'web'")
    assert stored == "icepack.table-statistics"
    body = {"catalog": "demo", "namespace": "web", "table": "clicks"}
    result = (await client.post("/policies/simulate", json=body, headers=auth)).json()
    policy = result["effective_policy"]
    assert policy["sources"]["icepack.table-statistics"] == "namespace web"
    assert policy["policies"]["icepack.table-statistics"]["columns"] == ["id"]
    skipped = {s["action"] for s in result["recommendation"]["skipped"]}
    proposed = {a["action"] for a in result["recommendation"]["actions"]}
    assert {"compute_table_stats", "compute_partition_stats"} <= skipped | proposed
    # Disabled by default elsewhere: another namespace's table says so.
    other = {"catalog": "demo", "namespace": "sales", "table": "orders"}
    result = (await client.post("/policies/simulate", json=other, headers=auth)).json()
    assert result["effective_policy"]["policies"]["icepack.table-statistics"] is None
    reasons = {s["action"]: s["reason"] for s in result["recommendation"]["skipped"]}
    assert reasons["compute_table_stats"] == "icepack.table-statistics is not enabled"
