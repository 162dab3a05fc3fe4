"""The planner's unit of work and policy simulation, on a real Postgres (no Spark needed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from icepack_core.errors import PolicyError
from icepack_core.inspection.status import TableStatus
from icepack_core.intents import RewriteDataFiles, RewriteDataFilesParams, RewriteManifests
from icepack_core.planning.planner import Planner
from icepack_core.planning.pressure import QueueAhead
from icepack_core.planning.simulation import simulate
from icepack_core.policy import PolicyAttachment
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import Settings
from icepack_core.types import PolicyType
from tests.support import statuses

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
MIB = 1024 * 1024


def status(**over: Any) -> TableStatus:
    base = {
        "data_file_count": 40,
        "data_file_bytes": 40 * MIB,
        "small_file_count": 0,
        "small_file_bytes": 0,
        "position_delete_file_count": 0,
        "equality_delete_file_count": 0,
        "deletion_vector_count": 0,
        "delete_record_count": 0,
        "manifest_count": 4,
        "manifest_bytes": 40_000,
        "snapshot_count": 4,
        "partition_count": 1,
        "oldest_snapshot_at": "2026-11-21T10:00:00.000Z",
        "current_snapshot_at": "2026-11-21T11:00:00.000Z",
    }
    return statuses.status(**(base | over))


async def add_table(
    db: asyncpg.Pool,
    name: str,
    st: TableStatus,
    properties: dict[str, str] | None = None,
    hold: dict[str, Any] | None = None,
) -> int:
    table_id: int = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name, properties, maintenance_hold) "
        "VALUES ('cat', 'db', $1, $2::jsonb, $3::jsonb) RETURNING id",
        name,
        properties or {},
        hold,
    )
    await db.execute(
        "INSERT INTO icepack.status_snapshots (table_id, inspected_at, inspector, status) "
        "VALUES ($1, now(), 'pyiceberg', $2::jsonb)",
        table_id,
        st.model_dump(mode="json"),
    )
    await db.execute(
        "INSERT INTO icepack.health_assessments (table_id, health, score, issues) "
        "VALUES ($1, 'warning', 40, '[]')",
        table_id,
    )
    return table_id


@pytest.fixture
def planner(db: asyncpg.Pool, settings: Settings) -> Planner:
    return Planner(settings, db, JobQueue(db))


async def test_unhealthy_table_gets_a_recommendation_and_one_job(
    db: asyncpg.Pool, planner: Planner
) -> None:
    table_id = await add_table(db, "small", status(small_file_count=30, small_file_bytes=30))
    first = await planner.plan(table_id, now=NOW)
    assert first.recommendation is not None
    assert [a.action for a in first.recommendation.actions] == ["rewrite_data_files"]
    assert first.job_created
    job = await db.fetchrow("SELECT * FROM icepack.jobs WHERE id = $1", first.job_id)
    assert job is not None
    # One priority band for planned jobs; the prediction orders them within it.
    assert job["priority"] == 100 and job["trigger"] == "planner"
    assert job["health_score"] == 40.0
    assert job["rewrite_bytes"] == 30 and job["benefit"] == 29.0  # 30 small files -> 1
    (predicted,) = job["predicted"]["actions"]
    assert predicted["action"] == "rewrite_data_files" and predicted["benefit"] == 29
    assert (predicted["before"]["data_files"], predicted["after"]["data_files"]) == (40, 11)
    assert (predicted["before"]["snapshots"], predicted["after"]["snapshots"]) == (4, 5)
    assert job["dedupe_key"] == f"table:{table_id}"
    assert job["actions"][0]["action"] == "rewrite_data_files"
    assert "small files" in job["actions"][0]["reason"]
    again = await planner.plan(table_id, now=NOW)  # redelivered event: no second job
    assert again.job_id == first.job_id and not again.job_created
    assert await db.fetchval("SELECT count(*) FROM icepack.jobs") == 1
    topics = [r["topic"] for r in await db.fetch("SELECT topic FROM icepack.events ORDER BY id")]
    assert topics == ["job.enqueued", "recommendation.created", "recommendation.created"]


async def test_healthy_table_gets_a_recommendation_without_a_job(
    db: asyncpg.Pool, planner: Planner
) -> None:
    table_id = await add_table(db, "fine", status())
    outcome = await planner.plan(table_id, now=NOW)
    assert outcome.recommendation is not None
    assert outcome.job_id is None and outcome.recommendation.actions == []
    stored = await db.fetchval("SELECT actions FROM icepack.recommendations")
    assert {s["action"] for s in stored["skipped"]} >= {"rewrite_data_files", "expire_snapshots"}


async def test_held_table_gets_no_job(db: asyncpg.Pool, planner: Planner) -> None:
    table_id = await add_table(
        db,
        "held",
        status(small_file_count=30, small_file_bytes=30),
        hold={"reason": "verification failed"},
    )
    outcome = await planner.plan(table_id, now=NOW)
    assert outcome.job_id is None
    assert outcome.recommendation is not None
    assert "table on hold: verification failed" in outcome.recommendation.skipped[0].reason


async def test_opted_out_table_gets_no_job(db: asyncpg.Pool, planner: Planner) -> None:
    table_id = await add_table(
        db,
        "optout",
        status(small_file_count=30, small_file_bytes=30),
        properties={"icepack.maintenance.enabled": "false"},
    )
    assert (await planner.plan(table_id, now=NOW)).job_id is None


async def test_invalid_table_property_is_reported_not_crashed_on(
    db: asyncpg.Pool, planner: Planner
) -> None:
    table_id = await add_table(
        db,
        "bad",
        status(small_file_count=30, small_file_bytes=30),
        properties={"icepack.snapshot-expiry.retain-last": "many"},
    )
    outcome = await planner.plan(table_id, now=NOW)
    assert outcome.job_id is None
    assert outcome.recommendation is not None
    assert "icepack.snapshot-expiry.retain-last" in outcome.recommendation.skipped[0].reason


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("icepack.snapshot-expiry.max-age-hours", "100000000"),  # before: OverflowError
        ("icepack.maintenance.cadence-hours", "1e11"),  # before: OverflowError
        ("icepack.maintenance.cadence-hours", "0"),  # before: a no-op job looped at once
        ("icepack.maintenance.cadence-hours", "0.1"),
    ],
)
async def test_a_duration_out_of_range_is_reported_not_crashed_on(
    db: asyncpg.Pool, planner: Planner, key: str, value: str
) -> None:
    """Every value a table property can hold ends in a plan or a reason naming it: a planner
    exception would retry the table's work item forever and never plan it."""
    table_id = await add_table(
        db,
        f"range-{abs(hash((key, value)))}",
        status(small_file_count=30, small_file_bytes=30),
        properties={key: value, "write.target-file-size-bytes": "²"},
    )
    outcome = await planner.plan(table_id, now=NOW)
    assert outcome.job_id is None
    assert outcome.recommendation is not None
    assert key in outcome.recommendation.skipped[0].reason


