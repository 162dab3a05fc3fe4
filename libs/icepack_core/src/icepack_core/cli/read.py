"""Read-only CLI commands: ``icepack tables``, ``icepack status``, ``icepack health``.

They are standalone: they talk to the catalogs (or a metadata file) directly through the
settings, with no services and no database. A failure prints INSPECTION_FAILED naming the cause
and exits 1, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from icepack_core.cli.common import JsonOpt, err, load_cli_settings, out
from icepack_core.discovery.catalogs import CatalogSet, ListedTable, list_table_locations
from icepack_core.errors import InspectionFailed
from icepack_core.inspection.health import Assessment, assess, inspection_failed
from icepack_core.inspection.inspector import (
    Inspector,
    MemoryManifestCache,
    inspect_metadata_location,
)
from icepack_core.inspection.status import TableStatus
from icepack_core.settings import Settings
from icepack_core.types import TableRef, join_namespace, split_namespace


def parse_table(name: str, settings: Settings) -> TableRef:
    """``catalog.namespace.table``, or ``namespace.table`` when one catalog is configured.

    Raises:
        typer.BadParameter: the name does not resolve to a configured catalog.
    """
    catalogs = [c.name for c in settings.effective_catalogs()]
    parts = split_namespace(name)  # a dot inside a level is written \.
    if len(parts) >= 3 and parts[0] in catalogs:
        return TableRef(parts[0], join_namespace(parts[1:-1]), parts[-1])
    if len(parts) >= 2 and len(catalogs) == 1:
        return TableRef(catalogs[0], join_namespace(parts[:-1]), parts[-1])
    raise typer.BadParameter(
        f"{name!r}: use CATALOG.NAMESPACE.TABLE (catalogs: {', '.join(catalogs)})"
        if len(catalogs) > 1
        else f"{name!r}: use NAMESPACE.TABLE or CATALOG.NAMESPACE.TABLE",
        param_hint="TABLE",
    )


def _fail(message: str, as_json: bool) -> typer.Exit:
    if as_json:
        out.print_json(json.dumps(InspectionFailed(message).to_json()))
    else:
        err.print(f"[bold red]INSPECTION_FAILED:[/] {message}", markup=True, highlight=False)
    return typer.Exit(1)


def _print_status(status: TableStatus) -> None:
    grid = RichTable(
        title=f"{status.catalog}.{status.namespace}.{status.table}".strip("."), show_header=False
    )
    for key, value in status.model_dump().items():
        grid.add_row(key, json.dumps(value) if isinstance(value, dict) else str(value))
    out.print(grid)


def _assessment_json(ref: str, assessment: Assessment) -> dict[str, object]:
    return {"table": ref, **assessment.model_dump(mode="json")}


def _print_health(ref: str, assessment: Assessment) -> None:
    colour = {"healthy": "green", "warning": "yellow", "critical": "red"}.get(
        assessment.health.value, "magenta"
    )
    out.print(f"{ref}: [{colour}]{assessment.health.value}[/] score {assessment.score}")
    for issue in assessment.issues:
        out.print(f"  {issue.severity:8} {issue.code}: {issue.message}", highlight=False)


async def _inspect(settings: Settings, ref: TableRef) -> TableStatus:
    return await Inspector(settings, cache=MemoryManifestCache()).inspect(ref)


def tables(as_json: JsonOpt = False) -> None:
    """List every table of every configured catalog (straight from the catalogs)."""
    settings = load_cli_settings()
    configs = settings.effective_catalogs()
    catalogs = CatalogSet(configs)

    async def go() -> tuple[list[ListedTable], dict[str, str]]:
        listed: list[ListedTable] = []
        errors: dict[str, str] = {}
        for cfg in configs:
            try:
                catalog = await catalogs.get(cfg.name)
                listed += await list_table_locations(catalog, cfg)
            except Exception as exc:
                errors[cfg.name] = f"{type(exc).__name__}: {exc}"
        return listed, errors

    listed, errors = asyncio.run(go())
    if as_json:
        out.print_json(
            json.dumps(
                {
                    "tables": [
                        {
                            "catalog": t.ref.catalog,
                            "namespace": t.ref.namespace,
                            "table": t.ref.name,
                            "metadata_location": t.metadata_location,
                        }
                        for t in listed
                    ],
                    "errors": errors,
                }
            )
        )
    else:
        grid = RichTable("catalog", "namespace", "table", "metadata location")
        for t in listed:
            grid.add_row(t.ref.catalog, t.ref.namespace, t.ref.name, t.metadata_location or "?")
        out.print(grid)
        for name, error in errors.items():
            err.print(f"[bold red]catalog {name} failed:[/] {error}", highlight=False)
    if errors:
        raise typer.Exit(1)


def status(
    table: Annotated[str | None, typer.Argument(help="[CATALOG.]NAMESPACE.TABLE")] = None,
    metadata_location: Annotated[
        str | None, typer.Option(help="inspect a metadata JSON file directly, with no catalog")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a table's TableStatus metrics (docs/table-status.md)."""
    if (table is None) == (metadata_location is None):
        raise typer.BadParameter("give either TABLE or --metadata-location")
    try:
        if metadata_location is not None:
            status = asyncio.run(inspect_metadata_location(metadata_location))
        else:
            settings = load_cli_settings()
            assert table is not None
            status = asyncio.run(_inspect(settings, parse_table(table, settings)))
    except InspectionFailed as exc:
        raise _fail(exc.message, as_json) from None
    if as_json:
        out.print_json(status.model_dump_json())
    else:
        _print_status(status)


