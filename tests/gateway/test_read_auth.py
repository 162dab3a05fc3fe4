"""``ICEPACK_GATEWAY_READ_AUTH=true``: every read route needs a live bearer token; the probes,
``/metrics``, the OpenAPI document and the UI's static files stay open."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.routing import Mount, Route

from icepack_core.access.tokens import TokenStore
from icepack_core.settings import load_settings
from icepack_gateway.app import api_routes, create_app
from tests.gateway.seed import Fleet

OPEN = ["/healthz", "/readyz", "/metrics", "/openapi.json", "/ui/", "/ui/app.js"]


@pytest.fixture
async def locked(db, database_url, monkeypatch) -> AsyncIterator[httpx.AsyncClient]:
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


async def test_every_read_route_needs_a_token(locked, db, fleet):
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


async def test_probes_metrics_and_static_ui_stay_open(locked, fleet):
    for path in OPEN:
        r = await locked.get(path)
        assert r.status_code == 200, (path, r.status_code)


async def test_a_revoked_token_cannot_read(locked, db, fleet):
    store = TokenStore(db)
    token, _ = await store.create("gone")
    await store.revoke("gone")
    r = await locked.get("/tables", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 403


async def test_reads_are_open_by_default(client, fleet):
    assert (await client.get("/tables")).status_code == 200
