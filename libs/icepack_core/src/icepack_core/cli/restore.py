"""``icepack restore JOB``: put the orphan files job JOB quarantined back where they were.

Like ``icepack maintain`` this process enqueues a ``cli`` job (``restore_quarantine`` with the
source job's id), claims it itself and runs it through ``JobRunner`` under the table lock and
the job's fence: the ledger rows go ``quarantined -> restored`` as each file moves back through
the table's FileIO. No Spark statement runs (a Spark engine is only opened if an earlier
rewrite on the table is still waiting to be verified). Files already purged are listed, and a
file whose original path exists again is refused with the reason, never overwritten.

Exit codes: 0 every quarantined file restored, 1 refused / failed / some files not restored,
2 bad usage or settings.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, TypedDict

import asyncpg
import typer

from icepack_core.cli.common import err, out
from icepack_core.cli.maintain import JsonOpt, Refused, _enqueue_and_claim, _settings, _with_db
from icepack_core.db.tables import TableRow
from icepack_core.errors import ActionRefused, JobNotFound
from icepack_core.execution.job_runner import JobRunner
from icepack_core.intents import Intent, RestoreQuarantine, RestoreQuarantineParams
from icepack_core.queue.jobs import JobQueue
from icepack_core.queue.ledger import restore_target
from icepack_core.safety.admission import admit
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.types import JobState, JSONObject

OWNER = "cli-restore"


async def _source_table(pool: asyncpg.Pool, job_id: int) -> asyncpg.Record:
    """The live table holding the files ``job_id`` quarantined (followed through a rename).
    Refused, with the ledger's counts, when nothing of that job is restorable."""
    try:
        target = await restore_target(pool, job_id)
    except JobNotFound:
        raise Refused(f"no job {job_id}, and no deletion ledger rows of it") from None
    if target.table is None:
        raise Refused(target.refusal or f"job {job_id}: nothing to restore")
    return target.table


class RestoreResult(TypedDict):
    """What ``icepack restore`` did: the restore job's id, end state and error, and its
    ``restore_quarantine`` action's stored output (``{}`` when it recorded none)."""

    job: int
    state: str
    error: str | None
    output: JSONObject


async def run_restore(settings: Settings, pool: asyncpg.Pool, job_id: int) -> RestoreResult:
    """Admit, enqueue, claim and run the restore of ``job_id``; what it did."""
    table = await _source_table(pool, job_id)
    intents: list[Intent] = [
        RestoreQuarantine(
            params=RestoreQuarantineParams(job_id=job_id),
            reason=f"icepack restore {job_id}",
        )
    ]
    try:
        await admit(
            pool,
            TableRow.from_record(table),
            intents,
            now=datetime.now(UTC),
            expiry_min_age_hours=settings.expiry_min_age_hours,
            default_cadence_hours=settings.maintenance_cadence_hours,
        )
    except ActionRefused as exc:
        raise Refused(str(exc)) from None
    queue = JobQueue(pool)
    job = await _enqueue_and_claim(queue, pool, table["id"], intents, settings.job_lease_seconds)
    engine = LocalEngine(settings)  # opened only if a pending rewrite must be verified first
    try:
        run = await JobRunner(pool, settings, queue, engine, OWNER, retry_failures=False).run(job)
    finally:
        await engine.close()
    if run.job is None:
        raise Refused(f"job {job.id}: the lease was lost; another holder owns it now")
    output = await pool.fetchval(
        "SELECT output FROM icepack.job_actions WHERE job_id = $1 AND action = $2",
        run.job.id,
        "restore_quarantine",
    )
    return {
        "job": run.job.id,
        "state": run.job.state.value,
        "error": run.job.error,
        "output": output or {},
    }


def restore_cmd(
    job: Annotated[int, typer.Argument(help="the job whose quarantined files to put back", min=1)],
    as_json: JsonOpt = False,
) -> None:
    """Move the orphan files JOB quarantined back to their original paths (a `cli` job)."""
    settings = _settings()
    result: RestoreResult = _with_db(settings, lambda pool: run_restore(settings, pool, job))
    output = result["output"]
    problems = bool(output.get("refused") or output.get("already_purged"))
    if as_json:
        print(json.dumps(result, indent=2, default=str))
    else:
        out.print(
            f"restore job {result['job']}: {result['state']}, "
            f"{output.get('files_restored', 0)} file(s) restored ({output.get('bytes', 0)} bytes)",
            highlight=False,
        )
        for refused in output.get("refused", []):
            out.print(f"  refused {refused['path']}: {refused['reason']}", highlight=False)
        for purged in output.get("already_purged", []):
            out.print(f"  already purged (gone): {purged}", highlight=False)
        if result["error"]:
            err.print(f"[bold red]error:[/] {result['error']}", highlight=False)
    if result["state"] != JobState.SUCCEEDED.value or problems:
        raise typer.Exit(1)
