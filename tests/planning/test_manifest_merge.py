"""Manifests first (``planning.manifest_merge``): a compaction the pressure plans on a table
whose commits would merge its manifests is replaced by a manifest rewrite, once."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from icepack_core.inspection.status import TableStatus
from icepack_core.intents import (
    ExpireSnapshots,
    ExpireSnapshotsParams,
    Intent,
    RewriteDataFiles,
    RewriteManifests,
    RewriteManifestsParams,
)
from icepack_core.planning.history import History
from icepack_core.planning.manifest_merge import (
    MERGE_ENABLED_PROPERTY,
    MIN_COUNT_PROPERTY,
    TARGET_SIZE_PROPERTY,
    ManifestMerge,
    manifests_first,
    manifests_first_at_run,
    writer_manifests_before_commit,
)
from icepack_core.planning.recommendation import FailureStreak, Recommendation, recommend
from icepack_core.policy import EffectivePolicy, resolve
from icepack_core.types import Action
from tests.planning.test_pressure import growth, streaming_status
from tests.planning.test_recommendation import NOW

COMPACTION, MANIFESTS = Action.REWRITE_DATA_FILES, Action.REWRITE_MANIFESTS
KIB = 1024


def merging(manifests: int = 120, each: int = 6 * KIB) -> TableStatus:
    """A streaming table (fullest open partition 60 small files) of ``manifests`` manifests."""
    return streaming_status(60, 80).model_copy(
        update={"manifest_count": manifests, "manifest_bytes": manifests * each}
    )


def planned(
    table: TableStatus, policy: EffectivePolicy, last_runs: Mapping[str, datetime] | None = None
) -> Recommendation:
    """What ``recommend`` plans for ``table`` growing 0.75 small files a second."""
    runs = dict(last_runs or {})
    return recommend(
        table,
        policy,
        runs,
        NOW,
        snapshots_after=dict.fromkeys(runs, "1"),
        growth=growth(15, 60, seconds=60),
    )


def history(**over: object) -> History:
    return History(**over)  # type: ignore[arg-type]


def kinds(rec: Recommendation) -> list[Action]:
    return [a.action for a in rec.actions]


def test_a_pressure_compaction_on_mergeable_manifests_becomes_a_manifest_rewrite() -> None:
    policy = resolve([], "db", "t")
    table = merging()
    rec = planned(table, policy)
    assert COMPACTION in kinds(rec) and MANIFESTS in kinds(rec), rec.skipped  # 120 > 100
    first = manifests_first(rec, table, policy, ManifestMerge(), history(), (), NOW)
    assert kinds(first) == [a for a in kinds(rec) if a is not COMPACTION]
    (skip,) = [s for s in first.skipped if s.action == COMPACTION]
    assert skip.reason.startswith("manifests first: 120 manifests (about 6144 B each), about 45 ")
    assert "(would be: " in skip.reason and "open-partition pressure" in skip.reason

    # Below the manifest action's own bound it is proposed for the compaction's sake alone.
    table = merging(manifests=100)
    rec = planned(table, policy)
    assert MANIFESTS not in kinds(rec)
    first = manifests_first(rec, table, policy, ManifestMerge(), history(), (), NOW)
    (manifests,) = [a for a in first.actions if a.action is MANIFESTS]
    assert manifests.reason.startswith("manifests first: 100 manifests")
    assert not [s for s in first.skipped if s.action == MANIFESTS]  # not both done and skipped


def test_it_goes_first_once_then_the_compaction_goes_ahead_whatever_the_count() -> None:
    policy = resolve([], "db", "t")
    table = merging()
    compacted, rewrote = NOW - timedelta(minutes=3), NOW - timedelta(seconds=90)
    rec = planned(table, policy, {COMPACTION: compacted, MANIFESTS: rewrote})
    assert COMPACTION in kinds(rec), rec.skipped
    after = manifests_first(
        rec,
        table,
        policy,
        ManifestMerge(),
        history(last_runs={COMPACTION: compacted, MANIFESTS: rewrote}),
        (),
        NOW,
    )
    assert after is rec
    # A manifest rewrite older than the last compaction does not count.
    runs: dict[str, datetime] = {COMPACTION: rewrote, MANIFESTS: compacted}
    rec = planned(table, policy, runs)
    assert COMPACTION in kinds(rec), rec.skipped
    again = manifests_first(rec, table, policy, ManifestMerge(), history(last_runs=runs), (), NOW)
    assert COMPACTION not in kinds(again) and MANIFESTS in kinds(again)


def test_a_manifest_rewrite_that_may_not_run_leaves_the_compaction_as_planned() -> None:
    table = merging()
    policy = resolve([], "db", "t")
    rec = planned(table, policy)
    resting = {MANIFESTS: FailureStreak(2, "boom", NOW + timedelta(minutes=5))}
    fresh = merging(manifests=100)
    fresh_rec = planned(fresh, policy)
    assert (
        manifests_first(
            fresh_rec, fresh, policy, ManifestMerge(), history(failures=resting), (), NOW
        )
        is fresh_rec
    )
    deferred = {MANIFESTS}
    assert manifests_first(rec, table, policy, ManifestMerge(), history(), deferred, NOW) is rec
    cancelled = history(cancelled={MANIFESTS: NOW - timedelta(minutes=1)})
    assert (
        manifests_first(fresh_rec, fresh, policy, ManifestMerge(), cancelled, (), NOW) is fresh_rec
    )
    off = resolve([], "db", "t", {"icepack.manifests.enabled": "false"})
    off_rec = planned(fresh, off)
    assert COMPACTION in kinds(off_rec), off_rec.skipped
    assert manifests_first(off_rec, fresh, off, ManifestMerge(), history(), (), NOW) is off_rec


def test_without_the_pressure_or_a_merge_nothing_changes() -> None:
    policy = resolve([], "db", "t")
    table = merging()
    batch = recommend(table, policy, {}, NOW)  # no growth measured: a batch table
    assert COMPACTION in kinds(batch), batch.skipped
    assert manifests_first(batch, table, policy, ManifestMerge(), history(), (), NOW) is batch
    rec = planned(table, policy)
    no_merge = ManifestMerge.of({MERGE_ENABLED_PROPERTY: "false"})
    assert manifests_first(rec, table, policy, no_merge, history(), (), NOW) is rec
    big = merging(manifests=120, each=200 * KIB)  # 100 of them do not fit one 8 MiB bin
    big_rec = planned(big, policy)
    assert manifests_first(big_rec, big, policy, ManifestMerge(), history(), (), NOW) is big_rec


@given(
    enabled=st.sampled_from(["true", "false", "TRUE", " False ", "yes", ""]) | st.none(),
    min_count=st.text(max_size=12) | st.integers(-5, 10**6).map(str) | st.none(),
    target=st.text(max_size=12) | st.integers(-5, 10**12).map(str) | st.none(),
)
def test_any_property_value_reads_as_iceberg_would_or_its_default(
    enabled: str | None, min_count: str | None, target: str | None
) -> None:
    properties = {
        key: value
        for key, value in (
            (MERGE_ENABLED_PROPERTY, enabled),
            (MIN_COUNT_PROPERTY, min_count),
            (TARGET_SIZE_PROPERTY, target),
        )
        if value is not None
    }
    merge = ManifestMerge.of(properties)
    default = ManifestMerge()
    assert merge.enabled is (enabled is None or enabled.strip().lower() != "false")
    for raw, value, fallback in (
        (min_count, merge.min_count, default.min_count),
        (target, merge.target_bytes, default.target_bytes),
    ):
        try:
            parsed = int(raw) if raw is not None else None
        except ValueError:
            parsed = None
        assert value == (parsed if parsed is not None and parsed > 0 else fallback)


@given(
    count=st.integers(0, 5_000),
    each=st.integers(1, 10 * 1024 * KIB),
    min_count=st.integers(1, 1_000),
    target=st.integers(1, 64 * 1024 * KIB),
    enabled=st.booleans(),
)
def test_manifests_merge_when_enough_of_them_fit_one_bin(
    count: int, each: int, min_count: int, target: int, enabled: bool
) -> None:
    merge = ManifestMerge(enabled=enabled, min_count=min_count, target_bytes=target)
    table = merging(manifests=count, each=each)
    expected = enabled and count >= max(min_count, 2) and each * min_count <= target
    assert merge.merges(table) is expected


def test_the_manifests_a_writer_adds_before_the_commit_count() -> None:
    """A compaction queued below the merge count commits above it: the writer adds about one
    manifest a commit over the projection's lead (0.75 a second over 75 s here)."""
    policy = resolve([], "db", "t")
    table = merging(manifests=60)
    rec = planned(table, policy)
    compaction = next(a for a in rec.actions if a.action is COMPACTION)
    assert compaction.pressure is not None
    added = writer_manifests_before_commit(compaction.pressure)
    assert 40 <= added < 100, added
    first = manifests_first(rec, table, policy, ManifestMerge(), history(), (), NOW)
    (skip,) = [s for s in first.skipped if s.action == COMPACTION]
    assert f"60 manifests (about 6144 B each), about {added:.0f} more before it commits" in (
        skip.reason
    )
    few = merging(manifests=100 - math.ceil(added) - 1)
    few_rec = planned(few, policy)
    assert manifests_first(few_rec, few, policy, ManifestMerge(), history(), (), NOW) is few_rec