async def test_a_target_file_size_no_writer_could_mean_is_ignored(
    db: asyncpg.Pool, planner: Planner
) -> None:
    """``'²'.isdigit()`` is true and ``int('²')`` raises; 5,000 digits exceed Python's limit."""
    for i, target in enumerate(["²", "9" * 5000, "-5", "0", str(2**63), " 64"]):
        table_id = await add_table(
            db,
            f"target-{i}",
            status(small_file_count=30, small_file_bytes=30),
            properties={"write.target-file-size-bytes": target},
        )
        outcome = await planner.plan(table_id, now=NOW)
        assert outcome.job_id is not None, target  # planned with Iceberg's default target


async def test_cadence_uses_the_action_history(db: asyncpg.Pool, planner: Planner) -> None:
    table_id = await add_table(db, "recent", status(small_file_count=30, small_file_bytes=30))
    job_id = await db.fetchval(
        "INSERT INTO icepack.jobs (table_id, state, finished_at) "
        "VALUES ($1, 'succeeded', now()) RETURNING id",
        table_id,
    )
    await db.execute(
        "INSERT INTO icepack.job_actions (job_id, fence, action, state, started_at, finished_at) "
        "VALUES ($1, 1, 'rewrite_data_files', 'succeeded', $2, $2)",
        job_id,
        NOW - timedelta(hours=2),
    )
    outcome = await planner.plan(table_id, now=NOW)
    assert outcome.job_id is None
    # Need-based scheduling: 29 files of benefit stay under the threshold, so the cadence of
    # the last run still decides (before: "cadence is 24 h" alone).
    assert outcome.recommendation is not None
    (skip,) = [s for s in outcome.recommendation.skipped if s.action == "rewrite_data_files"]
    assert skip.reason.startswith("not due: benefit 29 vs threshold 50.0"), skip.reason
    assert "after the cadence of 24 h" in skip.reason


