"""What every ``icepack`` command shares: the one settings loader, consoles, JSON output, and
a small database pool for commands that read or write Icepack's database.

Exit codes scripts can trust: 0 done, 1 not found or failed (database unreachable included),
2 bad usage or bad settings. ``--json`` prints machine-readable output on stdout; messages go to
stderr.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any, TypeVar

import asyncpg
import typer
from rich.console import Console

from icepack_core.db import pool as db
from icepack_core.errors import ConfigError
from icepack_core.settings import Settings, load_settings

out = Console()
err = Console(stderr=True)
R = TypeVar("R")
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


def load_cli_settings(**overrides: Any) -> Settings:
    """The settings (``ICEPACK_*`` plus ``overrides``); bad settings exit 2 naming the variable."""
    try:
        return load_settings(**overrides)
    except ConfigError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2) from None


def run_with_pool(work: Callable[[asyncpg.Pool], Awaitable[R]]) -> R:
    """Run ``work`` on a small pool; an unreachable database exits 1 with the reason."""
    settings = load_cli_settings().model_copy(update={"db_pool_min": 1, "db_pool_max": 2})

    async def go() -> R:
        pool = await db.create_pool(settings, "cli")
        try:
            return await work(pool)
        finally:
            await pool.close()

    try:
        return asyncio.run(go())
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        err.print(f"[bold red]error:[/] database {settings.masked_dsn}: {exc}")
        raise typer.Exit(1) from None


def json_default(value: object) -> object:
    """``json.dumps`` default: datetimes as RFC 3339; anything else unknown is an error."""
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(type(value).__name__)


def print_json(value: Any) -> None:
    """``value`` as JSON on stdout (datetimes as RFC 3339)."""
    print(json.dumps(value, default=json_default, indent=2))