@given(
    count=st.integers(0, 500),
    added=st.floats(-10, 1_000, allow_nan=False),
    min_count=st.integers(1, 300),
)
def test_manifests_merge_once_the_count_with_those_to_come_reaches_the_merge_count(
    count: int, added: float, min_count: int
) -> None:
    merge = ManifestMerge(min_count=min_count)
    table = merging(manifests=count, each=KIB)  # small: any min_count of them share a bin
    expected = count > 0 and count + max(0.0, added) >= max(min_count, 2)
    assert merge.merges(table, added) is expected


# Manifests first at run time (``manifests_first_at_run``): what the executor runs when a job
# planned earlier starts on a table a writer kept committing to.

PLANNED = NOW - timedelta(minutes=2)


def committed(table: TableStatus, at: datetime) -> TableStatus:
    """``table`` whose newest snapshot was committed at ``at``."""
    stamp = at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return table.model_copy(update={"current_snapshot_at": stamp})


def job_of(*kinds: Action) -> list[Intent]:
    by_kind: dict[Action, Intent] = {
        COMPACTION: RewriteDataFiles(reason="planned"),
        MANIFESTS: RewriteManifests(params=RewriteManifestsParams(use_caching=False)),
        Action.EXPIRE_SNAPSHOTS: ExpireSnapshots(
            params=ExpireSnapshotsParams(older_than=NOW - timedelta(days=5))
        ),
    }
    return [by_kind[k] for k in kinds]


