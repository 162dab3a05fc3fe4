"""What a maintenance action is predicted to change in its table, and what that is worth.

A table's *shape* is the five numbers maintenance changes: data files, data bytes, manifests,
delete files (position, equality and deletion vectors) and snapshots, all of the current
snapshot (snapshots: all retained ones). A prediction is the shape before and after the action
plus the bytes it rewrites; the executor measures the same shape before and after
(``execution.outcome``), so prediction and measurement compare field by field.

**Benefit** (one definition, used for the prediction, the measurement and the throttle): the
objects a full scan of the current snapshot no longer has to open, i.e. data files + delete
files + manifests removed. Snapshot expiry and orphan removal change none of these (a scan never
opens an old snapshot or an orphan), so their benefit is 0 and they are never throttled.

Pure functions, shared by the planner, ``icepack recommend`` and policy simulation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NotRequired, TypedDict

from icepack_core.inspection.status import TableStatus

SHAPE_FIELDS = ("data_files", "data_bytes", "manifests", "delete_files", "snapshots")


@dataclass(frozen=True)
class Shape:
    """What maintenance changes in a table (see the module doc)."""

    data_files: int
    data_bytes: int
    manifests: int
    delete_files: int
    snapshots: int

    @classmethod
    def of(cls, status: TableStatus) -> Shape:
        """The shape of a ``TableStatus`` (its ``delete_file_count``: every kind)."""
        return cls(
            data_files=status.data_file_count,
            data_bytes=status.data_file_bytes,
            manifests=status.manifest_count,
            delete_files=status.delete_file_count,
            snapshots=status.snapshot_count,
        )

    def to_json(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in SHAPE_FIELDS}


def benefit(before: Shape, after: Shape) -> int:
    """Objects a full scan no longer opens: data files + delete files + manifests removed
    (negative when the scan has more to open afterwards)."""
    return (
        (before.data_files - after.data_files)
        + (before.delete_files - after.delete_files)
        + (before.manifests - after.manifests)
    )


def ratio(measured: float, predicted: float) -> float | None:
    """Measured over predicted benefit; None when nothing was predicted (no ratio to judge)."""
    return None if predicted <= 0 else measured / predicted


class StatisticsEffectJSON(TypedDict):
    present_for_current: bool
    snapshot_id: int | None
    bytes_written: int | None


class PredictedEffectJSON(TypedDict):
    """A ``PredictedEffect`` as ``jobs.predicted`` stores it (per action)."""

    before: dict[str, int]
    after: dict[str, int]
    rewrite_bytes: int
    benefit: int
    statistics: NotRequired[StatisticsEffectJSON]
    overlap_depth: NotRequired[dict[str, float]]


class PredictedActionJSON(TypedDict):
    """One action of a planned job as ``jobs.predicted`` stores it: its ``PredictedEffectJSON``
    with the action's name; ``before`` and ``after`` null for an action that predicts no shape
    (orphan removal)."""

    action: str
    before: dict[str, int] | None
    after: dict[str, int] | None
    rewrite_bytes: int
    benefit: int
    statistics: NotRequired[StatisticsEffectJSON]
    overlap_depth: NotRequired[dict[str, float]]


class JobPredictionJSON(TypedDict):
    """``jobs.predicted``: the job's actions in order, and their summed bytes and benefit."""

    actions: list[PredictedActionJSON]
    rewrite_bytes: int
    benefit: float


@dataclass(frozen=True)
class StatisticsEffect:
    """What a statistics action is predicted to leave: statistics describing ``snapshot_id``
    (the current snapshot), written in a file of about ``bytes_written`` bytes (the size of the
    file it replaces; None without one to scale from). Measured by ``execution.outcome``."""

    snapshot_id: int | None
    bytes_written: int | None

    def to_json(self) -> StatisticsEffectJSON:
        return {
            "present_for_current": True,
            "snapshot_id": self.snapshot_id,
            "bytes_written": self.bytes_written,
        }


@dataclass(frozen=True)
class OverlapDepth:
    """A table's mean overlap depth on its clustering key (``inspection.clustering``), before
    and after a sort or z-order rewrite."""

    before: float
    after: float

    def to_json(self) -> dict[str, float]:
        return {"before": self.before, "after": self.after}


