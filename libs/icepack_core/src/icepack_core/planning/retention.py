"""Snapshot retention at a table's commit rate: when the policy's max age keeps more snapshots
than the health rule tolerates, the expiry recommendation says so and offers a count-based
retention (``max_snapshots``), never applied unless the policy sets it.
"""

from __future__ import annotations

from icepack_core.inspection.health import Thresholds
from icepack_core.inspection.status import TableStatus, parse_ts
from icepack_core.policy import SnapshotExpiryConfig

# The snapshot count at which the health rule warns (TOO_MANY_SNAPSHOTS): the one number the
# advice, the offered retention and the health rule share.
SNAPSHOTS_WARNING = Thresholds().snapshots_warning


def commit_rate_per_hour(status: TableStatus) -> float | None:
    """Snapshots added per hour, from the retained ones' span (None under two snapshots)."""
    count = status.snapshot_count
    oldest = parse_ts(status.oldest_snapshot_at or None)
    newest = parse_ts(status.current_snapshot_at or None)
    if count < 2 or oldest is None or newest is None:
        return None
    hours = (newest - oldest).total_seconds() / 3600
    return (count - 1) / hours if hours > 0 else None


def retention_advice(status: TableStatus, cfg: SnapshotExpiryConfig, floor: float) -> str:
    """When the policy keeps more snapshots than the health rule tolerates at the table's
    commit rate, say so and offer the count-based retention (never applied unasked)."""
    rate = commit_rate_per_hour(status)
    if rate is None:
        return ""
    if cfg.max_snapshots is None:
        kept = rate * cfg.max_snapshot_age_hours
        if kept < SNAPSHOTS_WARNING:
            return ""
        return (
            f"; at {rate:,.0f} commits/h the policy's {cfg.max_snapshot_age_hours:g} h keeps "
            f"about {kept:,.0f} snapshots, above the {SNAPSHOTS_WARNING:,} at which "
            "TOO_MANY_SNAPSHOTS warns (every reader and writer loads them with the metadata "
            f"file): offer: a count-based retention, max_snapshots {SNAPSHOTS_WARNING} "
            "(property icepack.snapshot-expiry.max-count; as Iceberg's "
            "history.expire.min-snapshots-to-keep with a short max age), which expiry applies "
            "only once the policy sets it"
        )
    floor_kept = rate * floor
    if floor_kept < max(cfg.max_snapshots, SNAPSHOTS_WARNING):
        return ""
    return (
        f"; at {rate:,.0f} commits/h the {floor:g} h safety floor alone keeps about "
        f"{floor_kept:,.0f} snapshots (ICEPACK_EXPIRY_MIN_AGE_HOURS)"
    )
