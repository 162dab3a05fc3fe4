"""What one job action, or the verification of a pending rewrite, left when it raised.

``failure_of`` is the one place that maps an exception to what the job stores and does about
it: the ``ActionRecord`` (state ``failed``, the redacted error, the evidence), a hold on the
table (with that evidence), whether the pending verification row is released, whether partial
progress is verified before the job ends, and the error the job raises (its type is the retry
decision: ``RetryableError``, ``CommitConflict`` or ``PermanentError``). ``JobExecution`` applies
the ``Failure`` it returns; nothing else decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from icepack_core.errors import (
    CommitConflict,
    DeletionLedgerViolation,
    DeletionOutsideTable,
    InvalidIdentifier,
    OrphanLimitExceeded,
    PermanentError,
    RetryableError,
    StaleFence,
)
from icepack_core.execution.conflicts import conflict_reason
from icepack_core.safety.verification import Evidence, PendingOrigin, VerificationFailed
from icepack_core.telemetry.logs import redact_text
from icepack_core.types import JSONObject

# The job action under which a pending rewrite's verification is recorded.
VERIFY_ACTION = "verify_rewrites"
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
# Errors whose evidence says the table itself is wrong: held, never retried.
HOLDING_ERRORS = (OrphanLimitExceeded, DeletionLedgerViolation, DeletionOutsideTable)


@dataclass
class ActionRecord:
    """One action as run: what ``job_actions`` stores."""

    action: str
    state: str
    started_at: datetime
    finished_at: datetime
    procedure: str | None = None
    sql_text: str | None = None
    output: JSONObject = field(default_factory=dict)  # job_actions.output (stored JSON)
    impact: JSONObject = field(default_factory=dict)  # job_actions.impact (``Impact`` or {})
    error: str | None = None

    @classmethod
    def failed(
        cls, action: str, started: datetime, error: str, output: JSONObject | None = None
    ) -> ActionRecord:
        """A failed run of ``action`` (its procedure), finished now."""
        now = datetime.now(UTC)
        return cls(
            action, "failed", started, now, procedure=action, output=output or {}, error=error
        )


def classify(exc: BaseException) -> bool:
    """True when ``exc`` is worth retrying (by exception type, never by message text)."""
    for error in (exc, exc.__cause__, exc.__context__):
        if error is not None and type(error).__name__ in PERMANENT_ERRORS:
            return False
    return True


@dataclass(frozen=True)
class Failure:
    """What to do about one exception (module doc). ``record`` is None when the job was lost
    (``StaleFence``): nothing is written, ``error`` is the exception itself. A hold's reason is
    the record's error. ``release``: delete the pending verification row (the rewrite's
    verdict is recorded). ``settle``: verify whatever the action committed before failing.
    ``interrupt``: stop the engine's work first (a verification that timed out)."""

    error: BaseException
    record: ActionRecord | None = None
    hold: Mapping[str, object] | None = None  # the evidence to hold the table with
    release: bool = False
    settle: bool = False
    interrupt: bool = False


def failure_of(
    exc: Exception,
    action: str,
    started: datetime,
    *,
    pending: PendingOrigin | None = None,
    table: str = "",
) -> Failure:
    """The ``Failure`` for ``exc`` raised by ``action`` (started at ``started``); with
    ``pending`` (the origin of a pending rewrite: job, fence, action, start snapshot) it was
    raised while verifying that rewrite of ``table``."""
    if isinstance(exc, StaleFence):
        return Failure(exc)  # lost the job: the pending verification is the next holder's
    if pending is not None:
        return _verification_failure(exc, started, pending, table)
    message = str(exc)
    if isinstance(exc, HOLDING_ERRORS):
        record = ActionRecord.failed(action, started, message, exc.evidence)
        return Failure(PermanentError(message), record, hold=exc.evidence)
    if isinstance(exc, VerificationFailed):
        evidence = exc.evidence.to_json()
        record = ActionRecord.failed(action, started, message, {"verification": evidence})
        return Failure(PermanentError(message), record, hold=evidence, release=True)
    if isinstance(exc, PermanentError | InvalidIdentifier | ValueError):
        record = ActionRecord.failed(action, started, message)
        return Failure(PermanentError(f"{action}: {exc}"), record, settle=True)
    # Spark/py4j/thrift errors: classified by type.
    conflict = conflict_reason(exc)
    if conflict is not None:  # a writer won: not a failure of the table
        error = f"commit conflict with a writer (the writer won): {conflict}"
        record = ActionRecord.failed(action, started, error, {"conflict": conflict})
        return Failure(CommitConflict(action, conflict), record, settle=True)
    message = redact_text(f"{action} failed: {type(exc).__name__}: {exc}")[:4000]
    retry = RetryableError if classify(exc) else PermanentError
    # A rewrite may have committed partial progress before failing: it is verified.
    return Failure(retry(message), ActionRecord.failed(action, started, message), settle=True)


def _verification_failure(
    exc: Exception, started: datetime, pending: PendingOrigin, table: str
) -> Failure:
    """A pending rewrite's verification that failed (the contents changed) or could not run
    (query error, timeout, engine gone): never "failed and forgotten", the table is held."""
    if isinstance(exc, VerificationFailed):
        reason = str(exc)
        evidence = exc.evidence.model_copy(update={"pending": pending}).to_json()
    else:
        reason = redact_text(
            f"rewrite of {table} could not be verified: {type(exc).__name__}: {exc}"
        )[:4000]
        evidence = Evidence(
            status="error",
            start_snapshot_id=pending.start_snapshot_id,
            error=reason,
            pending=pending,
        ).to_json()
    output = {"verification": evidence}
    record = ActionRecord(
        VERIFY_ACTION, "failed", started, datetime.now(UTC), output=output, error=reason
    )
    return Failure(
        PermanentError(reason),
        record,
        hold=evidence,
        release=True,
        interrupt=isinstance(exc, TimeoutError),
    )
