"""Commands that run Icepack itself: ``icepack migrate``, ``service``, ``up`` and ``demo``."""

from __future__ import annotations

import asyncio
import sys
from importlib.metadata import entry_points
from typing import Annotated

import typer
from rich.markup import escape

from icepack_core.cli.common import err, load_cli_settings
from icepack_core.db import pool as db
from icepack_core.db.migrate import migrate as run_migrations
from icepack_core.errors import IcepackError, MissingExtra
from icepack_core.runtime.service import Service, run_service
from icepack_core.spark.extra import require_spark
from icepack_core.types import SERVICE_NAMES


def load_service(name: str, **kwargs: object) -> Service:
    """The service registered under ``name`` in the ``icepack.services`` entry points."""
    found = {ep.name: ep for ep in entry_points(group="icepack.services")}
    if name not in found:
        raise typer.BadParameter(
            f"unknown service {name!r}; choose one of "
            f"{', '.join(sorted(found)) or '(none installed)'}"
        )
    factory = found[name].load()
    service: Service = factory(**kwargs)
    return service


def run_service_main(name: str, **kwargs: object) -> None:
    """Run one service in this process and exit with its code (2 when an optional extra it
    needs, such as the executor's Spark, is not installed)."""
    settings = load_cli_settings()
    service = load_service(name, **kwargs)
    try:
        code = asyncio.run(run_service(service, settings))
    except MissingExtra as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        code = 2
    sys.exit(code)


def migrate() -> None:
    """Create or upgrade the icepack schema (idempotent; safe to run concurrently)."""
    settings = load_cli_settings()

    async def go() -> list[int]:
        conn = await db.connect(settings, "migrate")
        try:
            return await run_migrations(conn)
        finally:
            await conn.close()

    try:
        applied = asyncio.run(go())
    except (OSError, IcepackError) as exc:
        err.print(f"[bold red]migration failed:[/] {exc}")
        raise typer.Exit(1) from None
    print(f"applied {applied}" if applied else "schema is up to date")


def service(
    name: Annotated[str, typer.Argument(help=f"one of: {', '.join(SERVICE_NAMES)}")],
    once: Annotated[
        bool, typer.Option(help="executor only: run one job (or none) and exit")
    ] = False,
) -> None:
    """Run one service in the foreground."""
    if once and name != "executor":
        raise typer.BadParameter("--once applies to the executor only", param_hint="--once")
    kwargs: dict[str, object] = {"once": True} if once else {}
    run_service_main(name, **kwargs)


def up(
    services: Annotated[
        list[str] | None,
        typer.Option("--service", "-s", help="run only these services (repeatable)"),
    ] = None,
) -> None:
    """Run every service locally, each in its own process, until Ctrl-C."""
    from icepack_core.local.stack import run_all

    settings = load_cli_settings()
    if "executor" in (services or SERVICE_NAMES):
        try:  # the executor child would die and be restarted forever: say so once, up front
            require_spark(settings.spark_engine, "icepack up (the executor service)")
        except MissingExtra as exc:
            err.print(
                f"[bold red]error:[/] {escape(str(exc))}; or leave the executor out "
                "(--service gateway --service discovery ...)",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(2) from None
    raise typer.Exit(run_all(settings, services or list(SERVICE_NAMES)))


def demo(
    duration: Annotated[float | None, typer.Option(help="stop after this many seconds")] = None,
    until_healthy: Annotated[
        bool,
        typer.Option("--until-healthy", help="exit 0 once every demo table is healthy (tests, CI)"),
    ] = False,
    deadline: Annotated[
        float,
        typer.Option(help="with --until-healthy: exit 1 if not healthy after this many seconds"),
    ] = 900.0,
    object_store: Annotated[
        bool,
        typer.Option(
            "--object-store",
            help="keep the demo lake on a local S3 (SeaweedFS, as the tests use), not on disk",
        ),
    ] = False,
) -> None:
    """Run every service on a small demo lake (written with Spark) and watch it heal."""
    from icepack_core.local.stack import run_demo

    raise typer.Exit(
        run_demo(
            duration, until_healthy=until_healthy, deadline=deadline, object_store=object_store
        )
    )
