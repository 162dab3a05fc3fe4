"""The predicted effect of each action (``planning.prediction``) and the throttle rule
(``planning.throttle``): arithmetic checked by example and by property."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from icepack_core.planning.planner import job_prediction
from icepack_core.planning.prediction import (
    Shape,
    benefit,
    predict_expire_snapshots,
    predict_rewrite_data_files,
    predict_rewrite_manifests,
    predict_rewrite_position_deletes,
    ratio,
)
from icepack_core.planning.recommendation import recommend
from icepack_core.planning.throttle import MeasuredRun, throttle_of
from icepack_core.policy import resolve
from tests.planning.test_planner import status

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
MIB = 1024 * 1024
WEEK = timedelta(days=7)

counts = st.integers(min_value=0, max_value=10**6)
sizes = st.integers(min_value=0, max_value=10**15)
shapes = st.builds(Shape, counts, sizes, counts, counts, st.integers(min_value=1, max_value=10**4))


def test_shape_of_a_status_counts_every_kind_of_delete_file() -> None:
    shape = Shape.of(
        status(position_delete_file_count=3, equality_delete_file_count=2, deletion_vector_count=4)
    )
    assert shape == Shape(
        data_files=40, data_bytes=40 * MIB, manifests=4, delete_files=9, snapshots=4
    )


def test_compaction_prediction_bin_packs_the_small_bytes() -> None:
    before = Shape(100, 300 * MIB, 6, 0, 10)
    effect = predict_rewrite_data_files(before, 90, 200 * MIB, 64 * MIB)
    # 200 MiB into 64 MiB files: ceil(3.125) = 4 files replace 90.
    assert effect.after == Shape(14, 300 * MIB, 6, 0, 11)
    assert effect.rewrite_bytes == 200 * MIB and effect.benefit == 86
    assert effect.to_json()["after"]["data_files"] == 14


def test_each_action_predicts_its_own_field() -> None:
    before = Shape(10, 10 * MIB, 40, 8, 30)
    deletes = predict_rewrite_position_deletes(before, 6)
    assert (deletes.after.delete_files, deletes.benefit, deletes.rewrite_bytes) == (3, 5, 0)
    manifests = predict_rewrite_manifests(before, 40 * 9000, 8 * MIB)
    assert (manifests.after.manifests, manifests.benefit) == (1, 39)
    assert manifests.rewrite_bytes == 360_000
    expiry = predict_expire_snapshots(before, 5)
    assert (expiry.after.snapshots, expiry.benefit, expiry.rewrite_bytes) == (5, 0, 0)


@given(shapes, counts, sizes, st.integers(min_value=1, max_value=2**31))
def test_compaction_prediction_never_adds_files_or_moves_bytes(
    before: Shape, small: int, small_bytes: int, target: int
) -> None:
    effect = predict_rewrite_data_files(before, small, small_bytes, target)
    after = effect.after
    assert 0 <= after.data_files <= before.data_files
    assert after.data_bytes == before.data_bytes and after.manifests == before.manifests
    assert after.snapshots == before.snapshots + 1
    if 0 < small <= before.data_files:
        files_after = min(small, max(1, math.ceil(small_bytes / target)))
        assert before.data_files - after.data_files == small - files_after
    assert effect.benefit == benefit(before, after) >= 0
    assert effect.rewrite_bytes == small_bytes


@given(shapes, sizes, st.integers(min_value=1, max_value=2**31), counts, counts)
def test_other_predictions_stay_within_the_table(
    before: Shape, manifest_bytes: int, target: int, deletes: int, keep: int
) -> None:
    for effect in (
        predict_rewrite_manifests(before, manifest_bytes, target),
        predict_rewrite_position_deletes(before, deletes),
        predict_expire_snapshots(before, keep),
    ):
        for field, value in effect.after.to_json().items():
            assert value >= 0, field
        assert effect.after.data_files == before.data_files
        assert effect.benefit >= 0


def test_recommendation_carries_predictions_and_the_job_sums_them() -> None:
    st_ = status(
        small_file_count=30,
        small_file_bytes=30 * MIB,
        manifest_count=300,
        manifest_bytes=300 * 8000,
        snapshot_count=120,
        oldest_snapshot_at="2026-10-01T00:00:00.000Z",
    )
    policy = resolve([], "db", "t", {}, 24)
    rec = recommend(st_, policy, {}, NOW)
    by_action = {a.action.value: a.predicted for a in rec.actions}
    benefits = {action: p.benefit for action, p in by_action.items() if p is not None}
    assert benefits.keys() == by_action.keys()  # every action carries its prediction
    assert benefits["rewrite_data_files"] == 29
    assert benefits["rewrite_manifests"] == 299
    assert benefits["expire_snapshots"] == 0
    assert rec.to_json()["actions"][0]["predicted"]["after"]["data_files"] == 11
    job = job_prediction(rec.actions)
    assert job.benefit == 29 + 299 and job.rewrite_bytes == 30 * MIB + 300 * 8000
    assert [a["action"] for a in job.predicted["actions"]] == [a.action for a in rec.actions]


def test_ratio_is_undefined_without_a_prediction() -> None:
    assert ratio(5, 0) is None and ratio(0, 10) == 0 and ratio(15, 10) == 1.5


def run(hours_ago: float, predicted: float, r: float) -> MeasuredRun:
    return MeasuredRun(NOW - timedelta(hours=hours_ago), predicted, r)


def test_two_weak_runs_throttle_until_the_period_ends_or_the_prediction_doubles() -> None:
    throttle = throttle_of([run(1, 20, 0.04), run(30, 20, 0.0)], WEEK)
    assert throttle is not None
    assert throttle.until == NOW - timedelta(hours=1) + WEEK
    assert throttle.active(NOW, 20) and throttle.active(NOW, 39)
    assert not throttle.active(NOW, 40)  # the table changed: the prediction doubled
    assert not throttle.active(throttle.until, 20)  # the period is over
    assert throttle.reason(20) == (
        "throttled: last 2 runs measured 0 % and 4 % of the predicted benefit (< 10 %); "
        "proposed again after 2026-11-28 11:00:00 or once the predicted benefit reaches 40 (now 20)"
    )


def test_one_good_run_among_the_last_two_lifts_the_throttle() -> None:
    assert throttle_of([run(1, 20, 0.5), run(30, 20, 0.0)], WEEK) is None
    assert throttle_of([run(1, 20, 0.0)], WEEK) is None  # one weak run is not a pattern
    assert throttle_of([run(1, 20, 0.0), run(2, 20, 0.0), run(3, 20, 0.9)], WEEK) is not None


@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0, max_value=1e4),
            st.floats(min_value=0.01, max_value=1e6),
            st.floats(min_value=-10, max_value=10),
        ),
        max_size=6,
    ),
    st.floats(min_value=0, max_value=1e7),
)
def test_throttled_exactly_when_the_newest_two_runs_are_under_ten_percent(
    runs: list[tuple[float, float, float]], gain: float
) -> None:
    ordered = sorted(runs)  # hours ago ascending: newest first
    history = [run(h, p, r) for h, p, r in ordered]
    throttle = throttle_of(history, WEEK)
    weak = len(history) >= 2 and all(r.ratio < 0.10 for r in history[:2])
    assert (throttle is not None) == weak
    if throttle is not None:
        newest = history[0]
        assert throttle.active(NOW, gain) == (
            newest.finished_at + WEEK > NOW and gain < 2 * newest.predicted_benefit
        )


def test_the_recommendation_skips_a_throttled_action_with_the_reason() -> None:
    st_ = status(small_file_count=30, small_file_bytes=30 * MIB)
    policy = resolve([], "db", "t", {}, 24)
    throttle = throttle_of([run(30, 29, 0.0), run(60, 29, 0.0)], WEEK)
    assert throttle is not None
    rec = recommend(st_, policy, {}, NOW, throttles={"rewrite_data_files": throttle})
    assert "rewrite_data_files" not in [a.action for a in rec.actions]
    (skip,) = [s for s in rec.skipped if s.action == "rewrite_data_files"]
    assert skip.reason.startswith("throttled: last 2 runs measured 0 % and 0 %")
    # Twice the small files: the prediction doubled, the throttle is lifted.
    more = status(data_file_count=80, small_file_count=59, small_file_bytes=59 * MIB)
    rec = recommend(more, policy, {}, NOW, throttles={"rewrite_data_files": throttle})
    assert "rewrite_data_files" in [a.action for a in rec.actions]


@given(st.lists(st.integers(min_value=0, max_value=2**40), min_size=7, max_size=7))
def test_the_shape_of_a_parsed_status_is_the_shape_of_its_document(counts: list[int]) -> None:
    """``Shape.of`` (the planner's and the executor's, on a parsed ``TableStatus``) takes
    each field of the status; every kind of delete file counts (``delete_file_count``)."""
    from icepack_core.inspection.status import TableStatus

    data, data_bytes, manifests, position, equality, vectors, snapshots = counts
    parsed = TableStatus(
        catalog="c",
        namespace="n",
        table="t",
        format_version=3,
        metadata_location="file:///m.json",
        current_snapshot_id=None,
        inspected_at="2026-11-21T12:00:00.000Z",
        inspector="pyiceberg",
        inspect_ms=0,
        manifests_read=0,
        manifests_cached=0,
        small_file_threshold_bytes=1,
        file_size_histogram={},
        data_file_count=data,
        data_file_bytes=data_bytes,
        manifest_count=manifests,
        position_delete_file_count=position,
        equality_delete_file_count=equality,
        deletion_vector_count=vectors,
        snapshot_count=snapshots,
    )
    shape = Shape.of(parsed)
    assert shape == Shape(data, data_bytes, manifests, position + equality + vectors, snapshots)
    assert shape.delete_files == position + equality + vectors
