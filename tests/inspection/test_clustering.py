"""The overlap depth (``inspection.clustering``) against a brute-force oracle, and the z-order
key's validation in policies and intents."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icepack_core.errors import IntentError, PolicyError
from icepack_core.execution.procedure_calls import procedure_args
from icepack_core.inspection.clustering import (
    FileBox,
    overlap_counts,
    partition_depths,
    reachable_depth,
    summarise,
    unclustered,
)
from icepack_core.intents import parse_intent
from icepack_core.policy import parse_config
from icepack_core.spark.sql import procedure_call
from icepack_core.types import TableRef

bound = st.one_of(st.none(), st.integers(-20, 20))


@st.composite
def boxes(draw: Any, dims: int | None = None) -> list[FileBox]:
    """Files in a few partitions with random (possibly unbounded or reversed-then-fixed)
    bounds on 1-3 key columns."""
    width = dims or draw(st.integers(1, 3))
    found = []
    for _ in range(draw(st.integers(0, 40))):
        part = draw(st.integers(0, 2))
        lows, highs = [], []
        for _ in range(width):
            a, b = draw(bound), draw(bound)
            if a is not None and b is not None and a > b:
                a, b = b, a
            lows.append(a)
            highs.append(b)
        found.append(FileBox((0, (part,)), tuple(lows), tuple(highs), draw(st.integers(0, 99))))
    return found


def brute_overlaps(a: FileBox, b: FileBox) -> bool:
    """The oracle: intervals with None as -inf/+inf, intersecting in every column."""
    for lo_a, hi_a, lo_b, hi_b in zip(a.lower, a.upper, b.lower, b.upper, strict=True):
        lo_a = float("-inf") if lo_a is None else lo_a
        lo_b = float("-inf") if lo_b is None else lo_b
        hi_a = float("inf") if hi_a is None else hi_a
        hi_b = float("inf") if hi_b is None else hi_b
        if max(lo_a, lo_b) > min(hi_a, hi_b):
            return False
    return True


def brute_depths(files: list[FileBox]) -> dict[Any, float]:
    """Per partition: the mean over its files of how many of its files overlap it."""
    by_part: dict[Any, list[FileBox]] = {}
    for f in files:
        by_part.setdefault(f.partition, []).append(f)
    return {
        key: sum(sum(brute_overlaps(f, g) for g in group) for f in group) / len(group)
        for key, group in by_part.items()
    }


@settings(max_examples=300, deadline=None)
@given(boxes())
def test_overlap_depth_matches_the_brute_force_oracle(files: list[FileBox]) -> None:
    depths, sampled = partition_depths(files, capacity=1000, small_bytes=50)
    oracle = brute_depths(files)
    assert sampled == len(files)
    assert {(p.spec_id, p.key): p.depth for p in depths} == pytest.approx(oracle)
    for p in depths:
        group = [f for f in files if f.partition == (p.spec_id, p.key)]
        assert (p.files, p.bytes) == (len(group), sum(f.size for f in group))
        assert p.small_files == sum(f.size < 50 for f in group)
    # The table's figure is the file-weighted mean.
    table = summarise("zorder", ["a"], depths, sampled, 2.0, 10**9)
    if files:
        expected = sum(oracle[f.partition] for f in files) / len(files)
        assert table.overlap_depth == pytest.approx(expected, abs=1e-3)
        loose = [f for f in files if oracle[f.partition] > 2.0]
        assert table.unclustered_files == len(loose)
        assert table.unclustered_bytes == sum(f.size for f in loose)


@settings(max_examples=200, deadline=None)
@given(boxes(dims=1))
def test_pairwise_counts_are_symmetric_and_exact(files: list[FileBox]) -> None:
    one = [FileBox((0, ()), f.lower, f.upper) for f in files]
    counts = overlap_counts(one)
    for i, f in enumerate(one):
        assert counts[i] == sum(brute_overlaps(f, g) for j, g in enumerate(one) if j != i)


@settings(max_examples=100, deadline=None)
@given(boxes(), st.integers(2, 10))
def test_a_sampled_figure_stays_within_its_bounds(files: list[FileBox], capacity: int) -> None:
    """Beyond the capacity the figure is an estimate: still between 1 and the partition's
    file count, and memory holds at most ``capacity`` boxes."""
    depths, sampled = partition_depths(files, capacity=capacity)
    assert sampled == min(len(files), capacity)
    for p in depths:
        assert 1.0 <= p.depth <= p.files + 1e-9


def test_sorted_files_are_clustered_and_shuffled_ones_are_not() -> None:
    sorted_files = [FileBox((0, ()), (i * 10,), (i * 10 + 9,)) for i in range(20)]
    shuffled = [FileBox((0, ()), (i,), (190 + i,)) for i in range(20)]
    (clustered,), _ = partition_depths(sorted_files)
    (random_order,), _ = partition_depths(shuffled)
    assert clustered.depth == 1.0 and random_order.depth == 20.0


def test_a_partition_is_unclustered_above_the_ratio_of_what_a_rewrite_reaches() -> None:
    # 16 files of 100 bytes at a 400-byte target: a rewrite writes 4 files.
    files = [FileBox((0, ()), (0, 0), (9, 9), 100) for _ in range(16)]
    (p,), sampled = partition_depths(files)
    assert p.depth == 16.0
    assert reachable_depth("sort", 2, 4) == 1.0 and reachable_depth("zorder", 1, 4) == 1.0
    assert reachable_depth("zorder", 2, 4) == pytest.approx(2.0)
    assert reachable_depth("zorder", 3, 8) == pytest.approx(4.0)
    # Judged against what its 16 files reach as well (4: a z-order may write more files than
    # bytes / target), predicted to leave 4 files at depth 2.
    due, predicted, depth = unclustered(p, "zorder", 2, 4.0, 400)
    assert (due, predicted) == (False, 4) and depth == pytest.approx(2.0)
    due, predicted, depth = unclustered(p, "zorder", 2, 3.9, 400)
    assert (due, predicted) == (True, 4) and depth == pytest.approx(2.0)
    assert unclustered(p, "sort", 2, 15.9, 400) == (True, 4, 1.0)
    found = summarise("zorder", ["a", "b"], [p], sampled, 2.0, 400)
    assert (found.unclustered_files, found.unclustered_files_after) == (16, 4)
    assert found.unclustered_depth_after == pytest.approx(2.0)
    assert found.lookup_gain == 14
    clustered = summarise("zorder", ["a", "b"], [p], sampled, 4.0, 400)
    assert clustered.unclustered_partitions == 0 and clustered.lookup_gain == 0


def test_zorder_needs_columns_and_names_a_bad_one() -> None:
    with pytest.raises(PolicyError, match="strategy zorder needs zorder_columns"):
        parse_config("system.data-compaction", {"strategy": "zorder"})
    with pytest.raises(PolicyError, match=r"zorder_columns\[1\]: 'a\\nb' is not a column name"):
        parse_config(
            "system.data-compaction", {"strategy": "zorder", "zorder_columns": ["x", "a\nb"]}
        )
    with pytest.raises(PolicyError, match="only used with strategy zorder, not 'sort'"):
        parse_config("system.data-compaction", {"strategy": "sort", "zorder_columns": ["x"]})
    cfg = parse_config("system.data-compaction", {"strategy": "zorder", "zorder_columns": ["a"]})
    assert cfg.model_dump()["zorder_columns"] == ["a"]
    with pytest.raises(IntentError, match="strategy zorder needs zorder_columns"):
        parse_intent({"action": "rewrite_data_files", "params": {"strategy": "zorder"}})


def test_a_zorder_call_quotes_every_column() -> None:
    intent = parse_intent(
        {
            "action": "rewrite_data_files",
            "params": {"strategy": "zorder", "zorder_columns": ["a", "we`ird' col"]},
        }
    )
    name, args = procedure_args(intent, TableRef("cat", "ns", "t"))
    assert args["strategy"] == "sort"
    assert args["sort_order"] == "zorder(`a`,`we``ird' col`)"
    call = procedure_call("cat", name, args)
    assert "sort_order => 'zorder(`a`,`we``ird\\' col`)'" in call
