"""``icepack hold show|list|release``: the operator's side of maintenance holds, over Icepack's
database (no catalog or Spark is touched).

TABLE is ``CATALOG.NAMESPACE.TABLE`` as Icepack recorded it (a dot inside a namespace level is
written ``\\.``), or ``NAMESPACE.TABLE`` when one catalog is configured. Exit codes: 0 done, 1 the
table is unknown or not on hold (release) or the database failed, 2 bad usage (malformed name,
ambiguous name, bad reason).
"""

from __future__ import annotations

import getpass
import json
import socket
from collections.abc import Mapping
from typing import Annotated, Any

import asyncpg
import typer
from rich.markup import escape
from rich.table import Table

from icepack_core.cli.common import JsonOpt, err, load_cli_settings, out, print_json, run_with_pool
from icepack_core.db.queries import load_query
from icepack_core.errors import TableNotHeld
from icepack_core.safety.holds import clean_reason, hold_reason, release_hold
from icepack_core.telemetry.logs import setup_logging
from icepack_core.types import join_namespace, split_namespace

TableArg = Annotated[
    str,
    typer.Argument(help="CATALOG.NAMESPACE.TABLE (or NAMESPACE.TABLE with one catalog configured)"),
]


def candidates(name: str, catalogs: list[str]) -> list[tuple[str, str, str]]:
    """The (catalog, namespace, table) identities ``name`` can mean, most explicit first.

    Raises:
        typer.BadParameter: ``name`` has fewer than two parts or an empty one.
    """
    parts = split_namespace(name)
    if len(parts) < 2 or not all(parts):
        raise typer.BadParameter(f"{name!r}: use CATALOG.NAMESPACE.TABLE", param_hint="TABLE")
    found: list[tuple[str, str, str]] = []
    if len(parts) >= 3:
        found.append((parts[0], join_namespace(parts[1:-1]), parts[-1]))
    if len(catalogs) == 1:
        implied = (catalogs[0], join_namespace(parts[:-1]), parts[-1])
        if implied not in found:
            found.append(implied)
    return found


async def resolve(pool: asyncpg.Pool, name: str, catalogs: list[str]) -> asyncpg.Record | None:
    """The ``tables`` row ``name`` names, or None.

    Raises:
        typer.BadParameter: the name is malformed, or two recorded tables match it.
    """
    rows = [
        r
        for c in candidates(name, catalogs)
        if (r := await pool.fetchrow(load_query("table_find"), *c)) is not None
    ]
    if len(rows) > 1:
        names = ", ".join(f"{r['catalog']}.{r['namespace']}.{r['name']}" for r in rows)
        raise typer.BadParameter(
            f"{name!r} matches several tables ({names}); name the catalog first", param_hint="TABLE"
        )
    return rows[0] if rows else None


def operator() -> str:
    """Who runs this command, for the audit trail: ``cli:USER@HOST``."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no USER/LOGNAME and no passwd entry (some containers)
        user = "unknown"
    return f"cli:{user}@{socket.gethostname()}"


def _catalogs() -> list[str]:
    return [c.name for c in load_cli_settings().effective_catalogs()]


def _label(row: asyncpg.Record) -> str:
    return f"{row['catalog']}.{row['namespace']}.{row['name']}"


def _hold_lines(hold: Mapping[str, Any]) -> list[str]:
    lines = [f"  reason: {hold_reason(hold)}"]
    for key in ("action", "at"):
        if hold.get(key):
            lines.append(f"  {key}: {hold[key]}")
    if hold.get("evidence"):
        lines.append(f"  evidence: {json.dumps(hold['evidence'], sort_keys=True)}")
    return lines


def _unknown(name: str) -> typer.Exit:
    err.print(
        f"[bold red]error:[/] table {escape(name)!r} is not known to Icepack", highlight=False
    )
    return typer.Exit(1)


def hold_show(table: TableArg, as_json: JsonOpt = False) -> None:
    """Whether TABLE is on hold, and the recorded reason and evidence."""
    catalogs = _catalogs()
    row = run_with_pool(lambda pool: resolve(pool, table, catalogs))
    if row is None:
        raise _unknown(table)
    hold = row["maintenance_hold"]
    if as_json:
        print_json({"table": _label(row), "held": hold is not None, "hold": hold})
        return
    if hold is None:
        out.print(f"{_label(row)} is not on hold", highlight=False, markup=False)
        return
    out.print(
        f"{_label(row)} is ON HOLD (no automatic maintenance until an operator runs "
        f"`icepack hold release`)",
        highlight=False,
        markup=False,
    )
    for line in _hold_lines(hold):
        out.print(line, highlight=False, markup=False, soft_wrap=True)


def hold_list(as_json: JsonOpt = False) -> None:
    """Every table on hold."""
    rows = run_with_pool(lambda pool: pool.fetch(load_query("table_holds_all")))
    if as_json:
        print_json([{"table": _label(r), "hold": r["maintenance_hold"]} for r in rows])
        return
    if not rows:
        err.print("no table is on hold")
        return
    grid = Table("table", "since", "action", "reason")
    for r in rows:
        hold = r["maintenance_hold"]
        grid.add_row(
            _label(r),
            str(hold.get("at") or "-"),
            str(hold.get("action") or "-"),
            hold_reason(hold),
        )
    out.print(grid)


def hold_release(
    table: TableArg,
    reason: Annotated[
        str | None, typer.Option(help="why the hold can go (kept in the table.hold_released event)")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Release TABLE's maintenance hold, so the planner and POST /jobs maintain it again."""
    # The release's audit log line goes to stderr, so stdout stays the answer (--json).
    setup_logging("cli", level="warning", fmt="console")
    try:
        clean_reason(reason)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--reason") from None
    catalogs = _catalogs()
    by = operator()

    async def go(pool: asyncpg.Pool) -> Any:
        row = await resolve(pool, table, catalogs)
        if row is None:
            return None
        return await release_hold(pool, row["id"], released_by=by, reason=reason)

    try:
        done = run_with_pool(go)
    except TableNotHeld as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(1) from None
    if done is None:
        raise _unknown(table)
    if as_json:
        print_json(done.to_json())
        return
    out.print(
        f"released the hold on {done.table} (event {done.event_id}); automatic "
        "maintenance resumes at its next planning",
        highlight=False,
        markup=False,
    )
    out.print("previous hold:", highlight=False, markup=False)
    for line in _hold_lines(done.previous_hold):
        out.print(line, highlight=False, markup=False, soft_wrap=True)
