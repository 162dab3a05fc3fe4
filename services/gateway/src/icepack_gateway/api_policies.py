"""Maintenance policies over HTTP: list, put/delete at catalog, namespace or table scope, and
simulate (what the policy engine would decide for one table).

Paths name the target and the type, so one target holds at most one policy of each type:
``/policies/catalog/{catalog}/{policy_type}``,
``/policies/namespace/{catalog}/{namespace}/{policy_type}``,
``/policies/table/{catalog}/{namespace}/{table}/{policy_type}``.
"""

from __future__ import annotations

import importlib
from datetime import UTC, datetime
from typing import Any, Literal

import asyncpg
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from icepack_core.db.queries import load_query
from icepack_gateway.errors import InvalidParameter, NotAvailable, NotFound
from icepack_gateway.jsonutil import ApiResponse
from icepack_gateway.params import MAX_IDENT, ident, json_body, only, opt_choice, opt_ident
from icepack_gateway.policy_models import PolicyType, policy_engine, validated_body
from icepack_gateway.state import find_table, gateway, table_json

SCOPES = ("catalog", "namespace", "table")
POLICY_KEYS = ("id", "policy_type", "scope", "catalog", "namespace", "table_name", "enabled",
               "config", "created_at", "updated_at")


def policy_json(row: asyncpg.Record) -> dict[str, Any]:
    return {k: row[k] for k in POLICY_KEYS}


async def list_policies(request: Request) -> Response:
    q = request.query_params
    only(q, {"policy_type", "scope", "catalog", "namespace", "table"})
    policy_type = opt_choice(q, "policy_type", PolicyType)
    scope = q.get("scope")
    if scope is not None and scope not in SCOPES:
        raise InvalidParameter("scope", f"must be one of {', '.join(SCOPES)}")
    rows = await gateway(request).pool.fetch(
        load_query("policy_list"), policy_type.value if policy_type else None, scope,
        opt_ident(q, "catalog"), opt_ident(q, "namespace"), opt_ident(q, "table"))
    return ApiResponse({"items": [policy_json(r) for r in rows]})


def _target(request: Request, scope: str) -> tuple[PolicyType, str, str | None, str | None]:
    p = request.path_params
    try:
        policy_type = PolicyType(p["policy_type"])
    except ValueError:
        raise InvalidParameter("policy_type", "must be one of " + ", ".join(
            t.value for t in PolicyType)) from None
    catalog = ident("catalog", p["catalog"])
    namespace = ident("namespace", p["namespace"]) if scope != "catalog" else None
    table = ident("table", p["table"]) if scope == "table" else None
    return policy_type, catalog, namespace, table


def _put(scope: str) -> Any:
    async def put_policy(request: Request) -> Response:
        only(request.query_params, set())
        policy_type, catalog, namespace, table = _target(request, scope)
        enabled, config = validated_body(policy_type, await json_body(request))
        pool = gateway(request).pool
        if table is not None:
            assert namespace is not None
            await find_table(pool, catalog, namespace, table, allow_dropped=False)
        row = await pool.fetchrow(load_query("policy_upsert"), policy_type.value, scope,
                                  catalog, namespace, table, enabled, config)
        assert row is not None  # an upsert always returns its row
        return ApiResponse({"policy": policy_json(row), "created": row["created"]},
                           status_code=201 if row["created"] else 200)

    return put_policy


def _delete(scope: str) -> Any:
    async def delete_policy(request: Request) -> Response:
        only(request.query_params, set())
        policy_type, catalog, namespace, table = _target(request, scope)
        deleted = await gateway(request).pool.fetchval(
            load_query("policy_delete"), policy_type.value, scope, catalog, namespace, table)
        if deleted is None:
            raise NotFound("POLICY_NOT_FOUND", f"no {policy_type.value} policy at that {scope}")
        return Response(status_code=204)

    return delete_policy


class ProposedPolicy(BaseModel):
    """A policy to try out in a simulation, as if it were stored (replacing the same target)."""

    model_config = ConfigDict(extra="forbid")

    policy_type: PolicyType
    scope: Literal["catalog", "namespace", "table"]
    namespace: str | None = Field(default=None, max_length=MAX_IDENT)
    table: str | None = Field(default=None, max_length=MAX_IDENT)
    enabled: bool = True
    config: dict[str, Any] = Field(default_factory=dict)


class SimulateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    catalog: str = Field(min_length=1, max_length=MAX_IDENT)
    namespace: str = Field(min_length=1, max_length=MAX_IDENT)
    table: str = Field(min_length=1, max_length=MAX_IDENT)
    policies: list[ProposedPolicy] = Field(default_factory=list, max_length=20)


def _proposed_target(p: ProposedPolicy) -> tuple[str | None, str | None]:
    """The (namespace, table) a proposed policy attaches to; 422 when the scope needs more."""
    namespace = p.namespace if p.scope != "catalog" else None
    name = p.table if p.scope == "table" else None
    if (p.scope != "catalog" and not namespace) or (p.scope == "table" and not name):
        raise InvalidParameter("policies", f"a {p.scope} policy needs namespace"
                                           f"{' and table' if p.scope == 'table' else ''}")
    return namespace, name


