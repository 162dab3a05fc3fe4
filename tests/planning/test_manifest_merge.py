"""Manifests first (``planning.manifest_merge``): when a job starts on a table a writer
committed to since the plan, and the compaction's commits would merge the table's manifests, its
manifest rewrite runs before its compaction."""

from __future__ import annotations

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
from icepack_core.planning.manifest_merge import (
    MERGE_ENABLED_PROPERTY,
    MIN_COUNT_PROPERTY,
    TARGET_SIZE_PROPERTY,
    ManifestMerge,
    manifests_first_at_run,
)
from icepack_core.policy import EffectivePolicy, resolve
from icepack_core.types import Action
from tests.planning.test_pressure import streaming_status
from tests.planning.test_recommendation import NOW

COMPACTION, MANIFESTS = Action.REWRITE_DATA_FILES, Action.REWRITE_MANIFESTS
KIB = 1024


def merging(manifests: int = 120, each: int = 6 * KIB) -> TableStatus:
    """A table of ``manifests`` manifests of ``each`` bytes."""
    return streaming_status(60, 80).model_copy(
        update={"manifest_count": manifests, "manifest_bytes": manifests * each}
    )


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
