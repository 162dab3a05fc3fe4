"""When statistics actions are proposed (``icepack.table-statistics``), and when they rest.

``compute_table_stats`` and ``compute_partition_stats`` are proposed for a table whose policy
enables them and whose statistics of that kind are *missing* or *stale* by the policy's rule
(``inspection.statistics.staleness``, the same rule as the health issues): the status says
which snapshot they describe and how far the table has moved since. Fresh statistics are a
skip with the reason.

They are due by that rule, not by the cadence (a table that moved on is re-planned as soon as
its statistics are stale again), with two guards against a loop:

1. **Inspection first.** The status predates the action's last run: it does not show the
   statistics that run wrote, so the action waits for the next inspection.
2. **Unchanged.** The table's current snapshot is the one the last run left, and the status
   still says missing or stale (the run wrote nothing usable): not again before the cadence.

Pure functions, shared by the planner, ``icepack recommend`` and policy simulation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from icepack_core.inspection.statistics import StalenessRule, staleness
from icepack_core.inspection.status import StatisticsFreshness, TableStatus
from icepack_core.intents import ComputePartitionStatsParams, ComputeTableStatsParams
from icepack_core.planning.prediction import PredictedEffect, Shape, predict_statistics
from icepack_core.policy import EffectivePolicy, TableStatisticsConfig
from icepack_core.types import Action, PolicyType

# The status field each action keeps current.
FIELD = {
    Action.COMPUTE_TABLE_STATS: "table_statistics",
    Action.COMPUTE_PARTITION_STATS: "partition_statistics",
}


@dataclass(frozen=True)
class Proposal:
    """A statistics action proposed (``params`` and ``predicted`` set) or not (the reason says
    why); ``recommendation`` turns it into a ``Proposed`` intent or a ``Skip``."""

    action: Action
    reason: str
    params: ComputeTableStatsParams | ComputePartitionStatsParams | None = None
    predicted: PredictedEffect | None = None


def _wanted(config: TableStatisticsConfig, action: Action) -> bool:
    return config.table_stats if action == Action.COMPUTE_TABLE_STATS else config.partition_stats


def _freshness(status: TableStatus, action: Action) -> StatisticsFreshness | None:
    """The status's freshness of the statistics ``action`` keeps current (None: unknown)."""
    if action == Action.COMPUTE_TABLE_STATS:
        return status.table_statistics
    return status.partition_statistics


def statistics_candidates(status: TableStatus, policy: EffectivePolicy) -> list[Proposal]:
    """One candidate or skip per statistics action (module doc)."""
    return [_candidate(status, policy, action) for action in FIELD]


def _candidate(status: TableStatus, policy: EffectivePolicy, action: Action) -> Proposal:
    config = policy.table_statistics
    if config is None:
        return Proposal(action, f"{PolicyType.TABLE_STATISTICS} is not enabled")
    if not _wanted(config, action):
        return Proposal(action, f"{PolicyType.TABLE_STATISTICS}: {FIELD[action]} is off")
    if status.current_snapshot_id is None:
        return Proposal(action, "the table has no snapshot: nothing to describe")
    freshness = _freshness(status, action)
    if freshness is None:
        return Proposal(action, "the status predates statistics inspection; waiting for the next")
    rule = StalenessRule(config.stale_after_snapshots, config.stale_added_rows_share)
    kind = FIELD[action].replace("_", " ")
    verdict = staleness(freshness, status.record_count, rule, kind)
    if verdict.state == "fresh":
        return Proposal(action, f"fresh: {verdict.reason}")
    crossed = f" (>= {verdict.threshold:g})" if verdict.threshold is not None else ""
    params: ComputeTableStatsParams | ComputePartitionStatsParams = ComputePartitionStatsParams()
    if action == Action.COMPUTE_TABLE_STATS:
        # Only columns the policy names are set (the stored recommendation lists set ones).
        columns = list(config.columns)
        params = ComputeTableStatsParams(columns=columns) if columns else ComputeTableStatsParams()
    previous = freshness.file_bytes if freshness.snapshot_id is not None else None
    return Proposal(
        action,
        f"{verdict.state}: {verdict.reason}{crossed}",
        params,
        predict_statistics(Shape.of(status), status.current_snapshot_id, previous),
    )


def statistics_gate(
    reason: str,
    last: datetime | None,
    snapshot_after: str | None,
    status: TableStatus,
    inspected_at: datetime | None,
    cadence_hours: float,
    now: datetime,
) -> str | None:
    """Why a statistics action proposed for ``reason`` rests (module doc's guards), or None:
    it is due."""
    if last is None:
        return None
    if inspected_at is not None and inspected_at < last:
        return (
            f"waiting for the inspection after the run of {_iso(last)} (the newest status "
            f"predates it; would be: {reason})"
        )
    current = status.current_snapshot_id
    unchanged = snapshot_after is not None and str(current) == snapshot_after
    if unchanged and now - last < timedelta(hours=cadence_hours):
        return (
            f"ran {_iso(last)} on this very snapshot ({snapshot_after}) and the status still "
            f"says {reason.split(':', 1)[0]}; again after the cadence of {cadence_hours:g} h"
        )
    return None


def _iso(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S")
