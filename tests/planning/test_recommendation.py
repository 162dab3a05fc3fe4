"""Recommendation rules, cadence and safety, with hypothesis properties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from hypothesis import given
from hypothesis import strategies as st

from icepack_core.inspection.status import TableStatus
from icepack_core.planning.recommendation import PartitionStat, recommend
from icepack_core.policy import PolicyAttachment, resolve
from icepack_core.types import LEDGER_ACTIONS, Action, PolicyType
from tests.support import statuses

if TYPE_CHECKING:  # type-only: the planner's intent type is being replaced (issue #29)
    from icepack_core.planning.recommendation import Recommendation

# The planner plans the maintenance actions, never the ledger ones (purge, restore).
ACTION_ORDER = tuple(a for a in Action if a not in LEDGER_ACTIONS)

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
MIB = 1024 * 1024


def status(**over: Any) -> TableStatus:
    base = {
        "data_file_count": 10,
        "data_file_bytes": 10 * 100 * MIB,
        "small_file_count": 0,
        "small_file_bytes": 0,
        "position_delete_file_count": 0,
        "equality_delete_file_count": 0,
        "deletion_vector_count": 0,
        "delete_record_count": 0,
        "manifest_count": 3,
        "manifest_bytes": 30_000,
        "snapshot_count": 3,
        "oldest_snapshot_at": "2026-11-21T10:00:00.000Z",
        "current_snapshot_at": "2026-11-21T11:00:00.000Z",
    }
    return statuses.status(**(base | over))


def actions(rec: Recommendation) -> list[str]:
    return [a.action for a in rec.actions]


def test_healthy_table_gets_nothing_and_says_why() -> None:
    rec = recommend(status(), resolve([], "db", "t"), {}, NOW)
    assert rec.actions == []
    assert {s.action for s in rec.skipped} == set(ACTION_ORDER)


def test_small_files_get_a_binpack_with_estimates() -> None:
    rec = recommend(
        status(small_file_count=40, small_file_bytes=40 * MIB),
        resolve([], "db", "t"),
        {},
        NOW,
        target_file_size_bytes=16 * MIB,
    )
    (rewrite,) = rec.actions
    assert rewrite.action == "rewrite_data_files"
    assert rewrite.to_json()["params"]["options"]["min-input-files"] == "5"
    assert rewrite.to_json()["params"]["options"]["target-file-size-bytes"] == str(16 * MIB)
    assert rewrite.estimated_benefit == {"files_removed": 37, "bytes_to_rewrite": 40 * MIB}
    assert "40 small files" in rewrite.reason


def test_rewrite_is_scoped_to_partitions_that_need_it() -> None:
    parts = [
        PartitionStat("`day` = '2026-11-01'", 30, 30 * MIB),
        PartitionStat("`day` = '2026-11-02'", 2, 2 * MIB),
        PartitionStat("`day` = '2026-11-03'", 8, 8 * MIB),
    ]
    rec = recommend(
        status(small_file_count=40, small_file_bytes=40 * MIB),
        resolve([], "db", "t"),
        {},
        NOW,
        partitions=parts,
        target_file_size_bytes=64 * MIB,
    )
    (rewrite,) = rec.actions
    assert (
        rewrite.to_json()["params"]["where"] == "(`day` = '2026-11-01') OR (`day` = '2026-11-03')"
    )
    assert rewrite.estimated_benefit["bytes_to_rewrite"] == 38 * MIB
    assert "scoped to 2 of 3 partitions" in rewrite.reason


def test_a_parameter_the_intent_refuses_is_a_skip_naming_it() -> None:
    """The compaction's parameters are built as the intent's model directly: a value it
    refuses (here a ``where`` over its 65,536 characters) is a Skip naming the field as
    ``parse_intent`` names it, never a job."""
    parts = [PartitionStat(f"`p` = '{'x' * 700}{i}'", 10, 10 * MIB) for i in range(100)]
    rec = recommend(
        status(small_file_count=1000, small_file_bytes=1000 * MIB),
        resolve([], "db", "t"),
        {},
        NOW,
        partitions=parts,
    )
    assert Action.REWRITE_DATA_FILES not in [a.action for a in rec.actions]
    (skip,) = [s for s in rec.skipped if s.action == Action.REWRITE_DATA_FILES]
    assert skip.reason.startswith("invalid: action.params.where: String should have at most")


def test_equality_deletes_force_a_rewrite_with_delete_threshold() -> None:
    rec = recommend(status(equality_delete_file_count=2), resolve([], "db", "t"), {}, NOW)
    (rewrite,) = rec.actions
    assert rewrite.to_json()["params"]["options"]["delete-file-threshold"] == "1"
    # The applied delete files are dropped too, or health keeps counting them.
    assert rewrite.to_json()["params"]["options"]["remove-dangling-deletes"] == "true"


def test_old_snapshots_are_expired_with_exact_parameters() -> None:
    rec = recommend(
        status(snapshot_count=50, oldest_snapshot_at="2026-11-01T00:00:00.000Z"),
        resolve([], "db", "t"),
        {},
        NOW,
    )
    (expire,) = rec.actions
    assert expire.to_json()["params"] == {"older_than": "2026-11-16 12:00:00.000", "retain_last": 1}


def test_actions_come_in_a_safe_order() -> None:
    orphans = PolicyAttachment(PolicyType.ORPHAN_FILE_REMOVAL, "catalog", "c", None, None, True, {})
    stats = PolicyAttachment(PolicyType.TABLE_STATISTICS, "catalog", "c", None, None, True, {})
    policy = resolve([orphans, stats], "db", "t")
    rec = recommend(
        status(
            current_snapshot_id=7,
            table_statistics={},
            partition_statistics={},
            small_file_count=9,
            small_file_bytes=9,
            manifest_count=500,
            position_delete_file_count=4,
            snapshot_count=9,
            oldest_snapshot_at="2026-01-01T00:00:00.000Z",
        ),
        policy,
        {},
        NOW,
    )
    assert actions(rec) == list(ACTION_ORDER)
    orphan = rec.actions[-1]
    assert orphan.to_json()["params"] == {
        "older_than": "2026-11-18 12:00:00.000",
        "dry_run_first": True,
    }


def test_below_its_threshold_a_need_action_waits_for_the_cadence() -> None:
    """Need-based scheduling (planning.due): a compaction whose benefit (10 files a scan no
    longer opens) is under its threshold is not proposed within the cadence of its last run
    (the behaviour a batch table had under the cadence alone), and is after it. Before: the
    reason said only "cadence is 24 h"; now it weighs benefit against the threshold."""
    small = status(small_file_count=40, small_file_bytes=40 * MIB)
    policy = resolve([], "db", "t")
    recent = {"rewrite_data_files": NOW - timedelta(hours=3)}
    rec = recommend(small, policy, recent, NOW)
    assert rec.actions == []
    reason = next(s.reason for s in rec.skipped if s.action == "rewrite_data_files")
    assert reason.startswith(
        "not due: benefit 10 vs threshold 50.3 = min benefit 50 + 40.0 MiB rewritten / "
        "128.0 MiB per object; ran 2026-11-21 09:00:00"
    ), reason
    assert "after the cadence of 24 h" in reason and rec.replan_at is None
    later = {"rewrite_data_files": NOW - timedelta(hours=25)}
    (due,) = recommend(small, policy, later, NOW).actions
    assert due.action == "rewrite_data_files" and "due: the cadence of 24 h passed" in due.reason


def test_cadence_still_gates_the_age_based_expiry() -> None:
    old = status(snapshot_count=50, oldest_snapshot_at="2026-11-01T00:00:00.000Z")
    policy = resolve([], "db", "t")
    rec = recommend(old, policy, {"expire_snapshots": NOW - timedelta(hours=3)}, NOW)
    assert rec.actions == []
    (skip,) = [s for s in rec.skipped if s.action == "expire_snapshots"]
    assert "cadence is 24 h" in skip.reason


counts = st.integers(0, 5000)


@given(
    small=counts,
    manifests=counts,
    snapshots=st.integers(1, 500),
    pos=counts,
    eq=counts,
    age_hours=st.floats(0, 24 * 365),
    last_hours=st.none() | st.floats(0, 100),
    enabled=st.booleans(),
)
def test_recommendation_properties(
    small: int,
    manifests: int,
    snapshots: int,
    pos: int,
    eq: int,
    age_hours: float,
    last_hours: float | None,
    enabled: bool,
) -> None:
    oldest = NOW - timedelta(hours=age_hours)
    st_ = status(
        small_file_count=small,
        small_file_bytes=small * MIB,
        manifest_count=manifests,
        snapshot_count=snapshots,
        position_delete_file_count=pos,
        equality_delete_file_count=eq,
        oldest_snapshot_at=oldest.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
    )
    props = {} if enabled else {"icepack.maintenance.enabled": "false"}
    last: dict[str, datetime] = (
        {} if last_hours is None else {a: NOW - timedelta(hours=last_hours) for a in ACTION_ORDER}
    )
    rec = recommend(st_, resolve([], "db", "t", props), last, NOW)
    names = actions(rec)
    if not enabled:
        assert names == []
    # ordered, no duplicates, never orphan removal by default; within the cadence only a
    # need action whose benefit reaches its threshold, and nothing within the min interval
    assert names == sorted(set(names), key=ACTION_ORDER.index)
    assert "remove_orphan_files" not in names
    if last_hours is not None and last_hours < 5 / 60:
        assert names == []
    if last_hours is not None and last_hours < 24:
        assert "expire_snapshots" not in names
        for a in rec.actions:
            assert a.by_need and "due: benefit" in a.reason
            assert a.predicted is not None
            assert a.predicted.benefit + a.extra_benefit >= 50 + a.predicted.rewrite_bytes / (
                128 * MIB
            )
    for a in rec.actions:
        assert all(v >= 0 for v in a.estimated_benefit.values())


def test_position_delete_buildup_gets_a_rewrite_that_applies_deletes() -> None:
    rec = recommend(
        status(record_count=1000, delete_record_count=300, position_delete_file_count=3),
        resolve([], "db", "t"),
        {},
        NOW,
    )
    assert actions(rec) == ["rewrite_data_files", "rewrite_position_delete_files"]
    rewrite = rec.actions[0]
    assert rewrite.to_json()["params"]["options"]["delete-file-threshold"] == "1"
    assert "scope" not in rewrite.to_json()["params"]
    assert "30% of records" in rewrite.reason


def test_a_few_deletes_below_the_threshold_do_not_force_a_rewrite() -> None:
    rec = recommend(
        status(record_count=1000, delete_record_count=5, position_delete_file_count=1),
        resolve([], "db", "t"),
        {},
        NOW,
    )
    assert actions(rec) == []
