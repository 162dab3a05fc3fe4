"""``icepack token|jobs|job|events``: output and the exit codes scripts rely on."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from typer.testing import CliRunner, Result

from icepack_core.cli.app import app
from tests.gateway.seed import Fleet


@pytest.fixture
def cli(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    monkeypatch.setenv("ICEPACK_DATABASE_URL", database_url)
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps to the terminal width
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


def test_token_create_revoke_exit_codes(cli: Callable[..., Result], fleet: Fleet) -> None:
    created = cli("token", "create", "ci")
    assert created.exit_code == 0, created.output
    assert created.stdout.strip().startswith("icepack_")
    assert cli("token", "create", "ci").exit_code == 1  # a live token has that name
    assert cli("token", "create", "bad name").exit_code == 2
    listed = json.loads(cli("token", "list", "--json").stdout)
    assert [t["name"] for t in listed] == ["ci"] and listed[0]["revoked_at"] is None
    assert cli("token", "revoke", "ci").exit_code == 0
    assert cli("token", "revoke", "ci").exit_code == 1


def test_token_create_with_a_read_scope(cli: Callable[..., Result], fleet: Fleet) -> None:
    created = cli("token", "create", "ui", "--scope", "read")
    assert created.exit_code == 0, created.output
    assert "scope read" in created.stderr
    assert cli("token", "create", "w").exit_code == 0  # write is the default
    listed = {t["name"]: t["scope"] for t in json.loads(cli("token", "list", "--json").stdout)}
    assert listed == {"ui": "read", "w": "write"}
    bad = cli("token", "create", "x", "--scope", "admin")
    assert bad.exit_code == 2 and "must be one of: read, write" in bad.stderr


def test_jobs_job_and_events(cli: Callable[..., Result], fleet: Fleet) -> None:
    jobs = json.loads(cli("jobs", "--json").stdout)
    assert {j["id"] for j in jobs} == set(fleet.jobs.values())
    failed = json.loads(cli("jobs", "--state", "failed", "--json").stdout)
    assert [j["error"] for j in failed] == ["Spark session lost"]
    assert cli("jobs", "--state", "bogus").exit_code == 2
    table = cli("jobs")
    assert table.exit_code == 0 and "demo.sales.orders" in table.stdout
    detail = json.loads(cli("job", str(fleet.jobs["done"]), "--json").stdout)
    assert detail["job_actions"][0]["impact"]["after"]["data_file_count"] == 90
    assert cli("job", str(fleet.jobs["done"])).exit_code == 0
    assert cli("job", "424242").exit_code == 1
    assert cli("job", "abc").exit_code == 2
    lines = cli("events", "--json", "--topic", "job.finished").stdout.splitlines()
    assert [json.loads(x)["table"] for x in lines] == ["demo.sales.orders", "demo.crm.users"]
    assert "table.discovered" in cli("events").stdout


def test_unreachable_database_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICEPACK_DATABASE_URL", "postgresql://postgres@127.0.0.1:1/x")
    assert CliRunner().invoke(app, ["jobs"]).exit_code == 1