async def test_simulation_reports_what_a_proposed_policy_would_change(
    db: asyncpg.Pool, planner: Planner
) -> None:
    await add_table(
        db, "old", status(snapshot_count=40, oldest_snapshot_at="2026-11-21T01:00:00.000Z")
    )
    await add_table(
        db, "young", status(snapshot_count=40, oldest_snapshot_at="2026-11-21T11:30:00.000Z")
    )
    proposed = [
        PolicyAttachment(
            PolicyType.SNAPSHOT_EXPIRY,
            "catalog",
            "cat",
            None,
            None,
            True,
            {"max_snapshot_age_hours": 6, "retain_last": 5},
        )
    ]
    report = await simulate(planner, "cat", proposed, now=NOW)
    assert report.tables_evaluated == 2
    (change,) = report.changes
    assert (change.table, change.current_actions, change.proposed_actions) == (
        "old",
        [],
        ["expire_snapshots"],
    )
    assert report.totals == {"snapshots_expired_at_most": 35}
    assert await db.fetchval("SELECT count(*) FROM icepack.jobs") == 0  # nothing enqueued
    assert await db.fetchval("SELECT count(*) FROM icepack.policies") == 0  # nothing stored
    with pytest.raises(PolicyError, match="retain_last"):
        bad = PolicyAttachment(
            PolicyType.SNAPSHOT_EXPIRY, "catalog", "cat", None, None, True, {"retain_last": 0}
        )
        await simulate(planner, "cat", [bad], now=NOW)


async def test_actions_the_choke_point_would_refuse_are_skipped_not_enqueued(
    db: asyncpg.Pool, planner: Planner
) -> None:
    """An operator enabled orphan removal for the namespace, but one table's location holds
    another table: the planner skips orphan removal there (naming the neighbour) and still
    enqueues the rewrite, so the job never carries an action the executor refuses."""
    outer = await add_table(db, "outer", status(small_file_count=30, small_file_bytes=30))
    inner = await add_table(db, "inner", status())
    lone = await add_table(db, "lone", status())
    for table_id, location in [
        (outer, "s3://b/wh/db/outer"),
        (inner, "s3://b/wh/db/outer/inner"),
        (lone, "s3://b/wh/lone"),
    ]:
        await db.execute(
            "UPDATE icepack.tables SET location = $2 WHERE id = $1", table_id, location
        )
    await db.execute(
        "INSERT INTO icepack.policies (policy_type, scope, catalog, namespace, config) "
        "VALUES ('system.orphan-file-removal', 'namespace', 'cat', 'db', '{}'::jsonb)"
    )

    planned = await planner.plan(outer, now=NOW)
    assert planned.recommendation is not None
    assert [a.action for a in planned.recommendation.actions] == ["rewrite_data_files"]
    assert planned.recommendation is not None
    (skip,) = [s for s in planned.recommendation.skipped if s.action == "remove_orphan_files"]
    assert "LOCATION_OVERLAP" in skip.reason and "cat.db.inner" in skip.reason
    job = await db.fetchrow("SELECT actions FROM icepack.jobs WHERE id = $1", planned.job_id)
    assert job is not None
    assert [a["action"] for a in job["actions"]] == ["rewrite_data_files"]

    alone = await planner.plan(lone, now=NOW)
    assert alone.recommendation is not None
    assert [a.action for a in alone.recommendation.actions] == ["remove_orphan_files"]


async def test_job_history_is_read_only_for_a_table_that_has_jobs(
    db: asyncpg.Pool, planner: Planner
) -> None:
    """``table_plan_inputs.has_jobs`` gates the history reads: a table without jobs is planned as
    if its (empty) history had been read; once planning queued a job, the flag is set."""
    from icepack_core.db.queries import load_query
    from icepack_core.db.tables import TableRow

    table_id = await add_table(db, "fresh", status(small_file_count=30, small_file_bytes=30 * MIB))
    row = await db.fetchrow(load_query("table_plan_inputs"), table_id)
    assert row is not None
    assert (row["has_jobs"], row["score"]) == (False, 40) and row["status_id"] is not None
    table = TableRow.from_record(row)
    read = await planner.recommend_for(
        table, TableStatus.model_validate(row["status"]), NOW, has_jobs=True
    )
    skipped = await planner.recommend_for(
        table, TableStatus.model_validate(row["status"]), NOW, has_jobs=False
    )
    assert skipped == read and [a.action for a in skipped.actions] == ["rewrite_data_files"]

    outcome = await planner.plan(table_id, now=NOW)
    assert outcome.job_id is not None
    inputs = await db.fetchrow(load_query("table_plan_inputs"), table_id)
    assert inputs is not None and inputs["has_jobs"] is True


