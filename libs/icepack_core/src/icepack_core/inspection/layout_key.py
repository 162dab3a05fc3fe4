"""Which key a table's compaction policy clusters it on, measured for the inspector.

A table whose effective ``system.data-compaction`` policy says ``strategy`` ``sort`` or
``zorder`` gets ``TableStatus.clustering`` (``inspection.clustering``) at each full inspection:
its overlap depth on the key, which the planner compares with the policy's
``max_overlap_ratio``. Health stays policy-independent; only *which* columns are measured comes
from the policy. An age-based refresh of an unchanged snapshot keeps the figure unless the key
changed (a policy attached or edited since), in which case it is measured again.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal

from pyiceberg.table import Table

from icepack_core.inspection.clustering import Clustering, measure
from icepack_core.inspection.status import DEFAULT_TARGET_FILE_SIZE, target_file_size
from icepack_core.policy import DataCompactionConfig, EffectivePolicy

MEASURE_TIMEOUT_SECONDS = 300.0


@dataclass(frozen=True)
class LayoutKey:
    """What a policy asks to cluster on: ``sort`` (the table's sort order) or ``zorder``."""

    strategy: Literal["sort", "zorder"]
    zorder_columns: tuple[str, ...]
    max_overlap_ratio: float
    target_file_size_bytes: int

    def measured_by(self, clustering: Clustering | None) -> bool:
        """Whether ``clustering`` was measured for this key (same strategy, columns, ratio and
        target file size)."""
        return (
            clustering is not None
            and clustering.strategy == self.strategy
            and clustering.max_overlap_ratio == self.max_overlap_ratio
            and clustering.target_file_size_bytes == self.target_file_size_bytes
            and (self.strategy == "sort" or tuple(clustering.columns) == self.zorder_columns)
        )


def layout_key_of(cfg: DataCompactionConfig, target: int) -> LayoutKey:
    """The clustering key of a sort or z-order compaction policy; ``target``: the rewrite's
    target file size (the policy's, else the table's, else Iceberg's default).

    Raises:
        ValueError: the policy bin-packs (it has no key).
    """
    if cfg.strategy == "binpack":
        raise ValueError("a binpack compaction has no clustering key")
    return LayoutKey(cfg.strategy, tuple(cfg.zorder_columns), cfg.max_overlap_ratio, target)


def layout_key(policy: EffectivePolicy, properties: dict[str, str]) -> LayoutKey | None:
    """The policy's clustering key, or None for binpack (or compaction disabled)."""
    cfg = policy.data_compaction
    if cfg is None or cfg.strategy == "binpack":
        return None
    target = cfg.target_file_size_bytes or target_file_size(properties) or DEFAULT_TARGET_FILE_SIZE
    return layout_key_of(cfg, target)


async def measure_key(table: Table, key: LayoutKey) -> Clustering:
    """``clustering.measure`` off the event loop, bounded in time.

    Raises:
        TimeoutError | Exception: the manifests could not be read.
    """
    return await asyncio.wait_for(
        asyncio.to_thread(
            measure,
            table,
            key.strategy,
            key.zorder_columns,
            key.max_overlap_ratio,
            key.target_file_size_bytes,
        ),
        MEASURE_TIMEOUT_SECONDS,
    )
