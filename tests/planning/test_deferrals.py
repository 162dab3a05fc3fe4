"""Repeated commit conflicts defer an action on a table, with the reason in the plan.

The conflict record is written by the executor's code (``queue.deferrals.record_conflict``, what
``JobRunner`` calls when a writer wins) and read by the real ``Planner.plan``; time is simulated
by passing ``now`` to both. The classifier is checked on Iceberg's own messages and, as a
property, on arbitrary text.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
from hypothesis import given
from hypothesis import strategies as st

from icepack_core.execution.conflicts import (
    COMMIT_FAILED,
    CONFLICT_MESSAGES,
    PARTIAL_LOSS,
    VALIDATION,
    conflict_reason,
    lost_part,
)
from icepack_core.planning.planner import Planner
from icepack_core.queue.deferrals import (
    DEFER_AFTER,
    DEFER_BASE,
    DEFER_CAP,
    clear_conflicts,
    defer_for,
    record_conflict,
)
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import Settings
from tests.planning.test_planner import add_table, status

ERROR = f"{VALIDATION}: Deleted manifest file:/m1.avro could not be found in the latest snapshot"


async def test_repeated_conflicts_defer_the_action_and_the_plan_says_why(
    db: asyncpg.Pool, settings: Settings
) -> None:
    queue = JobQueue(db)
    planner = Planner(settings, db, queue)
    table_id = await add_table(db, "hot", status(small_file_count=30, small_file_bytes=30))
    t = datetime.now(UTC) + timedelta(minutes=1)
    outcome = await planner.plan(table_id, now=t)
    assert outcome.recommendation is not None
    assert "rewrite_data_files" in [a.action for a in outcome.recommendation.actions]
    job = await queue.claim("executor@test", 60, now=t)
    assert job is not None
    # The writer won: the job waits its turn (queued), and the table is planned meanwhile.
    await queue.give_back(job, "conflict", "writer won", now=t)

    for n in range(1, DEFER_AFTER):
        deferral = await record_conflict(db, table_id, "rewrite_data_files", ERROR, now=t)
        assert deferral.conflicts == n and deferral.deferred_until is None
    deferral = await record_conflict(db, table_id, "rewrite_data_files", ERROR, now=t)
    assert deferral.deferred_until == t + DEFER_BASE
    assert deferral.reason is not None and "3 commit conflicts in a row" in deferral.reason

    deferred = await planner.plan(table_id, now=t + timedelta(minutes=5))
    assert deferred.recommendation is not None
    assert "rewrite_data_files" not in [a.action for a in deferred.recommendation.actions]
    assert deferred.recommendation is not None
    (skip,) = [s for s in deferred.recommendation.skipped if s.action == "rewrite_data_files"]
    assert "rewrite_data_files deferred: 3 commit conflicts in a row" in skip.reason
    assert "could not be found in the latest snapshot" in skip.reason
    assert (t + DEFER_BASE).strftime("%Y-%m-%d %H:%M:%S") in skip.reason
    stored = await db.fetchval(
        "SELECT actions FROM icepack.recommendations ORDER BY id DESC LIMIT 1"
    )
    assert any("deferred" in s["reason"] for s in stored["skipped"])

    # A quieter moment: past the deferral the action is planned again.
    later = await planner.plan(table_id, now=t + DEFER_BASE + timedelta(minutes=1))
    assert later.recommendation is not None
    assert "rewrite_data_files" in [a.action for a in later.recommendation.actions]
    # A clean commit starts the count over.
    await clear_conflicts(db, table_id, "rewrite_data_files")
    again = await record_conflict(db, table_id, "rewrite_data_files", ERROR, now=t)
    assert again.conflicts == 1 and again.deferred_until is None


@given(st.integers(min_value=0, max_value=10_000))
def test_deferral_grows_within_its_cap(conflicts: int) -> None:
    wait = defer_for(conflicts)
    if conflicts < DEFER_AFTER:
        assert wait is None
        return
    assert wait is not None and DEFER_BASE <= wait <= DEFER_CAP
    following = defer_for(conflicts + 1)
    assert following is not None and following >= wait


def test_iceberg_conflicts_are_told_from_other_failures() -> None:
    for message in CONFLICT_MESSAGES:
        text = f"py4j: An error occurred\n{VALIDATION}: {message} x\n\tat org.apache.iceberg.X"
        reason = conflict_reason(RuntimeError(text))
        assert reason is not None and reason.startswith(VALIDATION) and message in reason
    wrapped = RuntimeError("SparkException: Job aborted")
    wrapped.__cause__ = RuntimeError(f"Caused by: {COMMIT_FAILED}: Table has been updated")
    assert conflict_reason(wrapped) == f"{COMMIT_FAILED}: Table has been updated"
    not_conflicts = [
        f"{VALIDATION}: Cannot find source column for partition field: 1000: x",
        "org.apache.iceberg.exceptions.CommitStateUnknownException: Unknown commit state",
        "AnalysisException: Table or view not found",
        "Missing required files to delete",  # the words without Iceberg's exception
    ]
    for text in not_conflicts:
        assert conflict_reason(RuntimeError(text)) is None, text


def test_a_rewrite_whose_partial_progress_partly_lost_is_a_conflict() -> None:
    """Iceberg's RewriteDataFilesSparkAction, with partial-progress.max-failed-commits 0."""
    text = (
        "py4j.protocol.Py4JJavaError: An error occurred while calling o51.sql.\n"
        "java.lang.RuntimeException: partial-progress.enabled is true but 2 rewrite commits "
        "failed. This is more than the maximum allowed failures of 0. Check the logs\n"
        "\tat org.apache.iceberg.spark.actions.RewriteDataFilesSparkAction.x"
    )
    reason = conflict_reason(RuntimeError(text))
    assert reason is not None and reason.startswith(
        "partial progress: 2 of the rewrite's commits lost to concurrent commits"
    )
    for text in (
        "partial-progress.enabled is true but x rewrite commits failed",
        "partial-progress.enabled is true but 2 rewrite",
    ):
        assert conflict_reason(RuntimeError(text)) is None, text


def test_a_rewrite_that_left_selected_partitions_reports_the_lost_part() -> None:
    reason = lost_part("rewrite_data_files", {"partitions_lost": 3, "partitions_selected": 16})
    assert reason is not None and reason.startswith(
        "partial progress: 3 of 16 selected partitions not rewritten"
    )
    for output in ({}, {"partitions_lost": 0}, {"partitions_lost": "3"}):
        assert lost_part("rewrite_data_files", output) is None, output
    assert lost_part("rewrite_manifests", {"partitions_lost": 3}) is None


@given(st.text(max_size=300))
def test_text_without_iceberg_conflict_exceptions_is_never_a_conflict(text: str) -> None:
    if COMMIT_FAILED in text or VALIDATION in text or PARTIAL_LOSS[0] in text:
        return
    assert conflict_reason(RuntimeError(text)) is None
    assert conflict_reason(RuntimeError(f"{COMMIT_FAILED}: {text}")) is not None
