"""A job's measured outcome, beside what the planner predicted.

Per action the executor measures the table's shape (``planning.prediction.Shape``: data files,
data bytes, manifests, delete files, snapshots) before and after it, the measured benefit (the
same definition as the prediction's: objects a full scan no longer opens) and the ratio
measured/predicted benefit (None when nothing was predicted). A **read probe** times PyIceberg's
``table.scan().plan_files()`` on the current snapshot before the first action and after the
last (a full scan, same shape both times) and counts what it planned. The probe never fails a
job: any error is recorded as the probe's ``error``.

**Writers' commits are not the action's.** On a table written during the job, the shape
around the action also holds what writers committed meanwhile (new small files and manifests),
which would make a rewrite look weak or harmful. When any snapshot between the action's start
and the table's current one is not the action's own (its own: the ``replace`` snapshots its
verification checked), the action's benefit is measured from its own commits only: for each
own snapshot ``S`` with parent ``P``, ``benefit(shape(P), shape(S))`` (data and delete files
from the snapshot summaries' totals, manifests from the manifest lists), summed. ``before`` and
``after`` still show the table around the action; the entry then also carries
``"own": {"snapshots", "writer_snapshots", "table_benefit", "error"}``. When no other snapshot
was committed (a batch table) the entry is exactly the table-level measurement.

Stored in ``jobs.outcome`` (fenced) at the end of a successful job::

    {"actions": [{"action", "before": Shape|null, "after": Shape|null, "benefit": int|null,
                  "predicted_benefit": number|null, "ratio": number|null}, ...],
     "benefit": int|null, "predicted_benefit": number|null, "ratio": number|null,
     "read_probe": {"before": Probe, "after": Probe}}

(a statistics action's entry also has ``"statistics": {"present_for_current", "snapshot_id",
"bytes_written"}``), with ``Probe`` either ``{"snapshot_id", "files_planned",
"delete_files_planned", "plan_ms"}`` or ``{"error": "..."}``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.table import Table

from icepack_core.execution.verification.snapshots import snapshots_after
from icepack_core.inspection.inspector import LoadedTable
from icepack_core.inspection.status import StatisticsFreshness, TableStatus
from icepack_core.planning.prediction import Shape, benefit, ratio
from icepack_core.safety.verification import Evidence
from icepack_core.telemetry.logs import redact_text
from icepack_core.types import STATISTICS_ACTIONS, Action, JSONObject

# Planning a full scan reads every manifest of the current snapshot; far longer means stuck.
PROBE_TIMEOUT_SECONDS = 300.0
# The table as loaded now (``job_context.TableMetadata.loaded``, or an inspector's ``load``).
Load = Callable[[], Awaitable[LoadedTable]]


@dataclass(frozen=True)
class Probe:
    """One read probe: what planning a full scan of the current snapshot counted and took, or
    (``error`` set, every count None) why it could not plan."""

    snapshot_id: int | None = None
    files_planned: int | None = None
    delete_files_planned: int | None = None
    plan_ms: float | None = None
    error: str | None = None

    @classmethod
    def failed(cls, error: str) -> Probe:
        return cls(error=error)

    def to_json(self) -> JSONObject:
        """The stored form: ``{"error"}`` alone for a failed probe, else the four counts."""
        if self.error is not None:
            return {"error": self.error}
        return {
            "snapshot_id": self.snapshot_id,
            "files_planned": self.files_planned,
            "delete_files_planned": self.delete_files_planned,
            "plan_ms": self.plan_ms,
        }


async def read_probe(load: Load) -> Probe:
    """Time ``table.scan().plan_files()`` on the current snapshot of the table ``load``
    gives. Never raises (except cancellation): an error is returned as ``Probe.failed``."""
    try:
        loaded = await load()
        table = loaded.table
        if table is None:
            return Probe.failed("PyIceberg's model rejected the table metadata: no scan to plan")

        def plan() -> Probe:
            snapshot = table.current_snapshot()
            started = time.perf_counter()
            tasks = list(table.scan().plan_files())
            elapsed = time.perf_counter() - started
            deletes = {d.file_path for t in tasks for d in t.delete_files}
            return Probe(
                snapshot_id=None if snapshot is None else snapshot.snapshot_id,
                files_planned=len(tasks),
                delete_files_planned=len(deletes),
                plan_ms=round(elapsed * 1000, 3),
            )

        return await asyncio.wait_for(asyncio.to_thread(plan), PROBE_TIMEOUT_SECONDS)
    except Exception as exc:  # the probe is evidence, never a reason to fail the job
        return Probe.failed(redact_text(f"{type(exc).__name__}: {exc}")[:500])


def predicted_benefits(
    predicted: Mapping[str, Any] | None, actions: Sequence[str]
) -> list[float | None]:
    """Per action of the job, the predicted benefit stored with it (``jobs.predicted``), or
    None when the job carries no prediction for that position (operator jobs; a mismatch)."""
    entries = predicted.get("actions") if isinstance(predicted, Mapping) else None
    found: list[float | None] = []
    for i, name in enumerate(actions):
        entry = entries[i] if isinstance(entries, list) and i < len(entries) else None
        value = entry.get("benefit") if isinstance(entry, Mapping) else None
        same = isinstance(entry, Mapping) and entry.get("action") == name
        found.append(float(value) if same and isinstance(value, int | float) else None)
    return found


@dataclass(frozen=True)
class OwnEffect:
    """An action's own benefit on a table writers committed to during it (module doc).
    ``benefit`` is None (with ``error``) when a snapshot's totals could not be read."""

    snapshots: tuple[int, ...]
    writer_snapshots: int
    benefit: int | None
    error: str | None = None


