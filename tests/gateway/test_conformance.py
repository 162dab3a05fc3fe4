"""Every response of the live gateway conforms to its own ``/openapi.json``.

For each route of the app (read from the app itself, so a new route without cases fails
``test_every_route_has_success_and_error_cases``) the cases below send real requests to the
gateway on a seeded database: at least one success and one error each. Every answer's status
must be documented for that route, its media type must match, and a JSON body must validate
(``jsonschema``, draft 2020-12, ``$ref``s resolved against the served document) against the
schema documented for that status. Response models forbid extra keys, so a key a handler
returns that its model lacks fails here too. Cases with ``down`` go to a gateway whose
database is unreachable (503s).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pytest
from jsonschema import Draft202012Validator
from starlette.applications import Starlette
from starlette.routing import Route

from icepack_core.local.ports import free_port
from icepack_core.settings import load_settings
from icepack_gateway.app import create_app
from tests.gateway.seed import Fleet, add_table, seed_deletions, seed_many
from tests.gateway.test_ui_safety import failed_verification_job

NOTHING = object()
T = "/tables/{catalog}/{namespace}/{table}"
POLICY_PATHS = {
    "catalog": "/policies/catalog/{catalog}/{policy_type}",
    "namespace": "/policies/namespace/{catalog}/{namespace}/{policy_type}",
    "table": "/policies/table/{catalog}/{namespace}/{table}/{policy_type}",
}
# Routes no request can make fail: they answer constants and read no parameter, body or
# database (the redirect, liveness, the document itself).
NO_ERROR_POSSIBLE = {("GET", "/"), ("GET", "/healthz"), ("GET", "/openapi.json")}


@dataclass(frozen=True)
class Case:
    """One request to ``route`` (method, template) at ``url`` (``{name}`` filled from the
    seeded ids), and the status it must get."""

    method: str
    route: str
    url: str
    status: int
    body: Any = NOTHING
    token: bool = True
    down: bool = False
    raw: bytes | None = None
    headers: dict[str, str] | None = None  # instead of the operator token (the hook's own)


HOOK_TOKEN = "hook-token-for-conformance"
HOOK = {"authorization": f"Bearer {HOOK_TOKEN}"}


def hook_event(catalog: str = "demo", **data: Any) -> dict[str, Any]:
    return {
        "specversion": "1.0",
        "id": "e1",
        "source": "/polaris",
        "type": "table.updated",
        "data": {"catalog": catalog, "namespace": ["sales"], "table": "orders", **data},
    }


def get(route: str, url: str, status: int, *, down: bool = False) -> Case:
    return Case("GET", route, url, status, down=down)


ORDERS, CLICKS, USERS, FRESH = (
    f"/tables/demo/{t}" for t in ("sales/orders", "web/clicks", "crm/users", "new/fresh")
)
NO_TABLE = "/tables/demo/no/such"
BAD_CURSOR = "cursor=bm9wZQ"
JOB = {
    "catalog": "demo",
    "namespace": "sales",
    "table": "orders",
    "actions": [{"action": "rewrite_manifests", "reason": "many manifests"}],
}
SIM = {"catalog": "demo", "namespace": "web", "table": "clicks"}
# A proposed Polaris policy as Polaris' create request and attach target spell it.
POLARIS_PROPOSED = {
    "name": "compact1",
    "type": "system.data-compaction",
    "content": json.dumps(
        {"version": "2025-02-03", "enable": True, "config": {"target_file_size_bytes": 2**27}}
    ),
    "target": {"type": "namespace", "path": ["web"]},
}
PROPOSED = [
    {
        "policy_type": "system.data-compaction",
        "scope": "namespace",
        "namespace": "web",
        "config": {"min_input_files": 2},
    }
]


def policy_cases(scope: str) -> list[Case]:
    route = POLICY_PATHS[scope]
    url = route.format(
        catalog="demo", namespace="web", table="clicks", policy_type="system.data-compaction"
    )
    return [
        Case("PUT", route, url, 201, {"config": {"min_input_files": 8}}),
        Case("PUT", route, url, 200, {"enabled": False}),
        Case("PUT", route, url, 422, {"config": {"bogus": 1}}),
        Case(
            "PUT",
            route,
            route.format(
                catalog="demo", namespace="web", table="clicks", policy_type="system.nope"
            ),
            422,
            {"config": {}},
        ),
        Case("PUT", route, url, 401, {}, token=False),
    ]


def delete_cases(scope: str) -> list[Case]:
    route = POLICY_PATHS[scope]
    url = route.format(
        catalog="demo", namespace="web", table="clicks", policy_type="system.metadata-compaction"
    )
    return [
        Case("PUT", route, url, 201, {"config": {}}),
        Case("DELETE", route, url, 204),
        Case("DELETE", route, url, 404),
        Case("DELETE", route, f"{url}?force=1", 422),
    ]


CASES: dict[tuple[str, str], list[Case]] = {
    ("POST", "/hooks/catalog-events"): [
        Case(
            "POST",
            "/hooks/catalog-events",
            "/hooks/catalog-events",
            202,
            hook_event(),
            token=False,
            headers=HOOK,
        ),
        Case(
            "POST",
            "/hooks/catalog-events",
            "/hooks/catalog-events",
            202,
            hook_event(**{"metadata-location": "file:///w/m.metadata.json"}),
            token=False,
            headers=HOOK,
        ),
        Case(
            "POST", "/hooks/catalog-events", "/hooks/catalog-events", 401, hook_event(), token=False
        ),
        Case("POST", "/hooks/catalog-events", "/hooks/catalog-events", 401, hook_event()),
        Case(
            "POST",
            "/hooks/catalog-events",
            "/hooks/catalog-events",
            404,
            hook_event("nope"),
            token=False,
            headers=HOOK,
        ),
        Case(
            "POST",
            "/hooks/catalog-events",
            "/hooks/catalog-events",
            422,
            {**hook_event(), "specversion": "0.3"},
            token=False,
            headers=HOOK,
        ),
    ],
    ("GET", "/"): [get("/", "/", 307)],
    ("GET", "/healthz"): [get("/healthz", "/healthz", 200)],
    ("GET", "/readyz"): [get("/readyz", "/readyz", 200), get("/readyz", "/readyz", 503, down=True)],
    ("GET", "/openapi.json"): [get("/openapi.json", "/openapi.json", 200)],
    ("GET", "/metrics"): [
        get("/metrics", "/metrics", 200),
        get("/metrics", "/metrics", 503, down=True),
    ],
    ("GET", "/tables"): [
        get("/tables", "/tables", 200),
        get("/tables", "/tables?sort=name&limit=2", 200),
        get("/tables", "/tables?sort=-score&health=critical&issue=SMALL_FILES&q=cl", 200),
        get("/tables", "/tables?heatlh=critical", 422),
        get("/tables", "/tables?limit=0", 422),
        get("/tables", f"/tables?{BAD_CURSOR}", 400),
        get("/tables", "/tables", 503, down=True),
    ],
    ("GET", "/summary"): [get("/summary", "/summary", 200), get("/summary", "/summary?x=1", 422)],
    ("GET", T): [
        get(T, ORDERS, 200),
        get(T, CLICKS, 200),
        get(T, USERS, 200),
        get(T, FRESH, 200),
        get(T, NO_TABLE, 404),
        get(T, f"{ORDERS}?x=1", 422),
    ],
    ("GET", f"{T}/status"): [
        get(f"{T}/status", f"{ORDERS}/status", 200),
        get(f"{T}/status", f"{FRESH}/status", 404),
        get(f"{T}/status", f"{NO_TABLE}/status", 404),
    ],
    ("GET", f"{T}/status/history"): [
        get(f"{T}/status/history", f"{CLICKS}/status/history?limit=2", 200),
        get(f"{T}/status/history", f"{CLICKS}/status/history?{BAD_CURSOR}", 400),
        get(f"{T}/status/history", f"{NO_TABLE}/status/history", 404),
    ],
    ("GET", f"{T}/health"): [
        get(f"{T}/health", f"{CLICKS}/health", 200),
        get(f"{T}/health", f"{FRESH}/health", 404),
    ],
    ("GET", f"{T}/maintenance/recommendation"): [
        get(f"{T}/maintenance/recommendation", f"{CLICKS}/maintenance/recommendation", 200),
        get(f"{T}/maintenance/recommendation", f"{FRESH}/maintenance/recommendation", 404),
    ],
    ("GET", f"{T}/jobs"): [
        get(f"{T}/jobs", f"{ORDERS}/jobs?limit=1", 200),
        get(f"{T}/jobs", f"{ORDERS}/jobs?limit=0", 422),
        get(f"{T}/jobs", f"{NO_TABLE}/jobs", 404),
    ],
    ("GET", f"{T}/history"): [
        get(f"{T}/history", f"{ORDERS}/history", 200),
        get(f"{T}/history", f"{USERS}/history", 200),
        get(f"{T}/history", f"{NO_TABLE}/history", 404),
    ],
    ("POST", f"{T}/hold/release"): [
        Case("POST", f"{T}/hold/release", f"{USERS}/hold/release", 422, {"force": True}),
        Case("POST", f"{T}/hold/release", f"{USERS}/hold/release", 200, {"reason": "checked"}),
        Case("POST", f"{T}/hold/release", f"{USERS}/hold/release", 409),
        Case("POST", f"{T}/hold/release", f"{NO_TABLE}/hold/release", 404),
        Case("POST", f"{T}/hold/release", f"{USERS}/hold/release", 401, token=False),
    ],
    ("GET", "/jobs"): [
        get("/jobs", "/jobs", 200),
        get("/jobs", "/jobs?state=queued", 200),
        get("/jobs", "/jobs?table=demo.sales.orders&limit=1", 200),
        get("/jobs", "/jobs?state=done", 422),
        get("/jobs", "/jobs?table=demo.no.such", 404),
        get("/jobs", f"/jobs?{BAD_CURSOR}", 400),
    ],
    ("POST", "/jobs"): [
        Case("POST", "/jobs", "/jobs", 201, JOB),
        Case("POST", "/jobs", "/jobs", 200, JOB),
        Case("POST", "/jobs", "/jobs", 409, JOB | {"namespace": "crm", "table": "users"}),
        Case("POST", "/jobs", "/jobs", 422, {"catalog": "demo"}),
        Case("POST", "/jobs", "/jobs", 422, raw=b"{nope"),
        Case("POST", "/jobs", "/jobs", 404, JOB | {"table": "nope"}),
        Case("POST", "/jobs", "/jobs", 401, JOB, token=False),
        Case("POST", "/jobs", "/jobs", 413, raw=b" " * (1024 * 1024 + 1)),
    ],
    ("GET", "/jobs/{id}"): [
        get("/jobs/{id}", "/jobs/{done}", 200),
        get("/jobs/{id}", "/jobs/{failed}", 200),
        get("/jobs/{id}", "/jobs/{held}", 200),
        get("/jobs/{id}", "/jobs/{queued}", 200),
        get("/jobs/{id}", "/jobs/999999", 404),
        get("/jobs/{id}", "/jobs/abc", 422),
    ],
    ("POST", "/jobs/{id}/cancel"): [
        Case("POST", "/jobs/{id}/cancel", "/jobs/{queued}/cancel", 200),
        Case("POST", "/jobs/{id}/cancel", "/jobs/{done}/cancel", 409),
        Case("POST", "/jobs/{id}/cancel", "/jobs/999999/cancel", 404),
        Case("POST", "/jobs/{id}/cancel", "/jobs/0/cancel", 422),
    ],
    ("GET", "/jobs/{id}/deletions"): [
        get("/jobs/{id}/deletions", "/jobs/{done}/deletions", 200),
        get("/jobs/{id}/deletions", "/jobs/{queued}/deletions", 200),
        get("/jobs/{id}/deletions", "/jobs/999999/deletions", 404),
        get("/jobs/{id}/deletions", "/jobs/abc/deletions", 422),
    ],
    ("POST", "/jobs/{id}/restore"): [
        Case("POST", "/jobs/{id}/restore", "/jobs/{done}/restore", 201),
        Case("POST", "/jobs/{id}/restore", "/jobs/{done}/restore", 200),
        Case("POST", "/jobs/{id}/restore", "/jobs/{queued}/restore", 409),
        Case("POST", "/jobs/{id}/restore", "/jobs/999999/restore", 404),
        Case("POST", "/jobs/{id}/restore", "/jobs/{done}/restore", 401, token=False),
    ],
    ("GET", "/events"): [
        get("/events", "/events", 200),
        get("/events", "/events?topic=job.finished&limit=2", 200),
        get("/events", "/events?topic=JOB", 422),
        get("/events", "/events?table=demo.no.such", 404),
        get("/events", f"/events?{BAD_CURSOR}", 400),
    ],
    ("GET", "/policies"): [
        get("/policies", "/policies", 200),
        get("/policies", "/policies?scope=catalog&catalog=demo", 200),
        get("/policies", "/policies?scope=everywhere", 422),
    ],
    ("GET", "/policies/polaris"): [
        get("/policies/polaris", "/policies/polaris", 200),
        get("/policies/polaris", "/policies/polaris?catalog=demo", 200),
        get("/policies/polaris", "/policies/polaris?catalog=", 422),
    ],
    ("POST", "/policies/simulate"): [
        Case("POST", "/policies/simulate", "/policies/simulate", 200, SIM),
        Case("POST", "/policies/simulate", "/policies/simulate", 200, SIM | {"policies": PROPOSED}),
        Case(
            "POST",
            "/policies/simulate",
            "/policies/simulate",
            200,
            {"catalog": "demo", "namespace": "new", "table": "fresh"},
        ),
        Case("POST", "/policies/simulate", "/policies/simulate", 404, SIM | {"table": "nope"}),
        Case("POST", "/policies/simulate", "/policies/simulate", 422, SIM | {"x": 1}),
    ],
    ("POST", "/policies/simulate/fleet"): [
        Case(
            "POST",
            "/policies/simulate/fleet",
            "/policies/simulate/fleet",
            200,
            {"catalog": "demo", "policies": PROPOSED},
        ),
        Case(
            "POST",
            "/policies/simulate/fleet",
            "/policies/simulate/fleet",
            200,
            {"catalog": "demo", "polaris_policies": [POLARIS_PROPOSED]},
        ),
        Case(
            "POST",
            "/policies/simulate/fleet",
            "/policies/simulate/fleet",
            422,
            {"catalog": "demo", "policies": []},
        ),
    ],
    ("GET", "/budgets"): [
        get("/budgets", "/budgets", 200),
        get("/budgets", "/budgets?catalog=demo", 422),
        get("/budgets", "/budgets", 503, down=True),
    ],
    ("PUT", "/budgets/{catalog}"): [
        Case("PUT", "/budgets/{catalog}", "/budgets/demo", 200, {"max_running": 2}),
        Case(
            "PUT",
            "/budgets/{catalog}",
            "/budgets/demo",
            200,
            {"namespace": "sales", "rewrite_bytes_per_hour": 10**9, "max_running": 1},
        ),
        Case("PUT", "/budgets/{catalog}", "/budgets/demo", 422, {"max_running": 0}),
        Case("PUT", "/budgets/{catalog}", "/budgets/demo", 422, {}),
        Case("PUT", "/budgets/{catalog}", "/budgets/demo", 422, {"namespace": ""}),
        Case("PUT", "/budgets/{catalog}", "/budgets/demo", 401, {"max_running": 2}, token=False),
    ],
    ("DELETE", "/budgets/{catalog}"): [
        Case("DELETE", "/budgets/{catalog}", "/budgets/demo", 404),
        Case("PUT", "/budgets/{catalog}", "/budgets/demo", 200, {"max_running": 2}),
        Case("DELETE", "/budgets/{catalog}", "/budgets/demo?namespace=sales", 404),
        Case("DELETE", "/budgets/{catalog}", "/budgets/demo", 200),
        Case("DELETE", "/budgets/{catalog}", "/budgets/demo", 401, token=False),
    ],
    **{("PUT", path): policy_cases(scope) for scope, path in POLICY_PATHS.items()},
    **{("DELETE", path): delete_cases(scope) for scope, path in POLICY_PATHS.items()},
}


def served_routes(app: Any) -> set[tuple[str, str]]:
    """(method, path template) of every route the app serves (HEAD rides along with GET)."""
    return {
        (method, route.path)
        for route in app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }


def test_every_route_has_success_and_error_cases(db: asyncpg.Pool) -> None:
    app = create_app(db)
    served = served_routes(app)
    documented = {(m.upper(), p) for p, ops in app.state.openapi["paths"].items() for m in ops}
    assert served == documented
    operation_ids = [
        op["operationId"] for ops in app.state.openapi["paths"].values() for op in ops.values()
    ]
    assert len(set(operation_ids)) == len(operation_ids)
    assert len(served) >= 29
    assert served == set(CASES), (
        "routes without conformance cases",
        sorted(served - set(CASES)),
        "cases for no route",
        sorted(set(CASES) - served),
    )
    for key, cases in CASES.items():
        own = [c.status for c in cases if (c.method, c.route) == key]
        assert any(s < 400 for s in own), (key, "no success case")
        assert key in NO_ERROR_POSSIBLE or any(s >= 400 for s in own), (key, "no error case")


@pytest.fixture
def app(db: asyncpg.Pool, database_url: str) -> Starlette:
    """The gateway with its catalog event hook on (a hook token, the seeded catalog watched)."""
    settings = load_settings(
        gateway_hook_token=HOOK_TOKEN,
        catalogs=[{"name": "demo", "type": "sql", "uri": database_url}],
    )
    return create_app(db, settings=settings)


@pytest.fixture
async def down() -> AsyncIterator[httpx.AsyncClient]:
    """A gateway whose database does not answer (nothing listens on the port)."""
    pool = await asyncpg.create_pool(
        f"postgresql://postgres@127.0.0.1:{free_port()}/x", min_size=0, max_size=1
    )
    try:
        transport = httpx.ASGITransport(app=create_app(pool))
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
            yield c
    finally:
        await pool.close()


@pytest.fixture
async def ids(db: asyncpg.Pool, fleet: Fleet) -> dict[str, int]:
    """Seeded ids the case URLs name; also a held table, a never-inspected one and a bulk
    fleet (issues written by SQL, not the model)."""
    held = await failed_verification_job(db, fleet.tables["crm.users"])
    async with db.acquire() as conn:
        await add_table(conn, "new", "fresh")
    await seed_many(db, 5)
    await seed_deletions(db, fleet.jobs["done"], fleet.tables["sales.orders"])
    return {**fleet.jobs, "held": held}


def check(document: dict[str, Any], case: Case, response: httpx.Response) -> list[str]:
    """What is wrong with ``response`` against ``document`` (nothing: an empty list)."""
    where = f"{case.method} {case.url} -> {response.status_code}"
    if response.status_code != case.status:
        return [f"{where}: expected {case.status}: {response.text[:500]}"]
    operation = document["paths"][case.route][case.method.lower()]
    documented = operation["responses"].get(str(response.status_code))
    if documented is None:
        return [f"{where}: status not documented for {case.route}"]
    content = documented.get("content")
    if content is None:
        return [] if response.content == b"" else [f"{where}: documented without a body"]
    ((media, spec),) = content.items()
    if not response.headers.get("content-type", "").startswith(media):
        return [f"{where}: content-type {response.headers.get('content-type')}, not {media}"]
    if media != "application/json":
        return []
    schema = {**spec["schema"], "components": document["components"]}
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    return [
        f"{where}: {'/'.join(map(str, e.absolute_path))}: {e.message[:300]}"
        for e in validator.iter_errors(response.json())
    ]


@pytest.mark.parametrize("key", sorted(CASES), ids=lambda k: f"{k[0]} {k[1]}")
async def test_responses_conform_to_the_document(
    client: httpx.AsyncClient,
    down: httpx.AsyncClient,
    auth: dict[str, str],
    ids: dict[str, int],
    key: tuple[str, str],
) -> None:
    document = (await client.get("/openapi.json")).json()
    problems: list[str] = []
    for case in CASES[key]:
        case = Case(**{**vars(case), "url": case.url.format(**ids)})
        content = (
            case.raw
            if case.raw is not None
            else (None if case.body is NOTHING else json.dumps(case.body).encode())
        )
        headers = {
            **(auth if case.token else {}),
            **(case.headers or {}),
            **({"content-type": "application/json"} if content is not None else {}),
        }
        response = await (down if case.down else client).request(
            case.method, case.url, content=content, headers=headers
        )
        problems += check(document, case, response)
    assert not problems, "\n".join(problems)
