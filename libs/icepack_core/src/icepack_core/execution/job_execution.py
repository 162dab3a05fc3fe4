"""Running one job's actions against its table: shared by the executor and ``icepack maintain``.

Before any Spark call the job's raw actions are validated into typed intents
(``icepack_core.intents``) and admitted by the safety choke point
(``icepack_core.safety.admission``): a held or opted-out table, a floor broken or an unsafe
orphan removal fail the job permanently with the reason. Then, for each action: inspect the
table (incrementally, through the manifest cache), run the action through ``TableMaintenance``,
inspect again, and hand an ``ActionRecord`` (procedure, SQL sent, output, before/after impact,
duration) to the caller, who stores it under the job's fence. With a job, ``expire_snapshots``
records every file it will delete in the deletion ledger first (``expiry_ledger``). A job's
measured outcome (per action the shape before/after and the benefit against the prediction,
plus a read probe before the first action and after the last; ``execution.outcome``) is stored,
fenced, once all its actions succeeded. A rewrite that fails verification, an orphan dry run
over its limits, or an expiry whose ledger disagrees with the table (a recorded file still live,
or other counts deleted) puts the table on hold (no automatic maintenance until an operator
releases it) and fails the job permanently. Before a rewrite's CALL the start snapshot is stored
in ``pending_verifications``; see ``JobExecution`` for how that row is settled on every exit
path. The run is a pipeline over one ``JobContext`` (``execution.job_context``); every
failure is mapped in one place, ``execution.failures.failure_of``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NoReturn, TypedDict

import asyncpg
import structlog
from pyiceberg.schema import Schema

from icepack_core.db.queries import load_query
from icepack_core.db.tables import TableRow
from icepack_core.errors import (
    ActionRefused,
    CommitConflict,
    InspectionFailed,
    IntentError,
    PermanentError,
    StaleFence,
)
from icepack_core.execution.conflicts import lost_part
from icepack_core.execution.failures import (
    PERMANENT_ERRORS,
    VERIFY_ACTION,
    ActionRecord,
    Failure,
    classify,
    failure_of,
)
from icepack_core.execution.job_context import (
    JobContext,
    Record,
    TableMetadata,
    with_manifests_first,
)
from icepack_core.execution.ledger.actions import LedgerActions
from icepack_core.execution.ledger.expiry_ledger import ExpiryLedger
from icepack_core.execution.maintenance import (
    ActionOutcome,
    AfterCall,
    OrphanLimits,
    TableMaintenance,
)
from icepack_core.execution.outcome import (
    JobOutcome,
    MeasuredAction,
    Probe,
    job_outcome,
    measure_own,
    measured_action,
    predicted_benefits,
    read_probe,
)
from icepack_core.execution.verification import stored_fingerprints
from icepack_core.execution.verification.stored_fingerprints import (
    StoredFingerprint,
    StoredLoader,
)
from icepack_core.execution.verification.verifier import Guard
from icepack_core.inspection.inspector import Inspector
from icepack_core.inspection.status import TableStatus
from icepack_core.inspection.store import latest_status
from icepack_core.intents import LEDGER_INTENTS, Intent, RemoveOrphanFiles, parse_intents
from icepack_core.queue.deferrals import clear_conflicts
from icepack_core.queue.jobs import Job
from icepack_core.safety.admission import Admission, admit
from icepack_core.safety.confinement import loaded_confinement
from icepack_core.safety.holds import place_hold
from icepack_core.safety.verification import Evidence, PendingOrigin
from icepack_core.spark.engine import SparkEngine
from icepack_core.telemetry.logs import redact_text
from icepack_core.telemetry.metrics import JOB_ACTION_DURATION
from icepack_core.types import TableRef

log = structlog.get_logger("icepack.maintenance")
IMPACT_FIELDS = (
    "data_file_count",
    "data_file_bytes",
    "small_file_count",
    "record_count",
    "position_delete_file_count",
    "equality_delete_file_count",
    "deletion_vector_count",
    "delete_record_count",
    "manifest_count",
    "snapshot_count",
)
# A verification scans the table twice (start and newest snapshot); far longer means it is stuck.
DEFAULT_VERIFY_TIMEOUT_S = 3600.0
__all__ = [
    "PERMANENT_ERRORS",
    "VERIFY_ACTION",
    "ActionRecord",
    "JobExecution",
    "Record",
    "classify",
    "granted_roots",
]


def granted_roots(admission: Admission | None) -> tuple[str, ...]:
    """Roots outside its own that an operator's ``system.snapshot-expiry`` policy lets the
    table's expiry delete under (``delete_outside_location``)."""
    expiry = admission.policy.snapshot_expiry if admission else None
    return tuple(expiry.delete_outside_location) if expiry else ()


