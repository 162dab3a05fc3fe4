"""When a maintenance action is due on a table: by the debt it removes, not by the clock.

Compaction, delete application, position-delete compaction and manifest rewrites remove debt
that writers keep adding (small files, delete files, manifests); a count-based snapshot expiry
(``system.snapshot-expiry`` ``max_snapshots``) removes snapshots a fast writer keeps adding.
These *need* actions are due by this rule; the age-based expiry and orphan removal keep the
per-action cadence (``ICEPACK_MAINTENANCE_CADENCE_HOURS``).

For a need action, once its trigger holds (``recommendation``: ``min_input_files`` small files,
delete build-up, ``max_manifests``, ``max_snapshots``), in this order:

1. **Inspection first.** The status was inspected before the action last finished: it does not
   show what that run did, so the action waits for the inspection after it (which re-plans).
2. **Unchanged.** The table's current snapshot is the one the action's last job left (nothing
   was committed since): a new run would find what that one left, so it is not due until the
   cadence has passed since that run (then as before this rule: one run per cadence). If that
   run skipped partitions still open (``execution.scoping.metadata_scope``), the rule holds
   only until they close (``LastRun.reopens_at``), and the planner comes back then.
3. **Benefit against cost.** ``benefit >= threshold`` with ``threshold = min_benefit +
   rewrite_bytes / bytes_per_benefit``: the objects a full scan no longer opens
   (``planning.prediction``; a delete application also counts the delete files it applies)
   must pay for the bytes rewritten. Below the threshold the action is still due once the
   cadence has passed since it last ran, or if it never ran: a table written in batches keeps
   the behaviour it had under the cadence alone.
4. **Minimum interval.** A due action waits until ``min_interval`` has passed since the newest
   action run on the table (any action), so a hot table cannot take the executors in a loop;
   the verdict carries ``replan_at``, when the planner should plan the table again without an
   event (``planner_replans``).

**Open-partition pressure** (``planning.pressure``, compaction only): when the projection says
the fullest open partition reaches its compaction level (it would cross the policy's bound
before a later run could commit), the compaction is due after the inspection-first check
whatever rules 2 and 3 say, and the interval of rule 4 shrinks to ``pressure_interval`` (a
floor: the table still cannot loop), or is waived after a run that did nothing only because it
was planned with the policy's plain bound before growth was measured
(``LastRun.wasted_by_plain_bound``). Not yet threatened, a held verdict's ``replan_at`` is at
the latest when it will be.

Pure: the planner reads the history (``job_last_action_runs``) and passes it in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from icepack_core.planning.pressure import Pressure

MIB = 1024 * 1024


@dataclass(frozen=True)
class DueRule:
    """The knobs of the rule (settings ``ICEPACK_MAINTENANCE_MIN_INTERVAL_MINUTES``,
    ``_MIN_BENEFIT``, ``_BYTES_PER_BENEFIT``; the interval also per table, property
    ``icepack.maintenance.min-interval-minutes``)."""

    min_interval: timedelta = timedelta(minutes=5)
    min_benefit: float = 50.0
    bytes_per_benefit: int = 128 * MIB
    cadence: timedelta = timedelta(hours=24)
    # The interval while an open partition threatens its bound (``planning.pressure``).
    pressure_interval: timedelta = timedelta(minutes=1)

    def threshold(self, rewrite_bytes: int) -> float:
        """The benefit an action rewriting ``rewrite_bytes`` must reach to be due."""
        return self.min_benefit + max(0, rewrite_bytes) / max(1, self.bytes_per_benefit)

    def explain_threshold(self, rewrite_bytes: int) -> str:
        return (
            f"threshold {self.threshold(rewrite_bytes):.1f} = min benefit "
            f"{self.min_benefit:g} + {_size(rewrite_bytes)} rewritten / "
            f"{_size(self.bytes_per_benefit)} per object"
        )


@dataclass(frozen=True)
class LastRun:
    """An action's newest successful run on a table: when it finished and the table's current
    snapshot when its job ended (``None``: not recorded)."""

    finished_at: datetime
    snapshot_after: str | None
    # When partitions that run skipped as still open (a writer's file within the policy's
    # quiet period) close, if it skipped any: "unchanged" no longer holds from then.
    reopens_at: datetime | None = None
    # That run selected no partition: every candidate was open and below its bound (it
    # skipped them), so a run before they close would find the same (unless the pressure).
    found_only_open: bool = False
    # That run was planned by the open-partition pressure (its open partitions' bound was
    # the projection's level, not the policy's).
    planned_by_pressure: bool = False

    def wasted_by_plain_bound(self) -> bool:
        """It selected nothing because it was planned before a growth was measured (the plain
        bound): the pressure interval need not wait for a run that did no work. A run the
        pressure planned that still found nothing does not count, so a table cannot loop."""
        return self.found_only_open and not self.planned_by_pressure


@dataclass(frozen=True)
class Need:
    """What a candidate need action would do: its benefit (objects a scan no longer opens)
    and the bytes it rewrites."""

    action: str
    benefit: float
    rewrite_bytes: int


@dataclass(frozen=True)
class TableState:
    """What the rule reads of the table: its newest status's current snapshot (as text, any
    size) and inspection time, and the newest action run of any kind (for the interval)."""

    current_snapshot_id: str | None
    inspected_at: datetime | None
    newest_run_at: datetime | None


@dataclass(frozen=True)
class Verdict:
    """Due or not, and why (the words an operator reads in the recommendation).
    ``replan_at``: when the table should be planned again without an event (set when the
    minimum interval alone held a due action back, or open partitions a run skipped close)."""

    due: bool
    reason: str
    replan_at: datetime | None = None


def judge(
    need: Need,
    last: LastRun | None,
    table: TableState,
    now: datetime,
    rule: DueRule,
    pressure: Pressure | None = None,
) -> Verdict:
    """Whether ``need`` is due on the table at ``now`` (see the module doc for the order);
    ``pressure``: the open-partition projection of a compaction (None: no growth)."""
    interval = rule.min_interval
    if pressure is not None and pressure.threatened:
        pending = _under_pressure(last, table, pressure)
        interval = min(interval, rule.pressure_interval)
    else:
        pending = _before_interval(need, last, table, now, rule)
    if not pending.due:
        if pressure is not None and pressure.threat_at is not None:
            at = min(filter(None, (pending.replan_at, pressure.threat_at)))
            return Verdict(False, pending.reason, replan_at=at)
        return pending
    newest = table.newest_run_at
    if (
        newest is not None
        and now - newest < interval
        and not _interval_waived(last, newest, pressure)
    ):
        at = newest + interval
        return Verdict(
            False,
            f"min interval {_span(interval)}: the last run on the table finished "
            f"{_iso(newest)}; due again at {_iso(at)} ({pending.reason})",
            replan_at=at,
        )
    return pending


def _interval_waived(last: LastRun | None, newest: datetime, pressure: Pressure | None) -> bool:
    """Threatened, and the table's newest run is this action's run that did nothing because
    it was planned with the plain bound (``LastRun.wasted_by_plain_bound``): the next run is
    not held for the pressure interval (``bench.stream``: a bucket table's first run, planned
    from its first status, skipped its 16 open partitions and held the next a minute while
    they grew by 60 files each)."""
    return (
        pressure is not None
        and pressure.threatened
        and last is not None
        and last.finished_at >= newest
        and last.wasted_by_plain_bound()
    )


def _under_pressure(last: LastRun | None, table: TableState, pressure: Pressure) -> Verdict:
    if (
        last is not None
        and table.inspected_at is not None
        and table.inspected_at < last.finished_at
    ):
        return Verdict(
            False,
            f"waiting for the inspection after the run of {_iso(last.finished_at)} "
            "(the newest status predates it)",
        )
    return Verdict(True, f"due: open-partition pressure: {pressure.reason()}")


def _before_interval(
    need: Need, last: LastRun | None, table: TableState, now: datetime, rule: DueRule
) -> Verdict:
    threshold = rule.threshold(need.rewrite_bytes)
    weighed = f"benefit {need.benefit:g} vs {rule.explain_threshold(need.rewrite_bytes)}"
    if last is None:
        if need.benefit >= threshold:
            return Verdict(True, f"due: {weighed}")
        return Verdict(True, f"due: first run on the table ({weighed})")
    if table.inspected_at is not None and table.inspected_at < last.finished_at:
        return Verdict(
            False,
            f"waiting for the inspection after the run of {_iso(last.finished_at)} "
            "(the newest status predates it)",
        )
    cadence_passed = now - last.finished_at >= rule.cadence
    unchanged = last.snapshot_after is not None and table.current_snapshot_id == last.snapshot_after
    if unchanged and last.reopens_at is not None and not cadence_passed:
        if now < last.reopens_at:
            return Verdict(
                False,
                f"not due: unchanged since it ran {_iso(last.finished_at)}, which skipped "
                f"partitions still open; planned again when they close at "
                f"{_iso(last.reopens_at)}",
                replan_at=last.reopens_at,
            )
        unchanged = False  # the open partitions it left have closed since: compact them
    if (
        last.found_only_open
        and last.reopens_at is not None
        and now < last.reopens_at
        and not cadence_passed
    ):
        return Verdict(
            False,
            f"not due: its run of {_iso(last.finished_at)} found only open partitions below "
            f"their bound (none selected); planned again when they close at "
            f"{_iso(last.reopens_at)}, or sooner when one nears its bound",
            replan_at=last.reopens_at,
        )
    if unchanged and not cadence_passed:
        return Verdict(
            False,
            f"not due: unchanged since it ran {_iso(last.finished_at)} (snapshot "
            f"{last.snapshot_after}); a new run would find what that one left; checked again "
            f"after the cadence of {_span(rule.cadence)}",
        )
    if need.benefit >= threshold:
        return Verdict(True, f"due: {weighed}")
    if cadence_passed:
        return Verdict(True, f"due: the cadence of {_span(rule.cadence)} passed ({weighed})")
    return Verdict(
        False,
        f"not due: {weighed}; ran {_iso(last.finished_at)}, again once the benefit reaches the "
        f"threshold or after the cadence of {_span(rule.cadence)}",
    )


def newest_run(last_runs: Mapping[str, datetime]) -> datetime | None:
    """The newest successful action run on the table, any action (the interval's start)."""
    return max(last_runs.values(), default=None)


def _iso(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S")


def _span(value: timedelta) -> str:
    seconds = value.total_seconds()
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _size(value: int) -> str:
    if value >= 1024 * MIB:
        return f"{value / (1024 * MIB):.1f} GiB"
    if value >= MIB:
        return f"{value / MIB:.1f} MiB"
    return f"{value} B"
