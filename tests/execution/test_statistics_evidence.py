"""The statistics actions' evidence (``execution.statistics.evidence``), on metadata states
built here: the cases a real run cannot be made to produce on demand (a writer committing
between the two loads, a pinned snapshot whose manifest list changed, a file the procedure
named that the metadata does not record). The real runs are in test_statistics_actions.py."""

from __future__ import annotations

from icepack_core.execution.statistics import DescribedFile, StatisticsState, evidence


def state(current: int, lists: dict[int, str], described: dict[int, str]) -> StatisticsState:
    return StatisticsState(
        current=current,
        manifest_lists=dict(lists),
        operations={s: "append" for s in lists},
        described={s: DescribedFile(p, 100 + s) for s, p in described.items()},
    )


def test_a_metadata_only_update_is_proven_unchanged_with_the_bytes_written() -> None:
    before = state(2, {1: "l1", 2: "l2"}, {1: "old.stats"})
    after = state(2, {1: "l1", 2: "l2"}, {1: "old.stats", 2: "new.stats"})
    doc, problems = evidence(before, after, 2, "new.stats")
    assert problems == []
    assert doc["data_unchanged"] is True and doc["bytes_written"] == 102
    assert doc["snapshots_added"] == [] and doc["described"] == {
        "path": "new.stats",
        "file_bytes": 102,
    }


def test_a_writers_commit_meanwhile_is_named_and_the_pinned_snapshot_still_described() -> None:
    before = state(2, {1: "l1", 2: "l2"}, {})
    after = state(3, {1: "l1", 2: "l2", 3: "l3"}, {2: "new.stats"})
    doc, problems = evidence(before, after, 2, "new.stats")
    assert problems == []
    assert doc["data_unchanged"] is False
    assert doc["snapshots_added"] == [{"snapshot_id": 3, "operation": "append"}]
    assert (doc["snapshot_before"], doc["snapshot_after"]) == (2, 3)


def test_contradicting_evidence_is_a_violation() -> None:
    before = state(2, {1: "l1", 2: "l2"}, {})
    changed = state(2, {1: "l1", 2: "other"}, {2: "new.stats"})
    _, problems = evidence(before, changed, 2, "new.stats")
    assert problems == ["snapshot 2's manifest list changed"]
    unrecorded = state(2, {1: "l1", 2: "l2"}, {})
    doc, problems = evidence(before, unrecorded, 2, "new.stats")
    assert problems == [
        "the procedure wrote new.stats, but the metadata records no file for snapshot 2"
    ]
    assert doc["bytes_written"] == 0
    # Rewriting the same file again writes nothing new.
    same = state(2, {1: "l1", 2: "l2"}, {2: "new.stats"})
    assert evidence(same, same, 2, "new.stats")[0]["bytes_written"] == 0
