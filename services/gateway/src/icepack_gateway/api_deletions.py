"""The deletion ledger over HTTP: what a job deleted or quarantined, and restoring it.

The gateway never touches storage: ``POST /jobs/{id}/restore`` admits and enqueues a
``restore_quarantine`` job (an executor moves the files back through the table's FileIO) and
returns it.
"""

from __future__ import annotations

from starlette.responses import Response

from icepack_core.db.queries import load_query
from icepack_core.db.tables import TableRow
from icepack_core.intents import Intent, RestoreQuarantine, RestoreQuarantineParams
from icepack_core.queue.ledger import job_page, restore_target
from icepack_core.types import JobTrigger
from icepack_gateway import models
from icepack_gateway.api_jobs import MANUAL_PRIORITY, _admit, job_reply
from icepack_gateway.endpoint import AnyEndpoint, Call, Endpoint, NoBody, NoParams
from icepack_gateway.errors import Conflict
from icepack_gateway.inputs import DeletionsQuery, JobPath
from icepack_gateway.jsonutil import reply
from icepack_gateway.models import error, ok
from icepack_gateway.params import decode_cursor, encode_cursor
from icepack_gateway.state import gateway, stored_id


async def job_deletions(call: Call[JobPath, DeletionsQuery, NoBody]) -> Response:
    job_id, q = call.path.id, call.query
    after = decode_cursor(q.cursor, "deletions", (int,))
    pool = gateway(call.request).pool
    page = await job_page(pool, job_id, after[0] if after else None, q.limit)
    return reply(
        models.JobDeletions(
            job_id=job_id,
            items=[models.Deletion.of_row(r) for r in page.rows],
            next_cursor=(
                None if page.last_id is None else encode_cursor("deletions", [page.last_id])
            ),
            totals=models.DeletionTotal(files=page.files, bytes=page.bytes),
            by_state={
                state: models.DeletionTotal(files=t.files, bytes=t.bytes)
                for state, t in page.by_state.items()
            },
        )
    )


async def restore_job(call: Call[JobPath, NoParams, NoBody]) -> Response:
    job_id = call.path.id
    state = gateway(call.request)
    target = await restore_target(state.pool, job_id)
    if target.table is None:
        raise Conflict("NOTHING_TO_RESTORE", target.refusal or f"job {job_id}: nothing to restore")
    table = TableRow.from_record(target.table)
    table_id = stored_id(table)
    pool = state.pool
    intents: list[Intent] = [
        RestoreQuarantine(
            params=RestoreQuarantineParams(job_id=job_id),
            reason=f"operator restore of job {job_id}'s quarantined files",
        )
    ]
    await _admit(state, table, intents)
    enqueued = await state.jobs.enqueue(
        table_id,
        intents,
        dedupe_key=f"restore:{job_id}",
        priority=MANUAL_PRIORITY,
        trigger=JobTrigger.MANUAL,
    )
    row = await pool.fetchrow(load_query("job_detail"), enqueued.job.id)
    assert row is not None  # enqueued (or found) in this request
    return reply(
        models.JobSubmitted(job=job_reply(row), created=enqueued.created),
        status_code=201 if enqueued.created else 200,
    )


NO_JOB = {404: error("no such job, and no ledger rows of that id (JOB_NOT_FOUND)")}
endpoints: list[AnyEndpoint] = [
    Endpoint(
        "GET",
        "/jobs/{id}/deletions",
        job_deletions,
        summary=(
            "A page of a job's deletion ledger (each file, its size and state), with its totals"
        ),
        path_params=JobPath,
        query=DeletionsQuery,
        responses={200: ok(models.JobDeletions), **NO_JOB},
    ),
    Endpoint(
        "POST",
        "/jobs/{id}/restore",
        restore_job,
        summary="Queue a job that moves this job's quarantined files back to their paths",
        path_params=JobPath,
        responses={
            201: ok(models.JobSubmitted, "restore job created"),
            200: ok(models.JobSubmitted, "a restore of this job is already active"),
            **NO_JOB,
            409: error("nothing of that job is restorable (NOTHING_TO_RESTORE), or refused"),
        },
    ),
]
