"""``icepack recommend TABLE`` and ``icepack maintain TABLE``: one table, straight to the catalog
and Spark, bypassing the queue. Icepack's database still keeps the books: the table row (added
as discovery would when it never saw the table), policies, history, the table lock, and a ``jobs``
row with trigger ``cli`` that this process enqueues and claims itself; the actions run through
``JobExecution`` under that job's fence and lease, the executor's code path.

Spark runs only in ``maintain`` without ``--dry-run``; without the ``icepack-core[spark]`` extra
that fails at once, before anything is read or written. ``recommend`` and ``--dry-run`` need no
Spark.

Exit codes: 0 done (or nothing to do), 1 failed / table unreadable / table busy, 2 bad usage or
an unusable setup (settings, the Spark extra missing).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Annotated, Any

import asyncpg
import typer
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from icepack_core.cli.common import err, load_cli_settings, out
from icepack_core.cli.outcomes import prediction_text
from icepack_core.cli.read import parse_table
from icepack_core.db import pool as db
from icepack_core.db.queries import load_query
from icepack_core.db.tables import TableRow
from icepack_core.errors import (
    ActionRefused,
    IcepackError,
    InspectionFailed,
    MissingExtra,
    PolicyError,
)
from icepack_core.execution.job_execution import ActionRecord
from icepack_core.execution.job_runner import JobRunner
from icepack_core.execution.procedure_calls import procedure_args
from icepack_core.inspection.health import Assessment, assess
from icepack_core.inspection.inspector import Inspector, MemoryManifestCache
from icepack_core.inspection.status import TableStatus, target_file_size
from icepack_core.inspection.store import ManifestStatsStore
from icepack_core.intents import Intent, RemoveOrphanFiles, intents_json
from icepack_core.planning.planner import Planner
from icepack_core.planning.recommendation import Recommendation, Skip, recommend
from icepack_core.policy import EffectivePolicy, resolve
from icepack_core.queue import events
from icepack_core.queue.jobs import Job, JobQueue
from icepack_core.queue.locks import TableLocks
from icepack_core.safety.admission import admit
from icepack_core.settings import Settings
from icepack_core.spark.engine import engine_for
from icepack_core.spark.extra import require_spark
from icepack_core.spark.sql import procedure_call, spark_conf_statements
from icepack_core.telemetry.logs import setup_logging
from icepack_core.types import LEDGER_ACTIONS, Action, JobTrigger, TableRef, Topic

ACTION_NAMES = tuple(a.value for a in Action if a not in LEDGER_ACTIONS)

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of tables")]
# Claim one specific job (the one this process just enqueued, in the same transaction).
OWNER = f"cli:{socket.gethostname()}:{os.getpid()}"


class Refused(Exception):
    """The command cannot go on; the message names why (exit code 1)."""


@dataclass
class Observed:
    """A table as seen now: its status, health, Icepack row, policy and recommendation."""

    ref: TableRef
    status: TableStatus
    assessment: Assessment
    row: TableRow  # id is None when Icepack does not know the table (and we wrote nothing)
    policy: EffectivePolicy
    recommendation: Recommendation


def _settings(**overrides: Any) -> Settings:
    setup_logging("cli", level="warning", fmt="console")  # logs to stderr, stdout stays clean
    return load_cli_settings(**overrides)


async def _record_table(
    pool: asyncpg.Pool, ref: TableRef, location: str, properties: dict[str, str]
) -> TableRow:
    """Make Icepack know the table as discovery would (same queries, same events)."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(load_query("table_lock_catalog"), ref.catalog)
        row = await conn.fetchrow(load_query("table_find"), ref.catalog, ref.namespace, ref.name)
        payload = {"metadata_location": location, "source": "cli"}
        if row is None:
            table_id = await conn.fetchval(
                load_query("table_insert"),
                ref.catalog,
                ref.namespace,
                ref.name,
                location,
                properties,
            )
            await events.publish(conn, Topic.TABLE_DISCOVERED, table_id=table_id, payload=payload)
        else:
            table_id = row["id"]
            moved = row["dropped_at"] is not None or row["metadata_location"] != location
            if moved or row["properties"] != properties:
                await conn.execute(load_query("table_update_seen"), table_id, location, properties)
            if moved:
                topic = Topic.TABLE_DISCOVERED if row["dropped_at"] else Topic.TABLE_CHANGED
                await events.publish(conn, topic, table_id=table_id, payload=payload)
        fresh = await conn.fetchrow(load_query("table_find"), ref.catalog, ref.namespace, ref.name)
    assert fresh is not None  # inserted or found under the catalog lock
    return TableRow.from_record(fresh)


