"""Sort and z-order in recommendations (``planning.layout``) and health (``POOR_CLUSTERING``),
from a status carrying the inspector's clustering figure."""

from __future__ import annotations

from typing import Any

import pytest

from icepack_core.inspection.clustering import Clustering
from icepack_core.inspection.health import assess
from icepack_core.inspection.status import TableStatus
from icepack_core.planning.recommendation import recommend
from icepack_core.policy import PolicyAttachment, resolve
from icepack_core.types import IssueCode, PolicyType
from tests.planning.test_recommendation import NOW, status

REWRITE = "rewrite_data_files"
TARGET = 536_870_912


def policy(**config: Any) -> Any:
    return resolve(
        [PolicyAttachment(PolicyType.DATA_COMPACTION, "table", "c", "db", "t", True, dict(config))],
        "db",
        "t",
    )


def clustering(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "strategy": "zorder",
        "columns": ["a", "b"],
        "max_overlap_ratio": 2.0,
        "target_file_size_bytes": TARGET,
        "overlap_depth": 9.0,
        "files": 10,
        "partitions": 1,
        "sampled_files": 10,
        "unclustered_partitions": 1,
        "unclustered_files": 10,
        "unclustered_bytes": 10 * 100 * 1024 * 1024,
        "unclustered_depth": 9.0,
        "unclustered_files_after": 2,
        "unclustered_depth_after": 1.4142,
        "lookup_gain": 8,
    }
    return {**base, **over}


ZORDER = {"strategy": "zorder", "zorder_columns": ["a", "b"]}


def test_an_unclustered_table_gets_a_zorder_with_its_predicted_depth() -> None:
    rec = recommend(status(clustering=clustering()), policy(**ZORDER), {}, NOW)
    (rewrite,) = rec.actions
    assert rewrite.to_json()["params"]["strategy"] == "zorder"
    assert rewrite.to_json()["params"]["zorder_columns"] == ["a", "b"]
    assert rewrite.to_json()["params"]["max_overlap_ratio"] == 2.0
    assert "overlap depth 9 on zorder(a, b) in 1 of 1 partitions" in rewrite.reason
    assert rewrite.predicted is not None and rewrite.predicted.overlap_depth is not None
    assert rewrite.predicted.overlap_depth.before == 9.0
    assert rewrite.predicted.overlap_depth.after == pytest.approx(1.4142)
    assert rewrite.predicted.after.data_files == 2  # 10 files -> 2 of the target size
    assert rewrite.predicted.rewrite_bytes == 10 * 100 * 1024 * 1024
    assert rewrite.to_json()["predicted"]["overlap_depth"] == {"before": 9.0, "after": 1.4142}


def test_a_clustered_table_is_left_alone() -> None:
    found = clustering(
        overlap_depth=1.3, unclustered_partitions=0, unclustered_files=0, lookup_gain=0
    )
    rec = recommend(status(clustering=found), policy(**ZORDER), {}, NOW)
    assert REWRITE not in [a.action for a in rec.actions]
    (skip,) = [s for s in rec.skipped if s.action == REWRITE]
    assert "clustered: overlap depth 1.3 on zorder(a, b)" in skip.reason


def test_until_measured_and_without_a_sort_order_it_bin_packs_and_says_why() -> None:
    small = {"small_file_count": 40, "small_file_bytes": 40 * 1024 * 1024}
    rec = recommend(status(**small), policy(**ZORDER), {}, NOW)
    (rewrite,) = rec.actions
    assert (
        rewrite.to_json()["params"]["strategy"] == "binpack"
        and "not measured yet" in rewrite.reason
    )
    # Measured for other columns: not this key's figure either.
    other = clustering(columns=["a"])
    rec = recommend(status(clustering=other, **small), policy(**ZORDER), {}, NOW)
    assert rec.actions[0].to_json()["params"]["strategy"] == "binpack"
    no_order = clustering(strategy="sort", columns=[], overlap_depth=None, error="no sort order")
    rec = recommend(status(clustering=no_order, **small), policy(strategy="sort"), {}, NOW)
    (rewrite,) = rec.actions
    assert rewrite.to_json()["params"]["strategy"] == "binpack"
    assert "no sort order; falling back to binpack" in rewrite.reason


def test_a_bad_zorder_column_refuses_the_rewrite_naming_it() -> None:
    bad = clustering(overlap_depth=None, error="zorder column 'nope' is not a primitive column")
    small = {"small_file_count": 40, "small_file_bytes": 40 * 1024 * 1024}
    rec = recommend(status(clustering=bad, **small), policy(**ZORDER), {}, NOW)
    assert rec.actions == []
    (skip,) = [s for s in rec.skipped if s.action == REWRITE]
    assert skip.reason == "refused: zorder column 'nope' is not a primitive column"


def test_health_reports_poor_clustering_only_above_the_ratio() -> None:
    base = {
        "catalog": "c",
        "namespace": "db",
        "table": "t",
        "format_version": 2,
        "metadata_location": "file:///m.json",
        "current_snapshot_id": 1,
        "inspected_at": "2026-11-21T12:00:00.000Z",
        "inspector": "pyiceberg",
        "inspect_ms": 1,
        "manifests_read": 1,
        "manifests_cached": 0,
        "small_file_threshold_bytes": 1,
        "data_file_count": 10,
        "file_size_histogram": {},
    }
    poor = assess(TableStatus.model_validate({**base, "clustering": clustering()}))
    (issue,) = poor.issues
    assert issue.code == IssueCode.POOR_CLUSTERING and issue.value == 9.0
    assert issue.threshold is not None and issue.value is not None
    assert issue.threshold == pytest.approx(2.8284) and issue.value >= issue.threshold
    fine = clustering(unclustered_partitions=0, unclustered_files=0, overlap_depth=1.2)
    assert assess(TableStatus.model_validate({**base, "clustering": fine})).issues == []
    assert Clustering.model_validate(fine).overlap_depth == 1.2