async def test_a_table_whose_gc_is_disabled_gets_no_expiry_job(
    db: asyncpg.Pool, planner: Planner
) -> None:
    """``gc.enabled=false``: the choke point refuses expiry, so the planner skips it with the
    reason instead of enqueueing a job that Iceberg would refuse (a twin without the property
    is planned an expiry from the same status)."""
    old = status(snapshot_count=60, oldest_snapshot_at="2026-09-01T00:00:00.000Z")
    shared = await add_table(db, "shared_files", old, properties={"gc.enabled": "false"})
    twin = await add_table(db, "twin", old)

    planned = await planner.plan(shared, now=NOW)
    assert planned.recommendation is not None
    assert "expire_snapshots" not in [a.action for a in planned.recommendation.actions]
    assert planned.recommendation is not None
    (skip,) = [s for s in planned.recommendation.skipped if s.action == "expire_snapshots"]
    assert "GC_DISABLED" in skip.reason and "gc.enabled='false'" in skip.reason
    assert not planned.job_created
    assert await db.fetchval("SELECT count(*) FROM icepack.jobs WHERE table_id = $1", shared) == 0

    control = await planner.plan(twin, now=NOW)
    assert control.recommendation is not None
    assert [a.action for a in control.recommendation.actions] == ["expire_snapshots"]


async def test_an_operator_s_cancel_is_not_undone_by_the_next_plan(
    db: asyncpg.Pool, planner: Planner
) -> None:
    """The cancel's own ``job.finished`` wakes the planner: without this rule it enqueued the
    same job again at once. A cancelled action comes back after the cadence."""
    table_id = await add_table(db, "cancelled", status(small_file_count=30, small_file_bytes=30))
    first = await planner.plan(table_id, now=datetime.now(UTC))
    assert first.job_id is not None
    assert (await JobQueue(db).cancel(first.job_id)).state.value == "cancelled"

    again = await planner.plan(table_id, now=datetime.now(UTC))
    assert again.job_id is None
    assert again.recommendation is not None
    assert any("cancelled by an operator" in s.reason for s in again.recommendation.skipped)
    later = await planner.plan(table_id, now=datetime.now(UTC) + timedelta(hours=25))
    assert later.job_id is not None and later.job_id != first.job_id


async def add_growing_table(
    db: asyncpg.Pool,
    name: str,
    at: datetime,
    *,
    grew_to: int = 40,
    properties: dict[str, str] | None = None,
    **over: Any,
) -> int:
    """A streaming table's two statuses a minute apart, as the inspector records them: its
    fullest of 3 open partitions grew from 10 to ``grew_to`` small files (0.5 a second by
    default); every small file is in it. ``over`` sets other fields of both statuses."""

    def grown(fullest: int, inspected: datetime) -> TableStatus:
        return status(
            **over,
            data_file_count=fullest,
            data_file_bytes=fullest * MIB,
            small_file_count=fullest,
            small_file_bytes=fullest * MIB,
            partition_count=3,
            max_files_in_partition=fullest,
            inspected_at=inspected.isoformat(),
            oldest_snapshot_at=(at - timedelta(minutes=10)).isoformat(),
            current_snapshot_at=inspected.isoformat(),
        )

    table_id = await add_table(db, name, grown(10, at - timedelta(seconds=60)), properties)
    await db.execute(
        "UPDATE icepack.status_snapshots SET inspected_at = $2 WHERE table_id = $1",
        table_id,
        at - timedelta(seconds=60),
    )
    await db.execute(
        "INSERT INTO icepack.status_snapshots (table_id, inspected_at, inspector, status) "
        "VALUES ($1, $2, 'pyiceberg', $3::jsonb)",
        table_id,
        at,
        grown(grew_to, at).model_dump(mode="json"),
    )
    return table_id