async def observe(
    settings: Settings, pool: asyncpg.Pool, ref: TableRef, *, write: bool
) -> Observed:
    """Inspect the table, find (with ``write``: record) its row, recommend. Raises Refused."""
    cache = ManifestStatsStore(pool) if write else MemoryManifestCache()
    inspector = Inspector(settings, cache=cache)
    try:
        table = await inspector.load(ref)
        status = await inspector.inspect_loaded(ref, table)
    except InspectionFailed as exc:
        raise Refused(f"INSPECTION_FAILED: {exc.message}") from None
    properties = {str(k): str(v) for k, v in table.properties.items()}
    if write:
        row = await _record_table(pool, ref, table.metadata_location, properties)
    else:
        found = await pool.fetchrow(load_query("table_find"), ref.catalog, ref.namespace, ref.name)
        row = (
            TableRow.from_record(found)
            if found
            else TableRow(id=None, catalog=ref.catalog, namespace=ref.namespace, name=ref.name)
        )
    # The catalog's current properties, whatever discovery saw.
    row = replace(row, properties=properties)
    planner = Planner(settings, pool, JobQueue(pool))
    try:
        policy = resolve(
            await planner.attachments(ref.catalog),
            ref.namespace,
            ref.name,
            properties,
            settings.maintenance_cadence_hours,
        )
    except PolicyError as exc:
        raise Refused(f"invalid policy for {ref}: {exc}") from None
    rec = await planner.recommend_for(row, status, datetime.now(UTC))
    return Observed(ref, status, assess(status), row, policy, rec)


def choose_actions(obs: Observed, requested: list[str] | None) -> tuple[list[Intent], list[Skip]]:
    """The intents to run and the named ones left out (why). Without ``requested``: what
    ``recommend`` shows. With it: those of the named actions the recommendation proposes when
    the cadence is set aside (an operator asking now overrides "not again within 24 h").
    Refused when the table is on hold or its maintenance is disabled."""
    hold = obs.row.maintenance_hold
    if hold:
        raise Refused(f"{obs.ref} is on hold: {hold.get('reason')} (release the hold first)")
    if not obs.policy.maintenance_enabled:
        raise Refused(f"{obs.ref}: icepack.maintenance.enabled=false")
    rec = obs.recommendation
    if requested is not None:
        rec = recommend(
            obs.status,
            obs.policy,
            {},
            datetime.now(UTC),
            target_file_size_bytes=target_file_size(obs.row.properties),
        )
    wanted = set(requested or ACTION_NAMES)
    chosen = [a.intent for a in rec.actions if a.action in wanted]
    return (
        chosen,
        [s for s in rec.skipped if s.action in wanted or s.action == "*"],
    )


async def check_admitted(
    settings: Settings, pool: asyncpg.Pool, obs: Observed, intents: list[Intent]
) -> str | None:
    """The safety choke point, before anything is enqueued; the orphan location if any.
    Raises Refused naming the rule."""
    if obs.row.id is None and any(isinstance(i, RemoveOrphanFiles) for i in intents):
        raise Refused(
            f"{obs.ref} is not known to Icepack yet; orphan removal needs every "
            "table's location (run discovery or `icepack maintain` without --dry-run)"
        )
    try:
        admission = await admit(
            pool,
            obs.row,
            intents,
            now=datetime.now(UTC),
            expiry_min_age_hours=settings.expiry_min_age_hours,
            default_cadence_hours=settings.maintenance_cadence_hours,
        )
    except ActionRefused as exc:
        raise Refused(f"refused ({exc.rule}): {exc}") from None
    return admission.location