def _counts(table: Table, snapshot_id: int) -> tuple[int, int, int]:
    """Data files, delete files and manifests of one snapshot (summary totals, manifest list).
    Raises ValueError when the snapshot or its totals are missing."""
    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    if snapshot is None or snapshot.summary is None:
        raise ValueError(f"snapshot {snapshot_id} has no summary in the metadata")
    totals = []
    for key in ("total-data-files", "total-delete-files"):
        value = snapshot.summary.get(key)
        if value is None or not str(value).isdigit():
            raise ValueError(f"snapshot {snapshot_id}'s summary has no {key}")
        totals.append(int(value))
    return totals[0], totals[1], len(snapshot.manifests(table.io))


def own_effect(table: Table, start: int | None, own: frozenset[int]) -> OwnEffect | None:
    """The action's own benefit from its commits ``own`` after ``start`` (module doc), or None
    when every snapshot after ``start`` is the action's own (nothing else to separate)."""
    chain = snapshots_after(table, start)
    writers = [r for r in chain if r["snapshot_id"] not in own]
    if not writers:
        return None
    mine = [r for r in chain if r["snapshot_id"] in own and r["parent_id"] is not None]
    ids = tuple(r["snapshot_id"] for r in mine)
    try:
        total = 0
        for r in mine:
            (pd, pdel, pm), (sd, sdel, sm) = (
                _counts(table, r["parent_id"]),
                _counts(table, r["snapshot_id"]),
            )
            total += (pd - sd) + (pdel - sdel) + (pm - sm)
    except ValueError as exc:
        return OwnEffect(ids, len(writers), None, str(exc))
    return OwnEffect(ids, len(writers), total)


async def measure_own(
    load: Load,
    before: TableStatus | None,
    verification: Evidence | None,
) -> OwnEffect | None:
    """``own_effect`` on the table as ``load`` gives it now, after the snapshot ``before`` was
    inspected at; the own snapshots are those ``verification`` (a rewrite's evidence) checked.
    None when ``before`` is unknown, for an action that committed no verified snapshot (or no
    verification), or when writers committed nothing; an unreadable table gives an
    ``OwnEffect`` with ``error``, never an exception (except cancellation)."""
    checked = verification.snapshots if verification is not None else []
    own = frozenset(s.snapshot_id for s in checked)
    if before is None or not own:
        return None
    start = before.current_snapshot_id
    try:
        table = (await load()).table
        if table is None:
            return OwnEffect(tuple(sorted(own)), 0, None, "PyIceberg rejected the metadata")
        return await asyncio.to_thread(own_effect, table, start, own)
    except Exception as exc:  # evidence only: never a reason to fail the job
        error = redact_text(f"{type(exc).__name__}: {exc}")[:500]
        return OwnEffect(tuple(sorted(own)), 0, None, error)


@dataclass(frozen=True)
class StatisticsLeft:
    """What a statistics action measurably left (``measured_statistics``)."""

    present_for_current: bool
    snapshot_id: int | None
    bytes_written: int | None

    def to_json(self) -> dict[str, bool | int | None]:
        return {
            "present_for_current": self.present_for_current,
            "snapshot_id": self.snapshot_id,
            "bytes_written": self.bytes_written,
        }


