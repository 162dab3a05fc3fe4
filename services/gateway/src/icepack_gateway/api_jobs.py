"""The job queue over HTTP: list, detail (with actions and impact), operator submit and cancel."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from icepack_core.db.queries import load_query
from icepack_core.db.tables import TableRow
from icepack_core.errors import ActionRefused, IntentError, JobNotFound
from icepack_core.intents import MAX_ACTIONS, Intent, parse_intents
from icepack_core.safety.admission import admit
from icepack_core.types import JobState, JobTrigger
from icepack_gateway import models
from icepack_gateway.endpoint import AnyEndpoint, Call, Endpoint, NoBody, NoParams
from icepack_gateway.errors import Conflict, InvalidParameter
from icepack_gateway.inputs import Ident, JobPath, JobsQuery, TableFilter
from icepack_gateway.jsonutil import reply
from icepack_gateway.models import error, ok
from icepack_gateway.params import decode_cursor, encode_cursor, split_table
from icepack_gateway.policy_replies import Proposal
from icepack_gateway.state import GatewayState, find_table, gateway, stored_id

# Manual jobs jump ahead of the planner's (default 100; lower runs first).
MANUAL_PRIORITY = 50


def table_key(row: asyncpg.Record) -> models.TableKey | None:
    """The table a job or event row was joined with (``table_id``, ``catalog``, ``namespace``,
    ``table_name``); None for a row of no table."""
    if row["table_id"] is None:
        return None
    return models.TableKey(
        id=row["table_id"],
        catalog=row["catalog"],
        namespace=row["namespace"],
        name=row["table_name"],
    )


def job_reply(row: asyncpg.Record) -> models.Job:
    """A job row joined with its table (``job_page`` / ``job_detail``)."""
    return models.Job.of_row(row, table=table_key(row))


async def jobs_with_actions(
    pool: asyncpg.Pool, rows: Sequence[asyncpg.Record]
) -> list[models.JobWithActions]:
    """Each job row with the actions it ran, in order (one query for all of them)."""
    by_id: dict[int, list[models.JobAction]] = {r["id"]: [] for r in rows}
    for action in await pool.fetch(load_query("job_actions_of"), list(by_id)):
        by_id[action["job_id"]].append(models.JobAction.of_row(action))
    return [
        models.JobWithActions.of_row(r, table=table_key(r), job_actions=by_id[r["id"]])
        for r in rows
    ]


async def table_id_filter(pool: asyncpg.Pool, query: TableFilter) -> int | None:
    if query.table is not None and query.table_id is not None:
        raise InvalidParameter("table", "give either table or table_id, not both")
    if query.table is not None:
        table = await find_table(pool, *split_table("table", query.table))
        return stored_id(table)
    return query.table_id


async def list_jobs(call: Call[NoParams, JobsQuery, NoBody]) -> Response:
    q = call.query
    size = q.limit
    before = decode_cursor(q.cursor, "jobs", (int,))
    pool = gateway(call.request).pool
    table_id = await table_id_filter(pool, q)
    rows = await pool.fetch(
        load_query("job_page"),
        q.state.value if q.state else None,
        table_id,
        before[0] if before else None,
        size,
    )
    next_cursor = encode_cursor("jobs", [rows[-1]["id"]]) if len(rows) == size else None
    return reply(models.JobPage(items=[job_reply(r) for r in rows], next_cursor=next_cursor))


async def job_detail(call: Call[JobPath, NoParams, NoBody]) -> Response:
    job_id = call.path.id
    pool = gateway(call.request).pool
    row = await pool.fetchrow(load_query("job_detail"), job_id)
    if row is None:
        raise JobNotFound(job_id)
    return reply((await jobs_with_actions(pool, [row]))[0])


def _no_nul(value: Any, where: str) -> None:
    """Postgres jsonb cannot store U+0000: refuse it here instead of failing in the driver."""
    if isinstance(value, str) and "\x00" in value:
        raise InvalidParameter(where, "must not contain NUL characters")
    if isinstance(value, dict):
        for k, v in value.items():
            _no_nul(k, where)
            _no_nul(v, where)
    elif isinstance(value, list):
        for v in value:
            _no_nul(v, where)


class JobIn(BaseModel):
    """``POST /jobs``: maintain one table now. ``actions`` are action intents
    (``icepack_core.intents``); without them, the planner's latest recommendation is used."""

    model_config = ConfigDict(extra="forbid")

    catalog: Ident
    namespace: Ident
    table: Ident
    actions: list[dict[str, Any]] | None = Field(default=None, min_length=1, max_length=MAX_ACTIONS)
    priority: int = Field(default=MANUAL_PRIORITY, ge=0, le=1000)


def _intents(raw: object) -> list[Intent]:
    """``raw`` actions as intents; 422 naming the bad field."""
    try:
        return parse_intents(raw)
    except IntentError as exc:
        raise InvalidParameter(exc.field, str(exc).removeprefix(f"{exc.field}: ")) from None