def planned_sql(
    ref: TableRef, properties: dict[str, str], intent: Intent, location: str | None = None
) -> list[str]:
    """The statements ``TableMaintenance`` sends for one action, in order."""
    name, args = procedure_args(intent, ref, location=location)
    statements = list(spark_conf_statements(properties))
    if isinstance(intent, RemoveOrphanFiles) and not intent.params.dry_run:
        statements.append(procedure_call(ref.catalog, name, {**args, "dry_run": True}))
    statements.append(procedure_call(ref.catalog, name, args))
    return statements


def _parse_actions(raw: str | None) -> list[str] | None:
    if raw is None:
        return None
    names = [a.strip() for a in raw.split(",") if a.strip()]
    unknown = [a for a in names if a not in ACTION_NAMES]
    if not names or unknown:
        raise typer.BadParameter(
            f"unknown action(s) {', '.join(unknown) or '(none given)'}; choose from "
            f"{', '.join(ACTION_NAMES)}",
            param_hint="--actions",
        )
    return list(dict.fromkeys(names))


async def _enqueue_and_claim(
    queue: JobQueue,
    pool: asyncpg.Pool,
    table_id: int,
    intents: Sequence[Intent],
    lease_seconds: float,
) -> Job:
    """Enqueue a ``cli`` job and claim it in one transaction, so no executor can take it;
    Refused when another job is queued or running for the table (its dedupe key)."""
    async with pool.acquire() as conn, conn.transaction():
        enqueued = await queue.enqueue(
            table_id,
            intents,
            dedupe_key=f"table:{table_id}",
            priority=0,
            max_attempts=1,
            trigger=JobTrigger.CLI,
            conn=conn,
        )
        if not enqueued.created:
            other = enqueued.job
            raise Refused(
                f"job {other.id} ({other.trigger.value}, {other.state.value}) is "
                "already queued or running for this table; let it finish or cancel "
                f"it (icepack job {other.id})"
            )
        job = await queue.claim_id(enqueued.job.id, OWNER, lease_seconds, conn)
        assert job is not None  # inserted by this transaction: nobody else can see it yet
    return job


async def run_maintenance(
    settings: Settings, pool: asyncpg.Pool, obs: Observed, intents: list[Intent], progress: Progress
) -> tuple[Job, list[ActionRecord]]:
    """Run ``actions`` as a ``cli`` job: lock, lease, ``JobExecution``, fenced finish.
    Refused (nothing ran) when the table is locked or busy."""
    table_id = obs.row.id
    assert table_id is not None  # observed with write=True: recorded
    locks, queue = TableLocks(pool), JobQueue(pool)
    holder = await locks.holder(table_id)
    if holder is not None:
        raise Refused(
            f"{obs.ref} is locked by {holder.owner}"
            f"{f' (job {holder.job_id})' if holder.job_id else ''} until "
            f"{holder.expires_at:%Y-%m-%d %H:%M:%S}; try again later"
        )
    lease = settings.job_lease_seconds
    job = await _enqueue_and_claim(queue, pool, table_id, intents, lease)
    records: list[ActionRecord] = []
    record = _progress_printer(progress, [i.kind.value for i in intents], records)
    engine = engine_for(settings)
    runner = JobRunner(pool, settings, queue, engine, OWNER, retry_failures=False)
    try:
        run = await runner.run(job, on_record=record)
    finally:
        await engine.close()
    if run.lock_held:
        raise Refused(f"{obs.ref} is locked by another job; nothing ran (job {job.id})")
    if run.job is None:
        raise Refused(f"job {job.id}: the lease was lost; another holder owns it now")
    job = run.job
    return job, records


def _progress_printer(
    progress: Progress, names: list[str], records: list[ActionRecord]
) -> Callable[[ActionRecord], Awaitable[None]]:
    """The runner's ``on_record``: keeps each record in ``records`` and prints it (its state,
    time and file/snapshot changes), advancing the progress bar to the next of ``names``."""
    task = progress.add_task(f"{names[0]} (1/{len(names)})", total=len(names))

    async def record(action: ActionRecord) -> None:
        records.append(action)  # the runner has stored it under the job's fence
        mark = "[green]✓[/]" if action.state == "succeeded" else "[red]✗[/]"
        seconds = (action.finished_at - action.started_at).total_seconds()
        changes = ", ".join(
            f"{label} {_change(action.impact, key)}"
            for label, key in (
                ("data files", "data_file_count"),
                ("delete files", "position_delete_file_count"),
                ("snapshots", "snapshot_count"),
            )
            if _change(action.impact, key)
        )
        progress.console.print(
            f"{mark} {action.action} {seconds:.1f} s  {changes}", highlight=False, soft_wrap=True
        )
        following = names[len(records)] if len(records) < len(names) else "done"
        progress.update(
            task, advance=1, description=f"{following} ({len(records) + 1}/{len(names)})"
        )

    return record