def _policy_json(policy: Any) -> dict[str, Any]:
    configs = {"system.data-compaction": policy.data_compaction,
               "system.metadata-compaction": policy.metadata_compaction,
               "system.snapshot-expiry": policy.snapshot_expiry,
               "system.orphan-file-removal": policy.orphan_file_removal}
    return {"maintenance_enabled": policy.maintenance_enabled,
            "cadence_hours": policy.cadence_hours, "sources": dict(policy.sources),
            "policies": {t: None if c is None else c.model_dump(mode="json")
                         for t, c in configs.items()}}


async def simulate(request: Request) -> Response:
    """The effective policy of one table and what it would lead to now, writing nothing.

    Uses the policy engine (``icepack_core.policy.resolve``) and the recommender
    (``icepack_core.planning.recommendation.recommend``), imported lazily: without them the
    answer is 501 NOT_AVAILABLE. ``policies`` in the body are tried as if stored.
    """
    only(request.query_params, set())
    spec = SimulateIn.model_validate(await json_body(request))
    pool = gateway(request).pool
    table = await find_table(pool, ident("catalog", spec.catalog),
                             ident("namespace", spec.namespace), ident("table", spec.table))
    engine = policy_engine()
    try:
        recommender = importlib.import_module("icepack_core.planning.recommendation")
    except ImportError:
        raise NotAvailable("simulation needs icepack_core.planning.recommendation") from None
    stored = await pool.fetch(load_query("policy_list"), None, None, table["catalog"], None, None)
    attachments = {(r["policy_type"], r["scope"], r["namespace"], r["table_name"]):
                   engine.PolicyAttachment(r["policy_type"], r["scope"], r["catalog"],
                                           r["namespace"], r["table_name"], r["enabled"],
                                           r["config"]) for r in stored}
    for p in spec.policies:
        namespace, name = _proposed_target(p)
        validated_body(p.policy_type, {"enabled": p.enabled, "config": p.config})
        attachments[(p.policy_type.value, p.scope, namespace, name)] = engine.PolicyAttachment(
            p.policy_type.value, p.scope, table["catalog"], namespace, name, p.enabled, p.config)
    properties = {str(k): str(v) for k, v in (table["properties"] or {}).items()}
    try:
        policy = engine.resolve(attachments.values(), table["namespace"], table["name"],
                                properties)
    except engine.PolicyError as exc:
        raise InvalidParameter("policies", str(exc)) from None
    status = await pool.fetchrow(load_query("status_latest"), table["id"])
    recommendation = None
    if status is not None:
        last_runs = {r["action"]: r["finished_at"]
                     for r in await pool.fetch(load_query("job_last_runs"), table["id"])}
        target = properties.get("write.target-file-size-bytes", "")
        recommendation = recommender.recommend(
            status["status"], policy, last_runs, datetime.now(UTC),
            target_file_size_bytes=int(target) if target.isdigit() else None).to_json()
    return ApiResponse({"table": table_json(table), "effective_policy": _policy_json(policy),
                        "status_snapshot_id": status["id"] if status else None,
                        "recommendation": recommendation})


class FleetSimulateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    catalog: str = Field(min_length=1, max_length=MAX_IDENT)
    policies: list[ProposedPolicy] = Field(min_length=1, max_length=20)


async def simulate_fleet(request: Request) -> Response:
    """Which tables of a catalog the proposed policies would change, which actions they would
    get, and the estimated files/bytes affected (``icepack_core.planning.simulation``); writes
    nothing."""
    from icepack_core.errors import PolicyError
    from icepack_core.planning.planner import Planner
    from icepack_core.planning.simulation import simulate as simulate_catalog
    from icepack_core.policy import PolicyAttachment
    from icepack_core.queue.jobs import JobQueue
    from icepack_core.settings import load_settings

    only(request.query_params, set())
    spec = FleetSimulateIn.model_validate(await json_body(request))
    catalog = ident("catalog", spec.catalog)
    proposed = []
    for p in spec.policies:
        namespace, name = _proposed_target(p)
        proposed.append(PolicyAttachment(p.policy_type.value, p.scope, catalog, namespace, name,
                                         p.enabled, p.config))
    pool = gateway(request).pool
    planner = Planner(load_settings(), pool, JobQueue(pool))
    try:
        report = await simulate_catalog(planner, catalog, proposed)
    except PolicyError as exc:
        raise InvalidParameter("policies", str(exc)) from None
    return ApiResponse(report.to_json())


C, NS, T, PT = "{catalog}", "{namespace}", "{table}", "{policy_type}"
PATHS = {
    "catalog": f"/policies/catalog/{C}/{PT}",
    "namespace": f"/policies/namespace/{C}/{NS}/{PT}",
    "table": f"/policies/table/{C}/{NS}/{T}/{PT}",
}
routes = [
    Route("/policies", list_policies, methods=["GET"]),
    Route("/policies/simulate", simulate, methods=["POST"]),
    Route("/policies/simulate/fleet", simulate_fleet, methods=["POST"]),
    *(Route(path, _put(scope), methods=["PUT"], name=f"put_{scope}_policy")
      for scope, path in PATHS.items()),
    *(Route(path, _delete(scope), methods=["DELETE"], name=f"delete_{scope}_policy")
      for scope, path in PATHS.items()),
]
