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
path."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg
import structlog
from pyiceberg.table import Table

from icepack_core.db.queries import load_query
from icepack_core.errors import (
    ActionRefused,
    CommitConflict,
    DeletionLedgerViolation,
    DeletionOutsideTable,
    InspectionFailed,
    InvalidIdentifier,
    OrphanLimitExceeded,
    PermanentError,
    RetryableError,
    StaleFence,
)
from icepack_core.execution.conflicts import conflict_reason, lost_part
from icepack_core.execution.ledger.actions import LedgerActions
from icepack_core.execution.ledger.expiry_ledger import ExpiryLedger
from icepack_core.execution.maintenance import (
    ActionOutcome,
    AfterCall,
    OrphanLimits,
    TableMaintenance,
    VerificationFailed,
)
from icepack_core.execution.outcome import (
    job_outcome,
    measure_own,
    measured_action,
    predicted_benefits,
    read_probe,
)
from icepack_core.execution.verification.verifier import Guard
from icepack_core.inspection.inspector import Inspector
from icepack_core.inspection.status import TableStatus
from icepack_core.intents import LEDGER_INTENTS, Intent, RemoveOrphanFiles, parse_intents
from icepack_core.queue.deferrals import clear_conflicts
from icepack_core.queue.jobs import Job
from icepack_core.safety.admission import Admission, admit
from icepack_core.safety.confinement import loaded_confinement
from icepack_core.safety.holds import place_hold
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
# The job action under which a pending rewrite's verification is recorded.
VERIFY_ACTION = "verify_rewrites"
# A verification scans the table twice (start and newest snapshot); far longer means it is stuck.
DEFAULT_VERIFY_TIMEOUT_S = 3600.0
# Failures that will fail again whatever we do (bad SQL, bad arguments, missing table; and
# Python's own type errors, which a malformed action raises on every attempt).
PERMANENT_ERRORS = frozenset(
    {
        "AnalysisException",
        "ParseException",
        "IllegalArgumentException",
        "NoSuchTableException",
        "InvalidIdentifier",
        "PermanentError",
        "AttributeError",
        "TypeError",
        "KeyError",
    }
)


def granted_roots(admission: Admission | None) -> tuple[str, ...]:
    """Roots outside its own that an operator's ``system.snapshot-expiry`` policy lets the
    table's expiry delete under (``delete_outside_location``)."""
    expiry = admission.policy.snapshot_expiry if admission else None
    return tuple(expiry.delete_outside_location) if expiry else ()


@dataclass
class ActionRecord:
    """One action as run: what ``job_actions`` stores."""

    action: str
    state: str
    started_at: datetime
    finished_at: datetime
    procedure: str | None = None
    sql_text: str | None = None
    output: dict[str, Any] = field(default_factory=dict)
    impact: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @classmethod
    def failed(
        cls, action: str, started: datetime, error: str, output: dict[str, Any] | None = None
    ) -> ActionRecord:
        """A failed run of ``action`` (its procedure), finished now."""
        now = datetime.now(UTC)
        return cls(
            action, "failed", started, now, procedure=action, output=output or {}, error=error
        )


Record = Callable[[ActionRecord], Awaitable[None]]


def classify(exc: BaseException) -> bool:
    """True when ``exc`` is worth retrying (by exception type, never by message text)."""
    for error in (exc, exc.__cause__, exc.__context__):
        if error is not None and type(error).__name__ in PERMANENT_ERRORS:
            return False
    return True


def _impact(before: TableStatus | None, after: TableStatus | None) -> dict[str, Any]:
    if before is None or after is None:
        return {}
    b, a = before.model_dump(), after.model_dump()
    return {
        "before": {k: b[k] for k in IMPACT_FIELDS},
        "after": {k: a[k] for k in IMPACT_FIELDS},
        "snapshot_before": b["current_snapshot_id"],
        "snapshot_after": a["current_snapshot_id"],
    }