def print_recommendation(obs: Observed) -> None:
    a, s, rec = obs.assessment, obs.status, obs.recommendation
    colour = {"healthy": "green", "warning": "yellow", "critical": "red"}.get(
        a.health.value, "magenta"
    )
    out.print(
        f"[bold]{obs.ref}[/]: [{colour}]{a.health.value}[/] score {a.score} "
        f"({s.data_file_count} data files, {s.small_file_count} small, "
        f"{s.delete_file_count} delete files, {s.snapshot_count} snapshots)",
        highlight=False,
    )
    for issue in a.issues:
        out.print(f"  {issue.severity:8} {issue.code}: {issue.message}", highlight=False)
    out.print("[bold]recommended:[/]" if rec.actions else "[bold]nothing to do[/]")
    for i, intent in enumerate(rec.actions, 1):
        shown = intent.to_json()
        benefit = (
            ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in intent.estimated_benefit.items())
            or "-"
        )
        out.print(
            f"  {i}. [bold]{intent.action}[/]: {intent.reason}\n"
            f"     parameters: {json.dumps(shown['params'])}\n"
            f"     estimated benefit: {benefit}\n"
            f"     predicted: {prediction_text(shown['predicted'])}",
            highlight=False,
            soft_wrap=True,
        )
    for skip in rec.skipped:
        out.print(
            f"  [dim]skipped {skip.action}: {skip.reason}[/]", highlight=False, soft_wrap=True
        )
    for policy_type, source in obs.policy.sources.items():
        out.print(f"  [dim]policy {policy_type}: {source}[/]", highlight=False, soft_wrap=True)


def _change(impact: Mapping[str, object], key: str) -> str:
    """``before -> after`` of one ``IMPACT_FIELDS`` count in an action's impact; empty when the
    impact has no such count before the action."""
    before, after = (_count(impact.get(side), key) for side in ("before", "after"))
    return "" if before is None else f"{before} -> {after}"


def _count(side: object, key: str) -> object:
    return side.get(key) if isinstance(side, Mapping) else None


