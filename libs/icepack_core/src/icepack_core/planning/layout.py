"""Sort and z-order in a recommendation: which strategy a compaction runs with, and when the
clustering alone makes it due.

Bin-packing is driven by small files; clustering is not. A table whose compaction policy says
``sort`` or ``zorder`` carries ``TableStatus.clustering`` (``inspection.clustering``: the mean
overlap depth of its files' key ranges, per partition, measured at inspection). The rewrite is
proposed when some partition's depth exceeds the policy's ``max_overlap_ratio`` (or, as for
binpack, on small files), with the policy's strategy; a table whose every partition is at or
below the bound is clustered and is not rewritten for its layout again (no churn). Until the
key is measured (the policy is new, or changed), and for ``sort`` on a table without a sort
order, the rewrite falls back to binpack and the reason says so; a z-order column the table
does not have refuses the rewrite, naming the column.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from icepack_core.inspection.clustering import Clustering
from icepack_core.inspection.layout_key import layout_key_of
from icepack_core.inspection.status import TableStatus
from icepack_core.planning.prediction import OverlapDepth, PredictedEffect, predict_clustering
from icepack_core.policy import DataCompactionConfig


@dataclass(frozen=True)
class Layout:
    """The strategy part of a ``rewrite_data_files`` proposal.

    ``strategy``, ``zorder_columns`` (zorder only) and ``max_overlap_ratio`` (None: the
    rewrite is not scoped by depth): the intent's strategy parameters
    (``intents.RewriteDataFilesParams``, assembled by ``planning.compaction``). ``reason``: the
    clustering trigger when it fires. ``note``: why the strategy falls back or the table is
    left as it is. ``refused``: the rewrite must not run (a bad z-order key). ``depth``,
    ``files_removed``, ``rewrite_bytes`` and ``gain`` (files a query on the key no longer
    opens) predict the clustering part.
    """

    strategy: Literal["binpack", "sort", "zorder"] = "binpack"
    zorder_columns: tuple[str, ...] = ()
    max_overlap_ratio: float | None = None
    reason: str | None = None
    note: str | None = None
    refused: str | None = None
    depth: OverlapDepth | None = None
    files_removed: int = 0
    rewrite_bytes: int = 0
    gain: int = 0


def _label(found: Clustering) -> str:
    return f"{found.strategy}({', '.join(found.columns)})"


def layout_of(
    status: TableStatus, cfg: DataCompactionConfig, target: int, applies_deletes: bool
) -> Layout:
    """The layout of a compaction under ``cfg`` on a table with ``status`` (module doc).
    ``applies_deletes``: the rewrite applies deletes table-wide, so it is not scoped by depth."""
    if cfg.strategy == "binpack":
        return Layout()
    key = layout_key_of(cfg, target)
    found = status.clustering
    if found is None or not key.measured_by(found):
        return Layout(
            note=f"strategy {cfg.strategy}: the clustering on its key is not measured yet (the "
            "next inspection measures it); binpack until then"
        )
    if found.error is not None:
        if cfg.strategy == "zorder":
            return Layout(refused=f"refused: {found.error}")
        return Layout(note=f"{found.error}; falling back to binpack")
    columns = tuple(cfg.zorder_columns) if cfg.strategy == "zorder" else ()
    depth = found.overlap_depth or 1.0
    if applies_deletes:
        return Layout(cfg.strategy, columns)
    if found.unclustered_partitions == 0:
        return Layout(
            cfg.strategy,
            columns,
            cfg.max_overlap_ratio,
            note=f"clustered: overlap depth {depth:g} on {_label(found)}, no partition above "
            f"max_overlap_ratio {cfg.max_overlap_ratio:g} x what a rewrite reaches",
        )
    predicted = predict_clustering(
        found.files,
        depth,
        found.unclustered_files,
        found.unclustered_depth,
        found.unclustered_files_after,
        found.unclustered_depth_after,
    )
    return Layout(
        cfg.strategy,
        columns,
        cfg.max_overlap_ratio,
        reason=f"overlap depth {found.unclustered_depth:g} on {_label(found)} in "
        f"{found.unclustered_partitions} of {found.partitions} partitions "
        f"({found.unclustered_files} files, {found.unclustered_bytes} bytes), above "
        f"max_overlap_ratio {cfg.max_overlap_ratio:g} x the "
        f"{found.unclustered_depth_after:g} a rewrite reaches; "
        f"predicted table depth {predicted.before:g} -> {predicted.after:g}",
        depth=predicted,
        files_removed=found.unclustered_files - found.unclustered_files_after,
        rewrite_bytes=found.unclustered_bytes,
        gain=found.lookup_gain,
    )


def with_layout(effect: PredictedEffect, layout: Layout) -> PredictedEffect:
    """A binpack prediction with the clustering part added: the files the clustering rewrite
    removes (not added to binpack's: small files may lie in the same partitions, so the larger
    of the two), the bytes it rewrites (added: a budget must not be undercharged) and the
    overlap depth before -> after."""
    if layout.depth is None:
        return effect
    removed = max(effect.before.data_files - effect.after.data_files, layout.files_removed)
    after = replace(effect.after, data_files=max(0, effect.before.data_files - removed))
    return replace(
        effect,
        after=after,
        rewrite_bytes=effect.rewrite_bytes + layout.rewrite_bytes,
        overlap_depth=layout.depth,
    )
