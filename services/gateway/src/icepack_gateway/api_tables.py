"""Read APIs of the fleet: ``/tables``, ``/summary`` and one table's status, health,
recommendation and maintenance history."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg
from starlette.responses import Response

from icepack_core.db.queries import load_query
from icepack_core.db.tables import TableRow
from icepack_core.types import Health
from icepack_gateway import models
from icepack_gateway.api_jobs import job_reply, jobs_with_actions
from icepack_gateway.endpoint import AnyEndpoint, Call, Endpoint, NoBody, NoParams
from icepack_gateway.errors import InvalidCursor, NotFound, TableNotFound
from icepack_gateway.inputs import (
    HistoryQuery,
    Page,
    Sort,
    StatusHistoryQuery,
    TablePath,
    TablesQuery,
)
from icepack_gateway.jsonutil import reply
from icepack_gateway.models import error, ok
from icepack_gateway.params import decode_cursor, encode_cursor
from icepack_gateway.state import find_table, gateway, stored_id

# The current metrics a fleet listing carries per table (the full status is one call away).
LIST_METRICS = tuple(models.ListMetrics.model_fields)


def _list_item(row: asyncpg.Record) -> models.TableListItem:
    status: Mapping[str, Any] | None = row["status"]
    return models.TableListItem.of_row(
        row,
        issues=[
            models.IssueSummary(code=i.get("code"), severity=i.get("severity"))
            for i in row["issues"] or []
        ],
        metrics=(
            models.ListMetrics.model_validate({k: status.get(k) for k in LIST_METRICS})
            if status
            else None
        ),
    )


async def _fetch_planned(pool: asyncpg.Pool, query: str, *args: Any) -> list[asyncpg.Record]:
    """``fetch`` with a plan made for these very parameter values.

    asyncpg prepares every statement, and after five executions Postgres may switch a prepared
    statement to a generic plan. For the optional-filter keyset pages that plan cannot use the
    score or name index order (it sorts the fleet: ~20 ms instead of ~1 ms), and whether it is
    chosen depends on which pages the connection served first. ``SET LOCAL``: the setting ends
    with this read's transaction (pooled connections keep no session state, ``db.pool``).
    """
    async with pool.acquire() as conn, conn.transaction(readonly=True):
        await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
        rows: list[asyncpg.Record] = await conn.fetch(query, *args)
        return rows


async def list_tables(call: Call[NoParams, TablesQuery, NoBody]) -> Response:
    q = call.query
    sort = q.sort
    filters = (q.catalog, q.namespace, q.health.value if q.health else None, q.issue, q.q)
    size = q.limit
    pool = gateway(call.request).pool
    if sort is Sort.NAME:
        key = decode_cursor(q.cursor, "tables:name", (str, str, str)) or ["", "", ""]
        rows = await _fetch_planned(pool, load_query("table_page_by_name"), *filters, *key, size)
    else:
        key = decode_cursor(q.cursor, f"tables:{sort.value}", (int, str, str, str)) or [
            -1000,
            "",
            "",
            "",
        ]
        if not -1000 <= key[0] <= 1000:
            raise InvalidCursor("is not a cursor this API returned")
        rows = await _fetch_planned(
            pool,
            load_query("table_page_by_score"),
            *filters,
            *key[1:],
            size,
            sort is Sort.SCORE_DESC,
            key[0],
        )
    next_cursor = None
    if len(rows) == size:
        last = rows[-1]
        tail = [last["catalog"], last["namespace"], last["name"]]
        next_cursor = (
            encode_cursor("tables:name", tail)
            if sort is Sort.NAME
            else encode_cursor(f"tables:{sort.value}", [last["sort_key"], *tail])
        )
    return reply(models.TablePage(items=[_list_item(r) for r in rows], next_cursor=next_cursor))


async def summary(call: Call[NoParams, NoParams, NoBody]) -> Response:
    health = dict.fromkeys(Health, 0)
    async with gateway(call.request).pool.acquire() as conn:  # one connection, one reset
        for row in await conn.fetch(load_query("health_fleet_counts")):
            health[Health(row["health"])] = row["tables"]
        issues = {
            r["code"]: r["tables"] for r in await conn.fetch(load_query("health_issue_counts"))
        }
        queue = {r["state"]: r["jobs"] for r in await conn.fetch(load_query("job_queue_depth"))}
    return reply(
        models.Summary(tables=sum(health.values()), health=health, issues=issues, jobs=queue)
    )


def _recommendation(row: models.Row) -> models.Recommendation:
    """A ``recommendations`` row for the API: ``actions`` (each ``{action, reason, params,
    estimated_benefit}``) and ``skipped`` (each ``{action, reason}``) side by side, and
    ``policy_sources`` (per policy type, where its settings came from; empty when the policy
    named none).

    The column holds what ``Recommendation.to_json`` wrote: ``{"actions", "skipped"}``, and
    ``policy_sources`` when there are any.
    """
    stored: Mapping[str, Any] = row["actions"]
    return models.Recommendation.of_row(
        row,
        actions=stored["actions"],
        skipped=stored["skipped"],
        policy_sources=dict(stored.get("policy_sources") or {}),
    )


async def table_detail(call: Call[TablePath, NoParams, NoBody]) -> Response:
    pool = gateway(call.request).pool
    catalog, namespace, name = call.path.catalog, call.path.namespace, call.path.table
    # One connection for both reads: each release costs the pool a reset round trip.
    async with pool.acquire() as conn:
        row = await conn.fetchrow(load_query("table_detail"), catalog, namespace, name)
        if row is None:
            raise TableNotFound(catalog, namespace, name)
        job = (
            await conn.fetchrow(load_query("job_detail"), row["job_id"])
            if row["job_id"] is not None
            else None
        )
    return reply(
        models.TableDetail(
            table=models.Table.of(TableRow.from_record(row)),
            health=row["health"],
            status=row["status"],
            recommendation=(
                _recommendation(row["recommendation"]) if row["recommendation"] else None
            ),
            latest_job=job_reply(job) if job is not None else None,
        )
    )


async def table_status(call: Call[TablePath, NoParams, NoBody]) -> Response:
    pool = gateway(call.request).pool
    table = await find_table(pool, *ref(call.path))
    row = await pool.fetchrow(load_query("status_latest"), stored_id(table))
    if row is None:
        raise NotFound("NO_STATUS", "the table has not been inspected yet")
    return reply(models.StatusSnapshot.of_row(row))


async def status_history(call: Call[TablePath, StatusHistoryQuery, NoBody]) -> Response:
    size = call.query.limit
    before = decode_cursor(call.query.cursor, "status", (int,))
    pool = gateway(call.request).pool
    table = await find_table(pool, *ref(call.path))
    rows = await pool.fetch(
        load_query("status_history"), stored_id(table), before[0] if before else None, size
    )
    next_cursor = encode_cursor("status", [rows[-1]["id"]]) if len(rows) == size else None
    # Oldest first, the order a chart draws; the cursor pages further into the past.
    items = [models.StatusPoint.of_row(r) for r in reversed(rows)]
    return reply(models.StatusPage(items=items, next_cursor=next_cursor))


async def table_health(call: Call[TablePath, NoParams, NoBody]) -> Response:
    pool = gateway(call.request).pool
    table = await find_table(pool, *ref(call.path))
    row = await pool.fetchrow(load_query("health_latest"), stored_id(table))
    if row is None:
        raise NotFound("NO_HEALTH", "the table has not been assessed yet")
    return reply(models.HealthAssessment.of_row(row))


async def table_recommendation(call: Call[TablePath, NoParams, NoBody]) -> Response:
    pool = gateway(call.request).pool
    table = await find_table(pool, *ref(call.path))
    row = await pool.fetchrow(load_query("recommendation_latest"), stored_id(table))
    if row is None:
        raise NotFound(
            "NO_RECOMMENDATION", "the planner has not recommended anything for the table yet"
        )
    return reply(_recommendation(row))


async def table_jobs(
    call: Call[TablePath, Page, NoBody], *, with_actions: bool = False
) -> Response:
    size = call.query.limit
    before = decode_cursor(call.query.cursor, "jobs", (int,))
    pool = gateway(call.request).pool
    table = await find_table(pool, *ref(call.path))
    rows = await pool.fetch(
        load_query("job_page"), None, stored_id(table), before[0] if before else None, size
    )
    next_cursor = encode_cursor("jobs", [rows[-1]["id"]]) if len(rows) == size else None
    if with_actions:
        items = await jobs_with_actions(pool, rows)
        return reply(models.HistoryPage(items=items, next_cursor=next_cursor))
    return reply(models.JobPage(items=[job_reply(r) for r in rows], next_cursor=next_cursor))


async def table_history(call: Call[TablePath, HistoryQuery, NoBody]) -> Response:
    """Maintenance history: the table's jobs with the actions they ran and their impact."""
    return await table_jobs(call, with_actions=True)


