"""Operator CLI commands over Icepack's database: ``icepack token``, ``jobs``, ``job``, ``events``
(exit codes: ``cli.common``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any

import asyncpg
import typer
from rich.markup import escape
from rich.table import Table

from icepack_core.access.tokens import TokenStore
from icepack_core.cli.common import JsonOpt, err, json_default, out, print_json, run_with_pool
from icepack_core.cli.outcomes import outcome_table, probe_line
from icepack_core.db.queries import load_query
from icepack_core.errors import TokenNameTaken, TokenNotFound
from icepack_core.safety.evidence import ActionSafety, action_safety
from icepack_core.types import JobState


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _table_name(row: asyncpg.Record) -> str:
    if row["catalog"] is None:
        return "-"
    return f"{row['catalog']}.{row['namespace']}.{row['table_name']}"


def token_create(
    name: Annotated[str, typer.Argument(help="who or what uses the token")],
    scope: Annotated[
        str,
        typer.Option(
            "--scope",
            help="write: every endpoint; read: reads only (UI readers with "
            "ICEPACK_GATEWAY_READ_AUTH=true), refused on writes",
        ),
    ] = "write",
) -> None:
    """Create a token and print it once (only its SHA-256 is stored)."""
    try:
        token, info = run_with_pool(lambda pool: TokenStore(pool).create(name, scope))
    except ValueError as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(2) from None
    except TokenNameTaken as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(1) from None
    err.print(
        f"token [bold]{info.name}[/] (scope {info.scope}) created; it is shown once, store it now:"
    )
    print(token)


def token_revoke(name: str) -> None:
    """Revoke the live token called NAME."""
    try:
        info = run_with_pool(lambda pool: TokenStore(pool).revoke(name))
    except TokenNotFound as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(1) from None
    err.print(f"token {info.name} ({info.key_id}) revoked")


def token_list(as_json: JsonOpt = False) -> None:
    """Every token, live and revoked (never the secrets)."""
    tokens = run_with_pool(lambda pool: TokenStore(pool).list())
    if as_json:
        print_json(
            [
                {
                    "name": t.name,
                    "key_id": t.key_id,
                    "scope": t.scope,
                    "created_at": t.created_at,
                    "last_used_at": t.last_used_at,
                    "revoked_at": t.revoked_at,
                }
                for t in tokens
            ]
        )
        return
    table = Table("name", "key id", "scope", "created", "last used", "revoked")
    for t in tokens:
        table.add_row(
            t.name,
            t.key_id,
            t.scope,
            _when(t.created_at),
            _when(t.last_used_at),
            _when(t.revoked_at),
        )
    out.print(table)


JOB_FIELDS = (
    "id",
    "state",
    "actions",
    "priority",
    "attempts",
    "max_attempts",
    "trigger",
    "dedupe_key",
    "lease_owner",
    "error",
    "created_at",
    "started_at",
    "finished_at",
    "cancel_requested_at",
    "predicted",
    "outcome",
)
ACTION_FIELDS = (
    "action",
    "state",
    "procedure",
    "sql_text",
    "output",
    "impact",
    "error",
    "started_at",
    "finished_at",
    "duration_ms",
)


def _job_json(row: asyncpg.Record) -> dict[str, object]:
    """A job as `--json` prints it (the row's JOB_FIELDS and the table name)."""
    job = {k: row[k] for k in JOB_FIELDS}
    job["table"] = None if row["catalog"] is None else _table_name(row)
    return job


def jobs(
    state: Annotated[
        str | None, typer.Option(help="queued|running|succeeded|failed|cancelled")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Jobs, newest first."""
    if state is not None and state not in {s.value for s in JobState}:
        err.print(
            f"[bold red]error:[/] --state must be one of {', '.join(s.value for s in JobState)}"
        )
        raise typer.Exit(2)
    rows = run_with_pool(lambda pool: pool.fetch(load_query("job_page"), state, None, None, limit))
    if as_json:
        print_json([_job_json(r) for r in rows])
        return
    if not rows:
        err.print("no jobs")
        return
    table = Table("id", "state", "table", "actions", "trigger", "attempts", "created", "error")
    for r in rows:
        actions = ", ".join(str(a.get("action")) for a in r["actions"])
        table.add_row(
            str(r["id"]),
            r["state"],
            _table_name(r),
            actions,
            r["trigger"],
            f"{r['attempts']}/{r['max_attempts']}",
            _when(r["created_at"]),
            (r["error"] or "")[:60],
        )
    out.print(table)


def job(
    job_id: Annotated[int, typer.Argument(min=1, help="job id")], as_json: JsonOpt = False
) -> None:
    """One job with the actions it ran, their SQL and impact, and its predicted versus
    measured effect per action."""

    async def fetch(pool: asyncpg.Pool) -> tuple[Any, list[Any]]:
        row = await pool.fetchrow(load_query("job_detail"), job_id)
        actions = await pool.fetch(load_query("job_actions_of"), [job_id]) if row else []
        return row, actions

    row, actions = run_with_pool(fetch)
    if row is None:
        err.print(f"[bold red]error:[/] no job with id {job_id}")
        raise typer.Exit(1)
    safeties = [action_safety(a["action"], a["state"], a["output"], a["impact"]) for a in actions]
    if as_json:
        print_json(
            _job_json(row)
            | {
                "table_hold": row["table_hold"],
                "job_actions": [
                    {k: a[k] for k in ACTION_FIELDS} | {"safety": safety.model_dump()}
                    for a, safety in zip(actions, safeties, strict=True)
                ],
            }
        )
        return
    _print_job(row, actions, safeties)


def _print_job(
    row: asyncpg.Record, actions: list[asyncpg.Record], safeties: list[ActionSafety]
) -> None:
    """One job for a person: its line, error and hold, the actions' SQL and impact, what each
    did to the rows, and the predicted versus measured effect."""
    out.print(
        f"[bold]job {row['id']}[/] {row['state']}  table {_table_name(row)}  "
        f"trigger {row['trigger']}  attempts {row['attempts']}/{row['max_attempts']}"
    )
    if row["error"]:
        out.print(f"[red]error:[/] {escape(row['error'])}", highlight=False)
    if row["table_hold"]:
        reason = escape(str(row["table_hold"].get("reason")))
        out.print(
            f"[red]table on hold:[/] {reason} (no automatic maintenance until an "
            "operator releases the hold)",
            highlight=False,
        )
    table = Table("action", "state", "ms", "sql", "impact")
    for a in actions:
        table.add_row(
            a["action"],
            a["state"],
            str(a["duration_ms"]),
            a["sql_text"] or "",
            _impact_text(a["impact"]),
        )
    out.print(table if actions else "no actions run yet")
    for ran, safety in zip(actions, safeties, strict=True):
        for line in safety_lines(ran["action"], safety):
            out.print(line, highlight=False, markup=False, soft_wrap=True)
    effects = outcome_table(row["predicted"], row["outcome"])
    if effects is not None:
        out.print(effects)
    probe = probe_line(row["outcome"])
    if probe is not None:
        out.print(probe, highlight=False, markup=False, soft_wrap=True)


def _impact_text(impact: Mapping[str, object] | None) -> str:
    """``metric before -> after`` per changed metric; row counts are left to the safety lines
    (a lower stored record count after applying deletes is not lost data)."""
    if not impact:
        return ""
    before, after = impact.get("before") or {}, impact.get("after") or {}
    if not isinstance(before, dict) or not isinstance(after, dict):
        return json.dumps(impact)
    return "\n".join(
        f"{k.replace('_', ' ')} {before.get(k)} -> {after.get(k)}"
        for k in dict.fromkeys([*before, *after])
        if k not in ("record_count", "delete_record_count") and before.get(k) != after.get(k)
    )


def safety_lines(action: str, safety: ActionSafety) -> list[str]:
    """Plain lines saying what an action did to the table's rows, and the evidence."""
    if safety.verdict == "not_applicable" and not safety.snapshots:
        return []
    lines = [f"{action}: {safety.verdict.replace('_', ' ')} - {safety.summary}"]
    live, stored = safety.live_rows, safety.stored_rows
    if live.before is not None or live.after is not None:
        how = (
            "verified by scanning both snapshots"
            if live.source == "verification"
            else "from metadata, not scanned"
        )
        change = "unchanged" if live.before == live.after else "CHANGED"
        lines.append(f"  live rows    {live.before} -> {live.after}  {change} ({how})")
    if stored.before is not None or stored.after is not None:
        removed = safety.deleted_rows_removed
        note = f"  {removed} deleted rows physically removed" if removed else ""
        lines.append(f"  stored rows  {stored.before} -> {stored.after}  (incl. deleted){note}")
    if safety.delete_files_applied:
        lines.append(f"  delete files applied: {safety.delete_files_applied}")
    for r in safety.snapshots:
        checksum = f", checksum {r.checksum_before} -> {r.checksum_after}"
        how = "start vs. newest (whole chain)" if r.checked == "chain" else "against its parent"
        rolled = (
            ""
            if r.rolled_back is None
            else ", rolled back"
            if r.rolled_back
            else ", NOT rolled back"
        )
        lines.append(
            f"  snapshot {r.snapshot_id} (parent {r.parent_id}): rows "
            f"{r.rows_before} -> {r.rows_after}{checksum}; checked {how}{rolled}"
        )
    return lines


def _event_json(row: asyncpg.Record) -> dict[str, object]:
    """An event as `--json` prints it; ``payload`` is the stored event JSON, untouched."""
    return {
        "id": row["id"],
        "topic": row["topic"],
        "created_at": row["created_at"],
        "table": None if row["catalog"] is None else _table_name(row),
        "payload": row["payload"],
    }


def events(
    topic: Annotated[str | None, typer.Option(help="only this topic, e.g. job.finished")] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing new events")
    ] = False,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    as_json: JsonOpt = False,
) -> None:
    """The newest events (oldest of them first); with --follow, new ones as they arrive."""

    def show(rows: list[asyncpg.Record]) -> None:
        for r in rows:
            if as_json:
                print(json.dumps(_event_json(r), default=json_default))
            else:
                out.print(
                    f"{r['id']:>8}  {_when(r['created_at'])}  [bold]{r['topic']}[/]  "
                    f"{_table_name(r)}  {json.dumps(r['payload'])}"
                )

    async def tail(pool: asyncpg.Pool) -> None:
        rows = list(reversed(await pool.fetch(load_query("event_page"), topic, None, None, limit)))
        show(rows)
        last = rows[-1]["id"] if rows else 0
        while follow:
            await asyncio.sleep(1.0)
            rows = await pool.fetch(load_query("event_page_after"), topic, last, 500)
            show(rows)
            if rows:
                last = rows[-1]["id"]

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends --follow: a normal exit
        run_with_pool(tail)