class Impact(TypedDict):
    """``job_actions.impact``: the table's ``IMPACT_FIELDS`` around one action."""

    before: dict[str, int | None]
    after: dict[str, int | None]
    snapshot_before: int | None
    snapshot_after: int | None


def _impact(before: TableStatus | None, after: TableStatus | None) -> Impact | None:
    """None when an inspection failed (nothing measured; stored as ``{}``)."""
    if before is None or after is None:
        return None
    b, a = before.model_dump(), after.model_dump()
    return {
        "before": {k: b[k] for k in IMPACT_FIELDS},
        "after": {k: a[k] for k in IMPACT_FIELDS},
        "snapshot_before": b["current_snapshot_id"],
        "snapshot_after": a["current_snapshot_id"],
    }


@dataclass
class Measuring:
    """A job's measured outcome as its actions run (``execution.outcome``): the predicted
    benefit per action, the read probe before the first, the measured actions so far."""

    expected: list[float | None]
    probe_before: Probe
    actions: list[MeasuredAction] = field(default_factory=list)


class JobExecution:
    """Runs actions on one table with one engine.

    With a ``job`` (the executor and the CLI always pass one), every rewrite is verified or its
    table held, whatever happens to this process: the start snapshot is stored in
    ``pending_verifications`` (fenced) before the CALL, the row is deleted only once the
    rewrite is verified or the table held, and ``settle`` verifies a row left by an earlier
    attempt or job before anything else runs on the table.

    A run is a short pipeline over one ``JobContext`` (row, ref, intents, admission,
    maintenance; each obtained once): settle, inspect, then per action run -> record ->
    measure, then the outcome. Every exception of an action or a verification goes through
    ``failures.failure_of`` (the one mapping to a record, a hold and a retry decision) and is
    applied by ``_fail``.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        engine: SparkEngine,
        inspector: Inspector,
        *,
        expiry_min_age_hours: float = 1.0,
        default_cadence_hours: float = 24.0,
        after_call: AfterCall | None = None,
        verify_timeout_seconds: float = DEFAULT_VERIFY_TIMEOUT_S,
    ) -> None:
        self.pool = pool
        self.engine = engine
        self.inspector = inspector
        self.expiry_min_age_hours = expiry_min_age_hours
        self.default_cadence_hours = default_cadence_hours
        self.after_call = after_call
        self.verify_timeout_seconds = verify_timeout_seconds
        # Orphan quarantine, purge and restore (the deletion ledger).
        self.ledger = LedgerActions(pool, inspector)

    async def run(
        self,
        table_id: int,
        actions: Sequence[Intent] | IntentError,
        record: Record,
        *,
        job: Job | None = None,
        guard: Guard | None = None,
    ) -> list[dict[str, object]]:
        """Admit and run ``actions`` (``Job.actions``, or ``Job.actions_error`` when the stored
        actions are not intents: the job then fails permanently with that reason) in run order
        on table ``table_id``; ``record`` stores each one.

        ``job`` enables the durable verification record (see the class); ``guard`` raises when
        the caller no longer holds the table lock under a valid fence (checked before any
        rollback). Without a job, rewrites are verified inline only.

        Raises:
            RetryableError | PermanentError: an action failed (the type says whether to try again).
            StaleFence: the job was lost; any unverified rewrite is left to the next holder.
        """
        ctx = await self._context(table_id, record, job, guard, actions)
        if job is not None:
            await self._settle(ctx)
        status = await self._status(ctx)
        ctx = with_manifests_first(ctx, status)
        measuring = await self._start_measuring(ctx)
        results: list[dict[str, object]] = []
        for index, intent in enumerate(ctx.intents):
            outcome, after = await self._action(ctx, intent, status)
            results.append({"action": intent.kind.value, **outcome.output})
            if measuring is not None:
                own = await measure_own(ctx.metadata.loaded, status, outcome.verification)
                layout = outcome.output.get("clustering")
                expected = measuring.expected[index]
                measuring.actions.append(
                    measured_action(intent.kind.value, status, after, expected, own, layout)
                )
            status = after
        if measuring is not None:
            assert job is not None
            probe_after = await read_probe(ctx.metadata.loaded)
            outcome_doc = job_outcome(measuring.actions, measuring.probe_before, probe_after)
            await self._record_outcome(job, outcome_doc)
        return results

    async def _context(
        self,
        table_id: int,
        record: Record,
        job: Job | None,
        guard: Guard | None,
        actions: Sequence[Intent] | IntentError | None = None,
    ) -> JobContext:
        """The run's context; with ``actions``, validated and admitted (a settle alone admits
        nothing).

        Raises:
            PermanentError: unknown or dropped table, malformed actions, or refused by a
                safety rule; the message says which.
        """
        record_row = await self.pool.fetchrow(load_query("table_get"), table_id)
        row = TableRow.from_record(record_row) if record_row is not None else None
        if row is None or row.dropped:
            raise PermanentError(f"table {table_id} is unknown or dropped")
        ref = row.ref
        intents: list[Intent] = []
        admission = limits = None
        if actions is not None:
            intents, admission = await self._admit(row, actions)
            if any(isinstance(i, RemoveOrphanFiles) for i in intents):
                limits = await self._orphan_limits(table_id, admission)
        metadata = TableMetadata(self.inspector, ref)
        maintenance = self._maintenance(table_id, row, metadata, job, guard, admission, limits)
        return JobContext(
            table_id, row, ref, maintenance, metadata, record, job, guard, intents, admission
        )

    async def _admit(
        self, row: TableRow, actions: Sequence[Intent] | IntentError
    ) -> tuple[list[Intent], Admission]:
        """The validated intents and what the choke point established.

        Raises:
            PermanentError: malformed actions, or refused by a safety rule.
        """
        try:
            if isinstance(actions, IntentError):
                raise actions  # the job's stored actions are not intents (Job.actions_error)
            # In run order, each action once, at most MAX_ACTIONS (what Job.from_record
            # checked of a stored job; a caller passing intents directly is held to it too).
            intents = parse_intents(list(actions), allow_empty=True)
            admission = await admit(
                self.pool,
                row,
                intents,
                now=datetime.now(UTC),
                expiry_min_age_hours=self.expiry_min_age_hours,
                default_cadence_hours=self.default_cadence_hours,
            )
        except (ActionRefused, PermanentError) as exc:
            raise PermanentError(f"refused: {exc}") from exc
        return intents, admission

    async def _orphan_limits(self, table_id: int, admission: Admission) -> OrphanLimits:
        config = admission.policy.orphan_file_removal
        latest = await latest_status(self.pool, table_id)
        live = None
        if latest is not None:  # the files its limits compare the findings with
            live = latest.data_file_count + latest.delete_file_count + latest.manifest_count
        if config is None:
            return OrphanLimits(live_files=live)
        return OrphanLimits(
            max_files=config.max_orphan_files,
            max_fraction=config.max_orphan_fraction,
            live_files=live,
        )

    async def _status(self, ctx: JobContext) -> TableStatus | None:
        """The table's status as ``ctx.metadata`` has it (None, logged, when that fails)."""
        try:
            return await self.inspector.inspect_loaded(ctx.ref, await ctx.metadata.loaded())
        except InspectionFailed as exc:
            log.warning("maintenance.inspect_failed", table=str(ctx.ref), error=exc.message)
            return None

    def _maintenance(
        self,
        table_id: int,
        row: TableRow,
        metadata: TableMetadata,
        job: Job | None,
        guard: Guard | None,
        admission: Admission | None,
        limits: OrphanLimits | None,
    ) -> TableMaintenance:
        ref = metadata.ref

        async def begin(action: str, start: int | None) -> None:
            assert job is not None
            pending = await self.pool.fetchrow(
                load_query("table_pending_verification_begin"),
                table_id,
                start,
                job.id,
                job.fence,
                action,
            )
            if pending is None:
                raise StaleFence(job.id, job.fence, f"record the start of {action}")

        orphans = admission.policy.orphan_file_removal if admission else None
        return TableMaintenance(
            self.engine,
            ref,
            row.properties,
            after_call=self.after_call,
            guard=guard,
            before_call=begin if job is not None else None,
            orphan_location=admission.location if admission else None,
            orphan_limits=limits,
            expiry=self._expiry(job, table_id, ref, admission) if job is not None else None,
            orphan_sink=(
                self.ledger.orphan_sink(job, table_id, ref, orphans.quarantine_days)
                if job is not None and orphans is not None
                else None
            ),
            # The scope, the start snapshot and the verifier's file diff read the table
            # through the executor's own catalog, from the run's one load per table state.
            metadata=metadata.table,
            on_commit=metadata.changed,
            stored_fingerprints=self._stored_fingerprints(table_id),
        )

    def _stored_fingerprints(self, table_id: int) -> StoredLoader:
        """The loader of table ``table_id``'s fingerprints taken at first sight."""

        async def load(schema: Schema, checksum: bool) -> Mapping[str, StoredFingerprint]:
            return await stored_fingerprints.load(self.pool, table_id, schema, checksum)

        return load

    def _expiry(
        self, job: Job, table_id: int, ref: TableRef, admission: Admission | None
    ) -> ExpiryLedger:
        """Expiry through the deletion ledger, confined to the table's roots."""
        confine = loaded_confinement(self.pool, table_id, str(ref), granted_roots(admission))
        return ExpiryLedger(
            self.pool,
            job.id,
            job.fence,
            table_id,
            lambda: self.inspector.load(ref),
            confine=confine,
        )

    async def _start_measuring(self, ctx: JobContext) -> Measuring | None:
        """The measurement of a job with actions (None otherwise): the prediction per action
        and the read probe before the first."""
        if ctx.job is None or not ctx.intents:
            return None
        expected = predicted_benefits(ctx.job.predicted, [i.kind.value for i in ctx.intents])
        return Measuring(expected, await read_probe(ctx.metadata.loaded))

    async def _action(
        self, ctx: JobContext, intent: Intent, before: TableStatus | None
    ) -> tuple[ActionOutcome, TableStatus | None]:
        """Run one action and record it; returns its outcome and the table's status after.
        A failure is applied by ``_fail`` (which raises)."""
        name = intent.kind.value
        started = datetime.now(UTC)
        try:
            outcome = await self._run_one(ctx, intent)
        except Exception as exc:  # mapped in one place: failures.failure_of
            await self._fail(ctx, exc, failure_of(exc, name, started))
        lost = lost_part(name, outcome.output)
        if lost is None or outcome.output.get("rewritten_data_files_count"):
            await clear_conflicts(self.pool, ctx.table_id, name)  # it committed: progress
        after = await self._status(ctx)
        finished = datetime.now(UTC)
        JOB_ACTION_DURATION.record(
            (finished - started).total_seconds(), {"action": name, "state": "succeeded"}
        )
        await ctx.record(
            ActionRecord(
                name,
                "succeeded",
                started,
                finished,
                procedure=outcome.procedure,
                sql_text=redact_text(";\n".join(outcome.sql)),
                output=_output(outcome, ctx.run_reasons.get(name)),
                impact=dict(_impact(before, after) or {}),
            )
        )
        if ctx.job is not None and outcome.verification is not None:
            start = outcome.verification.start_snapshot_id
            if not await self._clear(ctx.job, ctx.table_id, start, check_start=True):
                # The pending row starts before this rewrite (an older row nobody
                # settled): verify from there before going on.
                await self._settle(ctx)
        if lost is not None:  # recorded and verified: the lost part is retried
            raise CommitConflict(name, lost)
        return outcome, after

    async def _run_one(self, ctx: JobContext, intent: Intent) -> ActionOutcome:
        """One action: a Spark procedure, or a ledger action (purge, restore) without Spark."""
        if isinstance(intent, LEDGER_INTENTS):
            return await self.ledger.run(intent, ctx.job, ctx.table_id, ctx.ref)
        return await ctx.maintenance.run(intent)

    async def _fail(
        self,
        ctx: JobContext,
        exc: Exception,
        failure: Failure,
        pending: asyncpg.Record | None = None,
    ) -> NoReturn:
        """Apply ``failure`` (``failures.failure_of`` of ``exc``): hold, release the pending
        row (``pending``: the one being verified, else this job's), record, verify partial
        progress, raise the decided error."""
        # Whatever the action committed (partial progress, a rollback) is read anew.
        ctx.metadata.changed()
        done = failure.record
        if done is None:
            raise exc  # lost the job: the pending verification is the next holder's
        if failure.interrupt:
            await self.engine.interrupt()
        if pending is None:
            elapsed = (datetime.now(UTC) - done.started_at).total_seconds()
            JOB_ACTION_DURATION.record(elapsed, {"action": done.action, "state": "failed"})
        if failure.hold is not None:
            await self._hold(ctx.table_id, done.action, done.error or "", failure.hold)
        if failure.release and pending is not None:
            await self._settled(pending)
        elif failure.release and ctx.job is not None:
            await self._clear(ctx.job, ctx.table_id)
        await ctx.record(done)
        if failure.settle and ctx.job is not None:
            await self._settle(ctx)
        raise failure.error from exc

    async def _record_outcome(self, job: Job, outcome: JobOutcome) -> None:
        """Store the job's measured outcome, fenced. Raises ``StaleFence`` for a lost job."""
        stored = await self.pool.fetchval(
            load_query("job_outcome_record"), job.id, job.fence, outcome.to_json()
        )
        if stored is None:
            raise StaleFence(job.id, job.fence, "record the outcome")
        probes = (outcome.probe_before, outcome.probe_after)
        log.info(
            "maintenance.outcome",
            job_id=job.id,
            benefit=outcome.benefit,
            predicted_benefit=outcome.predicted_benefit,
            ratio=outcome.ratio,
            files_planned=[p.files_planned for p in probes],
            plan_ms=[p.plan_ms for p in probes],
        )

    async def settle(
        self, job: Job, table_id: int, record: Record, guard: Guard | None
    ) -> Evidence | None:
        """Verify the table's pending rewrite (left by this or an earlier attempt or job), if
        any, and record the evidence as a ``verify_rewrites`` action. Returns the evidence
        (None when nothing was pending).

        Raises:
            PermanentError: the rewrite changed the contents, or it could not be
                verified (query error, timeout, engine gone): the table is now on hold.
            StaleFence: ``guard`` found the lock lost; the row stays for the next holder.
        """
        pending = await self.pool.fetchrow(load_query("table_pending_verification_get"), table_id)
        if pending is None:
            return None
        ctx = await self._context(table_id, record, job, guard)
        return await self._verify_pending(ctx, pending)

    async def _settle(self, ctx: JobContext) -> Evidence | None:
        """``settle`` within a run (its context already built)."""
        pending = await self.pool.fetchrow(
            load_query("table_pending_verification_get"), ctx.table_id
        )
        if pending is None:
            return None
        return await self._verify_pending(ctx, pending)

    async def _verify_pending(self, ctx: JobContext, pending: asyncpg.Record) -> Evidence:
        started = datetime.now(UTC)
        origin = PendingOrigin(
            job_id=pending["job_id"],
            fence=pending["fence"],
            action=pending["action"],
            recorded_at=pending["recorded_at"].isoformat(),
            start_snapshot_id=pending["start_snapshot_id"],
        )
        try:
            verified = await asyncio.wait_for(
                ctx.maintenance.verify_rewrites(pending["start_snapshot_id"], ctx.guard),
                self.verify_timeout_seconds,
            )
        except Exception as exc:  # never "failed and forgotten": failures.failure_of
            failure = failure_of(exc, VERIFY_ACTION, started, pending=origin, table=str(ctx.ref))
            await self._fail(ctx, exc, failure, pending)
        verified.pending = origin
        await self._settled(pending)
        await ctx.record(
            ActionRecord(
                VERIFY_ACTION,
                "succeeded",
                started,
                datetime.now(UTC),
                output={"verification": verified.to_json()},
            )
        )
        return verified

    async def _clear(
        self, job: Job, table_id: int, start: int | None = None, *, check_start: bool = False
    ) -> bool:
        """Delete this job's pending row for the table once its rewrite is settled; with
        ``check_start``, only if the row starts at ``start``. False when another row is
        pending (left as it is)."""
        pending = await self.pool.fetchrow(load_query("table_pending_verification_get"), table_id)
        if pending is None:
            return True
        if (
            pending["job_id"] != job.id
            or pending["fence"] != job.fence
            or (check_start and pending["start_snapshot_id"] != start)
        ):
            return False
        await self._settled(pending)
        return True

    async def _settled(self, pending: asyncpg.Record) -> None:
        await self.pool.execute(
            load_query("table_pending_verification_settle"),
            pending["table_id"],
            pending["job_id"],
            pending["fence"],
            pending["recorded_at"],
        )

    async def _hold(
        self, table_id: int, action: str, reason: str, evidence: Mapping[str, object]
    ) -> None:
        await place_hold(self.pool, table_id, action=action, reason=reason, evidence=evidence)
        log.error("maintenance.table_held", table_id=table_id, reason=reason)


def _output(outcome: ActionOutcome, run_reason: str | None = None) -> dict[str, object]:
    """A succeeded action's stored output: the procedure's, with its verification evidence and
    ``run_reason`` (why the executor ran it other than as planned) when there is one."""
    output: dict[str, object] = dict(outcome.output)
    if run_reason:
        output["run_reason"] = run_reason
    if outcome.verification is not None:
        output["verification"] = outcome.verification.to_json()
    return output
