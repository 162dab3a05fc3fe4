"""``ICEPACK_GATEWAY_READ_AUTH=true``: every read route needs a live bearer token; the probes,
``/metrics``, the OpenAPI document and the UI's static files stay open."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from starlette.routing import Mount, Route

from icepack_core.access.tokens import TokenStore
from icepack_core.settings import load_settings
from icepack_gateway.app import api_routes, create_app
from tests.gateway.seed import Fleet

OPEN = ["/healthz", "/readyz", "/metrics", "/openapi.json", "/ui/", "/ui/app.js"]


@pytest.fixture
async def locked(
    db: asyncpg.Pool, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[httpx.AsyncClient]:
    """The gateway with read auth switched on through the environment variable."""
    monkeypatch.setenv("ICEPACK_GATEWAY_READ_AUTH", "true")
    app = create_app(db, settings=load_settings(database_url=database_url))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gateway"
    ) as c:
        yield c


def read_paths(fleet: Fleet) -> list[str]:
    """Every GET route of the app, with real values in its path parameters."""
    values = {
        "catalog": "demo",
        "namespace": "web",
        "table": "clicks",
        "id": str(fleet.jobs["done"]),
    }
    paths = []
    for route in api_routes():
        if isinstance(route, Route) and "GET" in (route.methods or ()):
            paths.append(route.path.format(**{k: values[k] for k in route.param_convertors}))
        assert isinstance(route, Route | Mount)
    return [p for p in paths if p not in OPEN and p != "/"]


async def test_every_read_route_needs_a_token(
    locked: httpx.AsyncClient, db: asyncpg.Pool, fleet: Fleet
) -> None:
    token, _ = await TokenStore(db).create("reader")
    paths = read_paths(fleet)
    assert "/tables" in paths and f"/jobs/{fleet.jobs['done']}" in paths and len(paths) >= 12
    for path in paths:
        r = await locked.get(path)
        assert r.status_code == 401, (path, r.status_code, r.text)
        assert r.json()["code"] in ("AUTH_REQUIRED", "TOKEN_MISSING")
        assert r.headers["www-authenticate"] == "Bearer"
        r = await locked.get(path, headers={"Authorization": "Bearer icepack_wrong"})
        assert r.status_code == 401, path
        r = await locked.get(path, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, (path, r.status_code, r.text)


async def test_probes_metrics_and_static_ui_stay_open(
    locked: httpx.AsyncClient, fleet: Fleet
) -> None:
    for path in OPEN:
        r = await locked.get(path)
        assert r.status_code == 200, (path, r.status_code)


async def test_a_revoked_token_cannot_read(
    locked: httpx.AsyncClient, db: asyncpg.Pool, fleet: Fleet
) -> None:
    store = TokenStore(db)
    token, _ = await store.create("gone")
    await store.revoke("gone")
    r = await locked.get("/tables", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 403


async def test_reads_are_open_by_default(client: httpx.AsyncClient, fleet: Fleet) -> None:
    assert (await client.get("/tables")).status_code == 200


def write_calls(fleet: Fleet) -> list[tuple[str, str, dict[str, object] | None]]:
    """One call of every write route of the app (method, path, body), with real values."""
    values = {
        "catalog": "demo",
        "namespace": "web",
        "table": "clicks",
        "id": str(fleet.jobs["queued"]),
        "policy_type": "system.data-compaction",
    }
    bodies: dict[str, dict[str, object]] = {
        "/jobs": {"table": "demo.web.clicks", "actions": [{"action": "rewrite_manifests"}]},
        "/budgets/{catalog}": {"max_running": 1},
    }
    calls = []
    for route in api_routes():
        if not isinstance(route, Route):
            continue
        for method in sorted((route.methods or set()) - {"GET", "HEAD", "OPTIONS"}):
            if route.path.startswith("/hooks/"):
                continue  # the hooks check their own token, never an operator's
            path = route.path.format(**{k: values[k] for k in route.param_convertors})
            calls.append((method, path, bodies.get(route.path)))
    return calls


async def test_a_read_token_reads_everything_and_writes_nothing(
    locked: httpx.AsyncClient, db: asyncpg.Pool, fleet: Fleet
) -> None:
    """A UI reader's token: every read answers, every write is refused with 403
    TOKEN_READ_ONLY before its handler runs (nothing changes), and a write token still writes."""
    store = TokenStore(db)
    reader, info = await store.create("ui-reader", "read")
    assert info.scope == "read" and not info.may_write
    writer, _ = await store.create("operator")
    for path in read_paths(fleet):
        r = await locked.get(path, headers={"Authorization": f"Bearer {reader}"})
        assert r.status_code == 200, (path, r.status_code, r.text)
    calls = write_calls(fleet)
    assert {m for m, _, _ in calls} >= {"POST", "PUT", "DELETE"} and len(calls) >= 8
    state = "SELECT (SELECT count(*) FROM icepack.jobs), (SELECT count(*) FROM icepack.budgets)"
    before = await db.fetchrow(state)
    for method, path, body in calls:
        r = await locked.request(
            method, path, json=body, headers={"Authorization": f"Bearer {reader}"}
        )
        if path.startswith("/policies/simulate"):  # computes an answer, changes nothing
            assert r.status_code != 403, (method, path, r.text)
            continue
        assert r.status_code == 403, (method, path, r.status_code, r.text)
        assert r.json()["code"] == "TOKEN_READ_ONLY"
        assert "ui-reader" in r.json()["message"] and "--scope write" in r.json()["message"]
    assert await db.fetchrow(state) == before
    r = await locked.post(
        f"/jobs/{fleet.jobs['queued']}/cancel", headers={"Authorization": f"Bearer {writer}"}
    )
    assert r.status_code == 200, r.text


async def test_a_read_token_cannot_write_with_reads_open_either(
    client: httpx.AsyncClient, db: asyncpg.Pool, fleet: Fleet
) -> None:
    reader, _ = await TokenStore(db).create("reader", "read")
    r = await client.post(
        f"/jobs/{fleet.jobs['queued']}/cancel", headers={"Authorization": f"Bearer {reader}"}
    )
    assert r.status_code == 403 and r.json()["code"] == "TOKEN_READ_ONLY"
    assert (await client.get(f"/jobs/{fleet.jobs['queued']}")).json()["state"] == "queued"


async def test_a_token_scope_must_be_read_or_write(db: asyncpg.Pool) -> None:
    with pytest.raises(ValueError, match="'admin' must be one of: read, write"):
        await TokenStore(db).create("x", "admin")
    assert await db.fetchval("SELECT count(*) FROM icepack.api_tokens") == 0