async def test_a_run_waiting_behind_other_tables_jobs_is_planned_earlier(
    db: asyncpg.Pool, planner: Planner
) -> None:
    """The open-partition projection's lead counts the queue (``job_wait_ahead``): another
    table's job running on one executor and a third table's job queued behind it delay a run
    planned now as much as its own rewrite does. The growing table's fullest partition (40
    files, 0.5 a second) is below its level alone (75 - 0.5 * 60 = 45) and threatened behind
    the queue."""
    queue = planner.queue
    now = datetime.now(UTC)
    growing = await add_growing_table(db, "growing", now)
    alone = await planner.plan(growing, now=now)
    assert alone.recommendation is not None and not alone.job_created, alone.recommendation
    (held,) = [s for s in alone.recommendation.skipped if s.action == "rewrite_data_files"]
    assert "compacted from 45" in held.reason, held.reason
    assert await planner.queue_ahead(growing, now) == QueueAhead(0.0, 0)

    # Table "busy" ran a job of about 40 s before; its next one is queued. Table "running"
    # (no history: 60 s expected) has run 10 s of its job, on a second executor.
    busy = await add_table(db, "busy", status())
    running = await add_table(db, "running", status())
    due = now - timedelta(minutes=1)  # due before the claims' pinned clocks
    await queue.enqueue(busy, [], dedupe_key="busy", not_before=due)
    first = await queue.claim("ex-1", 600, now=datetime.now(UTC) - timedelta(seconds=40))
    assert first is not None and first.table_id == busy
    await queue.complete(first)
    await queue.enqueue(running, [], dedupe_key="running", not_before=due)
    current = await queue.claim("ex-2", 600, now=now - timedelta(seconds=10))
    assert current is not None and current.table_id == running
    await queue.enqueue(busy, [], dedupe_key="busy", not_before=due)

    ahead = await planner.queue_ahead(growing, now)
    assert ahead.executors == 2
    assert 40 + 50 <= ahead.seconds <= 40 + 50 + 10, ahead  # (40 s + the test's own pace) + 50 s
    # A table's own jobs are not ahead of it: for "busy", only the running one is.
    mine = await planner.queue_ahead(busy, now)
    assert mine.seconds == pytest.approx(50.0, abs=0.01) and mine.executors == 2

    behind = await planner.plan(growing, now=now)
    assert behind.job_created, behind.recommendation
    assert behind.recommendation is not None
    (action,) = [a for a in behind.recommendation.actions if a.action == "rewrite_data_files"]
    assert "due: open-partition pressure" in action.reason, action.reason
    assert "s of it behind other tables' jobs" in action.reason, action.reason


async def test_the_history_reads_the_open_partition_bound_each_run_was_planned_with(
    db: asyncpg.Pool, planner: Planner
) -> None:
    """``job_last_action_runs`` reads the newest run's ``open_max_small_files`` from its job's
    intent (what tells a run the pressure planned from one planned with the plain bound)."""
    queue = planner.queue
    table_id = await add_table(db, "bounded", status())
    for bound in (100, 14):
        intent = RewriteDataFiles(params=RewriteDataFilesParams(open_max_small_files=bound))
        await queue.enqueue(table_id, [intent, RewriteManifests()], dedupe_key="bounded")
        job = await queue.claim("ex-1", 600)
        assert job is not None
        now = datetime.now(UTC)
        for action in ("rewrite_data_files", "rewrite_manifests"):
            await queue.record_action(
                job, action=action, state="succeeded", started_at=now, finished_at=now
            )
        await queue.complete(job)
        history = await planner.history(table_id)
        assert history.open_max_small_files == {
            "rewrite_data_files": bound,
            "rewrite_manifests": None,
        }


async def run_job(queue: JobQueue, table_id: int) -> list[str]:
    """Claim the table's planned job, record each action succeeded, complete it; its actions."""
    job = await queue.claim("ex-1", 600)
    assert job is not None and job.table_id == table_id
    actions = [intent.kind.value for intent in job.actions]
    now = datetime.now(UTC)
    for action in actions:
        await queue.record_action(
            job, action=action, state="succeeded", started_at=now, finished_at=now
        )
    await queue.complete(job)
    return actions


async def test_a_growing_table_whose_commits_merge_manifests_gets_its_compaction_at_once(
    db: asyncpg.Pool, planner: Planner
) -> None:
    """A growing table of 120 small manifests: its compaction, due by the pressure, is planned
    at once with the manifest rule's rewrite, in the planned order. When a writer commits before
    the job runs, the executor runs the manifest rewrite first
    (``planning.manifest_merge.manifests_first_at_run``); the plan does not wait for it: a
    manifest-rewrite job of its own held the compaction back by the table's minimum interval."""
    now = datetime.now(UTC)
    merging = await add_growing_table(
        db, "merging", now, grew_to=70, manifest_count=120, manifest_bytes=120 * 6_000
    )
    first = await planner.plan(merging, now=now)
    assert first.job_created and first.recommendation is not None, first.recommendation
    (action,) = [a for a in first.recommendation.actions if a.action == "rewrite_data_files"]
    assert "due: open-partition pressure" in action.reason, action.reason
    assert await run_job(planner.queue, merging) == ["rewrite_data_files", "rewrite_manifests"]
