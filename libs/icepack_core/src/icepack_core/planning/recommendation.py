"""From a table's status, its effective policy and its maintenance history to ordered actions.

Each ``Proposed`` action is an ``intents.Intent`` (the Iceberg procedure, its exact parameters
and why it is proposed), built once here, with what it should gain (``predicted``: the
table's shape before and after and the bytes it rewrites, see ``planning.prediction``). What
is *not* proposed is reported too (``Skip``), so a user can always see why a table was or was
not maintained. Pure functions: the planner,
``icepack recommend`` and policy simulation share them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from icepack_core.errors import IntentError
from icepack_core.inspection.status import DEFAULT_TARGET_FILE_SIZE, TableStatus, parse_ts
from icepack_core.intents import (
    ComputePartitionStats,
    ComputeTableStats,
    ComputeTableStatsParams,
    ExpireSnapshots,
    ExpireSnapshotsParams,
    Intent,
    RemoveOrphanFiles,
    RemoveOrphanFilesParams,
    RewriteDataFiles,
    RewriteManifests,
    RewriteManifestsParams,
    RewritePositionDeleteFiles,
    RewritePositionDeleteFilesParams,
    checked,
)
from icepack_core.planning.compaction import PartitionScope, compaction_params
from icepack_core.planning.due import (
    DueRule,
    LastRun,
    Need,
    TableState,
    judge,
    newest_run,
)
from icepack_core.planning.layout import layout_of, with_layout
from icepack_core.planning.prediction import (
    PredictedEffect,
    Shape,
    predict_expire_snapshots,
    predict_rewrite_data_files,
    predict_rewrite_manifests,
    predict_rewrite_position_deletes,
)
from icepack_core.planning.pressure import Growth, Pressure, QueueAhead, table_pressure
from icepack_core.planning.retention import retention_advice
from icepack_core.planning.statistics import Proposal, statistics_candidates, statistics_gate
from icepack_core.planning.throttle import Throttle
from icepack_core.policy import DataCompactionConfig, EffectivePolicy
from icepack_core.types import STATISTICS_ACTIONS, Action


@dataclass(frozen=True)
class PartitionStat:
    """Small-file facts for one partition, with a filter that selects exactly it.

    ``predicate`` is built by the caller from identity-transform partition values only, through
    the SQL quoting functions; partitions it cannot express are left out (and the rewrite then
    relies on ``min-input-files`` to skip healthy groups).
    """

    predicate: str
    small_file_count: int
    small_file_bytes: int


@dataclass(frozen=True)
class Proposed:
    """One proposed action: its validated ``intents.Intent`` (built once, in ``recommend``;
    the intent carries the reason) and what the planner predicts beside it. The planner's
    admission and enqueue, ``icepack recommend``/``maintain``, the gateway and policy
    simulation all take ``intent`` as it is; ``to_json`` is the stored form."""

    intent: Intent
    estimated_benefit: dict[str, int]
    # None for orphan removal: it predicts nothing about the table's shape.
    predicted: PredictedEffect | None = None
    # Due by need (``planning.due``) rather than by the cadence: the debt actions, and an
    # expiry proposed by a count-based retention.
    by_need: bool = False
    # Objects the action removes beyond ``predicted.benefit`` (a delete application's delete
    # files: the prediction keeps delete files, since which ones go is not in the status).
    extra_benefit: int = 0
    # A compaction's open-partition projection (``planning.pressure``), None without growth.
    pressure: Pressure | None = None

    @property
    def action(self) -> Action:
        return self.intent.kind

    @property
    def reason(self) -> str:
        return self.intent.reason

    def with_reason(self, reason: str) -> Proposed:
        return replace(self, intent=self.intent.model_copy(update={"reason": reason}))

    def to_json(self) -> dict[str, Any]:
        """One item of a stored recommendation's ``actions`` (``recommendations.actions``, the
        gateway's answers, ``icepack recommend --json``)."""
        return {
            "action": self.action.value,
            "reason": self.reason,
            "params": stored_params(self.intent),
            "estimated_benefit": self.estimated_benefit,
            "predicted": None if self.predicted is None else self.predicted.to_json(),
        }


