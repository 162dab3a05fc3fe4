"""The deletion ledger over HTTP: what a job deleted or quarantined, and restoring it.

The gateway never touches storage: ``POST /jobs/{id}/restore`` admits and enqueues a
``restore_quarantine`` job (an executor moves the files back through the table's FileIO) and
returns it.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from icepack_core.db.queries import load_query
from icepack_core.errors import JobNotFound
from icepack_core.intents import RestoreQuarantine, RestoreQuarantineParams, intents_json
from icepack_core.types import JobTrigger
from icepack_gateway import models
from icepack_gateway.api_jobs import MANUAL_PRIORITY, _admit, job_json
from icepack_gateway.endpoint import AnyEndpoint, Call, Endpoint, NoBody, NoParams
from icepack_gateway.errors import Conflict
from icepack_gateway.inputs import JobPath
from icepack_gateway.jsonutil import ApiResponse
from icepack_gateway.models import error, ok
from icepack_gateway.state import gateway

DELETION_KEYS = tuple(models.Deletion.model_fields)


async def job_deletions(call: Call[JobPath, NoParams, NoBody]) -> Response:
    job_id = call.path.id
    pool = gateway(call.request).pool
    rows = await pool.fetch(load_query("deletion_list_job"), job_id)
    if not rows and await pool.fetchrow(load_query("job_detail"), job_id) is None:
        raise JobNotFound(job_id)  # the ledger outlives pruned jobs: either one will do
    by_state = {
        r["state"]: {"files": r["files"], "bytes": r["bytes"]}
        for r in await pool.fetch(load_query("deletion_job_states"), job_id)
    }
    return ApiResponse(
        {
            "job_id": job_id,
            "items": [{k: r[k] for k in DELETION_KEYS} for r in rows],
            "totals": {
                "files": sum(s["files"] for s in by_state.values()),
                "bytes": sum(s["bytes"] for s in by_state.values()),
            },
            "by_state": by_state,
        }
    )


def _nothing_restorable(job_id: int, states: dict[str, Any]) -> str:
    if not states:
        return f"job {job_id} recorded no deletions; nothing to restore"
    counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    return f"job {job_id} has no quarantined files ({counts}); nothing to restore"


async def restore_job(call: Call[JobPath, NoParams, NoBody]) -> Response:
    job_id = call.path.id
    state = gateway(call.request)
    pool = state.pool
    rows = await pool.fetch(load_query("deletion_list_job"), job_id)
    if not rows and await pool.fetchrow(load_query("job_detail"), job_id) is None:
        raise JobNotFound(job_id)
    states: dict[str, int] = {}
    for r in rows:
        states[r["state"]] = states.get(r["state"], 0) + 1
    tables = {r["table_id"] for r in rows if r["state"] == "quarantined"}
    if not tables:
        raise Conflict("NOTHING_TO_RESTORE", _nothing_restorable(job_id, states))
    if None in tables or len(tables) > 1:
        raise Conflict(
            "NOTHING_TO_RESTORE", f"job {job_id}'s quarantined files belong to no single live table"
        )
    (table_id,) = tables
    table = await pool.fetchrow(load_query("table_get"), table_id)
    if table is None or table["dropped_at"] is not None:
        raise Conflict("NOTHING_TO_RESTORE", f"job {job_id}'s table {table_id} was dropped")
    intents = [
        RestoreQuarantine(
            params=RestoreQuarantineParams(job_id=job_id),
            reason=f"operator restore of job {job_id}'s quarantined files",
        )
    ]
    await _admit(state, table, list(intents))
    enqueued = await state.jobs.enqueue(
        table_id,
        intents_json(list(intents)),
        dedupe_key=f"restore:{job_id}",
        priority=MANUAL_PRIORITY,
        trigger=JobTrigger.MANUAL,
    )
    row = await pool.fetchrow(load_query("job_detail"), enqueued.job.id)
    assert row is not None  # enqueued (or found) in this request
    return ApiResponse(
        {"job": job_json(row), "created": enqueued.created},
        status_code=201 if enqueued.created else 200,
    )


NO_JOB = {404: error("no such job, and no ledger rows of that id (JOB_NOT_FOUND)")}
endpoints: list[AnyEndpoint] = [
    Endpoint(
        "GET",
        "/jobs/{id}/deletions",
        "The deletion ledger of a job: each file, its size and state, with totals",
        job_deletions,
        JobPath,
        NoParams,
        NoBody,
        {200: ok(models.JobDeletions), **NO_JOB},
    ),
    Endpoint(
        "POST",
        "/jobs/{id}/restore",
        "Queue a job that moves this job's quarantined files back to their paths",
        restore_job,
        JobPath,
        NoParams,
        NoBody,
        {
            201: ok(models.JobSubmitted, "restore job created"),
            200: ok(models.JobSubmitted, "a restore of this job is already active"),
            **NO_JOB,
            409: error("nothing of that job is restorable (NOTHING_TO_RESTORE), or refused"),
        },
    ),
]
