"""Maintenance policies over HTTP: list, put/delete at catalog, namespace or table scope, and
simulate (what the policy engine would decide for one table).

Paths name the target and the type, so one target holds at most one policy of each type:
``/policies/catalog/{catalog}/{policy_type}``,
``/policies/namespace/{catalog}/{namespace}/{policy_type}``,
``/policies/table/{catalog}/{namespace}/{table}/{policy_type}``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from icepack_core.db.queries import load_query
from icepack_core.db.tables import TableRow
from icepack_core.errors import PolicyError
from icepack_core.inspection.status import TableStatus, target_file_size
from icepack_core.planning.planner import Planner
from icepack_core.planning.recommendation import recommend
from icepack_core.planning.simulation import simulate as simulate_catalog
from icepack_core.polaris.store import attachments_of
from icepack_core.policy import EffectivePolicy, PolicyAttachment, resolve
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import load_settings
from icepack_core.types import PolicyType
from icepack_gateway import policy_replies
from icepack_gateway.endpoint import AnyEndpoint, Call, Endpoint, NoBody, NoParams, Reply
from icepack_gateway.errors import InvalidParameter, NotFound
from icepack_gateway.inputs import (
    MAX_IDENT,
    SCOPE_PATHS,
    Ident,
    PolarisPoliciesQuery,
    PoliciesQuery,
    PolicyPath,
    Scope,
)
from icepack_gateway.jsonutil import reply
from icepack_gateway.models import Table, error, ok
from icepack_gateway.policy_models import PolicyIn, ProposedPolarisPolicy, validated_config
from icepack_gateway.state import find_table, gateway, stored_id


async def list_policies(call: Call[NoParams, PoliciesQuery, NoBody]) -> Response:
    q = call.query
    rows = await gateway(call.request).pool.fetch(
        load_query("policy_list"),
        q.policy_type.value if q.policy_type else None,
        q.scope,
        q.catalog,
        q.namespace,
        q.table,
    )
    return reply(policy_replies.PolicyList(items=[policy_replies.Policy.of_row(r) for r in rows]))


POLARIS_PAGE = 5_000  # policies in one listing (bounded memory); `truncated` says if more


async def list_polaris_policies(call: Call[NoParams, PolarisPoliciesQuery, NoBody]) -> Response:
    """The Polaris policies kept (for ``catalog``, or every catalog), as mapped (unknown keys,
    invalid reasons), and how each catalog's last refresh went."""
    pool = gateway(call.request).pool
    catalog = call.query.catalog
    sources = await pool.fetch(load_query("polaris_source_list"), catalog)
    rows = await pool.fetch(load_query("polaris_policy_page"), catalog, POLARIS_PAGE + 1)
    return reply(
        policy_replies.PolarisPolicyList(
            sources=[policy_replies.PolarisSource.of_row(s) for s in sources],
            items=[policy_replies.PolarisPolicy.of_row(r) for r in rows[:POLARIS_PAGE]],
            truncated=len(rows) > POLARIS_PAGE,
        )
    )


async def put_policy(call: Call[PolicyPath, NoParams, PolicyIn]) -> Response:
    path = call.path
    catalog, namespace, table = path.target()
    config = validated_config(path.policy_type, call.body)
    pool = gateway(call.request).pool
    if table is not None:
        assert namespace is not None
        await find_table(pool, catalog, namespace, table, allow_dropped=False)
    row = await pool.fetchrow(
        load_query("policy_upsert"),
        path.policy_type.value,
        path.scope,
        catalog,
        namespace,
        table,
        call.body.enabled,
        config,
    )
    assert row is not None  # an upsert always returns its row
    return reply(
        policy_replies.PolicyStored(
            policy=policy_replies.Policy.of_row(row), created=row["created"]
        ),
        status_code=201 if row["created"] else 200,
    )


async def delete_policy(call: Call[PolicyPath, NoParams, NoBody]) -> Response:
    path = call.path
    deleted = await gateway(call.request).pool.fetchval(
        load_query("policy_delete"), path.policy_type.value, path.scope, *path.target()
    )
    if deleted is None:
        raise NotFound(
            "POLICY_NOT_FOUND", f"no {path.policy_type.value} policy at that {path.scope}"
        )
    return Response(status_code=204)