def at_run(
    intents: list[Intent], table: TableStatus, policy: EffectivePolicy | None = None
) -> list[Intent]:
    policy = policy or resolve([], "db", "t")
    return manifests_first_at_run(intents, table, ManifestMerge(), policy, PLANNED)


def test_a_job_a_writer_committed_after_runs_its_manifest_rewrite_first() -> None:
    table = committed(merging(manifests=130), PLANNED + timedelta(seconds=30))
    added = at_run(job_of(COMPACTION, Action.EXPIRE_SNAPSHOTS), table)
    assert [i.kind for i in added] == [MANIFESTS, COMPACTION, Action.EXPIRE_SNAPSHOTS]
    assert added[0].reason.startswith(
        "manifests first (at run time): 130 manifests (about 6144 B each) >= "
        f"{MIN_COUNT_PROPERTY} 100, and a writer committed after the plan"
    )
    # A manifest rewrite the job already has (after the compaction) is moved, as it was.
    moved = at_run(job_of(COMPACTION, MANIFESTS, Action.EXPIRE_SNAPSHOTS), table)
    assert [i.kind for i in moved] == [MANIFESTS, COMPACTION, Action.EXPIRE_SNAPSHOTS]
    assert isinstance(moved[0], RewriteManifests) and moved[0].params.use_caching is False
    assert moved[1].reason == "planned"


def test_a_job_runs_as_planned_without_a_commit_since_the_plan_or_without_a_merge() -> None:
    job = job_of(COMPACTION, MANIFESTS)
    quiet = committed(merging(manifests=130), PLANNED - timedelta(seconds=1))
    assert at_run(job, quiet) == job  # nobody committed since the plan: a batch table
    written = PLANNED + timedelta(seconds=30)
    assert at_run(job, committed(merging(manifests=60), written)) == job  # below the count
    big = committed(merging(manifests=130, each=200 * KIB), written)  # 100 do not fit a bin
    assert at_run(job, big) == job
    table = committed(merging(manifests=130), written)
    off = resolve([], "db", "t", {"icepack.manifests.enabled": "false"})
    assert at_run(job_of(COMPACTION), table, off) == job_of(COMPACTION)
    assert at_run(job_of(Action.EXPIRE_SNAPSHOTS), table) == job_of(Action.EXPIRE_SNAPSHOTS)
    ordered = [job_of(MANIFESTS)[0], job_of(COMPACTION)[0]]
    assert at_run(ordered, table) == ordered  # already first
    merge_off = ManifestMerge.of({MERGE_ENABLED_PROPERTY: "false"})
    policy = resolve([], "db", "t")
    assert manifests_first_at_run(job, table, merge_off, policy, PLANNED) == job


@given(
    kinds=st.lists(st.sampled_from([COMPACTION, MANIFESTS, Action.EXPIRE_SNAPSHOTS]), unique=True),
    manifests=st.integers(0, 400),
    since=st.integers(-600, 600),
)
def test_at_run_time_each_action_runs_once_and_only_the_manifest_rewrite_moves(
    kinds: list[Action], manifests: int, since: int
) -> None:
    kinds.sort(key=lambda k: k.rank)
    table = committed(merging(manifests=manifests), PLANNED + timedelta(seconds=since))
    after = [i.kind for i in at_run(job_of(*kinds), table)]
    assert len(after) == len(set(after)) and set(kinds) <= set(after)
    assert [k for k in after if k is not MANIFESTS] == [k for k in kinds if k is not MANIFESTS]
    first = COMPACTION in kinds and since > 0 and manifests >= 100
    assert (after.index(MANIFESTS) < after.index(COMPACTION)) if first else after == kinds
