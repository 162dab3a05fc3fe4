"""How current a table's statistics are, from its metadata JSON alone (no file is read).

A table's metadata lists ``statistics`` (Puffin files, e.g. NDV sketches written by
``compute_table_stats``) and ``partition-statistics`` (written by ``compute_partition_stats``),
each entry for one snapshot. For each kind, the freshness is measured against the *current
lineage*: walking from the current snapshot through ``parent-snapshot-id``, the first snapshot
that has an entry is the one the statistics describe; ``snapshots_behind`` is how many snapshots
were walked before it (0: they describe the current snapshot), and ``added_records`` /
``added_data_files`` sum the snapshot summaries' ``added-records`` / ``added-data-files`` of
those snapshots, except ``replace`` snapshots (a compaction rewrites rows, it adds none).

Why the nearest ancestor, not only the current snapshot: Trino reads the statistics of the
nearest ancestor, while Spark (iceberg-spark 1.10 ``SparkScan.estimateStatistics``) only those of
the exact snapshot it scans. Both facts are in the status: ``snapshots_behind == 0`` is what
Spark uses; the distance says how far the values have drifted.

The same rules as go-inspector (``go-inspector/internal/inspect/statistics.go``), so both
inspectors report the same numbers: an entry whose ``snapshot-id`` is not an integer is skipped
(the field was never validated, and a bad entry must not fail an inspection); the first entry
of a snapshot wins; a summary count that is not a string of at most 18 ASCII digits counts 0
(sums saturate at 2^63-1); the walk stops at a parent that is not listed (expired) or already
seen (a cycle in a hand-made file).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from icepack_core.inspection.status import StatisticsFreshness

_DIGITS = re.compile(r"[0-9]{1,18}")
REPLACE = "replace"
_LONG_MAX = 2**63 - 1  # sums saturate here (go-inspector's int64)


@dataclass(frozen=True, slots=True)
class SnapshotLink:
    """One snapshot as the walk needs it: its parent and what its summary says it added."""

    snapshot_id: int
    parent_id: int | None
    operation: str | None
    added_records: int
    added_data_files: int


@dataclass(frozen=True, slots=True)
class StatisticsRef:
    """One ``statistics`` or ``partition-statistics`` entry: its snapshot and file size."""

    snapshot_id: int
    file_bytes: int


def summary_count(value: Any) -> int:
    """A snapshot summary count: the spec makes summaries string to string, and Iceberg writes
    counts as ASCII digits; anything else (a JSON number too, or over 18 digits) counts 0."""
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return int(value)
    return 0


def link_of(snapshot_id: int, parent_id: Any, summary: Mapping[str, Any] | None) -> SnapshotLink:
    """A ``SnapshotLink`` from a snapshot's raw fields (``parent_id`` kept only if an int)."""
    parent = parent_id if isinstance(parent_id, int) and not isinstance(parent_id, bool) else None
    summary = summary or {}
    operation = summary.get("operation")
    return SnapshotLink(
        snapshot_id,
        parent,
        operation if isinstance(operation, str) else None,
        summary_count(summary.get("added-records")),
        summary_count(summary.get("added-data-files")),
    )


def refs_of(entries: Iterable[Any]) -> tuple[StatisticsRef, ...]:
    """The usable entries of a raw ``statistics`` / ``partition-statistics`` list (module doc:
    a non-integer ``snapshot-id`` is skipped, a bad size counts 0)."""
    refs: list[StatisticsRef] = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        sid = entry.get("snapshot-id")
        if isinstance(sid, bool) or not isinstance(sid, int):
            continue
        size = entry.get("file-size-in-bytes")
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= _LONG_MAX:
            size = 0
        refs.append(StatisticsRef(sid, size))
    return tuple(refs)


def freshness(
    current_id: int | None,
    snapshots: Sequence[SnapshotLink],
    entries: Sequence[StatisticsRef],
) -> StatisticsFreshness:
    """The freshness of one kind of statistics (module doc)."""
    by_snapshot: dict[int, StatisticsRef] = {}
    for ref in entries:
        by_snapshot.setdefault(ref.snapshot_id, ref)
    missing = StatisticsFreshness(files=len(entries))
    links: dict[int, SnapshotLink] = {}
    for link in snapshots:
        links.setdefault(link.snapshot_id, link)
    if current_id is None or current_id not in links:
        return missing
    behind = records = files = 0
    seen: set[int] = set()
    node: int | None = current_id
    while node is not None and node in links and node not in seen:
        found = by_snapshot.get(node)
        if found is not None:
            return StatisticsFreshness(
                files=len(entries),
                snapshot_id=node,
                file_bytes=found.file_bytes,
                snapshots_behind=behind,
                added_records=min(records, _LONG_MAX),
                added_data_files=min(files, _LONG_MAX),
            )
        seen.add(node)
        link = links[node]
        behind += 1
        if link.operation != REPLACE:
            records += link.added_records
            files += link.added_data_files
        node = link.parent_id
    return missing


@dataclass(frozen=True, slots=True)
class StalenessRule:
    """When statistics that exist are stale: the table moved ``after_snapshots`` snapshots
    past them (None: never by count), or rows were added amounting to ``added_rows_share`` of
    its rows. The health rule and the planner share it (``icepack.table-statistics``)."""

    after_snapshots: int | None = 100
    added_rows_share: float = 0.2

    def __post_init__(self) -> None:
        if self.after_snapshots is not None and self.after_snapshots < 1:
            raise ValueError(f"after_snapshots={self.after_snapshots} must be at least 1")
        if not self.added_rows_share > 0:
            raise ValueError(f"added_rows_share={self.added_rows_share} must be above 0")


@dataclass(frozen=True, slots=True)
class Staleness:
    """The verdict on one kind of statistics. For ``stale``, ``value >= threshold`` holds and
    names the measure that crossed (snapshots behind, or the added rows' share)."""

    state: Literal["fresh", "stale", "missing"]
    reason: str
    value: float | int | None = None
    threshold: float | int | None = None


def added_share(f: StatisticsFreshness, record_count: int) -> float:
    """Rows added since the statistics over the table's rows now (4 decimals)."""
    return round((f.added_records or 0) / max(record_count, 1), 4)


def staleness(
    f: StatisticsFreshness, record_count: int, rule: StalenessRule, kind: str = "statistics"
) -> Staleness:
    """Whether ``f`` is missing, stale by ``rule`` or fresh, and why (in words)."""
    if f.snapshot_id is None or f.snapshots_behind is None:
        others = f" ({f.files} for snapshots off the current lineage)" if f.files else ""
        return Staleness(
            "missing", f"no {kind} describe the current snapshot or an ancestor{others}"
        )
    behind = f.snapshots_behind
    share = added_share(f, record_count)
    where = (
        f"{kind} describe snapshot {f.snapshot_id}, {behind} snapshots behind the current one "
        f"({f.added_records} rows, {f.added_data_files} data files added since: {share:.1%} "
        f"of {record_count} rows)"
    )
    if rule.after_snapshots is not None and behind >= rule.after_snapshots:
        return Staleness("stale", where, behind, rule.after_snapshots)
    if behind > 0 and share >= rule.added_rows_share:
        return Staleness("stale", where, share, rule.added_rows_share)
    return Staleness("fresh", where)
