"""``icepack budget set|list|clear``: output, sizes, and the exit codes scripts rely on."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from typer.testing import CliRunner, Result

from icepack_core.cli.app import app
from icepack_core.cli.budgets import parse_size


@pytest.fixture
def cli(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    monkeypatch.setenv("ICEPACK_DATABASE_URL", database_url)
    monkeypatch.setenv("COLUMNS", "200")
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


def test_parse_size() -> None:
    assert parse_size("123") == 123
    assert parse_size("500MB") == 500 * 10**6
    assert parse_size("10GiB") == 10 * 2**30
    assert parse_size("2t") == 2 * 10**12


def test_budget_set_list_clear(cli: Callable[..., Result]) -> None:
    done = cli("budget", "set", "demo", "--bytes-per-hour", "1GiB", "--max-running", "2")
    assert done.exit_code == 0, done.output
    assert "1,073,741,824 bytes/hour, 2 running" in done.stdout
    assert cli("budget", "set", "demo", "--namespace", "sales", "--max-running", "1").exit_code == 0
    listed = json.loads(cli("budget", "list", "--json").stdout)
    assert [(b["catalog"], b["namespace"], b["max_running"]) for b in listed] == [
        ("demo", None, 2),
        ("demo", "sales", 1),
    ]
    assert listed[0]["rewrite_bytes_per_hour"] == 2**30 and listed[0]["running"] == 0
    table = cli("budget", "list")
    assert table.exit_code == 0 and "demo / sales" in table.stdout
    assert cli("budget", "clear", "demo", "--namespace", "sales").exit_code == 0
    missing = cli("budget", "clear", "demo", "--namespace", "sales")
    assert missing.exit_code == 1 and "no budget" in missing.output
    assert len(json.loads(cli("budget", "list", "--json").stdout)) == 1


def test_budget_bad_input_exits_2_naming_the_value(cli: Callable[..., Result]) -> None:
    bad = cli("budget", "set", "demo", "--bytes-per-hour", "lots")
    assert bad.exit_code == 2 and "'lots'" in bad.output
    zero = cli("budget", "set", "demo", "--max-running", "0")
    assert zero.exit_code == 2 and "max_running: 0" in zero.output
    nothing = cli("budget", "set", "demo")
    assert nothing.exit_code == 2 and "rewrite_bytes_per_hour" in nothing.output
    assert json.loads(cli("budget", "list", "--json").stdout) == []