@dataclass(frozen=True)
class PredictedEffect:
    """One action's predicted effect: the table's shape before and after, and the bytes it
    rewrites (what it charges a rewrite budget); for a statistics action, also what it
    writes (``statistics``)."""

    before: Shape
    after: Shape
    rewrite_bytes: int
    statistics: StatisticsEffect | None = None
    # Sort and z-order: the table's mean overlap depth on the key, before -> after.
    overlap_depth: OverlapDepth | None = None

    @property
    def benefit(self) -> int:
        """The predicted benefit (never negative: no action is proposed to make scans worse)."""
        return max(0, benefit(self.before, self.after))

    def to_json(self) -> PredictedEffectJSON:
        doc: PredictedEffectJSON = {
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "rewrite_bytes": self.rewrite_bytes,
            "benefit": self.benefit,
        }
        if self.statistics is not None:
            doc["statistics"] = self.statistics.to_json()
        if self.overlap_depth is not None:
            doc["overlap_depth"] = self.overlap_depth.to_json()
        return doc


def predict_rewrite_data_files(
    before: Shape, small_files: int, small_bytes: int, target_file_size: int
) -> PredictedEffect:
    """Bin-packing ``small_files`` files of ``small_bytes`` bytes (those in scope) into files of
    ``target_file_size``: they become ``ceil(bytes/target)`` files (at least one, never more than
    they were); bytes and manifests stay, one snapshot is added. Delete files are predicted to
    stay (which of them a rewrite drops is not known from the status)."""
    small_files, small_bytes = max(0, small_files), max(0, small_bytes)
    if small_files == 0:
        files_after = 0
    else:
        files_after = min(small_files, max(1, math.ceil(small_bytes / max(1, target_file_size))))
    removed = min(before.data_files, small_files - files_after)
    after = replace(before, data_files=before.data_files - removed, snapshots=before.snapshots + 1)
    return PredictedEffect(before, after, small_bytes)


def predict_rewrite_position_deletes(before: Shape, position_delete_files: int) -> PredictedEffect:
    """Compacting ``position_delete_files`` position delete files into one. Their bytes are not
    in the status, so ``rewrite_bytes`` is 0."""
    removed = min(before.delete_files, max(0, position_delete_files - 1))
    after = replace(
        before, delete_files=before.delete_files - removed, snapshots=before.snapshots + 1
    )
    return PredictedEffect(before, after, 0)


def predict_rewrite_manifests(
    before: Shape, manifest_bytes: int, target_manifest_size: int
) -> PredictedEffect:
    """Rewriting the manifests (``manifest_bytes`` in all) into ``ceil(bytes/target)`` of them
    (at least one, never more than before); the manifest bytes are what it rewrites."""
    manifest_bytes = max(0, manifest_bytes)
    wanted = max(1, math.ceil(manifest_bytes / max(1, target_manifest_size)))
    after = replace(before, manifests=min(before.manifests, wanted), snapshots=before.snapshots + 1)
    return PredictedEffect(before, after, manifest_bytes)


def predict_expire_snapshots(before: Shape, retain_last: int) -> PredictedEffect:
    """Expiring snapshots: at best only the last ``retain_last`` remain (the ages of the others
    are not in the status, so this is the most it can expire). Benefit 0 by definition."""
    after = replace(before, snapshots=min(before.snapshots, max(1, retain_last)))
    return PredictedEffect(before, after, 0)


def predict_statistics(
    before: Shape, snapshot_id: int | None, previous_bytes: int | None
) -> PredictedEffect:
    """A statistics action: the shape does not change (no snapshot is committed, benefit 0:
    a scan opens the same files), it rewrites no data (it reads it) and it leaves statistics
    for ``snapshot_id`` in a file about as large as the one it replaces (``previous_bytes``)."""
    return PredictedEffect(before, before, 0, StatisticsEffect(snapshot_id, previous_bytes))


def predict_clustering(
    files: int,
    depth: float,
    loose_files: int,
    loose_depth: float,
    written_files: int,
    written_depth: float,
) -> OverlapDepth:
    """A sort or z-order rewrite of the unclustered partitions (``inspection.clustering``:
    ``loose_files`` files of mean depth ``loose_depth`` become ``written_files`` files of the
    depth the strategy reaches, ``written_depth``: 1 for a sort); the other partitions keep
    theirs. Returns the table's file-weighted mean depth before -> after."""
    if loose_files <= 0:
        return OverlapDepth(round(depth, 4), round(depth, 4))
    kept = files - loose_files
    kept_sum = max(0.0, depth * files - loose_depth * loose_files)
    after = (kept_sum + written_depth * written_files) / max(1, kept + written_files)
    return OverlapDepth(round(depth, 4), round(after, 4))