def stored_params(intent: Intent) -> dict[str, Any]:
    """The parameters of ``intent`` as a recommendation stores them: only those the planner
    set, timestamps as ``YYYY-MM-DD HH:MM:SS.fff`` (the form recommendations always had;
    ``jobs.actions`` stores ISO 8601 through ``Intent.to_json``)."""
    params = intent.params.model_dump(mode="json", exclude_unset=True)
    older_than = getattr(intent.params, "older_than", None)
    if "older_than" in params and isinstance(older_than, datetime):
        params["older_than"] = _iso(older_than)
    return params


def _propose(
    action: Action,
    build: Callable[[], Intent],
    benefit: dict[str, int],
    predicted: PredictedEffect | None,
    **beside: Any,
) -> Proposed | Skip:
    """The one place a proposal becomes its ``Intent``: ``build`` constructs it from typed
    values; a value the intent refuses is a Skip naming the field (``intents.checked``, in
    ``parse_intent``'s words), so a bad policy value never reaches a job."""
    try:
        intent = checked(build)
    except IntentError as exc:
        return Skip(action, f"invalid: {exc}")
    return Proposed(intent, benefit, predicted, **beside)


@dataclass(frozen=True)
class Skip:
    action: str
    reason: str


@dataclass(frozen=True)
class Recommendation:
    actions: list[Proposed] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    # When to plan the table again without an event: a due action held back only by the
    # minimum interval (``planning.due``). Not part of the stored JSON (``planner_replans``).
    replan_at: datetime | None = None
    # Per policy type, where its settings came from (``EffectivePolicy.sources``: "default",
    # "namespace db", "polaris table policy compact1 v0, fetched ...", "+ property ...").
    sources: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "actions": [a.to_json() for a in self.actions],
            "skipped": [asdict(s) for s in self.skipped],
        }
        if self.sources:
            body["policy_sources"] = dict(self.sources)
        return body


@dataclass(frozen=True)
class FailureStreak:
    """An action's consecutive permanent failures on one table since it last succeeded there.

    ``retry_after`` is when the planner may propose it again (see ``failure_backoff``).
    """

    failures: int
    last_error: str | None
    retry_after: datetime

    def reason(self) -> str:
        """The skip reason an operator sees: ``N failures, last: <error>; retry after <time>``."""
        error = (self.last_error or "no error recorded")[:200]
        return f"{self.failures} failures, last: {error}; retry after {_iso(self.retry_after)}"


def failure_backoff(failures: int, base_seconds: float, cap_seconds: float) -> timedelta:
    """How long an action rests after its ``failures``-th consecutive permanent failure:
    ``min(cap, base·2^(failures-1))`` (none before the first failure)."""
    if failures <= 0:
        return timedelta(0)
    exponent = min(failures - 1, 62)  # beyond this the cap has long been reached
    return timedelta(seconds=min(cap_seconds, base_seconds * 2.0**exponent))


