"""The due rule (``planning.due``) and the count-based snapshot retention, as pure functions with
hypothesis properties; the planner and executor paths are in ``tests/planning/test_due_planning.py``
and ``tests/execution/test_need_scheduling.py``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from hypothesis import given
from hypothesis import strategies as st

from icepack_core.inspection.status import TableStatus
from icepack_core.planning.due import DueRule, LastRun, Need, TableState, judge
from icepack_core.planning.recommendation import recommend
from icepack_core.policy import PolicyAttachment, resolve
from icepack_core.types import PolicyType
from tests.planning.test_recommendation import MIB, NOW, status

if TYPE_CHECKING:  # type-only
    from icepack_core.planning.recommendation import Proposed, Recommendation

RULE = DueRule()
REWRITE = "rewrite_data_files"


def state(
    snapshot: str = "7", inspected: datetime = NOW, newest: datetime | None = None
) -> TableState:
    return TableState(snapshot, inspected, newest)


def test_a_need_above_its_threshold_is_due_and_says_why() -> None:
    verdict = judge(Need(REWRITE, 299, 3 * MIB), None, state(), NOW, RULE)
    assert verdict.due and verdict.replan_at is None
    assert verdict.reason == (
        "due: benefit 299 vs threshold 50.0 = min benefit 50 + 3.0 MiB rewritten / "
        "128.0 MiB per object"
    )


def test_the_min_interval_holds_a_due_action_and_names_the_replan_time() -> None:
    finished = NOW - timedelta(minutes=2)
    verdict = judge(
        Need(REWRITE, 299, 3 * MIB), LastRun(finished, "6"), state(newest=finished), NOW, RULE
    )
    assert not verdict.due
    assert verdict.replan_at == finished + timedelta(minutes=5)
    assert verdict.reason.startswith(
        "min interval 5 min: the last run on the table finished 2026-11-21 11:58:00; "
        "due again at 2026-11-21 12:03:00 (due: benefit 299 vs threshold"
    ), verdict.reason


def test_an_unchanged_table_is_not_due_within_the_cadence() -> None:
    finished = NOW - timedelta(hours=2)
    verdict = judge(
        Need(REWRITE, 299, 0), LastRun(finished, "7"), state("7", newest=finished), NOW, RULE
    )
    assert not verdict.due and verdict.replan_at is None
    assert verdict.reason.startswith("not due: unchanged since it ran 2026-11-21 10:00:00")
    later = NOW + timedelta(hours=23)
    assert judge(Need(REWRITE, 299, 0), LastRun(finished, "7"), state("7"), later, RULE).due


def test_open_partitions_a_run_skipped_bring_it_back_when_they_close() -> None:
    """A compaction that skipped open partitions (a writer's file within the quiet period) left
    an unchanged table that still needs it: it is planned again once they close, not after the
    cadence, and the planner is told when."""
    finished = NOW - timedelta(minutes=3)
    closes = finished + timedelta(minutes=10)
    last = LastRun(finished, "7", reopens_at=closes)
    held = judge(Need(REWRITE, 299, 0), last, state("7", newest=finished), NOW, RULE)
    assert not held.due and held.replan_at == closes
    assert "skipped partitions still open; planned again when they close" in held.reason
    later = judge(Need(REWRITE, 299, 0), last, state("7", newest=finished), closes, RULE)
    assert later.due and later.reason.startswith("due: benefit 299")


def test_a_status_older_than_the_last_run_waits_for_the_next_inspection() -> None:
    finished = NOW - timedelta(minutes=30)
    verdict = judge(
        Need(REWRITE, 299, 0),
        LastRun(finished, "6"),
        state("5", inspected=finished - timedelta(seconds=1), newest=finished),
        NOW,
        RULE,
    )
    assert not verdict.due and verdict.reason.startswith("waiting for the inspection after")


@given(
    benefit=st.integers(0, 10_000),
    rewrite_mib=st.integers(0, 100_000),
    since_minutes=st.none() | st.floats(0, 3 * 24 * 60),
    unchanged=st.booleans(),
    min_interval=st.floats(0, 120),
)
def test_due_rule_properties(
    benefit: int,
    rewrite_mib: int,
    since_minutes: float | None,
    unchanged: bool,
    min_interval: float,
) -> None:
    rule = DueRule(min_interval=timedelta(minutes=min_interval))
    need = Need(REWRITE, benefit, rewrite_mib * MIB)
    finished = None if since_minutes is None else NOW - timedelta(minutes=since_minutes)
    last = None if finished is None else LastRun(finished, "7" if unchanged else "6")
    verdict = judge(need, last, state("7", inspected=NOW, newest=finished), NOW, rule)
    threshold = rule.threshold(need.rewrite_bytes)
    if last is None:
        assert verdict.due  # the first run is never held back
        return
    assert finished is not None
    within_interval = NOW - finished < rule.min_interval
    within_cadence = NOW - finished < rule.cadence
    if within_interval:
        assert not verdict.due  # a hot table never gets two runs within the interval
    if verdict.replan_at is not None:
        assert verdict.replan_at == finished + rule.min_interval and within_interval
    if unchanged and within_cadence:
        assert not verdict.due and verdict.replan_at is None
    if not within_interval and not (unchanged and within_cadence):
        # Past the interval a changed table is due exactly when its benefit pays for its
        # rewrite, or once the cadence has passed (a batch table's behaviour).
        assert verdict.due == (benefit >= threshold or not within_cadence)
    assert ("benefit" in verdict.reason) or ("unchanged" in verdict.reason)


def _iso(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def streaming(snapshots: int, hours: float = 1.0) -> TableStatus:
    """A table committed ``snapshots`` times over the last ``hours``."""
    return status(
        snapshot_count=snapshots,
        oldest_snapshot_at=_iso(NOW - timedelta(hours=hours)),
        current_snapshot_at=_iso(NOW),
    )


def expiry(rec: Recommendation) -> Proposed | None:
    return next((a for a in rec.actions if a.action == "expire_snapshots"), None)


def test_the_policy_s_age_keeping_too_many_snapshots_is_said_and_a_count_retention_offered() -> (
    None
):
    """3,600 commits an hour: 120 h keep about 432,000 snapshots, far above the 1,000 at which
    TOO_MANY_SNAPSHOTS warns. Nothing is expired beyond the policy: it is offered, not done."""
    rec = recommend(streaming(3601, hours=1), resolve([], "db", "t"), {}, NOW)
    assert expiry(rec) is None
    (skip,) = [s for s in rec.skipped if s.action == "expire_snapshots"]
    assert skip.reason == (
        "3601 snapshots, none older than 120 h beyond the last 1; at 3,600 commits/h the "
        "policy's 120 h keeps about 432,000 snapshots, above the 1,000 at which "
        "TOO_MANY_SNAPSHOTS warns (every reader and writer loads them with the metadata "
        "file): offer: a count-based retention, max_snapshots 1000 (property "
        "icepack.snapshot-expiry.max-count; as Iceberg's history.expire.min-snapshots-to-keep "
        "with a short max age), which expiry applies only once the policy sets it"
    )
    # A batch table (a commit an hour) is told nothing: 120 h keep 120 snapshots.
    quiet = recommend(streaming(24, hours=23), resolve([], "db", "t"), {}, NOW)
    (skip,) = [s for s in quiet.skipped if s.action == "expire_snapshots"]
    assert "offer" not in skip.reason


def test_a_count_retention_the_policy_sets_expires_down_to_it_never_past_the_floor() -> None:
    policy = resolve([], "db", "t", {"icepack.snapshot-expiry.max-count": "1000"})
    rec = recommend(streaming(3601, hours=2), policy, {}, NOW, expiry_floor_hours=1.0)
    action = expiry(rec)
    assert action is not None and action.by_need
    assert action.to_json()["params"] == {
        "older_than": "2026-11-21 11:00:00.000",
        "retain_last": 1000,
    }
    assert "3601 snapshots > max_snapshots 1000 (count-based retention)" in action.reason
    assert "the 1 h safety floor alone keeps about 1,800 snapshots" in action.reason


@given(
    count=st.integers(1, 100_000),
    hours=st.floats(0.01, 500),
    max_snapshots=st.none() | st.integers(1, 5000),
    retain_last=st.integers(1, 50),
    max_age=st.floats(0.5, 300),
    floor=st.floats(0, 5),
)
def test_expiry_never_goes_beyond_the_policy(
    count: int,
    hours: float,
    max_snapshots: int | None,
    retain_last: int,
    max_age: float,
    floor: float,
) -> None:
    config = {"retain_last": retain_last, "max_snapshot_age_hours": max_age}
    if max_snapshots is not None:
        config["max_snapshots"] = max_snapshots
    att = PolicyAttachment(PolicyType.SNAPSHOT_EXPIRY, "catalog", "c", None, None, True, config)
    rec = recommend(
        streaming(count, hours), resolve([att], "db", "t"), {}, NOW, expiry_floor_hours=floor
    )
    action = expiry(rec)
    if action is None:
        return
    older_than = datetime.strptime(
        action.to_json()["params"]["older_than"], "%Y-%m-%d %H:%M:%S.%f"
    ).replace(tzinfo=UTC)
    # Never fewer than the policy keeps; the age rule exactly as the policy says (the choke
    # point refuses one younger than the floor); a count rule never younger than the floor.
    assert action.to_json()["params"]["retain_last"] >= retain_last
    if not action.by_need:
        horizon = NOW - timedelta(hours=max_age)
        assert timedelta(0) <= horizon - older_than < timedelta(milliseconds=1)  # ms text
        return
    assert max_snapshots is not None and count > max(max_snapshots, retain_last)
    assert older_than <= NOW - timedelta(hours=floor)
    assert action.to_json()["params"]["retain_last"] == max(max_snapshots, retain_last)
