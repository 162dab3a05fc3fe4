"""``failures.failure_of``: the one mapping from an exception to what the job records, holds,
verifies and raises. Pure: the inputs are the exceptions themselves (an engine's error is an
exception whose text carries the Java class, as ``conflicts`` reads it); the Spark tests
(``test_verification``, ``test_commit_conflicts``) run the same mapping end to end."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from icepack_core.errors import (
    CommitConflict,
    DeletionLedgerViolation,
    InvalidIdentifier,
    OrphanLimitExceeded,
    PermanentError,
    RetryableError,
    StaleFence,
)
from icepack_core.execution.failures import VERIFY_ACTION, failure_of
from icepack_core.safety.verification import Evidence, PendingOrigin, VerificationFailed

STARTED = datetime(2026, 1, 1, tzinfo=UTC)
NAME = "rewrite_data_files"
PENDING = PendingOrigin(
    job_id=7, fence=2, action=NAME, recorded_at=STARTED.isoformat(), start_snapshot_id=11
)


def test_a_lost_job_records_nothing_and_raises_itself() -> None:
    lost = StaleFence(1, 2, "record")
    for pending in (None, PENDING):
        failure = failure_of(lost, NAME, STARTED, pending=pending)
        assert failure.error is lost and failure.record is None and failure.hold is None


@pytest.mark.parametrize("kind", [OrphanLimitExceeded, DeletionLedgerViolation])
def test_a_table_that_disagrees_is_held_with_the_evidence_and_not_retried(kind: type) -> None:
    evidence = {"dry_run_orphans": 20_000}
    failure = failure_of(kind("too many", evidence), "remove_orphan_files", STARTED)
    assert isinstance(failure.error, PermanentError) and str(failure.error) == "too many"
    assert failure.hold == evidence and not failure.settle and not failure.release
    assert failure.record is not None
    assert (failure.record.action, failure.record.state) == ("remove_orphan_files", "failed")
    assert failure.record.output == evidence and failure.record.error == "too many"


def test_a_failed_verification_holds_releases_the_row_and_keeps_the_evidence_once() -> None:
    evidence = Evidence(status="violation", start_snapshot_id=1)
    failure = failure_of(VerificationFailed("rows differ", evidence), NAME, STARTED)
    assert isinstance(failure.error, PermanentError) and failure.release and not failure.settle
    assert failure.hold == evidence.to_json() and failure.record is not None
    assert failure.record.output == {"verification": evidence.to_json()}


@pytest.mark.parametrize(
    "exc", [PermanentError("bad option"), InvalidIdentifier("bad`name"), ValueError("nope")]
)
def test_bad_input_fails_for_good_after_verifying_partial_progress(exc: Exception) -> None:
    failure = failure_of(exc, NAME, STARTED)
    assert isinstance(failure.error, PermanentError)
    assert str(failure.error) == f"{NAME}: {exc}"
    assert failure.settle and failure.hold is None and not failure.release


def test_a_conflict_the_writer_won_is_retried_as_a_conflict_not_held() -> None:
    engine_error = RuntimeError(
        "org.apache.iceberg.exceptions.CommitFailedException: Table metadata refresh failed"
    )
    failure = failure_of(engine_error, NAME, STARTED)
    assert isinstance(failure.error, CommitConflict) and failure.error.action == NAME
    assert failure.settle and failure.hold is None and failure.record is not None
    assert failure.record.output["conflict"].startswith("org.apache.iceberg.exceptions.Commit")


def test_engine_errors_are_retried_by_type_and_redacted() -> None:
    transient = failure_of(ConnectionError("password=hunter2 lost"), NAME, STARTED)
    assert type(transient.error) is RetryableError and transient.settle
    assert "hunter2" not in str(transient.error)
    assert transient.record is not None and "hunter2" not in (transient.record.error or "")
    permanent = failure_of(TypeError("unhashable"), NAME, STARTED)
    assert type(permanent.error) is PermanentError and permanent.settle


def test_a_pending_rewrite_that_cannot_be_verified_holds_the_table() -> None:
    failure = failure_of(TimeoutError(), VERIFY_ACTION, STARTED, pending=PENDING, table="c.n.t")
    assert isinstance(failure.error, PermanentError) and failure.interrupt and failure.release
    assert failure.hold is not None and failure.hold["status"] == "error"
    assert failure.hold["pending"] == PENDING.to_json() and failure.hold["start_snapshot_id"] == 11
    assert failure.record is not None and failure.record.procedure is None
    assert failure.record.output == {"verification": failure.hold}
    assert str(failure.error).startswith("rewrite of c.n.t could not be verified: TimeoutError")


def test_a_pending_rewrite_that_changed_the_contents_is_held_with_its_origin() -> None:
    evidence = Evidence(status="violation", start_snapshot_id=11)
    failed = VerificationFailed("checksum differs", evidence)
    failure = failure_of(failed, VERIFY_ACTION, STARTED, pending=PENDING)
    assert failure.hold == {**evidence.to_json(), "pending": PENDING.to_json()}
    assert not failure.interrupt
    assert failure.record is not None and failure.record.action == VERIFY_ACTION
    assert failure.record.output == {"verification": failure.hold}