class JobExecution:
    """Runs actions on one table with one engine.

    With a ``job`` (the executor and the CLI always pass one), every rewrite is verified or its
    table held, whatever happens to this process: the start snapshot is stored in
    ``pending_verifications`` (fenced) before the CALL, the row is deleted only once the
    rewrite is verified or the table held, and ``settle`` verifies a row left by an earlier
    attempt or job before anything else runs on the table.
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

    async def admitted(
        self, table_id: int, actions: Any
    ) -> tuple[asyncpg.Record, list[Intent], Admission]:
        """The table row, the validated intents and what the choke point established.

        Raises:
            PermanentError: unknown or dropped table, malformed actions, or refused
                by a safety rule; the message says which.
        """
        row = await self.pool.fetchrow(load_query("table_get"), table_id)
        if row is None or row["dropped_at"] is not None:
            raise PermanentError(f"table {table_id} is unknown or dropped")
        try:
            intents = parse_intents(actions, allow_empty=True)
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
        return row, intents, admission

    async def _orphan_limits(self, table_id: int, admission: Admission) -> OrphanLimits:
        config = admission.policy.orphan_file_removal
        latest = await self.pool.fetchrow(load_query("status_latest"), table_id)
        live = None
        if latest is not None:
            status = latest["status"]
            live = sum(
                int(status.get(k, 0))
                for k in (
                    "data_file_count",
                    "position_delete_file_count",
                    "equality_delete_file_count",
                    "deletion_vector_count",
                    "manifest_count",
                )
            )
        if config is None:
            return OrphanLimits(live_files=live)
        return OrphanLimits(
            max_files=config.max_orphan_files,
            max_fraction=config.max_orphan_fraction,
            live_files=live,
        )

    async def _status(self, ref: TableRef) -> TableStatus | None:
        try:
            return await self.inspector.inspect(ref)
        except InspectionFailed as exc:
            log.warning("maintenance.inspect_failed", table=str(ref), error=exc.message)
            return None

    async def _maintenance(
        self,
        table_id: int,
        job: Job | None,
        guard: Guard | None,
        admission: Admission | None = None,
        limits: OrphanLimits | None = None,
    ) -> TableMaintenance:
        row = await self.pool.fetchrow(load_query("table_get"), table_id)
        if row is None or row["dropped_at"] is not None:
            raise PermanentError(f"table {table_id} is unknown or dropped")
        ref = TableRef(row["catalog"], row["namespace"], row["name"])

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

        async def metadata() -> Table | None:
            # The verifier's file diff reads the manifests through the executor's own catalog.
            return (await self.inspector.load(ref)).table

        return TableMaintenance(
            self.engine,
            ref,
            row["properties"] or {},
            after_call=self.after_call,
            guard=guard,
            before_call=begin if job is not None else None,
            orphan_location=admission.location if admission else None,
            orphan_limits=limits,
            expiry=(
                ExpiryLedger(
                    self.pool,
                    job.id,
                    job.fence,
                    table_id,
                    lambda: self.inspector.load(ref),
                    confine=loaded_confinement(
                        self.pool, table_id, str(ref), granted_roots(admission)
                    ),
                )
                if job is not None
                else None
            ),
            orphan_sink=(
                self.ledger.orphan_sink(job, table_id, ref, orphans.quarantine_days)
                if job is not None and orphans is not None
                else None
            ),
            metadata=metadata,
        )

    async def run(
        self,
        table_id: int,
        actions: Any,
        record: Record,
        *,
        job: Job | None = None,
        guard: Guard | None = None,
    ) -> list[dict[str, Any]]:
        """Validate, admit and run ``actions`` (raw JSON, as stored in ``jobs.actions``) in
        order on table ``table_id``; ``record`` stores each one.

        ``job`` enables the durable verification record (see the class); ``guard`` raises when
        the caller no longer holds the table lock under a valid fence (checked before any
        rollback). Without a job, rewrites are verified inline only.

        Raises:
            RetryableError | PermanentError: an action failed (the type says whether to try again).
            StaleFence: the job was lost; any unverified rewrite is left to the next holder.
        """
        _row, intents, admission = await self.admitted(table_id, actions)
        limits = (
            await self._orphan_limits(table_id, admission)
            if any(isinstance(i, RemoveOrphanFiles) for i in intents)
            else None
        )
        maintenance = await self._maintenance(table_id, job, guard, admission, limits)
        ref = maintenance.ref
        if job is not None:
            await self.settle(job, table_id, record, guard, maintenance)
        results: list[dict[str, Any]] = []
        status = await self._status(ref)
        measure = job is not None and bool(intents)
        probe_before = await read_probe(self.inspector, ref) if measure else {}
        expected = predicted_benefits(
            job.predicted if job else None, [i.kind.value for i in intents]
        )
        measured: list[dict[str, Any]] = []
        for index, intent in enumerate(intents):
            name = intent.kind.value
            started = datetime.now(UTC)
            try:
                outcome = await self._run_one(maintenance, intent, job, table_id)
            except (OrphanLimitExceeded, DeletionLedgerViolation, DeletionOutsideTable) as exc:
                self._failed(name, started)
                await self._hold(table_id, name, str(exc), exc.evidence)
                await record(ActionRecord.failed(name, started, str(exc), exc.evidence))
                raise PermanentError(str(exc)) from exc
            except VerificationFailed as exc:
                self._failed(name, started)
                await self._hold(table_id, name, str(exc), exc.evidence)
                if job is not None:
                    await self._clear(job, table_id)
                output = {**exc.evidence, "verification": exc.evidence}
                await record(ActionRecord.failed(name, started, str(exc), output))
                raise PermanentError(str(exc)) from exc
            except StaleFence:
                raise  # lost the job: the pending verification is the next holder's
            except (PermanentError, InvalidIdentifier, ValueError) as exc:
                self._failed(name, started)
                await record(ActionRecord.failed(name, started, str(exc)))
                if job is not None:
                    await self.settle(job, table_id, record, guard, maintenance)
                raise PermanentError(f"{name}: {exc}") from exc
            except Exception as exc:  # Spark/py4j/thrift errors: classify by type
                self._failed(name, started)
                conflict = conflict_reason(exc)
                if conflict is not None:  # a writer won: not a failure of the table
                    await self._conflicted(name, started, conflict, job, table_id, record, guard)
                    raise CommitConflict(name, conflict) from exc
                message = redact_text(f"{name} failed: {type(exc).__name__}: {exc}")[:4000]
                await record(ActionRecord.failed(name, started, message))
                # A rewrite may have committed partial progress before failing: verify it.
                if job is not None:
                    await self.settle(job, table_id, record, guard, maintenance)
                raise (RetryableError if classify(exc) else PermanentError)(message) from exc
            lost = lost_part(name, outcome.output)
            if lost is None or outcome.output.get("rewritten_data_files_count"):
                await clear_conflicts(self.pool, table_id, name)  # it committed: progress
            after = await self._status(ref)
            finished = datetime.now(UTC)
            JOB_ACTION_DURATION.record(
                (finished - started).total_seconds(), {"action": name, "state": "succeeded"}
            )
            output = {**outcome.output, **outcome.verification}
            await record(
                ActionRecord(
                    name,
                    "succeeded",
                    started,
                    finished,
                    procedure=outcome.procedure,
                    sql_text=redact_text(";\n".join(outcome.sql)),
                    output=output,
                    impact=_impact(status, after),
                )
            )
            if job is not None and outcome.verification:
                start = outcome.verification["verification"]["start_snapshot_id"]
                if not await self._clear(job, table_id, start, check_start=True):
                    # The pending row starts before this rewrite (an older row nobody
                    # settled): verify from there before going on.
                    await self.settle(job, table_id, record, guard, maintenance)
            if lost is not None:  # recorded and verified: the lost part is retried
                raise CommitConflict(name, lost)
            results.append({"action": name, **outcome.output})
            own = await measure_own(self.inspector, ref, status, outcome.verification)
            layout = outcome.output.get("clustering")
            measured.append(measured_action(name, status, after, expected[index], own, layout))
            status = after
        if measure:
            assert job is not None
            probe_after = await read_probe(self.inspector, ref)
            await self._record_outcome(job, job_outcome(measured, probe_before, probe_after))
        return results

    async def _conflicted(
        self,
        name: str,
        started: datetime,
        conflict: str,
        job: Job | None,
        table_id: int,
        record: Record,
        guard: Guard | None,
    ) -> None:
        """Record an action that lost a commit conflict, and verify whatever partial progress
        it committed before (``partial-progress.enabled``: committed groups stay)."""
        error = f"commit conflict with a writer (the writer won): {conflict}"
        await record(ActionRecord.failed(name, started, error, {"conflict": conflict}))
        if job is not None:
            await self.settle(job, table_id, record, guard)

    async def _record_outcome(self, job: Job, outcome: dict[str, Any]) -> None:
        """Store the job's measured outcome, fenced. Raises ``StaleFence`` for a lost job."""
        stored = await self.pool.fetchval(
            load_query("job_outcome_record"), job.id, job.fence, outcome
        )
        if stored is None:
            raise StaleFence(job.id, job.fence, "record the outcome")
        probes = outcome["read_probe"]
        log.info(
            "maintenance.outcome",
            job_id=job.id,
            benefit=outcome["benefit"],
            predicted_benefit=outcome["predicted_benefit"],
            ratio=outcome["ratio"],
            files_planned=[probes[k].get("files_planned") for k in ("before", "after")],
            plan_ms=[probes[k].get("plan_ms") for k in ("before", "after")],
        )

    async def _run_one(
        self, maintenance: TableMaintenance, intent: Intent, job: Job | None, table_id: int
    ) -> ActionOutcome:
        """One action: a Spark procedure, or a ledger action (purge, restore) without Spark."""
        if isinstance(intent, LEDGER_INTENTS):
            return await self.ledger.run(intent, job, table_id, maintenance.ref)
        return await maintenance.run(intent)

    async def settle(
        self,
        job: Job,
        table_id: int,
        record: Record,
        guard: Guard | None,
        maintenance: TableMaintenance | None = None,
    ) -> dict[str, Any] | None:
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
        maintenance = maintenance or await self._maintenance(table_id, job, guard)
        started = datetime.now(UTC)
        origin = {
            "job_id": pending["job_id"],
            "fence": pending["fence"],
            "action": pending["action"],
            "recorded_at": pending["recorded_at"].isoformat(),
            "start_snapshot_id": pending["start_snapshot_id"],
        }
        try:
            verified = await asyncio.wait_for(
                maintenance.verify_rewrites(pending["start_snapshot_id"], guard),
                self.verify_timeout_seconds,
            )
        except VerificationFailed as exc:
            evidence = {**exc.evidence, "pending": origin}
            await self._hold(table_id, VERIFY_ACTION, str(exc), evidence)
            await self._settled(pending)
            await record(
                ActionRecord(
                    VERIFY_ACTION,
                    "failed",
                    started,
                    datetime.now(UTC),
                    output={**evidence, "verification": evidence},
                    error=str(exc),
                )
            )
            raise PermanentError(str(exc)) from exc
        except StaleFence:
            raise
        except Exception as exc:  # query error, timeout, engine gone: never "failed and forgotten"
            if isinstance(exc, TimeoutError):
                await self.engine.interrupt()
            reason = redact_text(
                f"rewrite of {maintenance.ref} could not be verified: {type(exc).__name__}: {exc}"
            )[:4000]
            evidence = {
                "status": "error",
                "start_snapshot_id": pending["start_snapshot_id"],
                "snapshots": [],
                "rollback": None,
                "error": reason,
                "pending": origin,
            }
            await self._hold(table_id, VERIFY_ACTION, reason, evidence)
            await self._settled(pending)
            await record(
                ActionRecord(
                    VERIFY_ACTION,
                    "failed",
                    started,
                    datetime.now(UTC),
                    output={"verification": evidence},
                    error=reason,
                )
            )
            raise PermanentError(reason) from exc
        evidence = {**verified["verification"], "pending": origin}
        await self._settled(pending)
        await record(
            ActionRecord(
                VERIFY_ACTION,
                "succeeded",
                started,
                datetime.now(UTC),
                output={
                    "verified_snapshots": verified["verified_snapshots"],
                    "verification": evidence,
                },
            )
        )
        return evidence

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

    @staticmethod
    def _failed(name: str, started: datetime) -> None:
        JOB_ACTION_DURATION.record(
            (datetime.now(UTC) - started).total_seconds(), {"action": name, "state": "failed"}
        )

    async def _hold(
        self, table_id: int, action: str, reason: str, evidence: dict[str, Any]
    ) -> None:
        await place_hold(self.pool, table_id, action=action, reason=reason, evidence=evidence)
        log.error("maintenance.table_held", table_id=table_id, reason=reason)
