"""Property tests of the health rules: score range, monotonicity, thresholds crossed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from icepack_core.inspection.health import Thresholds, assess, inspection_failed
from icepack_core.inspection.status import TableStatus, empty_histogram, format_ts

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def make_status(**fields: object) -> TableStatus:
    base: dict[str, object] = dict(
        catalog="c",
        namespace="n",
        table="t",
        format_version=2,
        metadata_location="m",
        current_snapshot_id=None,
        inspected_at=format_ts(NOW),
        inspector="pyiceberg",
        inspect_ms=0,
        manifests_read=0,
        manifests_cached=0,
        small_file_threshold_bytes=64 << 20,
        file_size_histogram=empty_histogram(),
    )
    base.update(fields)
    return TableStatus.model_validate(base)


@st.composite
def statuses(draw: st.DrawFn) -> TableStatus:
    data = draw(st.integers(0, 50_000))
    small = draw(st.integers(0, data))
    records = draw(st.integers(data, data * 1000 + 1))
    partitions = draw(st.integers(1 if data else 0, max(data, 1)))
    max_in_part = draw(st.integers(-(-data // max(partitions, 1)), data)) if data else 0
    snapshots = draw(st.integers(0, 20_000))
    age_days = draw(st.floats(0, 400))
    return make_status(
        data_file_count=data,
        small_file_count=small,
        small_file_bytes=small * 1000,
        data_file_bytes=data * 100_000,
        record_count=records,
        position_delete_file_count=draw(st.integers(0, 5000)),
        equality_delete_file_count=draw(st.integers(0, 5000)),
        deletion_vector_count=draw(st.integers(0, 5000)),
        delete_record_count=draw(st.integers(0, records * 2)),
        manifest_count=draw(st.integers(0, 5000)),
        partition_count=partitions,
        max_files_in_partition=max_in_part,
        snapshot_count=snapshots,
        oldest_snapshot_at=format_ts(NOW - timedelta(days=age_days)) if snapshots else None,
        metadata_log_count=draw(st.integers(0, 500)),
    )


@settings(max_examples=300, deadline=None)
@given(statuses())
def test_score_is_within_0_and_100(status: TableStatus) -> None:
    assert 0 <= assess(status, now=NOW).score <= 100


@settings(max_examples=300, deadline=None)
@given(statuses(), st.integers(1, 50_000))
def test_more_small_files_never_improve_the_score_or_health(status: TableStatus, more: int) -> None:
    worse = status.model_copy(
        update={
            "small_file_count": min(status.data_file_count, status.small_file_count + more),
            "small_file_bytes": status.small_file_bytes + more * 1000,
        }
    )
    order = {"healthy": 0, "warning": 1, "critical": 2, "unknown": 3}
    before, after = assess(status, now=NOW), assess(worse, now=NOW)
    assert after.score <= before.score
    assert order[after.health] >= order[before.health]


@settings(max_examples=300, deadline=None)
@given(
    statuses(),
    st.builds(
        Thresholds,
        small_files_min=st.integers(1, 50),
        snapshots_warning=st.integers(1, 2000),
        manifests_warning=st.integers(1, 2000),
        skew_min_files=st.integers(1, 500),
        metadata_log_warning=st.integers(1, 200),
    ),
)
def test_every_issue_value_reached_its_threshold(
    status: TableStatus, thresholds: Thresholds
) -> None:
    for issue in assess(status, thresholds, NOW).issues:
        assert issue.value is not None and issue.threshold is not None
        assert issue.value >= issue.threshold, issue
        assert issue.message


@given(st.integers(0, 50), st.integers(0, 10))
def test_a_table_without_data_is_healthy(metadata_log: int, refs: int) -> None:
    status = make_status(metadata_log_count=metadata_log, ref_count=refs)
    assessment = assess(status, now=NOW)
    assert assessment.health == "healthy" and assessment.score == 100 and not assessment.issues


def test_inspection_failure_is_unknown_with_the_cause() -> None:
    assessment = inspection_failed("cannot read manifest s3://b/m.avro: FileNotFoundError")
    assert assessment.health == "unknown" and assessment.score == 0
    assert [i.code for i in assessment.issues] == ["INSPECTION_FAILED"]
    assert "m.avro" in assessment.issues[0].message


def test_glue_trigger_makes_small_files_critical() -> None:
    status = make_status(
        data_file_count=1000,
        small_file_count=101,
        partition_count=1,
        max_files_in_partition=1000,
        record_count=1000,
    )
    (issue,) = assess(status, now=NOW).issues
    assert (issue.code, issue.severity) == ("SMALL_FILES", "critical")
