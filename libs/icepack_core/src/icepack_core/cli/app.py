"""The ``icepack`` command line: one entry point for operators, services and the demo.

Every command is a plain function in its module; this module is the one place they are named
and grouped.
"""

from __future__ import annotations

from collections.abc import Callable

import typer

from icepack_core.cli import budgets, holds, maintain, ops, read, restore, services

app = typer.Typer(
    help="Icepack: a control plane for Apache Iceberg table maintenance.",
    no_args_is_help=True,
    add_completion=False,
)
Command = Callable[..., None]
GROUPS: dict[str, tuple[str, dict[str, Command]]] = {
    "token": (
        "Operator API tokens for the gateway's write endpoints.",
        {"create": ops.token_create, "revoke": ops.token_revoke, "list": ops.token_list},
    ),
    "hold": (
        "Maintenance holds: why automatic maintenance of a table stopped, and releasing it.",
        {"show": holds.hold_show, "list": holds.hold_list, "release": holds.hold_release},
    ),
    "budget": (
        "Maintenance budgets: rewrite bytes per hour and running jobs per catalog or namespace.",
        {"set": budgets.budget_set, "list": budgets.budget_list, "clear": budgets.budget_clear},
    ),
}
COMMANDS: dict[str, Command] = {
    "migrate": services.migrate,
    "service": services.service,
    "up": services.up,
    "demo": services.demo,
    "tables": read.tables,
    "status": read.status,
    "health": read.health,
    "recommend": maintain.recommend_cmd,
    "maintain": maintain.maintain_cmd,
    "restore": restore.restore_cmd,
    "jobs": ops.jobs,
    "job": ops.job,
    "events": ops.events,
}
for name, command in COMMANDS.items():
    app.command(name)(command)
for name, (help_text, commands) in GROUPS.items():
    group = typer.Typer(help=help_text, no_args_is_help=True)
    for sub, command in commands.items():
        group.command(sub)(command)
    app.add_typer(group, name=name)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