def ref(path: TablePath) -> tuple[str, str, str]:
    return path.catalog, path.namespace, path.table


T = "/tables/{catalog}/{namespace}/{table}"
NO_TABLE = {404: error("unknown table (TABLE_NOT_FOUND)")}
endpoints: list[AnyEndpoint] = [
    Endpoint(
        "GET",
        "/tables",
        list_tables,
        summary="Tables still in their catalog, paged",
        query=TablesQuery,
        responses={200: ok(models.TablePage)},
    ),
    Endpoint(
        "GET",
        "/summary",
        summary,
        summary="Fleet counts: tables by health and issue, jobs by state",
        responses={200: ok(models.Summary)},
    ),
    Endpoint(
        "GET",
        T,
        table_detail,
        summary="One table: latest health, status, recommendation and job",
        path_params=TablePath,
        responses={200: ok(models.TableDetail), **NO_TABLE},
    ),
    Endpoint(
        "GET",
        f"{T}/status",
        table_status,
        summary="Latest status snapshot",
        path_params=TablePath,
        responses={
            200: ok(models.StatusSnapshot),
            404: error("TABLE_NOT_FOUND, or NO_STATUS: not inspected yet"),
        },
    ),
    Endpoint(
        "GET",
        f"{T}/status/history",
        status_history,
        summary="Metric history, oldest first",
        path_params=TablePath,
        query=StatusHistoryQuery,
        responses={200: ok(models.StatusPage), **NO_TABLE},
    ),
    Endpoint(
        "GET",
        f"{T}/health",
        table_health,
        summary="Latest health assessment",
        path_params=TablePath,
        responses={
            200: ok(models.HealthAssessment),
            404: error("TABLE_NOT_FOUND, or NO_HEALTH: not assessed yet"),
        },
    ),
    Endpoint(
        "GET",
        f"{T}/maintenance/recommendation",
        table_recommendation,
        summary="Latest recommendation",
        path_params=TablePath,
        responses={
            200: ok(models.Recommendation),
            404: error("TABLE_NOT_FOUND, or NO_RECOMMENDATION: none yet"),
        },
    ),
    Endpoint(
        "GET",
        f"{T}/jobs",
        table_jobs,
        summary="The table's jobs, newest first",
        path_params=TablePath,
        query=Page,
        responses={200: ok(models.JobPage), **NO_TABLE},
    ),
    Endpoint(
        "GET",
        f"{T}/history",
        table_history,
        summary="Maintenance history: jobs with actions and impact",
        path_params=TablePath,
        query=HistoryQuery,
        responses={200: ok(models.HistoryPage), **NO_TABLE},
    ),
]
