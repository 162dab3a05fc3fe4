"""The maintenance job queue: enqueue with dedupe, claim, heartbeat, finish, reap, prune.

Every claim bumps the job's ``fence``; every later write names the fence it holds and is a no-op
for anyone else. A holder whose lease expired and whose job was re-claimed gets ``StaleFence``
and must stop without touching anything. Job events (``job.enqueued/started/finished``) are
published in the same transaction as the transition they announce.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Literal

import asyncpg

from icepack_core.db.pool import Conn
from icepack_core.db.queries import load_query
from icepack_core.db.text import storable
from icepack_core.errors import IntentError, JobNotFound, StaleFence
from icepack_core.intents import Intent, intents_json, parse_intents
from icepack_core.queue import events
from icepack_core.telemetry.logs import redact, redact_text
from icepack_core.telemetry.tracing import current_traceparent
from icepack_core.types import JobState, JobTrigger, JSONObject, Topic

KEDA_TRIGGER_QUERY = load_query("job_count_claimable")
# Picks per claim call: a pick fails its locked re-check only when another claimer used the
# budget up meanwhile, so a few tries suffice; after them the executor polls again.
_CLAIM_ATTEMPTS = 5


_ERROR_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")


def error_code(code: str) -> str:
    """``code`` when it is a well-formed error class (upper case, at most 64 characters; the
    schema checks the same), else ``UNEXPECTED``: a bad class never fails the failing."""
    return code if _ERROR_CODE.fullmatch(code) else "UNEXPECTED"


@dataclass(frozen=True, slots=True)
class Job:
    """A snapshot of one ``jobs`` row, its ``actions`` parsed into intents once, when read.

    Stored actions that are not valid intents (a row written by hand, bypassing the API's
    validation) leave ``actions`` empty and ``actions_error`` saying why: reading such a job
    never fails, and the executor fails it permanently with that reason.
    """

    id: int
    table_id: int | None
    state: JobState
    actions: list[Intent]
    priority: int
    attempts: int
    max_attempts: int
    not_before: datetime
    lease_owner: str | None
    lease_until: datetime | None
    fence: int
    dedupe_key: str | None
    trigger: JobTrigger
    error: str | None
    result: JSONObject | None  # free-form: written by the executor, read back untouched
    traceparent: str | None
    cancel_requested_at: datetime | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    predicted: JSONObject | None = None  # stored planning.prediction JSON
    rewrite_bytes: int = 0
    benefit: float = 0.0
    health_score: float | None = None
    outcome: JSONObject | None = None  # stored execution.outcome JSON
    lock_waits: int = 0
    conflicts: int = 0
    error_code: str | None = None  # the class of the last failure (jobs.error_code)
    actions_error: IntentError | None = None  # why the stored actions are not intents

    @classmethod
    def from_record(cls, row: asyncpg.Record) -> Job:
        """The job in a ``jobs`` row; columns the dataclass does not name (a claim's pick
        columns) are ignored."""
        try:
            actions, actions_error = parse_intents(row["actions"], allow_empty=True), None
        except IntentError as exc:
            actions, actions_error = [], exc
        present = set(row.keys())  # a query may leave out columns that have defaults
        columns = {name: row[name] for name in _ROW_FIELDS if name in present}
        return cls(
            **columns,
            state=JobState(row["state"]),
            trigger=JobTrigger(row["trigger"]),
            actions=actions,
            actions_error=actions_error,
        )


_ROW_FIELDS = tuple(
    f.name for f in fields(Job) if f.name not in ("state", "trigger", "actions", "actions_error")
)


@dataclass(frozen=True, slots=True)
class Enqueued:
    """The result of ``enqueue``: the job, and whether this call created it."""

    job: Job
    created: bool


@dataclass(frozen=True, slots=True)
class Heartbeat:
    lease_until: datetime
    cancel_requested: bool


@dataclass(frozen=True, slots=True)
class Backoff:
    """Capped exponential backoff with jitter: ``min(cap, base·2^(attempt-1))·U(0.5, 1)``."""

    base_seconds: float = 30.0
    cap_seconds: float = 3600.0


# A busy table is usually free again when the job holding it ends (minutes); a writer that
# keeps winning commit conflicts is waited out longer.
LOCK_BACKOFF = Backoff(base_seconds=15.0, cap_seconds=600.0)
CONFLICT_BACKOFF = Backoff(base_seconds=30.0, cap_seconds=1800.0)
GiveBack = Literal["lock", "conflict"]


class JobQueue:
    """Intent-named operations on ``icepack.jobs``."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        backoff: Backoff | None = None,
        *,
        lock_backoff: Backoff = LOCK_BACKOFF,
        conflict_backoff: Backoff = CONFLICT_BACKOFF,
    ) -> None:
        self.pool = pool
        self.backoff = backoff or Backoff()
        self.give_back_backoff: dict[GiveBack, Backoff] = {
            "lock": lock_backoff,
            "conflict": conflict_backoff,
        }

    async def enqueue(
        self,
        table_id: int | None,
        actions: Sequence[Intent],
        *,
        dedupe_key: str | None = None,
        priority: int = 100,
        max_attempts: int = 3,
        trigger: JobTrigger = JobTrigger.PLANNER,
        not_before: datetime | None = None,
        predicted: Mapping[str, object] | None = None,
        rewrite_bytes: int = 0,
        benefit: float = 0.0,
        health_score: float | None = None,
        conn: Conn | None = None,
    ) -> Enqueued:
        """Queue a job running ``actions`` (stored in their one JSON form, ``intents_json``;
        empty: a no-op job), or return the queued/running job that already holds ``dedupe_key``.

        ``predicted`` (per action, the planner's predicted effect), ``rewrite_bytes`` (what the
        job charges a rewrite budget), ``benefit`` and ``health_score`` (the claim order) are
        stored on the job. Pass ``conn`` to enqueue inside the caller's transaction.
        """
        if conn is None:
            async with self.pool.acquire() as own, own.transaction():
                return await self.enqueue(
                    table_id,
                    actions,
                    dedupe_key=dedupe_key,
                    priority=priority,
                    max_attempts=max_attempts,
                    trigger=trigger,
                    not_before=not_before,
                    predicted=predicted,
                    rewrite_bytes=rewrite_bytes,
                    benefit=benefit,
                    health_score=health_score,
                    conn=own,
                )
        stored = intents_json(list(actions))
        while True:
            row = await conn.fetchrow(
                load_query("job_enqueue"),
                table_id,
                stored,
                priority,
                max_attempts,
                not_before,
                dedupe_key,
                trigger.value,
                current_traceparent(),
                predicted,
                rewrite_bytes,
                benefit,
                health_score,
            )
            if row is not None:
                job = Job.from_record(row)
                await events.publish(
                    conn,
                    Topic.JOB_ENQUEUED,
                    table_id=table_id,
                    payload={"job_id": job.id, "trigger": trigger.value},
                )
                return Enqueued(job, created=True)
            existing = await conn.fetchrow(load_query("job_get_active_by_dedupe"), dedupe_key)
            if existing is not None:
                return Enqueued(Job.from_record(existing), created=False)
            # The holder finished between our two statements: try the insert again.

    async def get(self, job_id: int) -> Job:
        row = await self.pool.fetchrow(load_query("job_get"), job_id)
        if row is None:
            raise JobNotFound(job_id)
        return Job.from_record(row)

    async def claim(
        self, owner: str, lease_seconds: float, now: datetime | None = None
    ) -> Job | None:
        """queued -> running for the first due job in claim order that every budget covering
        its table allows, or None when none is claimable.

        Claim order: priority, then benefit per byte rewritten (highest first), then the lowest
        health score, then age. A job no budget covers is claimed in one statement. For one
        that budgets cover, the claim takes a transaction-level advisory lock per covering
        budget scope (sorted, so claimers never deadlock) and checks those budgets again on a
        fresh snapshot before claiming: two claimers can never both pass the check for a
        budget's last slot or last bytes. When another claimer used the budget up between the
        pick and the check, the pick is retried (each retry sees that claimer's commit).
        """
        for _ in range(_CLAIM_ATTEMPTS):
            async with self.pool.acquire() as conn, conn.transaction():
                row = await conn.fetchrow(load_query("job_claim"), owner, lease_seconds, now)
                if row is None:
                    return None
                if row["id"] is not None:
                    return await _announce_start(conn, row, owner)
                for scope in row["scopes"]:  # sorted by the query
                    await conn.execute(load_query("budget_scope_lock"), scope)
                taken = await conn.fetchrow(
                    load_query("job_claim_budgeted"), owner, lease_seconds, now, row["candidate"]
                )
                if taken is not None:
                    return await _announce_start(conn, taken, owner)
        return None

    async def claim_id(
        self, job_id: int, owner: str, lease_seconds: float, conn: Conn | None = None
    ) -> Job | None:
        """queued -> running for one named job; None when it is not queued. Pass ``conn`` to
        claim in the transaction that enqueued it (so no executor can take it first)."""
        if conn is None:
            async with self.pool.acquire() as own, own.transaction():
                return await self.claim_id(job_id, owner, lease_seconds, own)
        row = await conn.fetchrow(load_query("job_claim_id"), job_id, owner, lease_seconds)
        return await _announce_start(conn, row, owner)

    async def heartbeat(
        self, job: Job, lease_seconds: float, now: datetime | None = None
    ) -> Heartbeat:
        """Extend the lease. Raises ``StaleFence`` when the caller lost the job."""
        row = await self.pool.fetchrow(
            load_query("job_heartbeat"), job.id, job.fence, lease_seconds, now
        )
        if row is None:
            raise StaleFence(job.id, job.fence, "heartbeat")
        return Heartbeat(row["lease_until"], row["cancel_requested"])

    async def complete(self, job: Job, result: Mapping[str, object] | None = None) -> Job:
        """running -> succeeded. Raises ``StaleFence`` when the caller lost the job."""
        return await self._finish(job, "job_complete", "complete", redact(result or {}))

    async def fail(
        self,
        job: Job,
        error: str,
        *,
        retryable: bool,
        now: datetime | None = None,
        code: str = "UNEXPECTED",
    ) -> Job:
        """running -> queued (retryable with attempts left, after backoff) or failed.

        ``code`` classes the error (``jobs.error_code``, a metrics label): the ``code`` of the
        Icepack exception that failed the job, ``UNEXPECTED`` for any other. ``now`` pins the
        clock (tests simulating time). Raises ``StaleFence`` when the caller lost the job.
        """
        return await self._finish(
            job,
            "job_fail",
            "fail",
            storable(redact_text(error)),
            retryable,
            self.backoff.base_seconds,
            self.backoff.cap_seconds,
            now,
            error_code(code),
        )

    async def give_back(
        self,
        job: Job,
        kind: GiveBack,
        reason: str,
        *,
        not_before: datetime | None = None,
        now: datetime | None = None,
        streak: int | None = None,
    ) -> Job:
        """running -> queued without spending the attempt: the table was busy (``lock``: another
        job holds its lock) or a writer won an Iceberg commit conflict (``conflict``). This
        claim's budget charge is refunded; the job is due again after a capped exponential
        backoff with jitter over its earlier give-backs of the same kind (``lock_waits`` or
        ``conflicts``, counted on the job), and never before ``not_before`` (a deferral's end).
        ``streak`` (conflicts only): the conflicts in a row on the (table, action) counting
        this one (``deferrals.record_conflict``); when given it is the backoff's exponent
        instead of the job's count, so an attempt that committed progress (which restarts the
        streak) is retried after the base backoff however often the job lost a part before.
        Raises ``StaleFence`` when the caller lost the job.
        """
        backoff = self.give_back_backoff[kind]
        return await self._finish(
            job,
            "job_give_back",
            f"give back ({kind})",
            kind,
            backoff.base_seconds,
            backoff.cap_seconds,
            now,
            storable(redact_text(reason)),
            not_before,
            streak,
        )

    async def finish_cancelled(self, job: Job, reason: str = "cancelled by operator") -> Job:
        """running -> cancelled, acknowledging an operator's cancel request (fenced)."""
        return await self._finish(
            job, "job_finish_cancelled", "cancel", storable(redact_text(reason))
        )

    async def _finish(self, job: Job, query: str, operation: str, *args: Any) -> Job:
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(load_query(query), job.id, job.fence, *args)
            if row is None:
                raise StaleFence(job.id, job.fence, operation)
            done = Job.from_record(row)
            await _announce_transition(conn, done)
            return done

    async def cancel(self, job_id: int) -> Job:
        """Cancel a queued job now, or ask a running job's executor to stop.

        Raises:
            JobNotFound: no such job.
        Returns:
            The job after the request (a job already finished is returned unchanged).
        """
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(load_query("job_cancel"), job_id)
            if row is None:
                existing = await conn.fetchrow(load_query("job_get"), job_id)
                if existing is None:
                    raise JobNotFound(job_id)
                return Job.from_record(existing)
            job = Job.from_record(row)
            await _announce_transition(conn, job)
            return job

    async def reap(self, now: datetime | None = None, limit: int = 100) -> list[Job]:
        """Return running jobs with expired leases to queued (with backoff) or fail them."""
        async with self.pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                load_query("job_reap"),
                limit,
                self.backoff.base_seconds,
                self.backoff.cap_seconds,
                now,
            )
            reaped = [Job.from_record(r) for r in rows]
            for job in reaped:
                await _announce_transition(conn, job)
            return reaped

    async def prune(self, retention_seconds: float, now: datetime | None = None) -> int:
        """Delete jobs that finished longer than ``retention_seconds`` ago."""
        status = await self.pool.execute(load_query("job_prune"), retention_seconds, now)
        return int(status.split()[-1])

    async def claimable_count(self) -> int:
        """What KEDA sees: how many claims in a row would succeed now (due, queued, within
        every budget covering them)."""
        count: int = await self.pool.fetchval(KEDA_TRIGGER_QUERY)
        return count

    async def list(
        self,
        state: JobState | None = None,
        table_id: int | None = None,
        before_id: int | None = None,
        limit: int = 50,
    ) -> list[Job]:
        rows = await self.pool.fetch(
            load_query("job_list"), state.value if state else None, table_id, before_id, limit
        )
        return [Job.from_record(r) for r in rows]

    async def record_action(
        self,
        job: Job,
        *,
        action: str,
        state: str,
        started_at: datetime,
        finished_at: datetime,
        procedure: str | None = None,
        sql_text: str | None = None,
        output: Mapping[str, object] | None = None,
        impact: Mapping[str, object] | None = None,
        error: str | None = None,
    ) -> int:
        """Record one action the executor ran (secrets in its SQL, output and error masked).
        Raises ``StaleFence`` when it lost the job."""
        action_id: int | None = await self.pool.fetchval(
            load_query("job_action_record"),
            job.id,
            job.fence,
            action,
            procedure,
            None if sql_text is None else redact_text(sql_text),
            state,
            redact(output or {}),
            impact or {},
            None if error is None else redact_text(error),
            started_at,
            finished_at,
        )
        if action_id is None:
            raise StaleFence(job.id, job.fence, f"record action {action}")
        return action_id


async def _announce_start(conn: Conn, row: asyncpg.Record | None, owner: str) -> Job | None:
    """Publish ``job.started`` for a claimed row (None when nothing was claimed)."""
    if row is None:
        return None
    job = Job.from_record(row)
    await events.publish(
        conn,
        Topic.JOB_STARTED,
        table_id=job.table_id,
        payload={"job_id": job.id, "fence": job.fence, "owner": owner},
        traceparent=current_traceparent() or job.traceparent,
    )
    return job


async def _announce_transition(conn: Conn, job: Job) -> None:
    """Publish ``job.finished`` when a transition made the job terminal."""
    if job.state.terminal:
        await events.publish(
            conn,
            Topic.JOB_FINISHED,
            table_id=job.table_id,
            payload={"job_id": job.id, "state": job.state.value, "error": job.error},
            traceparent=current_traceparent() or job.traceparent,
        )