@dataclass(frozen=True)
class MeasuredAction:
    """One action's measured effect (the module doc's ``actions[]`` entry). ``table_benefit``
    is the table-level benefit, kept beside ``own`` when writers committed during it."""

    action: str
    before: Shape | None
    after: Shape | None
    benefit: int | None
    predicted_benefit: float | None
    ratio: float | None
    statistics: StatisticsLeft | None = None
    overlap_depth: tuple[object, object] | None = None  # a clustering rewrite's before, after
    own: OwnEffect | None = None
    table_benefit: int | None = None

    def to_json(self) -> JSONObject:
        """The stored form; optional parts appear only when measured."""
        entry: JSONObject = {
            "action": self.action,
            "before": None if self.before is None else self.before.to_json(),
            "after": None if self.after is None else self.after.to_json(),
            "benefit": self.benefit,
            "predicted_benefit": self.predicted_benefit,
            "ratio": self.ratio,
        }
        if self.statistics is not None:
            entry["statistics"] = self.statistics.to_json()
        if self.overlap_depth is not None:
            entry["overlap_depth"] = dict(zip(("before", "after"), self.overlap_depth, strict=True))
        if self.own is not None:
            entry["own"] = {
                "snapshots": list(self.own.snapshots),
                "writer_snapshots": self.own.writer_snapshots,
                "table_benefit": self.table_benefit,
                "error": self.own.error,
            }
        return entry


def measured_action(
    action: str,
    before: TableStatus | None,
    after: TableStatus | None,
    predicted_benefit: float | None,
    own: OwnEffect | None = None,
    clustering: Mapping[str, Any] | None = None,
) -> MeasuredAction:
    """One action's measured effect (the module doc's ``actions[]`` entry); with ``own``
    (writers committed during it) the benefit is the action's own. ``clustering``: a sort or
    z-order rewrite's measured overlap depth (its output's ``clustering``), kept as
    ``overlap_depth``."""
    if before is None or after is None:  # an inspection failed: nothing measured
        return MeasuredAction(action, None, None, None, predicted_benefit, None)
    b, a = Shape.of(before), Shape.of(after)
    table_benefit = benefit(b, a)
    measured = table_benefit if own is None else own.benefit
    return MeasuredAction(
        action,
        b,
        a,
        measured,
        predicted_benefit,
        None
        if predicted_benefit is None or measured is None
        else ratio(measured, predicted_benefit),
        statistics=measured_statistics(Action(action), before, after)
        if action in STATISTICS_ACTIONS
        else None,
        overlap_depth=None
        if clustering is None
        else (clustering.get("before"), clustering.get("after")),
        own=own,
        table_benefit=table_benefit,
    )


def measured_statistics(action: Action, before: TableStatus, after: TableStatus) -> StatisticsLeft:
    """What a statistics action measurably left: statistics of its kind describing the current
    snapshot or not, which snapshot they describe, and the bytes of the file it wrote (0 when
    the status shows the same file as before)."""
    kind = "table_statistics" if action == Action.COMPUTE_TABLE_STATS else "partition_statistics"
    # None (an inspector before statistics inspection) is no statistics of that kind.
    b = getattr(before, kind) or StatisticsFreshness()
    a = getattr(after, kind) or StatisticsFreshness()
    same = (b.snapshot_id, b.file_bytes) == (a.snapshot_id, a.file_bytes)
    return StatisticsLeft(
        present_for_current=a.current,
        snapshot_id=a.snapshot_id,
        bytes_written=0 if same or a.snapshot_id is None else a.file_bytes,
    )


@dataclass(frozen=True)
class JobOutcome:
    """A job's measured outcome (``jobs.outcome``, the module doc's shape)."""

    actions: tuple[MeasuredAction, ...]
    benefit: int | None
    predicted_benefit: float | None
    ratio: float | None
    probe_before: Probe
    probe_after: Probe

    def to_json(self) -> dict[str, object]:
        return {
            "actions": [a.to_json() for a in self.actions],
            "benefit": self.benefit,
            "predicted_benefit": self.predicted_benefit,
            "ratio": self.ratio,
            "read_probe": {
                "before": self.probe_before.to_json(),
                "after": self.probe_after.to_json(),
            },
        }


def job_outcome(
    actions: Sequence[MeasuredAction], probe_before: Probe, probe_after: Probe
) -> JobOutcome:
    """The job's outcome from its measured actions and the two read probes."""
    measured = [a.benefit for a in actions if a.benefit is not None]
    predicted = [a.predicted_benefit for a in actions if a.predicted_benefit is not None]
    total = sum(measured) if len(measured) == len(actions) else None
    expected = sum(predicted) if predicted else None
    return JobOutcome(
        tuple(actions),
        total,
        expected,
        None if total is None or expected is None else ratio(total, expected),
        probe_before,
        probe_after,
    )
