"""Running ``compute_table_stats`` / ``compute_partition_stats``, and proving no data changed.

Statistics are metadata-only: Iceberg's procedures (iceberg-spark-runtime 1.10 has both) write
a Puffin file of NDV sketches, or a partition-statistics file, and commit a metadata update
(``UpdateStatistics`` / ``UpdatePartitionStatistics``) that adds no snapshot. The run pins the
snapshot: the procedure gets ``snapshot_id`` = the table's current snapshot as loaded just
before the call, so the file describes exactly the snapshot the evidence names, even when a
writer commits meanwhile.

The evidence (``output["evidence"]``), from the table's metadata before and after the call:

- ``snapshot_before`` / ``snapshot_after`` and their manifest lists: ``data_unchanged`` is true
  when the current snapshot and its manifest list (an immutable file naming every data and
  delete file) are the same, i.e. the same data files;
- ``snapshots_added``: snapshots committed meanwhile (writers': a statistics update commits
  none), each with its operation; ``snapshots_removed``: snapshots that were there before and
  are gone (none, unless someone else expired them);
- ``described``: the statistics entry now recorded for the pinned snapshot (path, bytes) and
  ``bytes_written``: its size when the file is new (0 when the entry was already that file).

A pinned snapshot whose manifest list changed, or whose entry is absent after a call that
named a file, is a violation: ``StatisticsNotRecorded`` (the job fails permanently; nothing to
roll back: no snapshot was committed).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from pyiceberg.table import Table

from icepack_core.errors import PermanentError
from icepack_core.execution.verification.verifier import TableLoader
from icepack_core.intents import ComputePartitionStats, ComputeTableStats
from icepack_core.spark.engine import SparkEngine
from icepack_core.spark.sql import ProcedureValue, StringArray, procedure_call
from icepack_core.types import TableRef


class StatisticsNotRecorded(PermanentError):
    """A statistics run left evidence that contradicts it (module doc)."""


class AddedSnapshot(TypedDict):
    snapshot_id: int
    operation: str | None


class DescribedJson(TypedDict):
    path: str
    file_bytes: int


class StatisticsEvidence(TypedDict):
    """``output["evidence"]`` of a statistics action, as stored with the job (module doc)."""

    snapshot_before: int | None
    snapshot_after: int | None
    manifest_list_before: str | None
    manifest_list_after: str | None
    data_unchanged: bool
    snapshots_added: list[AddedSnapshot]
    snapshots_removed: list[int]
    described: DescribedJson | None
    bytes_written: int


@dataclass(frozen=True, slots=True)
class DescribedFile:
    path: str
    file_bytes: int


@dataclass(frozen=True, slots=True)
class StatisticsState:
    """What the evidence compares: the current snapshot, every snapshot's manifest list and
    operation, and the statistics entries of the action's kind."""

    current: int | None
    manifest_lists: dict[int, str | None]
    operations: dict[int, str | None]
    described: dict[int, DescribedFile]

    @classmethod
    def of(cls, table: Table, partition: bool) -> StatisticsState:
        meta = table.metadata
        entries = meta.partition_statistics if partition else meta.statistics
        described: dict[int, DescribedFile] = {}
        for entry in entries:
            described.setdefault(
                entry.snapshot_id, DescribedFile(entry.statistics_path, entry.file_size_in_bytes)
            )
        return cls(
            current=meta.current_snapshot_id,
            manifest_lists={s.snapshot_id: s.manifest_list for s in meta.snapshots},
            operations={
                s.snapshot_id: (s.summary.operation.value if s.summary is not None else None)
                for s in meta.snapshots
            },
            described=described,
        )


def statistics_args(
    intent: ComputeTableStats | ComputePartitionStats, table: TableRef, snapshot_id: int
) -> dict[str, ProcedureValue]:
    """The procedure's typed arguments: the table, the pinned snapshot, the columns."""
    args: dict[str, ProcedureValue] = {"table": table, "snapshot_id": snapshot_id}
    if isinstance(intent, ComputeTableStats) and intent.params.columns:
        args["columns"] = StringArray(tuple(intent.params.columns))
    return args


