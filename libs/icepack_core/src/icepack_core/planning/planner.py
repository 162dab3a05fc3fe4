"""The planner's unit of work: decide a table's maintenance and enqueue it.

``Planner.plan(table_id)`` reads the table's newest status and health score in one query
(``table_plan_inputs``, which also says whether the table has any job), resolves its effective
policy, looks up when each action last ran (only for a table with jobs: without, its history is
empty), asks ``recommendation.recommend`` for action intents and, in one transaction, records
the recommendation (with what was skipped and why), enqueues a job when there is something to do
(deduped per table: never a second queued/running job), and publishes
``recommendation.created``. A table on hold (failed verification) gets no job, and an action
whose jobs failed permanently rests (exponential backoff, ``failure_streaks``), so a table that
keeps failing gets at most ``job_max_attempts`` runs per backoff window; an action
whose measured benefit keeps falling short of its prediction is throttled (``throttles``).
Compaction, delete application and manifest rewrites are due by need (``planning.due``); when
only the table's minimum interval holds one back, the planning records when to plan the table
again (``planner_replans``, turned into a work item by ``queue.upkeep``).

Planned jobs carry their prediction: ``predicted`` (per action, ``planning.prediction``),
``rewrite_bytes`` (the sum), ``benefit`` (the sum of predicted benefits: objects a full scan no
longer opens) and the table's ``health_score``. They all get one priority (``PLANNER_PRIORITY``);
the claim order within it is benefit per byte rewritten, then health score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg
import structlog

from icepack_core.db.pool import Conn
from icepack_core.db.queries import load_query
from icepack_core.db.tables import TableRow
from icepack_core.errors import ActionRefused, PolicyError
from icepack_core.inspection.status import TableStatus, parse_ts, target_file_size
from icepack_core.planning.due import DueRule
from icepack_core.planning.history import History
from icepack_core.planning.prediction import JobPredictionJSON, PredictedActionJSON
from icepack_core.planning.pressure import (
    DEFAULT_LEAD,
    EXECUTOR_WINDOW,
    Growth,
    QueueAhead,
    fullest_small,
)
from icepack_core.planning.recommendation import (
    FailureStreak,
    Proposed,
    Recommendation,
    Skip,
    due_rule_of,
    failure_backoff,
    recommend,
)
from icepack_core.planning.throttle import THROTTLE_RUNS, MeasuredRun, Throttle, throttle_of
from icepack_core.polaris.store import attachments_of
from icepack_core.policy import EffectivePolicy, PolicyAttachment, resolve
from icepack_core.queue import events
from icepack_core.queue.deferrals import Deferral, active_deferrals
from icepack_core.queue.jobs import JobQueue
from icepack_core.safety.admission import admit_resolved
from icepack_core.settings import Settings
from icepack_core.types import JobTrigger, Topic

log = structlog.get_logger("icepack.planner")


@dataclass(frozen=True)
class PlanOutcome:
    table_id: int
    recommendation: Recommendation | None
    recommendation_id: int | None
    job_id: int | None
    job_created: bool


COMPACTION = "rewrite_data_files"
# Every planned job has this priority; operators' jobs keep theirs (lower runs first).
PLANNER_PRIORITY = 100


@dataclass(frozen=True)
class JobPrediction:
    """What a planned job is predicted to do, as ``JobQueue.enqueue`` stores it."""

    predicted: JobPredictionJSON
    rewrite_bytes: int
    benefit: float


def without_deferred(rec: Recommendation, deferred: dict[str, Deferral]) -> Recommendation:
    """``rec`` with every action deferred on the table (writers kept winning its commits;
    ``queue.deferrals``) moved to ``skipped``, its reason saying why and until when."""
    if not deferred:
        return rec
    kept = [a for a in rec.actions if a.action not in deferred]
    skipped = list(rec.skipped)
    for action in rec.actions:
        d = deferred.get(action.action)
        if d is not None and d.deferred_until is not None:
            until = d.deferred_until.strftime("%Y-%m-%d %H:%M:%S")
            skipped.append(Skip(action.action, f"{d.reason}; until {until}"))
    return Recommendation(
        actions=kept, skipped=skipped, replan_at=rec.replan_at, sources=rec.sources
    )


def job_prediction(actions: Sequence[Proposed]) -> JobPrediction:
    """``predicted`` is ``{"actions": [{"action", "before", "after", "rewrite_bytes",
    "benefit"}, ...], "rewrite_bytes", "benefit"}`` in the job's action order (``before`` and
    ``after`` null for an action that predicts no shape: orphan removal)."""
    entries: list[PredictedActionJSON] = []
    for action in actions:
        effect = action.predicted
        if effect is None:
            entries.append(
                {
                    "action": action.action,
                    "before": None,
                    "after": None,
                    "rewrite_bytes": 0,
                    "benefit": 0,
                }
            )
        else:
            entries.append({"action": action.action, **effect.to_json()})
    rewrite_bytes = sum(e["rewrite_bytes"] for e in entries)
    benefit = float(sum(e["benefit"] for e in entries))
    return JobPrediction(
        {"actions": entries, "rewrite_bytes": rewrite_bytes, "benefit": benefit},
        rewrite_bytes,
        benefit,
    )


class Planner:
    def __init__(self, settings: Settings, pool: asyncpg.Pool, queue: JobQueue) -> None:
        self.settings = settings
        self.pool = pool
        self.queue = queue

    async def attachments(self, catalog: str) -> list[PolicyAttachment]:
        return await attachments_of(self.pool, catalog)

    async def recommend_for(
        self,
        table: TableRow,
        status: TableStatus,
        now: datetime,
        attachments: list[PolicyAttachment] | None = None,
        *,
        has_jobs: bool = True,
        status_id: int | None = None,
    ) -> Recommendation:
        """The recommendation for one table row and its status (no writes).

        ``attachments`` replaces the stored policies of the table's catalog (simulation).
        ``has_jobs=False`` says no job ever ran on the table, so its job history (cadence,
        failure streaks, throttles) is known to be empty and is not read. ``status_id`` is
        the stored status's id (None: a status not read from ``status_snapshots``, whose growth
        is then not measured). The hold is checked and the policy resolved here, once: the
        admission of each proposed action reuses both (``admit_resolved``).
        """
        if table.maintenance_hold:
            reason = table.maintenance_hold.get("reason")
            return Recommendation(skipped=[Skip("*", f"table on hold: {reason}")])
        try:
            policy = await self._policy(table, attachments)
        except PolicyError as exc:
            return Recommendation(skipped=[Skip("*", f"invalid policy: {exc}")])
        history = await self.history(table.id) if has_jobs and table.id is not None else History()
        growth = await self.growth(table, status_id, status, history.last_runs.get(COMPACTION))
        rec = recommend(
            status,
            policy,
            history.last_runs,
            now,
            target_file_size_bytes=target_file_size(table.properties),
            failures=history.failures,
            throttles=history.throttles,
            cancelled=history.cancelled,
            snapshots_after=history.snapshots_after,
            open_skipped=history.open_skipped,
            selected=history.selected,
            open_max_small_files=history.open_max_small_files,
            growth=growth,
            compaction_seconds=history.durations.get(COMPACTION),
            queue_ahead=None if growth is None else await self.queue_ahead(table.id, now),
            due_rule=self._due_rule(policy),
            expiry_floor_hours=self.settings.expiry_min_age_hours,
        )
        if has_jobs and table.id is not None:
            rec = without_deferred(rec, await active_deferrals(self.pool, table.id, now))
        return await self._admissible(table, rec, now, policy)

    async def _policy(
        self, table: TableRow, attachments: list[PolicyAttachment] | None
    ) -> EffectivePolicy:
        """The table's effective policy under ``attachments`` (None: its catalog's stored
        ones). Raises PolicyError."""
        if attachments is None:
            attachments = await self.attachments(table.catalog)
        return resolve(
            attachments,
            table.namespace,
            table.name,
            table.properties,
            self.settings.maintenance_cadence_hours,
            self.settings.maintenance_min_interval_minutes,
        )

    def _due_rule(self, policy: EffectivePolicy) -> DueRule:
        return due_rule_of(
            policy,
            self.settings.maintenance_min_benefit,
            self.settings.maintenance_bytes_per_benefit,
            self.settings.maintenance_pressure_interval_seconds,
        )

    async def history(self, table_id: int) -> History:
        """What the table's job history says about each action (``History``)."""
        runs = await self.pool.fetch(load_query("job_last_action_runs"), table_id)
        stops = await self.pool.fetch(load_query("job_cancelled_actions"), table_id)
        return History(
            last_runs={r["action"]: r["finished_at"] for r in runs},
            snapshots_after={r["action"]: r["snapshot_after"] for r in runs},
            open_skipped={r["action"]: int(r["open_skipped"]) for r in runs},
            selected={r["action"]: r["selected"] for r in runs},
            open_max_small_files={r["action"]: r["open_max_small_files"] for r in runs},
            durations={
                r["action"]: None if r["duration_ms"] is None else r["duration_ms"] / 1000
                for r in runs
            },
            cancelled={r["action"]: r["cancelled_at"] for r in stops},
            failures=await self.failure_streaks(table_id),
            throttles=await self.throttles(table_id),
        )

    async def _admissible(
        self,
        table: TableRow,
        rec: Recommendation,
        now: datetime,
        policy: EffectivePolicy,
    ) -> Recommendation:
        """``rec`` with every action the safety choke point would refuse moved to ``skipped``
        (with the rule and reason), so a job never carries an action the executor refuses.
        The table's hold and policy were settled by ``recommend_for`` (``policy``)."""
        kept, skipped = [], list(rec.skipped)
        for action in rec.actions:
            try:
                await admit_resolved(
                    self.pool,
                    table,
                    [action.intent],
                    policy,
                    now=now,
                    expiry_min_age_hours=self.settings.expiry_min_age_hours,
                )
            except ActionRefused as exc:
                skipped.append(Skip(action.action, f"refused ({exc.rule}): {exc}"))
            else:
                kept.append(action)
        return Recommendation(
            actions=kept, skipped=skipped, replan_at=rec.replan_at, sources=rec.sources
        )

    async def growth(
        self,
        table: TableRow,
        status_id: int | None,
        status: TableStatus,
        since: datetime | None,
    ) -> Growth | None:
        """The fullest partition's small files in an earlier status and in ``status`` (the
        newest), both inspected after ``since`` (the last compaction's end), at least
        ``maintenance_growth_span_seconds`` apart (``planning.pressure``). Without such an
        earlier status (right after a compaction), the rate measured between two statuses
        before ``since`` carried over to ``status`` (``Growth.carried``); None without either.
        """
        now_at = parse_ts(status.inspected_at)
        if status_id is None or now_at is None:
            return None
        measured = await self._growth_to(table.id, status_id, status, now_at)
        if measured is not None and (since is None or measured.at_before > since):
            return measured
        if since is None:
            return None
        # The newest status inspected before the compaction ended, and the rate up to it.
        end = await self.pool.fetchrow(load_query("status_growth_base"), table.id, status_id, since)
        if end is None:
            return None
        ended = TableStatus.model_validate(end["status"])
        before = await self._growth_to(table.id, end["id"], ended, end["inspected_at"])
        small_now = fullest_small(status.max_files_in_partition, status.small_file_count)
        return Growth.carried(before, small_now, now_at)

    async def _growth_to(
        self, table_id: int | None, status_id: int, status: TableStatus, at: datetime
    ) -> Growth | None:
        """The growth up to status ``status_id`` (``status``, inspected ``at``) from the
        newest status at least the growth span older."""
        span = timedelta(seconds=self.settings.maintenance_growth_span_seconds)
        base = await self.pool.fetchrow(
            load_query("status_growth_base"), table_id, status_id, at - span
        )
        if base is None:
            return None
        before = TableStatus.model_validate(base["status"])
        return Growth(
            fullest_small(before.max_files_in_partition, before.small_file_count),
            base["inspected_at"],
            fullest_small(status.max_files_in_partition, status.small_file_count),
            at,
            table_small_before=before.small_file_count,
            table_small_now=status.small_file_count,
        )

    async def queue_ahead(self, table_id: int | None, now: datetime) -> QueueAhead:
        """The other tables' jobs a run of ``table_id`` planned at ``now`` waits behind
        (``job_wait_ahead``), for the open-partition projection's lead."""
        row = await self.pool.fetchrow(
            load_query("job_wait_ahead"),
            table_id,
            now,
            DEFAULT_LEAD.total_seconds(),
            EXECUTOR_WINDOW.total_seconds(),
        )
        assert row is not None  # an aggregate: always one row
        return QueueAhead(float(row["seconds"]), int(row["executors"]))

    async def failure_streaks(self, table_id: int) -> dict[str, FailureStreak]:
        """Per action, its consecutive permanent failures on the table and when it may run
        again (``ICEPACK_FAILURE_BACKOFF_*``), from the job history."""
        rows = await self.pool.fetch(load_query("job_failure_streaks"), table_id)
        base = self.settings.failure_backoff_base_seconds
        cap = self.settings.failure_backoff_cap_seconds
        return {
            r["action"]: FailureStreak(
                r["failures"],
                r["last_error"],
                r["last_failed_at"] + failure_backoff(r["failures"], base, cap),
            )
            for r in rows
        }

    async def throttles(self, table_id: int) -> dict[str, Throttle]:
        """Per action, its throttle on the table (``planning.throttle``), from the measured
        outcomes of its newest runs (``job_outcome_history``)."""
        rows = await self.pool.fetch(load_query("job_outcome_history"), table_id, THROTTLE_RUNS)
        runs: dict[str, list[MeasuredRun]] = {}
        for r in rows:  # newest first per action
            runs.setdefault(r["action"], []).append(
                MeasuredRun(r["finished_at"], r["predicted_benefit"], r["ratio"])
            )
        period = timedelta(hours=self.settings.throttle_hours)
        found = {action: throttle_of(history, period) for action, history in runs.items()}
        return {action: t for action, t in found.items() if t is not None}

    async def _enqueue(
        self, conn: Conn, table_id: int, rec: Recommendation, health_score: float | None
    ) -> tuple[int, bool]:
        """Enqueue ``rec``'s actions as the table's planned job (deduped per table), in the
        caller's transaction; the job's id and whether this call created it."""
        # Validated like any other source (``recommend`` built each intent once).
        intents = [a.intent for a in rec.actions]
        prediction = job_prediction(rec.actions)
        enqueued = await self.queue.enqueue(
            table_id,
            intents,
            dedupe_key=f"table:{table_id}",
            priority=PLANNER_PRIORITY,
            max_attempts=self.settings.job_max_attempts,
            trigger=JobTrigger.PLANNER,
            predicted=prediction.predicted,
            rewrite_bytes=prediction.rewrite_bytes,
            benefit=prediction.benefit,
            health_score=health_score,
            conn=conn,
        )
        return enqueued.job.id, enqueued.created

    async def plan(self, table_id: int, now: datetime | None = None) -> PlanOutcome:
        """Plan one table (see module doc). Safe to repeat: at-least-once delivery."""
        now = now or datetime.now(UTC)
        # The table, its newest status and score, and whether it has any job: one round trip.
        inputs = await self.pool.fetchrow(load_query("table_plan_inputs"), table_id)
        if inputs is None or inputs["dropped_at"] is not None:
            return PlanOutcome(table_id, None, None, None, False)
        if inputs["status_id"] is None:
            return PlanOutcome(table_id, None, None, None, False)  # never inspected successfully
        table = TableRow.from_record(inputs)
        rec = await self.recommend_for(
            table,
            TableStatus.model_validate(inputs["status"]),
            now,
            has_jobs=inputs["has_jobs"],
            status_id=inputs["status_id"],
        )
        job_id, created = None, False
        async with self.pool.acquire() as conn, conn.transaction():
            if rec.actions:
                score = None if inputs["score"] is None else float(inputs["score"])
                job_id, created = await self._enqueue(conn, table_id, rec, score)
            recommendation_id: int = await conn.fetchval(
                load_query("recommendation_insert"),
                table_id,
                inputs["status_id"],
                rec.to_json(),
                job_id,
            )
            # A due action held back only by the minimum interval: plan again then, even if
            # no event comes (a writer that stopped); otherwise nothing waits.
            await conn.execute(load_query("recommendation_replan_set"), table_id, rec.replan_at)
            await events.publish(
                conn,
                Topic.RECOMMENDATION_CREATED,
                table_id=table_id,
                payload={
                    "recommendation_id": recommendation_id,
                    "job_id": job_id,
                    "actions": [a.action for a in rec.actions],
                },
            )
        log.info(
            "planner.planned",
            table_id=table_id,
            actions=[a.action for a in rec.actions],
            job_id=job_id,
            job_created=created,
            replan_at=rec.replan_at,
        )
        return PlanOutcome(table_id, rec, recommendation_id, job_id, created)
