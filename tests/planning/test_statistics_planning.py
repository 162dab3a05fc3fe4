"""When the planner proposes the statistics actions, and when they rest (pure functions).

``planning.statistics`` through ``recommend``: proposed for missing or stale statistics under an
enabled ``icepack.table-statistics`` policy, the same verdict as the health rules; due by
staleness (not the cadence), held back only by the inspection-first and unchanged guards.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from icepack_core.inspection.health import Thresholds, assess, with_statistics_policy
from icepack_core.inspection.status import StatisticsFreshness, TableStatus
from icepack_core.planning.recommendation import recommend
from icepack_core.policy import PolicyAttachment, resolve
from icepack_core.types import IssueCode, PolicyType
from tests.support import statuses

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
TABLE, PARTITION = "compute_table_stats", "compute_partition_stats"


def status(**over: Any) -> TableStatus:
    base: dict[str, Any] = {
        "catalog": "c",
        "namespace": "db",
        "table": "t",
        "format_version": 2,
        "metadata_location": "m",
        "current_snapshot_id": 30,
        "inspected_at": "2026-11-21T11:59:00.000Z",
        "inspector": "pyiceberg",
        "inspect_ms": 1,
        "manifests_read": 0,
        "manifests_cached": 0,
        "small_file_threshold_bytes": 1,
        "file_size_histogram": {},
        "data_file_count": 4,
        "data_file_bytes": 4000,
        "small_file_count": 0,
        "small_file_bytes": 0,
        "position_delete_file_count": 0,
        "equality_delete_file_count": 0,
        "record_count": 1000,
        "manifest_count": 2,
        "manifest_bytes": 100,
        "snapshot_count": 3,
        "oldest_snapshot_at": "2026-11-21T10:00:00.000Z",
        "current_snapshot_at": "2026-11-21T11:00:00.000Z",
        "table_statistics": {},
        "partition_statistics": {},
    }
    return statuses.status(**(base | over))


def described(snapshot: int, behind: int, added: int, size: int = 900) -> dict[str, Any]:
    return StatisticsFreshness(
        files=1,
        snapshot_id=snapshot,
        file_bytes=size,
        snapshots_behind=behind,
        added_records=added,
        added_data_files=behind,
    ).model_dump()


def policy(enabled: bool = True, **config: Any) -> Any:
    att = PolicyAttachment(PolicyType.TABLE_STATISTICS, "catalog", "c", None, None, enabled, config)
    return resolve([att], "db", "t")


def names(rec: Any) -> list[str]:
    return [a.action for a in rec.actions]


def reason(rec: Any, action: str) -> str:
    found: str = next(s.reason for s in rec.skipped if s.action == action)
    return found


def test_missing_statistics_are_proposed_with_the_policys_columns_and_a_prediction() -> None:
    rec = recommend(status(), policy(columns=["id", "ts"]), {}, NOW)
    assert names(rec) == [TABLE, PARTITION]
    table = rec.actions[0]
    assert (
        table.to_json()["params"] == {"columns": ["id", "ts"]}
        and rec.actions[1].to_json()["params"] == {}
    )
    assert table.reason == (
        "missing: no table statistics describe the current snapshot or an ancestor"
    )
    assert table.predicted is not None and table.predicted.benefit == 0
    assert table.predicted.before == table.predicted.after
    assert table.to_json()["predicted"]["statistics"] == {
        "present_for_current": True,
        "snapshot_id": 30,
        "bytes_written": None,
    }


def test_disabled_by_default_off_per_kind_fresh_and_old_statuses_are_skipped() -> None:
    assert reason(recommend(status(), resolve([], "db", "t"), {}, NOW), TABLE) == (
        "icepack.table-statistics is not enabled"
    )
    assert reason(recommend(status(), policy(enabled=False), {}, NOW), TABLE) == (
        "icepack.table-statistics is not enabled"
    )
    only_table = recommend(status(), policy(partition_stats=False), {}, NOW)
    assert names(only_table) == [TABLE]
    assert "partition_statistics is off" in reason(only_table, PARTITION)
    fresh = status(table_statistics=described(30, 0, 0), partition_statistics=described(29, 1, 1))
    rec = recommend(fresh, policy(), {}, NOW)
    assert names(rec) == []
    assert reason(rec, TABLE).startswith("fresh: table statistics describe snapshot 30, 0 ")
    # A stored status of an inspector before statistics inspection: the field is unknown.
    old = status(table_statistics=None)
    assert "predates statistics inspection" in reason(recommend(old, policy(), {}, NOW), TABLE)
    assert "no snapshot" in reason(
        recommend(status(current_snapshot_id=None), policy(), {}, NOW), TABLE
    )


def test_stale_statistics_are_proposed_again_within_the_cadence_once_the_table_moved() -> None:
    stale = status(table_statistics=described(20, 5, 300, size=1234), partition_statistics={})
    ran = NOW - timedelta(hours=1)  # well within the 24 h cadence
    last = {TABLE: ran, PARTITION: ran}
    rec = recommend(stale, policy(), last, NOW, snapshots_after={TABLE: "20", PARTITION: "20"})
    assert names(rec) == [TABLE, PARTITION], rec.skipped
    assert rec.actions[0].reason.endswith("(>= 0.2)")  # 300 of 1000 rows added: 30 %
    assert rec.actions[0].to_json()["predicted"]["statistics"]["bytes_written"] == 1234


def test_the_guards_hold_back_a_run_the_status_cannot_show_yet_and_one_that_changed_nothing() -> (
    None
):
    missing = status(inspected_at="2026-11-21T11:00:00.000Z")
    ran = NOW - timedelta(minutes=30)  # after the status was inspected
    rec = recommend(missing, policy(), {TABLE: ran}, NOW, snapshots_after={TABLE: "30"})
    assert reason(rec, TABLE).startswith("waiting for the inspection after the run of")
    # Inspected after the run, still missing on the very snapshot the run left: rest.
    rec = recommend(
        status(), policy(), {TABLE: NOW - timedelta(hours=2)}, NOW, snapshots_after={TABLE: "30"}
    )
    assert reason(rec, TABLE).startswith("ran 2026-11-21 10:00:00 on this very snapshot (30)")
    # ... until the cadence passed.
    rec = recommend(
        status(), policy(), {TABLE: NOW - timedelta(hours=25)}, NOW, snapshots_after={TABLE: "30"}
    )
    assert TABLE in names(rec)


@given(
    behind=st.integers(0, 300),
    added=st.integers(0, 5000),
    records=st.integers(0, 5000),
    after=st.none() | st.integers(1, 200),
    share=st.floats(0.01, 3, allow_nan=False),
)
def test_the_planner_proposes_exactly_what_health_calls_stale(
    behind: int, added: int, records: int, after: int | None, share: float
) -> None:
    doc = status(
        record_count=records,
        table_statistics=described(1, behind, added),
        partition_statistics=described(30, 0, 0),
    )
    config = {"stale_after_snapshots": after, "stale_added_rows_share": share}
    rec = recommend(doc, policy(True, **config), {}, NOW)
    thresholds = with_statistics_policy(Thresholds(), policy(True, **config).table_statistics)
    issues = assess(doc, thresholds, NOW).issue_codes()
    assert (TABLE in names(rec)) == (IssueCode.STATISTICS_STALE in issues)
    assert PARTITION not in names(rec)


def test_table_properties_turn_statistics_on_and_set_the_snapshot_threshold() -> None:
    props = {"icepack.statistics.enabled": "true", "icepack.statistics.stale-after-snapshots": "5"}
    effective = resolve([], "db", "t", props)
    assert effective.table_statistics is not None
    assert effective.table_statistics.stale_after_snapshots == 5
    assert effective.sources["icepack.table-statistics"] == (
        "default + property icepack.statistics.enabled"
        " + property icepack.statistics.stale-after-snapshots"
    )
    rec = recommend(status(table_statistics=described(1, 5, 0)), effective, {}, NOW)
    assert rec.actions[0].reason.startswith("stale: ") and rec.actions[0].reason.endswith("(>= 5)")