async def _recommended(pool: asyncpg.Pool, table: TableRow) -> list[Intent]:
    """The intents of the planner's latest recommendation (``Recommendation.to_json``, read as
    the ``Proposal`` it answers); 409 when it proposes none, with what it skipped and why."""
    label = table.label
    row = await pool.fetchrow(load_query("recommendation_latest"), stored_id(table))
    recommendation = row["actions"] if row is not None else None
    if not isinstance(recommendation, dict):
        raise Conflict(
            "NOTHING_RECOMMENDED", f"{label} has no recommendation yet; name the actions to run"
        )
    proposal = Proposal.model_validate(recommendation)
    if not proposal.actions:
        skipped = "; ".join(f"{s.action}: {s.reason}" for s in proposal.skipped)
        raise Conflict(
            "NOTHING_RECOMMENDED",
            f"the planner recommends nothing for {label}"
            f"{f' ({skipped})' if skipped else ''}; name the actions to run",
        )
    # Only what an intent holds: the recommendation adds an estimated benefit per action.
    return _intents(
        [
            {"action": a.action.value, "params": a.params, "reason": a.reason}
            for a in proposal.actions
        ]
    )


async def _admit(state: GatewayState, table: TableRow, intents: list[Intent]) -> None:
    """The safety choke point (``icepack_core.safety.admission.admit``) as HTTP errors: 409 for the
    table's state, 422 naming the parameter for a broken floor."""
    try:
        await admit(
            state.pool,
            table,
            intents,
            now=datetime.now(UTC),
            expiry_min_age_hours=state.expiry_min_age_hours,
            default_cadence_hours=state.cadence_hours,
        )
    except ActionRefused as exc:
        if exc.conflict:
            raise Conflict(exc.rule, str(exc)) from None
        raise InvalidParameter(exc.field or "actions", str(exc)) from None


async def submit_job(call: Call[NoParams, NoParams, JobIn]) -> Response:
    spec = call.body
    _no_nul(spec.actions, "body")
    state = gateway(call.request)
    pool = state.pool
    table = await find_table(pool, spec.catalog, spec.namespace, spec.table, allow_dropped=False)
    if spec.actions is None:
        # A held or opted-out table is refused for that reason, not as "nothing recommended"
        # (the planner recommends nothing for a held table precisely because it is held).
        await _admit(state, table, [])
    intents = (
        _intents(spec.actions) if spec.actions is not None else await _recommended(pool, table)
    )
    await _admit(state, table, intents)
    enqueued = await state.jobs.enqueue(
        stored_id(table),
        intents,
        dedupe_key=f"table:{stored_id(table)}",
        priority=spec.priority,
        trigger=JobTrigger.MANUAL,
    )
    row = await pool.fetchrow(load_query("job_detail"), enqueued.job.id)
    assert row is not None  # enqueued (or found) in this request; jobs are pruned only when done
    return reply(
        models.JobSubmitted(job=job_reply(row), created=enqueued.created),
        status_code=201 if enqueued.created else 200,
    )


async def cancel_job(call: Call[JobPath, NoParams, NoBody]) -> Response:
    job_id = call.path.id
    state = gateway(call.request)
    before = await state.pool.fetchrow(load_query("job_detail"), job_id)
    if before is None:
        raise JobNotFound(job_id)
    if before["state"] in (JobState.SUCCEEDED, JobState.FAILED):
        raise Conflict(
            "JOB_ALREADY_FINISHED",
            f"job {job_id} already finished ({before['state']}); nothing to cancel",
        )
    if before["state"] != JobState.CANCELLED:
        await state.jobs.cancel(job_id)
    row = await state.pool.fetchrow(load_query("job_detail"), job_id)
    assert row is not None  # read above; only finished jobs are ever pruned
    # A queued job is cancelled at once; a running one stops when its executor next heartbeats
    # (``cancel_requested_at`` is set and the state is still ``running``).
    return reply(
        models.JobCancelled(job=job_reply(row), cancelled=row["state"] == JobState.CANCELLED)
    )


REFUSED = (
    "refused: table held or opted out (TABLE_HELD, ...), or NOTHING_RECOMMENDED without actions"
)
NO_JOB = {404: error("no such job (JOB_NOT_FOUND)")}
endpoints: list[AnyEndpoint] = [
    Endpoint(
        "GET",
        "/jobs",
        list_jobs,
        summary="Jobs newest first",
        query=JobsQuery,
        responses={200: ok(models.JobPage), 404: error("table= names an unknown table")},
    ),
    Endpoint(
        "POST",
        "/jobs",
        submit_job,
        summary="Queue maintenance for a table (deduplicated per table)",
        body=JobIn,
        responses={
            201: ok(models.JobSubmitted, "created"),
            200: ok(models.JobSubmitted, "a job for the table is already active"),
            404: error("unknown or dropped table (TABLE_NOT_FOUND)"),
            409: error(REFUSED),
        },
    ),
    Endpoint(
        "GET",
        "/jobs/{id}",
        job_detail,
        summary="One job with its actions and their impact",
        path_params=JobPath,
        responses={200: ok(models.JobWithActions), **NO_JOB},
    ),
    Endpoint(
        "POST",
        "/jobs/{id}/cancel",
        cancel_job,
        summary="Cancel a queued job, or ask a running one to stop",
        path_params=JobPath,
        responses={
            200: ok(models.JobCancelled),
            **NO_JOB,
            409: error("the job already finished (JOB_ALREADY_FINISHED)"),
        },
    ),
]