def evidence(
    before: StatisticsState, after: StatisticsState, pinned: int, named: str | None
) -> tuple[StatisticsEvidence, list[str]]:
    """The evidence of one run (module doc) and the violations it shows (empty: none)."""
    added = [s for s in after.manifest_lists if s not in before.manifest_lists]
    removed = [s for s in before.manifest_lists if s not in after.manifest_lists]
    now = after.described.get(pinned)
    earlier = before.described.get(pinned)
    new_file = now is not None and (earlier is None or earlier.path != now.path)
    problems: list[str] = []
    if (
        after.manifest_lists.get(pinned, before.manifest_lists[pinned])
        != (before.manifest_lists[pinned])
    ):
        problems.append(f"snapshot {pinned}'s manifest list changed")
    if named and (now is None or now.path != named):
        problems.append(
            f"the procedure wrote {named}, but the metadata records "
            f"{now.path if now else 'no file'} for snapshot {pinned}"
        )
    doc: StatisticsEvidence = {
        "snapshot_before": before.current,
        "snapshot_after": after.current,
        "manifest_list_before": before.manifest_lists.get(pinned),
        "manifest_list_after": after.manifest_lists.get(after.current)
        if after.current is not None
        else None,
        "data_unchanged": before.current == after.current
        and before.manifest_lists.get(pinned) == after.manifest_lists.get(pinned),
        "snapshots_added": [{"snapshot_id": s, "operation": after.operations[s]} for s in added],
        "snapshots_removed": removed,
        "described": None if now is None else {"path": now.path, "file_bytes": now.file_bytes},
        "bytes_written": now.file_bytes if new_file and now is not None else 0,
    }
    return doc, problems


def _named_file(rows: Sequence[Mapping[str, object]]) -> str | None:
    """The file the procedure reports (``statistics_file`` / ``partition_statistics_file``)."""
    for row in rows[:1]:
        for key, value in row.items():
            if key.endswith("statistics_file") and value:
                return str(value)
    return None


async def compute_statistics(
    engine: SparkEngine,
    ref: TableRef,
    intent: ComputeTableStats | ComputePartitionStats,
    load: TableLoader | None,
) -> tuple[list[str], dict[str, object]]:
    """Run one statistics action on ``ref`` pinned to its current snapshot; returns the SQL
    sent and the output (with the evidence). A table without a snapshot has nothing to
    describe: nothing is called.

    Raises:
        PermanentError: no metadata loader (the evidence needs the metadata).
        StatisticsNotRecorded: the evidence contradicts the run (module doc).
    """
    if load is None:
        raise PermanentError(f"{intent.kind.value} on {ref} needs the table's metadata")
    partition = isinstance(intent, ComputePartitionStats)
    before = StatisticsState.of(await _loaded(load, ref), partition)
    if before.current is None:
        return [], {"skipped": "the table has no current snapshot: nothing to describe"}
    call = procedure_call(
        ref.catalog, intent.kind.value, statistics_args(intent, ref, before.current)
    )
    started = time.monotonic()
    rows = await engine.sql(call)
    elapsed = int((time.monotonic() - started) * 1000)
    named = _named_file(rows)
    after = StatisticsState.of(await _loaded(load, ref), partition)
    doc, problems = evidence(before, after, before.current, named)
    output: dict[str, object] = {
        "statistics_snapshot_id": before.current,
        "statistics_file": named,
        "bytes_written": doc["bytes_written"],
        "procedure_ms": elapsed,
        "evidence": doc,
    }
    if problems:
        raise StatisticsNotRecorded(
            f"{intent.kind.value} on {ref}: " + "; ".join(problems) + f" (evidence: {doc})"
        )
    return [call], output


async def _loaded(load: TableLoader, ref: TableRef) -> Table:
    table = await load()
    if table is None:
        raise PermanentError(f"{ref}: PyIceberg's model rejected the table metadata")
    return table