def _iso(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _millis(value: datetime) -> datetime:
    """``value`` to the millisecond, as a recommendation stores it (``_iso``): the job runs
    with the timestamp the stored recommendation shows."""
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def recommend(
    status: TableStatus,
    policy: EffectivePolicy,
    last_runs: Mapping[str, datetime],
    now: datetime,
    *,
    target_file_size_bytes: int | None = None,
    partitions: Sequence[PartitionStat] | None = None,
    failures: Mapping[str, FailureStreak] | None = None,
    throttles: Mapping[str, Throttle] | None = None,
    cancelled: Mapping[str, datetime] | None = None,
    snapshots_after: Mapping[str, str | None] | None = None,
    due_rule: DueRule | None = None,
    expiry_floor_hours: float = 1.0,
    open_skipped: Mapping[str, int] | None = None,
    selected: Mapping[str, int | None] | None = None,
    open_max_small_files: Mapping[str, int | None] | None = None,
    growth: Growth | None = None,
    compaction_seconds: float | None = None,
    queue_ahead: QueueAhead | None = None,
) -> Recommendation:
    """Ordered action intents for one table.

    Args:
        status: the table's newest ``TableStatus`` (docs/table-status.md), parsed where it
            was read.
        policy: the table's effective policy.
        last_runs: when each action last succeeded on this table (cadence, due rule).
        now: the clock (pinned by tests).
        target_file_size_bytes: the table's ``write.target-file-size-bytes``, if set.
        partitions: per-partition small-file facts, to scope the rewrite.
        failures: per action, its permanent failures on this table; an action is skipped
            until its ``retry_after`` (so a failing table cannot loop through jobs).
        throttles: per action, its throttle on this table (``planning.throttle``); an action
            is skipped while the throttle is active for its predicted benefit.
        cancelled: per action, when an operator last cancelled a job naming it on this table;
            the action is not proposed again within the cadence (a cancel would otherwise be
            undone by the re-plan its own ``job.finished`` wakes).
        snapshots_after: per action in ``last_runs``, the table's current snapshot id (text)
            when that run's job ended (the due rule's "unchanged since").
        due_rule: the due rule's knobs; by default ``due_rule_of(policy)``.
        open_skipped: per action in ``last_runs``, how many open partitions that run skipped
            (they close after the compaction policy's quiet period; the due rule returns).
        expiry_floor_hours: ``ICEPACK_EXPIRY_MIN_AGE_HOURS``, the youngest a count-based
            expiry may expire.
        selected: per action in ``last_runs``, how many partitions that run's scoped
            compaction selected (None: not scoped); 0 with open partitions skipped means it
            found only open ones, and the due rule waits for them to close.
        open_max_small_files: per action in ``last_runs``, the small files that run's intent
            let an open partition hold (below the policy's bound: planned by the pressure).
        growth: the fullest partition's small files at two inspections since the last
            compaction (``planning.pressure``); None: no projection.
        compaction_seconds: how long the last compaction ran (the projection's lead).
        queue_ahead: the other tables' jobs a run planned now waits behind (the lead's
            queue share); None: not known.
    """
    result = Recommendation(sources=dict(policy.sources))
    if not policy.maintenance_enabled:
        result.skipped.append(Skip("*", "icepack.maintenance.enabled=false"))
        return result
    gate = _Gate(
        status,
        policy,
        now,
        due_rule or due_rule_of(policy),
        TableState(
            current_snapshot_id=_text(status.current_snapshot_id),
            inspected_at=parse_ts(status.inspected_at),
            newest_run_at=newest_run(last_runs),
        ),
        last_runs,
        failures or {},
        throttles or {},
        cancelled or {},
        snapshots_after or {},
        open_skipped or {},
        selected or {},
        open_max_small_files or {},
    )
    pressure = table_pressure(status, policy, growth, compaction_seconds, queue_ahead)
    candidates = [
        _rewrite_data_files(status, policy, target_file_size_bytes, partitions, pressure),
        _rewrite_position_deletes(status, policy),
        _rewrite_manifests(status, policy),
        _expire_snapshots(status, policy, now, expiry_floor_hours),
        _remove_orphans(policy, now),
        *(_statistics(p) for p in statistics_candidates(status, policy)),
    ]
    replan: list[datetime] = []
    for candidate in candidates:
        judged = candidate if isinstance(candidate, Skip) else gate.judge(candidate, replan)
        if isinstance(judged, Skip):
            result.skipped.append(judged)
        else:
            result.actions.append(judged)
    result.actions.sort(key=lambda a: a.action.rank)
    if pressure is not None and pressure.threat_at is not None:
        replan.append(pressure.threat_at)  # plan again when the open partition reaches its level
    return replace(result, replan_at=min(replan, default=None))


@dataclass(frozen=True)
class _Gate:
    """What decides whether a proposed action runs now: the table, its policy and history."""

    status: TableStatus
    policy: EffectivePolicy
    now: datetime
    rule: DueRule
    state: TableState
    last_runs: Mapping[str, datetime]
    failures: Mapping[str, FailureStreak]
    throttles: Mapping[str, Throttle]
    cancelled: Mapping[str, datetime]
    snapshots_after: Mapping[str, str | None]
    open_skipped: Mapping[str, int]
    selected: Mapping[str, int | None]
    open_max_small_files: Mapping[str, int | None]

    def judge(self, candidate: Proposed, replan: list[datetime]) -> Proposed | Skip:
        """``candidate`` as proposed (its reason extended by the due rule's), or why it
        waits; a due-by-need action held back only by time adds when to plan again to
        ``replan``."""
        policy, now = self.policy, self.now
        held = _held_back(candidate, policy, now, self.failures, self.throttles, self.cancelled)
        if held is not None:
            return held
        last = self.last_runs.get(candidate.action)
        if candidate.by_need:
            return self._by_need(candidate, last, replan)
        if candidate.action in STATISTICS_ACTIONS:
            why = statistics_gate(
                candidate.reason,
                last,
                self.snapshots_after.get(candidate.action),
                self.status,
                self.state.inspected_at,
                policy.cadence_hours,
                now,
            )
            return candidate if why is None else Skip(candidate.action, why)
        return _within_cadence(candidate, policy, last, now) or candidate

    def _by_need(
        self, candidate: Proposed, last: datetime | None, replan: list[datetime]
    ) -> Proposed | Skip:
        """The due rule (``planning.due.judge``) of a debt action."""
        after = self.snapshots_after.get(candidate.action)
        skipped_open = self.open_skipped.get(candidate.action, 0)
        reopens = _reopens_at(self.policy, last, skipped_open)
        only_open = skipped_open > 0 and self.selected.get(candidate.action) == 0
        verdict = judge(
            Need(candidate.action, _need_benefit(candidate), _rewrite_bytes(candidate)),
            None
            if last is None
            else LastRun(last, after, reopens, only_open, self._by_pressure(candidate.action)),
            self.state,
            self.now,
            self.rule,
            candidate.pressure,
        )
        if verdict.due:
            return candidate.with_reason(f"{candidate.reason}; {verdict.reason}")
        replan.extend([verdict.replan_at] if verdict.replan_at else [])
        return Skip(candidate.action, f"{verdict.reason} (would be: {candidate.reason})")

    def _by_pressure(self, action: str) -> bool:
        """The action's last run was planned by the open-partition pressure: its intent let
        open partitions hold fewer small files than the policy's bound."""
        held = self.open_max_small_files.get(action)
        cfg = self.policy.data_compaction
        return held is not None and cfg is not None and held < cfg.open_partition_max_small_files


def _statistics(proposal: Proposal) -> Proposed | Skip:
    params, reason = proposal.params, proposal.reason
    if proposal.predicted is None or params is None:
        return Skip(proposal.action, reason)
    if isinstance(params, ComputeTableStatsParams):
        return _propose(
            proposal.action,
            lambda: ComputeTableStats(params=params, reason=reason),
            {},
            proposal.predicted,
        )
    return _propose(
        proposal.action,
        lambda: ComputePartitionStats(params=params, reason=reason),
        {},
        proposal.predicted,
    )


def due_rule_of(
    policy: EffectivePolicy,
    min_benefit: float = DueRule.min_benefit,
    bytes_per_benefit: int = DueRule.bytes_per_benefit,
    pressure_interval_seconds: float = DueRule.pressure_interval.total_seconds(),
) -> DueRule:
    """The due rule for a table: its policy's interval and cadence, the fleet's threshold
    and pressure interval."""
    return DueRule(
        min_interval=timedelta(minutes=policy.min_interval_minutes),
        min_benefit=min_benefit,
        bytes_per_benefit=bytes_per_benefit,
        cadence=timedelta(hours=policy.cadence_hours),
        pressure_interval=timedelta(seconds=pressure_interval_seconds),
    )


def _held_back(
    candidate: Proposed,
    policy: EffectivePolicy,
    now: datetime,
    failures: Mapping[str, FailureStreak] | None,
    throttles: Mapping[str, Throttle] | None,
    cancelled: Mapping[str, datetime] | None,
) -> Skip | None:
    """Why a proposed action rests whatever its need: failures, a throttle, a cancel."""
    streak = (failures or {}).get(candidate.action)
    if streak is not None and now < streak.retry_after:
        return Skip(candidate.action, streak.reason())
    throttle = (throttles or {}).get(candidate.action)
    gain = candidate.predicted.benefit if candidate.predicted is not None else 0
    if throttle is not None and throttle.active(now, gain):
        return Skip(candidate.action, throttle.reason(gain))
    stopped = (cancelled or {}).get(candidate.action)
    if stopped is not None and now - stopped < timedelta(hours=policy.cadence_hours):
        return Skip(
            candidate.action,
            f"cancelled by an operator {_iso(stopped)}; cadence is "
            f"{policy.cadence_hours:g} h (would be: {candidate.reason})",
        )
    return None


def _within_cadence(
    candidate: Proposed, policy: EffectivePolicy, last: datetime | None, now: datetime
) -> Skip | None:
    """The cadence gate of the actions not due by need (age-based expiry, orphan removal)."""
    if last is not None and now - last < timedelta(hours=policy.cadence_hours):
        return Skip(
            candidate.action,
            f"ran {_iso(last)}; cadence is {policy.cadence_hours:g} h "
            f"(would be: {candidate.reason})",
        )
    return None


def _reopens_at(policy: EffectivePolicy, last: datetime | None, skipped: int) -> datetime | None:
    """When the open partitions a compaction skipped close (its quiet period after the run)."""
    cfg = policy.data_compaction
    if last is None or skipped <= 0 or cfg is None:
        return None
    return last + timedelta(minutes=cfg.open_partition_quiet_minutes)


def _need_benefit(candidate: Proposed) -> float:
    gain = candidate.predicted.benefit if candidate.predicted is not None else 0
    return float(gain + candidate.extra_benefit)


def _rewrite_bytes(candidate: Proposed) -> int:
    return candidate.predicted.rewrite_bytes if candidate.predicted is not None else 0


def _text(value: int | None) -> str | None:
    return None if value is None else str(value)


def _rewrite_data_files(
    status: TableStatus,
    policy: EffectivePolicy,
    table_target: int | None,
    partitions: Sequence[PartitionStat] | None,
    pressure: Pressure | None = None,
) -> Proposed | Skip:
    action = Action.REWRITE_DATA_FILES
    cfg = policy.data_compaction
    if cfg is None:
        return Skip(action, "system.data-compaction is disabled")
    target = cfg.target_file_size_bytes or table_target or DEFAULT_TARGET_FILE_SIZE
    small, small_bytes = status.small_file_count, status.small_file_bytes
    eq_deletes, pos_deletes, deleted_share = _delete_debt(status)
    reasons = []
    if small >= cfg.min_input_files:
        reasons.append(
            f"{small} small files ({small_bytes} bytes) >= min_input_files {cfg.min_input_files}"
        )
    deletes_reason = _delete_build_up(cfg, eq_deletes, pos_deletes, deleted_share)
    applies_deletes = deletes_reason is not None
    reasons.extend([deletes_reason] if deletes_reason else [])
    options = _compaction_options(cfg, target, applies_deletes)
    if pressure is not None:  # a table being written
        options |= BESIDE_WRITERS_OPTIONS
    layout = layout_of(status, cfg, target, applies_deletes)
    if layout.refused is not None:
        return Skip(action, layout.refused)
    reasons.extend([layout.reason] if layout.reason else [])
    if not reasons:
        return Skip(
            action,
            f"{small} small files < min_input_files {cfg.min_input_files} and no delete build-up"
            + (f"; {layout.note}" if layout.note else ""),
        )
    if layout.note:
        reasons.append(layout.note)
    scope: PartitionScope | None = None
    if status.partition_count > 1 and not applies_deletes:
        scoped = _partition_scope(status, cfg, pressure)
        if isinstance(scoped, Skip):
            return scoped
        scope = scoped
    rewrite_bytes, where = small_bytes, None
    if partitions and not applies_deletes:
        where, small, rewrite_bytes = _where_scope(partitions, cfg, reasons, small, small_bytes)
    reason = "; ".join(reasons)
    files_after = max(1, math.ceil(rewrite_bytes / target)) if small else 0
    effect = with_layout(
        predict_rewrite_data_files(Shape.of(status), small, rewrite_bytes, target), layout
    )
    removed = max(0, small - files_after, layout.files_removed)
    return _propose(
        action,
        lambda: RewriteDataFiles(
            params=compaction_params(layout, options, scope, where), reason=reason
        ),
        {"files_removed": removed, "bytes_to_rewrite": effect.rewrite_bytes},
        effect,
        by_need=True,
        extra_benefit=((eq_deletes + pos_deletes) if applies_deletes else 0) + layout.gain,
        pressure=pressure,  # scoped or not (an unpartitioned table): due by the projection
    )


def _delete_debt(status: TableStatus) -> tuple[int, int, float]:
    """Equality delete files, position delete files (deletion vectors included) and the
    share of records they delete."""
    eq_deletes = status.equality_delete_file_count
    pos_deletes = status.position_delete_file_count + status.deletion_vector_count
    records = status.record_count
    deleted_share = status.delete_record_count / records if records else 0.0
    return eq_deletes, pos_deletes, deleted_share


# A table being written (growth measured) has its file groups rewritten one at a time. Iceberg's
# partial-progress commit service commits a batch on the thread whose group completed it
# (``BaseCommitService.offer``), so concurrent group rewrites also commit concurrently and race
# each other as well as the writer; on a ``bucket(16, id)`` table, where each commit rewrites
# every manifest, their commit retries ran out (``bench/stream``: 3 to 6 of 6 to 16 selected
# partitions lost in each attempt). One at a time, each commit races only the writer.
BESIDE_WRITERS_OPTIONS = {"max-concurrent-file-group-rewrites": "1"}


def _compaction_options(
    cfg: DataCompactionConfig, target: int, applies_deletes: bool
) -> dict[str, str]:
    """Iceberg's ``rewrite_data_files`` options of a planned compaction."""
    options = {
        "min-input-files": str(cfg.min_input_files),
        "target-file-size-bytes": str(target),
        "partial-progress.enabled": "true",
    }
    if applies_deletes:
        options["delete-file-threshold"] = str(cfg.min_delete_files)
        # A rewrite leaves the delete files it applied live (they no longer apply to anything,
        # but every scan still plans them; health does not count them: delete_applicability):
        # Iceberg drops them in one more commit when asked (partitioned tables only).
        options["remove-dangling-deletes"] = "true"
    return options


def _delete_build_up(
    cfg: DataCompactionConfig, eq_deletes: int, pos_deletes: int, deleted_share: float
) -> str | None:
    """Why the rewrite should apply the table's delete files; None when it need not."""
    if cfg.rewrite_delete_files and eq_deletes >= cfg.min_delete_files:
        # Equality deletes are only ever removed by rewriting the data files they apply to.
        return f"{eq_deletes} equality delete files"
    if (
        cfg.rewrite_delete_files
        and pos_deletes
        and (deleted_share >= cfg.delete_ratio_threshold or pos_deletes >= cfg.max_delete_files)
    ):
        # Compacting position deletes keeps their records; only a data rewrite drops them.
        return (
            f"{pos_deletes} position delete files cover {deleted_share:.0%} of "
            f"records (threshold {cfg.delete_ratio_threshold:.0%} or "
            f"{cfg.max_delete_files} files)"
        )
    return None


def _partition_scope(
    status: TableStatus, cfg: DataCompactionConfig, pressure: Pressure | None
) -> PartitionScope | Skip:
    """The scope of a partitioned table's rewrite; a Skip when only the growing open
    partition has small files (``_open_only``)."""
    # The executor narrows the rewrite to partitions that have enough small files, at most
    # max_partitions per run, skipping partitions still being written (metadata_scope).
    scope = PartitionScope(
        max_partitions=cfg.max_partitions_per_run,
        open_quiet_seconds=cfg.open_partition_quiet_minutes * 60,
        open_max_small_files=cfg.open_partition_max_small_files,
    )
    if pressure is None:
        return scope
    held = _open_only(status, cfg.min_input_files, pressure)
    return streaming_scope(scope, pressure) if held is None else held


def _where_scope(
    partitions: Sequence[PartitionStat],
    cfg: DataCompactionConfig,
    reasons: list[str],
    small: int,
    small_bytes: int,
) -> tuple[str | None, int, int]:
    """The ``where`` filter that narrows the rewrite to the partitions with enough small files
    (None: none has), and the small files and bytes then in scope."""
    needing = sorted(
        (p for p in partitions if p.small_file_count >= cfg.min_input_files),
        key=lambda p: -p.small_file_count,
    )[: cfg.max_partitions_per_run]
    if not needing:
        return None, small, small_bytes
    reasons.append(f"scoped to {len(needing)} of {len(partitions)} partitions")
    where = " OR ".join(f"({p.predicate})" for p in needing)
    return where, sum(p.small_file_count for p in needing), sum(p.small_file_bytes for p in needing)


# A closed partition of a table being written holds at most this many data files once
# compacted: its last open small files and the compacted file are rewritten to target once.
CLOSED_MIN_FILES = 2


def streaming_scope(scope: PartitionScope, pressure: Pressure) -> PartitionScope:
    """A scoped compaction of a table whose open partitions grow: open partitions are
    compacted from the projection's level, closed ones from ``CLOSED_MIN_FILES`` small files
    (what the writer left in them when they closed), so they end at one file each."""
    # The executor compacts an open partition *above* this many small files: from the level.
    return replace(
        scope, open_max_small_files=max(1, pressure.level - 1), min_input_files=CLOSED_MIN_FILES
    )


def _open_only(status: TableStatus, min_files: int, pressure: Pressure) -> Skip | None:
    """Not due while every small file that could qualify is in the open partition, below the
    level (a run would skip it and do nothing): the projection says when it reaches it."""
    others = status.small_file_count - pressure.small_now
    if pressure.threatened or others >= min_files:
        return None
    return Skip(
        Action.REWRITE_DATA_FILES,
        f"not due: {others} small files outside the fullest open partition (< min_input_files "
        f"{min_files}); {pressure.reason()}",
    )


def _rewrite_position_deletes(status: TableStatus, policy: EffectivePolicy) -> Proposed | Skip:
    action = Action.REWRITE_POSITION_DELETE_FILES
    cfg = policy.data_compaction
    if cfg is None or not cfg.rewrite_delete_files:
        return Skip(action, "delete-file rewrites are disabled")
    count = status.position_delete_file_count
    if count < max(cfg.min_delete_files, 2):
        # One position delete file cannot be compacted into fewer.
        return Skip(action, f"{count} position delete files")
    reason = f"{count} position delete files"
    return _propose(
        action,
        lambda: RewritePositionDeleteFiles(
            params=RewritePositionDeleteFilesParams(options={"rewrite-all": "true"}), reason=reason
        ),
        {"files_removed": count - 1},
        predict_rewrite_position_deletes(Shape.of(status), count),
        by_need=True,
    )


def _rewrite_manifests(status: TableStatus, policy: EffectivePolicy) -> Proposed | Skip:
    action = Action.REWRITE_MANIFESTS
    cfg = policy.metadata_compaction
    if cfg is None:
        return Skip(action, "system.metadata-compaction is disabled")
    count = status.manifest_count
    if count <= cfg.max_manifests:
        return Skip(action, f"{count} manifests <= max_manifests {cfg.max_manifests}")
    return _rewrite_manifests_proposal(
        status, policy, f"{count} manifests > max_manifests {cfg.max_manifests}"
    )


def _rewrite_manifests_proposal(
    status: TableStatus, policy: EffectivePolicy, reason: str
) -> Proposed | Skip:
    """A manifest rewrite of the whole table for ``reason``; a Skip when the policy disables
    it."""
    action = Action.REWRITE_MANIFESTS
    cfg = policy.metadata_compaction
    if cfg is None:
        return Skip(action, "system.metadata-compaction is disabled")
    count, size = status.manifest_count, status.manifest_bytes
    after = max(1, math.ceil(size / cfg.target_manifest_size_bytes))
    return _propose(
        action,
        lambda: RewriteManifests(params=RewriteManifestsParams(use_caching=True), reason=reason),
        {"manifests_removed": max(0, count - after)},
        predict_rewrite_manifests(Shape.of(status), size, cfg.target_manifest_size_bytes),
        by_need=True,
    )


def _expire_snapshots(
    status: TableStatus, policy: EffectivePolicy, now: datetime, floor_hours: float
) -> Proposed | Skip:
    action = Action.EXPIRE_SNAPSHOTS
    cfg = policy.snapshot_expiry
    if cfg is None:
        return Skip(action, "system.snapshot-expiry is disabled")
    count = status.snapshot_count
    oldest = parse_ts(status.oldest_snapshot_at or None)
    horizon = now - timedelta(hours=cfg.max_snapshot_age_hours)
    floor = now - timedelta(hours=floor_hours)
    advice = retention_advice(status, cfg, floor_hours)
    keep = max(cfg.max_snapshots or 0, cfg.retain_last)
    if cfg.max_snapshots is not None and count > keep and oldest is not None and oldest < floor:
        # Count-based retention, only as the operator's policy sets it: the newest `keep`
        # stay, and nothing younger than the safety floor goes, whatever the count.
        reason = (
            f"{count} snapshots > max_snapshots {cfg.max_snapshots} (count-based retention): "
            f"expiring those older than the {floor_hours:g} h safety floor beyond the newest "
            f"{keep}{advice}"
        )
        return _propose(
            action,
            lambda: ExpireSnapshots(
                params=ExpireSnapshotsParams(older_than=_millis(floor), retain_last=keep),
                reason=reason,
            ),
            {"snapshots_expired_at_most": count - keep},
            predict_expire_snapshots(Shape.of(status), keep),
            by_need=True,
        )
    if count <= cfg.retain_last or oldest is None or oldest >= horizon:
        return Skip(
            action,
            f"{count} snapshots, none older than "
            f"{cfg.max_snapshot_age_hours:g} h beyond the last {cfg.retain_last}{advice}",
        )
    reason = (
        f"oldest of {count} snapshots is from {_iso(oldest)}, older than "
        f"{cfg.max_snapshot_age_hours:g} h{advice}"
    )
    return _propose(
        action,
        lambda: ExpireSnapshots(
            params=ExpireSnapshotsParams(older_than=_millis(horizon), retain_last=cfg.retain_last),
            reason=reason,
        ),
        {"snapshots_expired_at_most": count - cfg.retain_last},
        predict_expire_snapshots(Shape.of(status), cfg.retain_last),
    )


def _remove_orphans(policy: EffectivePolicy, now: datetime) -> Proposed | Skip:
    action = Action.REMOVE_ORPHAN_FILES
    cfg = policy.orphan_file_removal
    if cfg is None:
        return Skip(action, "system.orphan-file-removal is not enabled")
    older_than = _millis(now - timedelta(hours=cfg.older_than_hours))
    reason = f"orphan removal enabled; files older than {cfg.older_than_hours:g} h"
    return _propose(
        action,
        lambda: RemoveOrphanFiles(
            params=RemoveOrphanFilesParams(older_than=older_than, dry_run_first=cfg.dry_run_first),
            reason=reason,
        ),
        {},
        None,
    )
