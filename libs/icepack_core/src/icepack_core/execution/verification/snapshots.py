"""The snapshots a verification checks, from loaded metadata: the current snapshot's
ancestors after the rewrite's start."""

from __future__ import annotations

from pyiceberg.table import Table

from icepack_core.spark.engine import Rows


def snapshots_after(table: Table, start: int | None) -> Rows:
    """``snapshots_since`` from loaded metadata: the current snapshot's ancestors after
    ``start`` (all that are still in the metadata when ``start`` is None or not one of them),
    oldest first, as rows of ``snapshot_id``, ``parent_id``, ``operation``."""
    metadata = table.metadata
    chain: Rows = []
    cursor = metadata.current_snapshot()
    seen: set[int] = set()
    while cursor is not None and cursor.snapshot_id != start and cursor.snapshot_id not in seen:
        seen.add(cursor.snapshot_id)
        summary = cursor.summary
        chain.append(
            {
                "snapshot_id": cursor.snapshot_id,
                "parent_id": cursor.parent_snapshot_id,
                "operation": summary.operation.value if summary is not None else None,
            }
        )
        parent = cursor.parent_snapshot_id
        cursor = metadata.snapshot_by_id(parent) if parent is not None else None
    chain.reverse()
    return chain