def health(
    table: Annotated[str | None, typer.Argument(help="[CATALOG.]NAMESPACE.TABLE")] = None,
    all_tables: Annotated[bool, typer.Option("--all", help="every table of every catalog")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Assess a table's health (or every table's with --all)."""
    if (table is None) == (not all_tables):
        raise typer.BadParameter("give either TABLE or --all")
    settings = load_cli_settings()
    if table is not None:
        ref = parse_table(table, settings)
        try:
            assessment = assess(asyncio.run(_inspect(settings, ref)))
        except InspectionFailed as exc:
            assessment = inspection_failed(exc.message)
        if as_json:
            out.print_json(json.dumps(_assessment_json(str(ref), assessment)))
        else:
            _print_health(str(ref), assessment)
        if assessment.health.value == "unknown":
            raise typer.Exit(1)
        return
    results, errors = asyncio.run(_health_all(settings, quiet=as_json))
    if as_json:
        out.print_json(
            json.dumps({"tables": [_assessment_json(r, a) for r, a in results], "errors": errors})
        )
    else:
        for ref_name, assessment in results:
            _print_health(ref_name, assessment)
        for name, error in errors.items():
            err.print(f"[bold red]catalog {name} failed:[/] {error}", highlight=False)
    if errors or any(a.health.value == "unknown" for _, a in results):
        raise typer.Exit(1)


async def _health_all(
    settings: Settings, quiet: bool
) -> tuple[list[tuple[str, Assessment]], dict[str, str]]:
    configs = settings.effective_catalogs()
    inspector = Inspector(settings, cache=MemoryManifestCache())
    refs: list[TableRef] = []
    errors: dict[str, str] = {}
    for cfg in configs:
        try:
            catalog = await inspector.catalogs.get(cfg.name)
            refs += [t.ref for t in await list_table_locations(catalog, cfg)]
        except Exception as exc:
            errors[cfg.name] = f"{type(exc).__name__}: {exc}"
    results: list[tuple[str, Assessment]] = []
    with Progress(
        TextColumn("inspecting"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=quiet,
        transient=True,
    ) as progress:
        task = progress.add_task("tables", total=len(refs))
        for ref in refs:
            try:
                assessment = assess(await inspector.inspect(ref))
            except InspectionFailed as exc:
                assessment = inspection_failed(exc.message)
            results.append((str(ref), assessment))
            progress.advance(task)
    return results, errors
