"""The UI and ``icepack job`` on data written by the real producers: the planner's stored
recommendation (actions with reasons and params, skipped actions with why), a job's safety
(live rows apart from deleted rows removed, verification evidence, rollback and hold), and the
token field the UI needs when ``ICEPACK_GATEWAY_READ_AUTH=true``. Headless Debian Chromium."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import asyncpg
import pytest
from typer.testing import CliRunner

from icepack_core.access.tokens import TokenStore
from icepack_core.cli.app import app as cli_app
from icepack_core.execution.job_execution import JobExecution
from icepack_core.execution.maintenance import VerificationFailed
from icepack_core.inspection.health import assess
from icepack_core.inspection.status import TableStatus
from icepack_core.inspection.store import record_inspection
from icepack_core.intents import RewriteDataFiles, RewritePositionDeleteFiles
from icepack_core.local.ports import free_port
from icepack_core.planning.planner import Planner
from icepack_core.queue.jobs import JobQueue
from icepack_core.runtime.probes import make_server
from icepack_core.safety.verification import Evidence, Rollback, SnapshotCheck
from icepack_core.settings import Settings, load_settings
from icepack_gateway.app import create_app
from tests.gateway.seed import ORDERS_REWRITE_OUTPUT, Fleet, add_table, status_doc
from tests.gateway.test_ui import ARTIFACTS, _page, browser  # noqa: F401 (fixture)

NOW = datetime.now(UTC)


@contextlib.asynccontextmanager
async def serving(db: asyncpg.Pool, settings: Settings) -> AsyncIterator[str]:
    port = free_port()
    server = make_server(create_app(db, settings=settings), "127.0.0.1", port)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


@pytest.fixture
async def base(db: asyncpg.Pool, database_url: str) -> AsyncIterator[str]:
    async with serving(db, load_settings(database_url=database_url)) as url:
        yield url


async def planned_table(db: asyncpg.Pool) -> tuple[int, dict[str, Any]]:
    """``demo.shop.carts``: inspected (stored as the inspector stores it, assessed by the real
    health rules) and planned by the real planner. Returns its id and the stored
    recommendation."""
    async with db.acquire() as conn, conn.transaction():
        table_id = await add_table(conn, "shop", "carts")
        status = TableStatus.model_validate(
            status_doc(
                "shop",
                "carts",
                data_file_count=400,
                small_file_count=380,
                small_file_bytes=380 * 1_000_000,
                snapshot_count=150,
                inspected_at=NOW.isoformat(),
                oldest_snapshot_at=(NOW - timedelta(days=30)).isoformat(),
                current_snapshot_at=NOW.isoformat(),
            )
        )
        await record_inspection(
            cast(asyncpg.Connection, conn), table_id, status, assess(status, now=NOW)
        )
    outcome = await Planner(Settings(), db, JobQueue(db)).plan(table_id, now=NOW)
    stored = await db.fetchval(
        "SELECT actions FROM icepack.recommendations WHERE id = $1", outcome.recommendation_id
    )
    return table_id, stored


async def test_recommendation_shows_each_action_and_each_skip(
    base: str, browser: object, db: asyncpg.Pool
) -> None:
    _, stored = await planned_table(db)
    assert stored["actions"] and stored["skipped"]  # the real planner wrote both kinds
    errors: list[str] = []
    context, page = await _page(browser, 1280, 900, errors)
    try:
        await page.goto(f"{base}/ui/#/table/demo/shop/carts")
        panel = page.locator("[data-test=recommendation]")
        await panel.wait_for()
        items = panel.locator("[data-test=rec-action]")
        await items.first.wait_for()
        assert await items.count() == len(stored["actions"])
        for n, intent in enumerate(stored["actions"]):
            text = await items.nth(n).inner_text()
            assert intent["action"] in text and intent["reason"] in text, (intent, text)
            for key in intent["params"]:
                assert f"{key}=" in text, (key, text)
        skipped = panel.locator("[data-test=rec-skipped]")
        assert await skipped.count() == len(stored["skipped"])
        for n, skip in enumerate(stored["skipped"]):
            text = await skipped.nth(n).inner_text()
            assert skip["reason"] in text, (skip, text)
            assert skip["action"] in text or skip["action"] == "*"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        await panel.screenshot(path=str(ARTIFACTS / "recommendation-1280.png"))
        assert errors == [], errors
    finally:
        await context.close()


async def failed_verification_job(db: asyncpg.Pool, table_id: int) -> int:
    """A rewrite whose post-commit check failed, recorded and held as ``JobExecution`` does:
    the evidence as the action's ``output.verification``, the table put on hold, the job
    failed."""
    queue = JobQueue(db)
    enqueued = await queue.enqueue(table_id, [RewriteDataFiles()], dedupe_key="verify-fail")
    job = await queue.claim_id(enqueued.job.id, "executor@test:2", 600)
    assert job is not None
    bad = SnapshotCheck(
        snapshot_id=9_123_456_789_012_345_678,
        parent_id=9_000_000_000_000_000_001,
        rows_before=1000,
        rows_after=990,
        checksum_before="1234567890123456789",
        checksum_after="-987654321987654321",
        checked="parent",
        ok=False,
    )
    rollback = Rollback(
        status="rolled_back", to_snapshot_id=bad.parent_id, bad_snapshot_id=bad.snapshot_id
    )
    evidence = Evidence(
        status="violation",
        start_snapshot_id=bad.parent_id,
        snapshots=[bad],
        violation=bad,
        rollback=rollback,
    )
    exc = VerificationFailed(
        "rewrite snapshot 9123456789012345678 changed the live contents "
        "of demo.crm.users: 1000 rows -> 990 rows, checksum differs",
        evidence,
    )
    await JobExecution(db, None, None)._hold(  # type: ignore[arg-type]
        table_id, "rewrite_data_files", str(exc), exc.evidence.to_json()
    )
    await queue.record_action(
        job,
        action="rewrite_data_files",
        state="failed",
        started_at=NOW,
        finished_at=NOW,
        procedure="rewrite_data_files",
        output={"verification": exc.evidence.to_json()},
        error=str(exc),
    )
    await queue.fail(job, str(exc), retryable=False)
    return job.id


async def test_job_page_shows_live_rows_deleted_rows_and_evidence(
    base: str,
    browser: object,
    db: asyncpg.Pool,
    fleet: Fleet,
) -> None:
    errors: list[str] = []
    context, page = await _page(browser, 1280, 900, errors)
    try:
        await page.goto(f"{base}/ui/#/job/{fleet.jobs['done']}")
        safety = page.locator("[data-test=safety]").first
        await safety.wait_for()
        assert await safety.locator("[data-test=verdict]").inner_text() == "verified"
        live = await safety.locator("[data-test=live-rows]").inner_text()
        assert "256\t256" in live and "unchanged" in live and "verified" in live, live
        stored = await safety.locator("[data-test=stored-rows]").inner_text()
        assert "320\t256" in stored and "64 deleted rows physically removed" in stored, stored
        assert "4" in await safety.locator("[data-test=delete-files]").inner_text()
        row = await safety.locator("[data-test=evidence-row]").inner_text()
        record = ORDERS_REWRITE_OUTPUT["verification"]["snapshots"][0]
        assert str(record["snapshot_id"]) in row and str(record["parent_id"]) in row
        assert "256 → 256" in row
        # 64-bit checksums shown with their exact digits (not rounded by JS numbers).
        assert f"{record['checksum_before']} → {record['checksum_after']}" in row, row
        # No row count is presented as a loss anywhere on the page.
        for cell in await page.locator("td.down, td.up").all_inner_texts():
            assert "64" not in cell, cell
        assert await page.locator("[data-test=hold]").is_hidden()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "job-safety-1280.png"), full_page=True)
        assert errors == [], errors
    finally:
        await context.close()


async def test_job_page_shows_a_failed_verification_rollback_and_hold(
    base: str,
    browser: object,
    db: asyncpg.Pool,
    fleet: Fleet,
) -> None:
    job_id = await failed_verification_job(db, fleet.tables["crm.users"])
    errors: list[str] = []
    context, page = await _page(browser, 390, 844, errors)
    try:
        await page.goto(f"{base}/ui/#/job/{job_id}")
        safety = page.locator("[data-test=safety]").first
        await safety.wait_for()
        assert await safety.locator("[data-test=verdict]").inner_text() == "verification failed"
        row = await safety.locator("[data-test=evidence-row]").inner_text()
        assert "9123456789012345678" in row and "9000000000000000001" in row
        assert "1,000 → 990" in row and "rolled back" in row
        assert "1234567890123456789 → -987654321987654321" in row
        hold = page.locator("[data-test=hold]")
        await hold.wait_for()
        assert "changed the live contents" in await hold.inner_text()
        assert (
            await page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
            <= 0
        )
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "job-held-390.png"), full_page=True)
        # The table's own page says it is held, too.
        await page.locator("section[data-view=job] a[href^='#/table/']").click()
        table_hold = page.locator("[data-test=table-hold]")
        await table_hold.wait_for()
        assert "changed the live contents" in await table_hold.inner_text()
        assert errors == [], errors
    finally:
        await context.close()


async def test_a_violation_not_rolled_back_is_shown_so(
    base: str,
    browser: object,
    db: asyncpg.Pool,
    fleet: Fleet,
) -> None:
    """A violation whose rollback was refused (a writer committed on top): every checked
    snapshot shown, the bad one as not rolled back."""
    queue = JobQueue(db)
    enqueued = await queue.enqueue(
        fleet.tables["crm.users"],
        [RewritePositionDeleteFiles()],
        dedupe_key="verification-key",
    )
    job = await queue.claim_id(enqueued.job.id, "executor@test:3", 600)
    assert job is not None
    good, bad = (
        SnapshotCheck(
            snapshot_id=parent + 1,
            parent_id=parent,
            rows_before=50,
            rows_after=rows,
            checksum_before="7",
            checksum_after=checksum,
            checked="parent",
            ok=rows == 50,
        )
        for parent, rows, checksum in ((10, 50, "7"), (11, 49, "6"))
    )
    evidence = Evidence(
        status="violation",
        start_snapshot_id=10,
        snapshots=[good, bad],
        violation=bad,
        rollback=Rollback(
            status="not_rolled_back",
            to_snapshot_id=11,
            bad_snapshot_id=12,
            current_snapshot_id=13,
            reason="snapshots were committed on top of the bad one",
        ),
    )
    output = {"rewritten_delete_files_count": 3, "verification": evidence.to_json()}
    await queue.record_action(
        job,
        action="rewrite_position_delete_files",
        state="failed",
        started_at=NOW,
        finished_at=NOW,
        output=output,
        impact={},
    )
    await queue.fail(job, "verification failed", retryable=False)
    errors: list[str] = []
    context, page = await _page(browser, 1280, 900, errors)
    try:
        await page.goto(f"{base}/ui/#/job/{job.id}")
        rows = page.locator("[data-test=evidence-row]")
        await rows.first.wait_for()
        first, second = await rows.all_inner_texts()
        assert "50 → 50" in first and "7 → 7" in first and "rolled back" not in first
        assert "50 → 49" in second and "7 → 6" in second and "not rolled back" in second
        assert await page.locator("[data-test=verdict]").inner_text() == "verification failed"
        assert errors == [], errors
    finally:
        await context.close()


def test_cli_job_shows_the_same_safety(
    database_url: str, db: asyncpg.Pool, fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ICEPACK_DATABASE_URL", database_url)
    monkeypatch.setenv("COLUMNS", "200")
    runner = CliRunner()
    result = runner.invoke(cli_app, ["job", str(fleet.jobs["done"])])
    assert result.exit_code == 0, result.output
    out = result.stdout
    record = ORDERS_REWRITE_OUTPUT["verification"]["snapshots"][0]
    assert "rewrite_data_files: verified" in out
    assert "live rows    256 -> 256  unchanged (verified by scanning both snapshots)" in out
    assert "stored rows  320 -> 256  (incl. deleted)  64 deleted rows physically removed" in out
    assert "delete files applied: 4" in out
    assert (
        f"snapshot {record['snapshot_id']} (parent {record['parent_id']}): rows 256 -> 256"
        f", checksum {record['checksum_before']} -> {record['checksum_after']}"
    ) in out
    assert "record count" not in out  # the raw stored-count drop is not shown as a change
    detail = json.loads(runner.invoke(cli_app, ["job", str(fleet.jobs["done"]), "--json"]).stdout)
    safety = detail["job_actions"][0]["safety"]
    assert safety["verdict"] == "verified" and safety["deleted_rows_removed"] == 64
    assert safety["live_rows"] == {"before": 256, "after": 256, "source": "verification"}


async def test_cli_job_shows_rollback_and_hold(
    database_url: str, db: asyncpg.Pool, fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = await failed_verification_job(db, fleet.tables["crm.users"])
    monkeypatch.setenv("ICEPACK_DATABASE_URL", database_url)
    monkeypatch.setenv("COLUMNS", "200")
    result = await asyncio.to_thread(CliRunner().invoke, cli_app, ["job", str(job_id)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "rewrite_data_files: failed - verification FAILED" in out and "rolled back" in out
    assert "rows 1000 -> 990, checksum 1234567890123456789 -> -987654321987654321" in out
    assert "table on hold:" in out and "changed the live contents" in out


async def test_read_auth_ui_asks_for_a_token_and_uses_it(
    browser: object,
    db: asyncpg.Pool,
    database_url: str,
    fleet: Fleet,
) -> None:
    token, _ = await TokenStore(db).create("ui-reader")
    settings = load_settings(database_url=database_url, gateway_read_auth=True)
    errors: list[str] = []
    async with serving(db, settings) as url:
        context, page = await _page(browser, 1280, 900, errors)
        try:
            await page.goto(f"{url}/ui/")
            form = page.locator("[data-test=token-form]")
            await form.wait_for()
            assert "needs an API token" in await form.inner_text()
            assert await page.locator("[data-test=table-row]").count() == 0
            await page.fill("[data-test=token-input]", token)
            await page.click("[data-test=token-form] button[type=submit]")
            await page.locator("[data-test=table-row]").first.wait_for()
            assert await form.is_hidden()
            stored = await page.evaluate("() => sessionStorage.getItem('icepack.token')")
            assert stored == token
            # Every page's API calls carry it: a job page loads too.
            await page.goto(f"{url}/ui/#/job/{fleet.jobs['done']}")
            await page.locator("[data-test=safety]").first.wait_for()
            assert all("401" in e for e in errors), errors  # only the first, token-less load
        finally:
            await context.close()
