"""Releasing a maintenance hold: ``POST /tables/{c}/{ns}/{t}/hold/release`` and ``icepack hold
show|list|release``, on real Postgres, with the hold written as the executor writes it after a
failed verification (``JobExecution._hold``). What must hold: the hold is cleared only for a
held table, exactly once, the previous hold, who and why are kept in the ``table.hold_released``
event (and answered), and a released table is admitted by the safety choke point again."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pytest
from typer.testing import CliRunner, Result

from icepack_core.access.tokens import TokenStore
from icepack_core.cli.app import app as cli_app
from icepack_core.cli.holds import candidates
from icepack_core.safety.holds import MAX_REASON
from tests.gateway.seed import Fleet
from tests.gateway.test_ui_safety import failed_verification_job

USERS = "/tables/demo/crm/users"
JOB = {
    "catalog": "demo",
    "namespace": "crm",
    "table": "users",
    "actions": [{"action": "rewrite_manifests"}],
}


@pytest.fixture
async def held(db: asyncpg.Pool, fleet: Fleet) -> dict[str, Any]:
    """``demo.crm.users`` held after a failed verification; returns the stored hold."""
    await failed_verification_job(db, fleet.tables["crm.users"])
    hold = await db.fetchval(
        "SELECT maintenance_hold FROM icepack.tables WHERE id = $1", fleet.tables["crm.users"]
    )
    assert hold and "changed the live contents" in hold["reason"]
    stored: dict[str, Any] = hold
    return stored


async def hold_of(db: asyncpg.Pool, table_id: int) -> dict[str, Any] | None:
    hold: dict[str, Any] | None = await db.fetchval(
        "SELECT maintenance_hold FROM icepack.tables WHERE id = $1", table_id
    )
    return hold


async def release_events(db: asyncpg.Pool) -> list[asyncpg.Record]:
    return await db.fetch(
        "SELECT table_id, payload FROM icepack.events "
        "WHERE topic = 'table.hold_released' ORDER BY id"
    )


@dataclass(frozen=True)
class Held:
    """``demo.crm.users`` on hold (``held``), with the client, pool and token to act on it."""

    client: httpx.AsyncClient
    db: asyncpg.Pool
    table_id: int
    hold: dict[str, Any]
    auth: dict[str, str]

    async def unchanged(self) -> None:
        """Nothing was released: the hold is as stored and no release event was written."""
        assert await hold_of(self.db, self.table_id) == self.hold
        assert await release_events(self.db) == []


@pytest.fixture
def users(
    client: httpx.AsyncClient,
    db: asyncpg.Pool,
    fleet: Fleet,
    held: dict[str, Any],
    auth: dict[str, str],
) -> Held:
    return Held(client, db, fleet.tables["crm.users"], held, auth)


async def test_release_clears_the_hold_and_records_who_and_why(users: Held) -> None:
    client, db, held, auth = users.client, users.db, users.hold, users.auth
    refused = await client.post("/jobs", json=JOB, headers=auth)
    assert refused.status_code == 409 and refused.json()["code"] == "TABLE_HELD"

    r = await client.post(
        f"{USERS}/hold/release", json={"reason": "  checked the rewrite  "}, headers=auth
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["table"]["maintenance_hold"] is None and body["table"]["id"] == users.table_id
    released = body["released"]
    assert released["previous_hold"] == held  # the whole hold, evidence included
    assert released["released_by"] == "token:tester"
    assert released["reason"] == "checked the rewrite"
    assert released["table"] == "demo.crm.users"
    assert await hold_of(db, users.table_id) is None
    (event,) = await release_events(db)
    assert event["table_id"] == users.table_id
    assert event["payload"]["previous_hold"] == held
    assert event["payload"]["released_by"] == "token:tester"
    assert event["payload"]["reason"] == "checked the rewrite"
    assert released["event_id"] == await db.fetchval(
        "SELECT id FROM icepack.events WHERE topic = 'table.hold_released'"
    )

    # Released: the choke point admits the table again.
    admitted = await client.post("/jobs", json=JOB, headers=auth)
    assert admitted.status_code == 201, admitted.text
    # A second release finds nothing to release and writes nothing.
    again = await client.post(f"{USERS}/hold/release", headers=auth)
    assert again.status_code == 409 and again.json()["code"] == "TABLE_NOT_HELD"
    assert "demo.crm.users is not on hold" in again.json()["message"]
    assert len(await release_events(db)) == 1


async def test_maintain_now_on_a_held_table_says_held_not_nothing_recommended(
    users: Held,
) -> None:
    """POST /jobs without actions: the hold is the reason, even with no recommendation."""
    client, db, auth = users.client, users.db, users.auth
    jobs = await db.fetchval("SELECT count(*) FROM icepack.jobs")
    r = await client.post(
        "/jobs", json={k: JOB[k] for k in ("catalog", "namespace", "table")}, headers=auth
    )
    assert r.status_code == 409 and r.json()["code"] == "TABLE_HELD", r.text
    assert "demo.crm.users is on hold: rewrite snapshot" in r.json()["message"]
    assert await db.fetchval("SELECT count(*) FROM icepack.jobs") == jobs


async def test_release_without_a_body_has_no_reason(users: Held) -> None:
    client, held, auth = users.client, users.hold, users.auth
    r = await client.post(f"{USERS}/hold/release", headers=auth)
    assert r.status_code == 200, r.text
    assert r.json()["released"]["reason"] is None
    assert r.json()["released"]["previous_hold"] == held


@pytest.mark.parametrize(
    "path,body,status,code,says",
    [
        ("/tables/demo/crm/nope/hold/release", None, 404, "TABLE_NOT_FOUND", "demo.crm.nope"),
        (
            "/tables/demo/web/clicks/hold/release",
            None,
            409,
            "TABLE_NOT_HELD",
            "demo.web.clicks is not on hold",
        ),
        (
            f"{USERS}/hold/release",
            {"reason": "x" * (MAX_REASON + 1)},
            422,
            "INVALID_PARAMETER",
            "reason",
        ),
        (f"{USERS}/hold/release", {"reason": "a\u0000b"}, 422, "INVALID_PARAMETER", "NUL"),
        (
            f"{USERS}/hold/release",
            {"reason": "ok", "force": True},
            422,
            "INVALID_PARAMETER",
            "force",
        ),
        (f"{USERS}/hold/release", ["reason"], 422, "INVALID_PARAMETER", "body"),
        (f"{USERS}/hold/release?now=1", None, 422, "INVALID_PARAMETER", "now"),
    ],
)
async def test_release_refusals_name_the_problem_and_change_nothing(
    users: Held,
    path: str,
    body: dict[str, Any] | list[str] | None,
    status: int,
    code: str,
    says: str,
) -> None:
    client, auth = users.client, users.auth
    r = (
        await client.post(path, json=body, headers=auth)
        if body is not None
        else await client.post(path, headers=auth)
    )
    assert r.status_code == status, r.text
    assert r.json()["code"] == code
    assert says in r.json()["message"] + json.dumps(r.json()["detail"]), r.json()
    await users.unchanged()


async def test_concurrent_releases_release_once(users: Held) -> None:
    client, db, auth = users.client, users.db, users.auth
    answers = await asyncio.gather(
        *[client.post(f"{USERS}/hold/release", headers=auth) for _ in range(6)]
    )
    assert sorted(a.status_code for a in answers) == [200] + [409] * 5
    assert len(await release_events(db)) == 1


async def test_released_by_names_the_token(
    client: httpx.AsyncClient, db: asyncpg.Pool, fleet: Fleet, held: dict[str, Any]
) -> None:
    token, _ = await TokenStore(db).create("night-shift")
    r = await client.post(
        f"{USERS}/hold/release", json={"reason": "ok"}, headers={"Authorization": f"Bearer {token}"}
    )
    assert r.json()["released"]["released_by"] == "token:night-shift"
    # The secret itself never reaches the audit trail.
    assert token not in json.dumps([dict(e) for e in await release_events(db)], default=str)


# -- the CLI ---------------------------------------------------------------------------------


@pytest.fixture
def cli(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Awaitable[Result]]:
    monkeypatch.setenv("ICEPACK_DATABASE_URL", database_url)
    monkeypatch.setenv("COLUMNS", "200")
    runner = CliRunner()
    return lambda *args: asyncio.to_thread(runner.invoke, cli_app, list(args))


async def test_cli_hold_show_list_and_release(
    cli: Callable[..., Awaitable[Result]], db: asyncpg.Pool, fleet: Fleet, held: dict[str, Any]
) -> None:
    users = fleet.tables["crm.users"]
    shown = await cli("hold", "show", "demo.crm.users")
    assert shown.exit_code == 0, shown.output
    assert "demo.crm.users is ON HOLD" in shown.stdout
    assert "changed the live contents" in shown.stdout and "rewrite_data_files" in shown.stdout
    as_json = json.loads((await cli("hold", "show", "demo.crm.users", "--json")).stdout)
    assert as_json == {"table": "demo.crm.users", "held": True, "hold": held}
    listed = json.loads((await cli("hold", "list", "--json")).stdout)
    assert listed == [{"table": "demo.crm.users", "hold": held}]
    assert "not on hold" in (await cli("hold", "show", "demo.web.clicks")).stdout

    released = await cli(
        "hold", "release", "demo.crm.users", "--reason", "rows re-checked", "--json"
    )
    assert released.exit_code == 0, released.output
    out = json.loads(released.stdout)
    assert out["previous_hold"] == held and out["reason"] == "rows re-checked"
    assert out["released_by"].startswith("cli:")
    assert await hold_of(db, users) is None
    (event,) = await release_events(db)
    assert event["payload"]["released_by"] == out["released_by"]
    assert event["payload"]["reason"] == "rows re-checked"
    assert event["payload"]["previous_hold"] == held

    again = await cli("hold", "release", "demo.crm.users")
    assert again.exit_code == 1 and "is not on hold" in again.stderr
    assert json.loads((await cli("hold", "list", "--json")).stdout) == []


async def test_cli_release_prints_the_previous_hold(
    cli: Callable[..., Awaitable[Result]], db: asyncpg.Pool, fleet: Fleet, held: dict[str, Any]
) -> None:
    released = await cli("hold", "release", "demo.crm.users")
    assert released.exit_code == 0, released.output
    assert "released the hold on demo.crm.users" in released.stdout
    assert "previous hold:" in released.stdout and "changed the live contents" in released.stdout


@pytest.mark.parametrize(
    "args,code,says",
    [
        (["hold", "release", "demo.crm.nope"], 1, "not known to Icepack"),
        (["hold", "show", "demo.crm.nope"], 1, "not known to Icepack"),
        (["hold", "release", "users"], 2, "CATALOG.NAMESPACE.TABLE"),
        (
            ["hold", "release", "demo.crm.users", "--reason", "x" * (MAX_REASON + 1)],
            2,
            f"at most {MAX_REASON}",
        ),
    ],
)
async def test_cli_refusals_exit_codes(
    cli: Callable[..., Awaitable[Result]],
    users: Held,
    args: list[str] | list[Any],
    code: int,
    says: str,
) -> None:
    result = await cli(*args)
    assert result.exit_code == code, result.output
    assert says in result.output
    await users.unchanged()


def test_table_names_resolve_to_candidates() -> None:
    assert candidates("demo.crm.users", ["icepack"]) == [
        ("demo", "crm", "users"),
        ("icepack", "demo.crm", "users"),
    ]
    assert candidates("crm.users", ["icepack"]) == [("icepack", "crm", "users")]
    assert candidates("demo.crm.users", ["a", "b"]) == [("demo", "crm", "users")]
    assert candidates(r"c.a\.b.t", ["a", "b"]) == [("c", r"a\.b", "t")]
    assert candidates("demo.a.b.t", ["x", "y"]) == [("demo", "a.b", "t")]
