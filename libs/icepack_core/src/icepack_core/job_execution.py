"""Running one job's actions against its table: shared by the executor and ``icepack maintain``.

For each action: inspect the table (incrementally, through the manifest cache), run the action
through ``TableMaintenance``, inspect again, and hand an ``ActionRecord`` (procedure, SQL sent,
output, before/after impact, duration) to the caller, who stores it under the job's fence. A
rewrite that fails verification puts the table on hold (no automatic maintenance until an
operator releases it) and fails the job permanently.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg
import structlog

from icepack_core.actions import ActionError
from icepack_core.errors import InvalidIdentifier, PermanentError
from icepack_core.inspect import Inspector
from icepack_core.inspect.status import InspectionFailed, TableStatus
from icepack_core.logs import redact, redact_text
from icepack_core.maintenance import (
    MAINTENANCE_ACTIONS,
    AfterCall,
    TableMaintenance,
    VerificationFailed,
)
from icepack_core.queries import load_query
from icepack_core.service_metrics import JOB_ACTION_DURATION
from icepack_core.spark.engine import SparkEngine
from icepack_core.types import TableRef

log = structlog.get_logger("icepack.maintenance")
IMPACT_FIELDS = (
    "data_file_count", "data_file_bytes", "small_file_count", "record_count",
    "position_delete_file_count", "equality_delete_file_count", "deletion_vector_count",
    "delete_record_count", "manifest_count", "snapshot_count",
)
# Failures that will fail again whatever we do (bad SQL, bad arguments, missing table).
PERMANENT_ERRORS = frozenset({"AnalysisException", "ParseException", "IllegalArgumentException",
                              "NoSuchTableException", "InvalidIdentifier", "PermanentError"})


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
    return {"before": {k: b[k] for k in IMPACT_FIELDS}, "after": {k: a[k] for k in IMPACT_FIELDS},
            "snapshot_before": b["current_snapshot_id"], "snapshot_after": a["current_snapshot_id"]}


class JobExecution:
    """Runs actions on one table with one engine."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        engine: SparkEngine,
        inspector: Inspector,
        *,
        after_call: AfterCall | None = None,
    ) -> None:
        self.pool = pool
        self.engine = engine
        self.inspector = inspector
        self.after_call = after_call

    async def _status(self, ref: TableRef) -> TableStatus | None:
        try:
            return await self.inspector.inspect(ref)
        except InspectionFailed as exc:
            log.warning("maintenance.inspect_failed", table=str(ref), error=exc.message)
            return None

    async def run(
        self,
        table_id: int,
        actions: Sequence[Mapping[str, Any]],
        record: Record,
    ) -> list[dict[str, Any]]:
        """Run ``actions`` in order on table ``table_id``; ``record`` stores each one.

        Raises:
            ActionError: an action failed (``retryable`` says whether to try again).
        """
        row = await self.pool.fetchrow(load_query("table_get"), table_id)
        if row is None or row["dropped_at"] is not None:
            raise ActionError(f"table {table_id} is unknown or dropped", retryable=False)
        ref = TableRef(row["catalog"], row["namespace"], row["name"])
        maintenance = TableMaintenance(self.engine, ref, row["properties"] or {},
                                       after_call=self.after_call)
        results: list[dict[str, Any]] = []
        status = await self._status(ref)
        for action in actions:
            name = str(action.get("action"))
            started = datetime.now(UTC)
            if name not in MAINTENANCE_ACTIONS:
                raise ActionError(f"unknown action {name!r} (known: "
                                  f"{', '.join(MAINTENANCE_ACTIONS)})", retryable=False)
            try:
                outcome = await maintenance.run(action)
            except VerificationFailed as exc:
                self._failed(name, started)
                await self._hold(table_id, name, exc)
                await record(ActionRecord(name, "failed", started, datetime.now(UTC),
                                          procedure=name, output=exc.evidence, error=str(exc)))
                raise ActionError(str(exc), retryable=False) from exc
            except (PermanentError, InvalidIdentifier, ValueError) as exc:
                self._failed(name, started)
                await record(ActionRecord(name, "failed", started, datetime.now(UTC),
                                          procedure=name, error=str(exc)))
                raise ActionError(f"{name}: {exc}", retryable=False) from exc
            except Exception as exc:  # Spark/py4j/thrift errors: classify by type
                self._failed(name, started)
                message = redact_text(f"{name} failed: {type(exc).__name__}: {exc}")[:4000]
                await record(ActionRecord(name, "failed", started, datetime.now(UTC),
                                          procedure=name, error=message))
                raise ActionError(message, retryable=classify(exc)) from exc
            after = await self._status(ref)
            finished = datetime.now(UTC)
            JOB_ACTION_DURATION.record((finished - started).total_seconds(),
                                       {"action": name, "state": "succeeded"})
            output = {**outcome.output, **outcome.verification}
            await record(ActionRecord(
                name, "succeeded", started, finished, procedure=outcome.procedure,
                sql_text=redact_text(";\n".join(outcome.sql)), output=output,
                impact=_impact(status, after)))
            results.append({"action": name, **outcome.output})
            status = after
        return results

    @staticmethod
    def _failed(name: str, started: datetime) -> None:
        JOB_ACTION_DURATION.record((datetime.now(UTC) - started).total_seconds(),
                                   {"action": name, "state": "failed"})

    async def _hold(self, table_id: int, action: str, exc: VerificationFailed) -> None:
        hold = {"reason": redact_text(str(exc)), "action": action,
                "evidence": redact(exc.evidence),
                "at": datetime.now(UTC).isoformat()}
        await self.pool.execute(load_query("table_hold_set"), table_id, hold)
        log.error("maintenance.table_held", table_id=table_id, reason=str(exc))
