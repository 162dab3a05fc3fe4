"""``icepack budget set|list|clear``: maintenance budgets over Icepack's database (what
``/budgets`` does over HTTP). Claims enforce them (``JobQueue.claim``).

Exit codes: 0 done, 1 no budget to clear or the database failed, 2 bad usage (a limit that is
not a positive size or count, no limit at all, an empty name).
"""

from __future__ import annotations

import re
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from icepack_core.cli.common import JsonOpt, err, out, print_json, run_with_pool
from icepack_core.errors import BudgetInvalid, BudgetNotFound
from icepack_core.queue.budgets import BudgetUse, clear_budget, list_budgets, set_budget

CatalogArg = Annotated[str, typer.Argument(help="the catalog the budget covers")]
NamespaceOpt = Annotated[
    str | None, typer.Option("--namespace", help="one namespace of it (default: all of it)")
]
_UNITS = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4}
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?)b?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from ``123``, ``500MB``, ``10GiB``, ``2T`` (k/M/G/T: powers of 1000; with ``i``:
    of 1024).

    Raises:
        typer.BadParameter: anything else, naming the value.
    """
    match = _SIZE.match(text)
    if match is None:
        raise typer.BadParameter(
            f"{text!r} is not a size (use bytes, or e.g. 500MB, 10GiB)",
            param_hint="--bytes-per-hour",
        )
    number, unit, binary = match.groups()
    unit = unit.lower()
    scale = 1024 ** list(_UNITS).index(unit) if binary else _UNITS[unit]
    return int(number) * scale


def _limit(value: int | None) -> str:
    return "unlimited" if value is None else f"{value:,}"


def _scope(b: BudgetUse) -> str:
    return b.catalog if b.namespace is None else f"{b.catalog} / {b.namespace}"


def budget_set(
    catalog: CatalogArg,
    namespace: NamespaceOpt = None,
    bytes_per_hour: Annotated[
        str | None,
        typer.Option(
            "--bytes-per-hour", help="rewrite budget per sliding hour: bytes, or 500GB, 1TiB"
        ),
    ] = None,
    max_running: Annotated[
        int | None, typer.Option("--max-running", help="jobs in scope that may run at once")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Set (or replace) the budget of CATALOG, or of one of its namespaces. A limit left out is
    unlimited; give at least one."""
    per_hour = None if bytes_per_hour is None else parse_size(bytes_per_hour)
    try:
        use = run_with_pool(
            lambda pool: set_budget(
                pool,
                catalog,
                namespace,
                rewrite_bytes_per_hour=per_hour,
                max_running=max_running,
            )
        )
    except BudgetInvalid as exc:
        hint = {"rewrite_bytes_per_hour": "--bytes-per-hour", "max_running": "--max-running"}
        raise typer.BadParameter(str(exc), param_hint=hint.get(exc.field, exc.field)) from None
    if as_json:
        print_json(use.to_json())
        return
    out.print(
        f"budget for {_scope(use)}: {_limit(use.rewrite_bytes_per_hour)} bytes/hour, "
        f"{_limit(use.max_running)} running",
        highlight=False,
        markup=False,
    )


def budget_list(as_json: JsonOpt = False) -> None:
    """Every budget with its use now: running jobs and bytes charged in the last hour."""
    budgets = run_with_pool(list_budgets)
    if as_json:
        print_json([b.to_json() for b in budgets])
        return
    if not budgets:
        err.print("no budget is set")
        return
    grid = Table("scope", "bytes/hour", "charged (1 h)", "max running", "running", "oversized")
    for b in budgets:
        grid.add_row(
            escape(_scope(b)),
            _limit(b.rewrite_bytes_per_hour),
            f"{b.charged_bytes:,}",
            _limit(b.max_running),
            str(b.running),
            ", ".join(map(str, b.oversized_jobs)) or "-",
        )
    out.print(grid)


def budget_clear(catalog: CatalogArg, namespace: NamespaceOpt = None) -> None:
    """Remove the budget of CATALOG (or of --namespace in it)."""
    try:
        run_with_pool(lambda pool: clear_budget(pool, catalog, namespace))
    except BudgetNotFound as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(1) from None
    err.print(
        f"budget cleared: {escape(catalog)}" + (f" / {escape(namespace)}" if namespace else "")
    )
