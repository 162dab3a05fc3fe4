"""Statistics freshness and staleness: properties of the walk and the rule, and parity.

``inspection.statistics.freshness`` is checked against an oracle written differently (the
ancestor chain first, then the first described snapshot on it); ``staleness`` against its
contract (``value >= threshold``, moving further never freshens); and both inspectors read the
same hand-made metadata files alike, malformed statistics entries and summaries included (the
Go binary is real; the files are written here because Spark never writes malformed ones).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icepack_core.inspection.go_inspector import DEFAULT_BINARY, inspect_with_go
from icepack_core.inspection.health import Thresholds, assess, with_statistics_policy
from icepack_core.inspection.inspector import inspect_metadata_location
from icepack_core.inspection.statistics import (
    SnapshotLink,
    StalenessRule,
    StatisticsRef,
    freshness,
    staleness,
)
from icepack_core.inspection.status import StatisticsFreshness, TableStatus
from icepack_core.policy import TableStatisticsConfig
from icepack_core.types import IssueCode
from tests.support import statuses

REPO = Path(__file__).resolve().parents[2]
IDS = st.integers(1, 12)


@st.composite
def histories(draw: st.DrawFn) -> tuple[int | None, list[SnapshotLink], list[StatisticsRef]]:
    ids = draw(st.lists(IDS, min_size=0, max_size=10))
    links = [
        SnapshotLink(
            sid,
            draw(st.none() | IDS),
            draw(st.sampled_from(["append", "overwrite", "delete", "replace", None])),
            draw(st.integers(0, 1000)),
            draw(st.integers(0, 10)),
        )
        for sid in ids
    ]
    entries = [
        StatisticsRef(sid, draw(st.integers(0, 10_000))) for sid in draw(st.lists(IDS, max_size=4))
    ]
    return draw(st.none() | IDS), links, entries


def oracle(
    current: int | None, links: list[SnapshotLink], entries: list[StatisticsRef]
) -> StatisticsFreshness:
    by_id: dict[int, SnapshotLink] = {}
    for link in links:
        by_id.setdefault(link.snapshot_id, link)
    chain: list[SnapshotLink] = []
    node = current
    while node is not None and node in by_id and all(c.snapshot_id != node for c in chain):
        chain.append(by_id[node])
        node = by_id[node].parent_id
    described = [e.snapshot_id for e in entries]
    hit = next((i for i, c in enumerate(chain) if c.snapshot_id in described), None)
    if hit is None:
        return StatisticsFreshness(files=len(entries))
    walked = [c for c in chain[:hit] if c.operation != "replace"]
    first = next(e for e in entries if e.snapshot_id == chain[hit].snapshot_id)
    return StatisticsFreshness(
        files=len(entries),
        snapshot_id=chain[hit].snapshot_id,
        file_bytes=first.file_bytes,
        snapshots_behind=hit,
        added_records=sum(c.added_records for c in walked),
        added_data_files=sum(c.added_data_files for c in walked),
    )


@given(histories())
def test_freshness_is_the_nearest_described_ancestor(
    history: tuple[int | None, list[SnapshotLink], list[StatisticsRef]],
) -> None:
    current, links, entries = history
    assert freshness(current, links, entries) == oracle(current, links, entries)


@given(histories(), IDS)
def test_describing_the_current_snapshot_makes_them_current(
    history: tuple[int | None, list[SnapshotLink], list[StatisticsRef]], size: int
) -> None:
    current, links, entries = history
    if current is None or all(link.snapshot_id != current for link in links):
        return
    got = freshness(current, links, [StatisticsRef(current, size), *entries])
    assert got.current and got.snapshot_id == current and got.file_bytes == size
    assert (got.added_records, got.added_data_files) == (0, 0)


def test_a_replace_snapshot_moves_the_statistics_behind_but_adds_no_rows() -> None:
    links = [
        SnapshotLink(1, None, "append", 100, 2),
        SnapshotLink(2, 1, "replace", 100, 1),
        SnapshotLink(3, 2, "append", 5, 1),
    ]
    got = freshness(3, links, [StatisticsRef(1, 77)])
    assert (got.snapshot_id, got.snapshots_behind, got.added_records, got.added_data_files) == (
        1,
        2,
        5,
        1,
    )
    # Statistics of a snapshot off the lineage (another branch) do not count.
    assert freshness(3, links, [StatisticsRef(9, 1)]).snapshot_id is None


freshnesses = st.builds(
    StatisticsFreshness,
    files=st.integers(0, 3),
    snapshot_id=st.integers(1, 5),
    file_bytes=st.integers(0, 100),
    snapshots_behind=st.integers(0, 500),
    added_records=st.integers(0, 10**7),
    added_data_files=st.integers(0, 1000),
)
rules = st.builds(
    StalenessRule,
    after_snapshots=st.none() | st.integers(1, 300),
    added_rows_share=st.floats(0.001, 5, allow_nan=False),
)


@given(freshnesses, st.integers(0, 10**7), rules)
def test_a_stale_verdict_names_the_measure_that_crossed(
    f: StatisticsFreshness, records: int, rule: StalenessRule
) -> None:
    verdict = staleness(f, records, rule)
    assert f.snapshots_behind is not None
    by_count = rule.after_snapshots is not None and f.snapshots_behind >= rule.after_snapshots
    share = (f.added_records or 0) / max(records, 1)
    by_share = f.snapshots_behind > 0 and round(share, 4) >= rule.added_rows_share
    assert (verdict.state == "stale") == (by_count or by_share)
    if verdict.state == "stale":
        assert verdict.value is not None and verdict.threshold is not None
        assert verdict.value >= verdict.threshold
    if f.snapshots_behind == 0:
        assert verdict.state == "fresh"  # statistics of the current snapshot are never stale


@given(freshnesses, st.integers(0, 10**7), rules, st.integers(0, 100), st.integers(0, 10**6))
def test_moving_further_never_freshens_statistics(
    f: StatisticsFreshness, records: int, rule: StalenessRule, more: int, rows: int
) -> None:
    assert f.snapshots_behind is not None and f.added_records is not None
    further = f.model_copy(
        update={
            "snapshots_behind": f.snapshots_behind + more,
            "added_records": f.added_records + rows,
        }
    )
    if staleness(f, records, rule).state == "stale":
        assert staleness(further, records, rule).state == "stale"


def test_missing_statistics_are_an_issue_only_where_the_policy_asks_for_them() -> None:
    # As an inspector leaves it: statistics of neither kind (no entry in the metadata).
    status = statuses.status(
        current_snapshot_id=3,
        inspected_at="2026-11-21T10:00:00.000Z",
        record_count=100,
        oldest_snapshot_at=None,
        current_snapshot_at=None,
    )
    assert assess(status).issues == []
    wanted = with_statistics_policy(Thresholds(), TableStatisticsConfig(partition_stats=False))
    (issue,) = assess(status, wanted).issues
    assert issue.code == IssueCode.STATISTICS_MISSING
    assert issue.message == "no table statistics describe the current snapshot or an ancestor"
    # Stale statistics are an issue whatever the policy: someone relies on them.
    stale = status.model_copy(
        update={
            "table_statistics": StatisticsFreshness(
                files=1,
                snapshot_id=1,
                snapshots_behind=2,
                added_records=50,
                added_data_files=2,
            )
        }
    )
    (issue,) = assess(stale).issues
    assert (issue.code, issue.value, issue.threshold) == (IssueCode.STATISTICS_STALE, 0.5, 0.2)


# Values a hand-made file may hold where integers belong.
JUNK: st.SearchStrategy[object] = st.sampled_from([True, 1.0, "7", None, -3, 2**70, [], {}])
BIG = 9_876_543_210_123_456_789  # beyond int64: both inspectors keep it exact


@st.composite
def metadata_files(draw: st.DrawFn) -> dict[str, Any]:
    ids = draw(st.lists(st.sampled_from([1, 2, 3, 4, 5, BIG]), min_size=1, max_size=6))
    snapshots = []
    for i, sid in enumerate(ids):
        snap: dict[str, Any] = {"snapshot-id": sid, "timestamp-ms": 1_700_000_000_000 + i}
        snap["manifests"] = []
        parent = draw(st.none() | st.sampled_from([1, 2, 3, 4, 5, BIG]) | JUNK)
        if parent is not None:
            snap["parent-snapshot-id"] = parent
        summary = {
            "operation": draw(st.sampled_from(["append", "replace", "overwrite", 7])),
            "added-records": draw(
                st.sampled_from(["10", "0", "12a", "-1", "1234567890123456789", 5])
            ),
            "added-data-files": draw(st.sampled_from(["1", "3", "", "x"])),
        }
        snap["summary"] = draw(st.sampled_from([summary, [], "s"]))
        snapshots.append(snap)

    def entries() -> list[Any]:
        return [
            {
                "snapshot-id": draw(st.sampled_from([*ids, 99]) | JUNK),
                "statistics-path": "s3://b/t/metadata/x.stats",
                "file-size-in-bytes": draw(st.integers(0, 500) | JUNK),
            }
            for _ in range(draw(st.integers(0, 3)))
        ]

    doc: dict[str, Any] = {
        "format-version": 1,
        "location": "s3://b/t",
        "current-snapshot-id": draw(st.sampled_from(ids)),
        "snapshots": snapshots,
        "properties": {},
        "statistics": draw(st.sampled_from([entries(), None, "no"])),
        "partition-statistics": entries(),
    }
    return doc


@pytest.mark.skipif(not (REPO / DEFAULT_BINARY).is_file(), reason="go-inspector is not built")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(metadata_files())
def test_both_inspectors_read_statistics_alike(doc: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "db" / "t" / "metadata" / "v1.metadata.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(doc))

        async def both() -> tuple[TableStatus, TableStatus]:
            ours = await inspect_metadata_location(str(path))
            theirs = await inspect_with_go(
                str(path), catalog="", namespace="db", table="t", binary=REPO / DEFAULT_BINARY
            )
            return ours, theirs

        ours, theirs = asyncio.run(both())
    assert theirs.table_statistics == ours.table_statistics
    assert theirs.partition_statistics == ours.partition_statistics
    assert theirs.table_metrics() == ours.table_metrics()