class ProposedPolicy(BaseModel):
    """A policy to try out in a simulation, as if it were stored (replacing the same target)."""

    model_config = ConfigDict(extra="forbid")

    policy_type: PolicyType
    scope: Scope
    namespace: str | None = Field(default=None, max_length=MAX_IDENT)
    table: str | None = Field(default=None, max_length=MAX_IDENT)
    enabled: bool = True
    config: dict[str, Any] = Field(default_factory=dict)


class SimulateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    catalog: Ident
    namespace: Ident
    table: Ident
    policies: list[ProposedPolicy] = Field(default_factory=list, max_length=20)


def _proposed_target(p: ProposedPolicy) -> tuple[str | None, str | None]:
    """The (namespace, table) a proposed policy attaches to; 422 when the scope needs more."""
    namespace = p.namespace if p.scope != "catalog" else None
    name = p.table if p.scope == "table" else None
    if (p.scope != "catalog" and not namespace) or (p.scope == "table" and not name):
        raise InvalidParameter(
            "policies",
            f"a {p.scope} policy needs namespace{' and table' if p.scope == 'table' else ''}",
        )
    return namespace, name


def _effective(policy: EffectivePolicy) -> policy_replies.EffectivePolicy:
    configs = {
        PolicyType.DATA_COMPACTION: policy.data_compaction,
        PolicyType.METADATA_COMPACTION: policy.metadata_compaction,
        PolicyType.SNAPSHOT_EXPIRY: policy.snapshot_expiry,
        PolicyType.ORPHAN_FILE_REMOVAL: policy.orphan_file_removal,
        PolicyType.TABLE_STATISTICS: policy.table_statistics,
    }
    # PolicyConfigs names its fields by the policy types' values (aliases); each config as its
    # full JSON (an instance would keep only the keys that were set: ``reply`` drops the rest).
    return policy_replies.EffectivePolicy(
        maintenance_enabled=policy.maintenance_enabled,
        cadence_hours=policy.cadence_hours,
        sources={PolicyType(t): source for t, source in policy.sources.items()},
        policies=policy_replies.PolicyConfigs.model_validate(
            {t.value: None if c is None else c.model_dump(mode="json") for t, c in configs.items()}
        ),
    )


async def _tried_attachments(
    pool: asyncpg.Pool, table: TableRow, proposals: list[ProposedPolicy]
) -> list[PolicyAttachment]:
    """The catalog's attachments with ``proposals`` in place, for ``table``'s simulation.

    Raises:
        InvalidParameter: a proposal's target or config is invalid (the message names it).
    """
    current = await attachments_of(pool, table.catalog)
    # A proposal replaces Icepack's own attachment at its place; Polaris' stay as they are
    # (the precedence then puts Icepack's over Polaris' at the same scope).
    polaris = [a for a in current if a.origin == "polaris"]
    attachments = {
        (a.policy_type, a.scope, a.namespace, a.table_name): a
        for a in current
        if a.origin == "icepack"
    }
    for p in proposals:
        namespace, name = _proposed_target(p)
        validated_config(p.policy_type, PolicyIn(enabled=p.enabled, config=p.config))
        attachments[(p.policy_type.value, p.scope, namespace, name)] = PolicyAttachment(
            p.policy_type.value, p.scope, table.catalog, namespace, name, p.enabled, p.config
        )
    return [*attachments.values(), *polaris]


async def simulate(call: Call[NoParams, NoParams, SimulateIn]) -> Response:
    """The effective policy of one table and what it would lead to now, writing nothing
    (``icepack_core.policy.resolve``, ``icepack_core.planning.recommendation.recommend``).
    ``policies`` in the body are tried as if stored."""
    spec = call.body
    pool = gateway(call.request).pool
    table = await find_table(pool, spec.catalog, spec.namespace, spec.table)
    attachments = await _tried_attachments(pool, table, spec.policies)
    properties = {str(k): str(v) for k, v in table.properties.items()}
    try:
        policy = resolve(attachments, table.namespace, table.name, properties)
    except PolicyError as exc:
        raise InvalidParameter("policies", str(exc)) from None
    status = await pool.fetchrow(load_query("status_latest"), stored_id(table))
    proposal = None
    if status is not None:
        last_runs = {
            r["action"]: r["finished_at"]
            for r in await pool.fetch(load_query("job_last_runs"), stored_id(table))
        }
        recommendation = recommend(
            TableStatus.model_validate(status["status"]),
            policy,
            last_runs,
            datetime.now(UTC),
            target_file_size_bytes=target_file_size(properties),
        )
        proposal = policy_replies.Proposal.model_validate(recommendation.to_json())
    return reply(
        policy_replies.Simulation(
            table=Table.of(table),
            effective_policy=_effective(policy),
            status_snapshot_id=status["id"] if status else None,
            recommendation=proposal,
        )
    )


class FleetSimulateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    catalog: Ident
    policies: list[ProposedPolicy] = Field(default_factory=list, max_length=20)
    # Proposed Polaris policies: they compete with Icepack's under the one precedence
    # (``icepack_core.policy``), replacing the Polaris policy of their type at their target.
    polaris_policies: list[ProposedPolarisPolicy] = Field(default_factory=list, max_length=20)


async def simulate_fleet(call: Call[NoParams, NoParams, FleetSimulateIn]) -> Response:
    """Which tables of a catalog the proposed policies would change, which actions they would
    get, and the estimated files/bytes affected (``icepack_core.planning.simulation``); writes
    nothing."""
    spec = call.body
    catalog = spec.catalog
    proposed = []
    for p in spec.policies:
        namespace, name = _proposed_target(p)
        proposed.append(
            PolicyAttachment(
                p.policy_type.value, p.scope, catalog, namespace, name, p.enabled, p.config
            )
        )
    if not proposed and not spec.polaris_policies:
        raise InvalidParameter("policies", "propose at least one policy or polaris policy")
    proposed += [p.attachment(catalog) for p in spec.polaris_policies]
    pool = gateway(call.request).pool
    planner = Planner(load_settings(), pool, JobQueue(pool))
    try:
        report = await simulate_catalog(planner, catalog, proposed)
    except PolicyError as exc:
        raise InvalidParameter("policies", str(exc)) from None
    return reply(policy_replies.FleetSimulation.model_validate(report.to_json()))


C, NS, T, PT = "{catalog}", "{namespace}", "{table}", "{policy_type}"
PATHS: dict[Scope, str] = {
    "catalog": f"/policies/catalog/{C}/{PT}",
    "namespace": f"/policies/namespace/{C}/{NS}/{PT}",
    "table": f"/policies/table/{C}/{NS}/{T}/{PT}",
}
NO_TABLE = {404: error("unknown table (TABLE_NOT_FOUND)")}
endpoints: list[AnyEndpoint] = [
    Endpoint(
        "GET",
        "/policies",
        list_policies,
        summary="Maintenance policies",
        query=PoliciesQuery,
        responses={200: ok(policy_replies.PolicyList)},
    ),
    Endpoint(
        "GET",
        "/policies/polaris",
        list_polaris_policies,
        summary=(
            "Policies read from a Polaris catalog, as Icepack mapped them (unknown keys, "
            "invalid reasons), and how their last refresh went"
        ),
        query=PolarisPoliciesQuery,
        responses={200: ok(policy_replies.PolarisPolicyList)},
    ),
    Endpoint(
        "POST",
        "/policies/simulate",
        simulate,
        summary="Effective policy of a table and what it would lead to now (writes nothing; "
        "`policies` in the body are tried as if stored)",
        body=SimulateIn,
        responses={200: ok(policy_replies.Simulation), **NO_TABLE},
    ),
    Endpoint(
        "POST",
        "/policies/simulate/fleet",
        simulate_fleet,
        summary="Which tables of a catalog proposed policies would change, with their new actions "
        "and the estimated files/bytes affected (writes nothing, enqueues nothing)",
        body=FleetSimulateIn,
        responses={200: ok(policy_replies.FleetSimulation)},
    ),
    *(
        Endpoint[PolicyPath, NoParams, PolicyIn](
            "PUT",
            path,
            put_policy,
            summary=f"Create or replace a {scope}-level policy",
            path_params=SCOPE_PATHS[scope],
            body=PolicyIn,
            responses={
                200: ok(policy_replies.PolicyStored, "replaced"),
                201: ok(policy_replies.PolicyStored, "created"),
                **NO_TABLE,
            },
            name=f"put_{scope}_policy",
        )
        for scope, path in PATHS.items()
    ),
    *(
        Endpoint[PolicyPath, NoParams, NoBody](
            "DELETE",
            path,
            delete_policy,
            summary=f"Remove a {scope}-level policy",
            path_params=SCOPE_PATHS[scope],
            responses={
                204: Reply("removed", media_type=None),
                404: error("no such policy (POLICY_NOT_FOUND)"),
            },
            name=f"delete_{scope}_policy",
        )
        for scope, path in PATHS.items()
    ),
]