def _with_db(settings: Settings, work: Any) -> Any:
    """Run ``work(pool)`` on a small pool; every expected failure becomes a message + code."""

    async def go() -> Any:
        pool = await db.create_pool(
            settings.model_copy(update={"db_pool_min": 1, "db_pool_max": 4}), "cli"
        )
        try:
            return await work(pool)
        finally:
            await pool.close()

    try:
        return asyncio.run(go())
    except (Refused, IcepackError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        where = "" if isinstance(exc, Refused | IcepackError) else f"{settings.masked_dsn}: "
        err.print(f"[bold red]error:[/] {where}{exc}", highlight=False)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        err.print("[bold red]interrupted[/]")
        raise typer.Exit(130) from None


def recommend_cmd(
    table: Annotated[str, typer.Argument(help="[CATALOG.]NAMESPACE.TABLE")],
    as_json: JsonOpt = False,
) -> None:
    """What maintenance a table needs now, why, and what it should gain (runs nothing)."""
    settings = _settings()
    ref = parse_table(table, settings)
    obs: Observed = _with_db(settings, lambda pool: observe(settings, pool, ref, write=False))
    if as_json:
        print(
            json.dumps(
                {
                    "table": str(ref),
                    "health": obs.assessment.model_dump(mode="json"),
                    "recommendation": obs.recommendation.to_json(),
                },
                indent=2,
            )
        )
    else:
        print_recommendation(obs)


def maintain_cmd(
    table: Annotated[str, typer.Argument(help="[CATALOG.]NAMESPACE.TABLE")],
    actions: Annotated[
        str | None,
        typer.Option(
            help=f"comma-separated, any of: {', '.join(ACTION_NAMES)} "
            "(default: what `icepack recommend` proposes)"
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the SQL, run nothing")] = False,
    engine: Annotated[
        str | None, typer.Option(help="local|connect|thrift (overrides ICEPACK_SPARK_ENGINE)")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Maintain one table now, on Spark, bypassing the queue (recorded as a `cli` job)."""
    if engine is not None and engine not in ("local", "connect", "thrift"):
        raise typer.BadParameter("must be local, connect or thrift", param_hint="--engine")
    requested = _parse_actions(actions)
    settings = _settings(**({"spark_engine": engine} if engine else {}))
    if not dry_run:
        _require_spark(settings)  # before the table is inspected or recorded: nothing half-done
    ref = parse_table(table, settings)

    async def work(pool: asyncpg.Pool) -> _Maintained:
        obs = await observe(settings, pool, ref, write=not dry_run)
        chosen, skipped = choose_actions(obs, requested)
        location = await check_admitted(settings, pool, obs, chosen) if chosen else None
        if dry_run or not chosen:
            return _Maintained(obs, chosen, skipped, None, location)
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=err,
            disable=as_json,
        ) as progress:
            ran = await run_maintenance(settings, pool, obs, chosen, progress)
        return _Maintained(obs, chosen, skipped, ran, location)

    done: _Maintained = _with_db(settings, work)
    if dry_run or done.ran is None:
        _print_planned(done, dry_run=dry_run, as_json=as_json)
        return
    _print_ran(done, done.ran, as_json=as_json)
    if done.ran[0].state.value != "succeeded":
        raise typer.Exit(1)


@dataclass(frozen=True, slots=True)
class _Maintained:
    """What ``maintain`` did: the table observed, the intents chosen and skipped, the job and
    its action records (None: nothing ran), and the admitted orphan location."""

    obs: Observed
    chosen: list[Intent]
    skipped: list[Skip]
    ran: tuple[Job, list[ActionRecord]] | None
    location: str | None

    def summary(self) -> dict[str, object]:
        """The JSON answer's common part."""
        return {
            "table": str(self.obs.ref),
            "actions": intents_json(self.chosen),
            "skipped": [vars(s) for s in self.skipped],
        }


def _require_spark(settings: Settings) -> None:
    """Exit 2, naming the missing extra, when Spark cannot run here."""
    try:
        require_spark(settings.spark_engine, "icepack maintain")
    except MissingExtra as exc:
        err.print(
            f"[bold red]error:[/] {escape(str(exc))}; or use --dry-run to print the SQL",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(2) from None


def _print_planned(done: _Maintained, *, dry_run: bool, as_json: bool) -> None:
    """The SQL a dry run (or a run with nothing to do) would send, and what was skipped."""
    obs = done.obs
    sql = [
        s for a in done.chosen for s in planned_sql(obs.ref, obs.row.properties, a, done.location)
    ]
    if as_json:
        answer = done.summary() | {"sql": sql, "dry_run": dry_run, "job": None}
        print(json.dumps(answer, indent=2))
        return
    for statement in sql:
        print(f"{statement};")
    for skip in done.skipped:
        err.print(f"skipped {skip.action}: {skip.reason}", highlight=False, soft_wrap=True)
    if not done.chosen:
        err.print(f"{obs.ref}: nothing to do")


def _print_ran(done: _Maintained, ran: tuple[Job, list[ActionRecord]], *, as_json: bool) -> None:
    """The job's outcome: as JSON, or one line (and its error) for a person."""
    job, records = ran
    if as_json:
        answer = done.summary() | {
            "job": job.id,
            "state": job.state.value,
            "error": job.error,
            "results": [asdict(r) for r in records],
        }
        print(json.dumps(answer, indent=2, default=str))
        return
    out.print(
        f"job {job.id} {job.state.value} ({len(records)} of {len(done.chosen)} actions; "
        f"`icepack job {job.id}` shows the SQL and impact)",
        highlight=False,
    )
    if job.error:
        err.print(f"[bold red]failed:[/] {job.error}", highlight=False)
