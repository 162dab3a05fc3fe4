""" "Maintain now" on the table page, in headless Debian Chromium against the real gateway.

Every outcome is shown, never a silent failure: no token (the token field opens), an unknown
token (401), a held table (409 TABLE_HELD), nothing recommended (409), a job already active
(200), a new job (201) with a link to its page; and the job page follows the job until it is
terminal. The end-to-end test takes a small-files table written by Spark through the real
discovery, inspector and planner, clicks the button, runs the real executor, and watches the
job page reach "succeeded" while the table's rows and checksum stay the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from icepack_core.access.tokens import TokenStore
from icepack_core.settings import Settings
from icepack_discovery.service import DiscoveryService
from icepack_executor.service import ExecutorService
from icepack_inspector.service import InspectorService
from icepack_planner.service import PlannerService
from tests.execution.spark_tables import data_file_count, fingerprint, make_small_files_table
from tests.gateway.seed import Fleet
from tests.gateway.test_ui import ARTIFACTS, _page, browser  # noqa: F401 (fixture)
from tests.gateway.test_ui_safety import base, failed_verification_job, serving  # noqa: F401
from tests.support.services import running
from tests.support.settings import service_settings
from tests.support.waiting import eventually

NS = "maintain_now"
JOB_STATE = "() => document.querySelector('[data-test=job-state]')?.textContent"


async def use_token(page: Any, token: str) -> None:
    """Type the token into the UI's token field, as an operator does."""
    form = page.locator("[data-test=token-form]")
    if await form.is_hidden():
        await page.click("[data-test=token-button]")
    await page.fill("[data-test=token-input]", token)
    await page.click("[data-test=token-form] button[type=submit]")
    await form.wait_for(state="hidden")


async def click_maintain(page: Any, expect: str) -> str:
    """Click "Maintain now" and return the text of the outcome (``result`` or ``error``)."""
    for other in ("result", "error"):  # a previous outcome must not be mistaken for this one
        await page.locator(f"[data-test=maintain-{other}]").wait_for(state="hidden")
    await page.click("[data-test=maintain-button]")
    outcome = page.locator(f"[data-test=maintain-{expect}]")
    await outcome.wait_for()
    text: str = await outcome.inner_text()
    return text


async def job_count(db: asyncpg.Pool) -> int:
    count: int = await db.fetchval("SELECT count(*) FROM icepack.jobs")
    return count


async def test_maintain_now_on_a_held_table_shows_the_409_refusal(
    base: str,
    browser: object,
    db: asyncpg.Pool,
    fleet: Fleet,
) -> None:
    await failed_verification_job(db, fleet.tables["crm.users"])
    token, _ = await TokenStore(db).create("operator")
    jobs_before = await job_count(db)
    errors: list[str] = []
    context, page = await _page(browser, 1280, 900, errors)
    try:
        await page.goto(f"{base}/ui/#/table/demo/crm/users")
        await page.locator("[data-test=table-hold]").wait_for()
        await use_token(page, token)
        text = await click_maintain(page, "error")
        assert "Refused:" in text and "TABLE_HELD" in text, text
        assert "demo.crm.users is on hold" in text and "changed the live contents" in text
        assert await page.locator("[data-test=maintain-result]").is_hidden()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "maintain-held-409-1280.png"), full_page=True)
        assert await job_count(db) == jobs_before
        # The refused POST is the only console error (the browser logs failed fetches).
        assert all("409" in e for e in errors), errors
    finally:
        await context.close()


async def test_maintain_now_shows_every_outcome(
    base: str, browser: object, db: asyncpg.Pool, fleet: Fleet
) -> None:
    token, _ = await TokenStore(db).create("operator")
    jobs_before = await job_count(db)
    errors: list[str] = []
    context, page = await _page(browser, 390, 844, errors)
    try:
        # No token yet: nothing is sent, the token field opens and says why.
        await page.goto(f"{base}/ui/#/table/demo/crm/users")
        text = await click_maintain(page, "error")
        assert "Operator token needed" in text and "icepack token create" in text, text
        await page.locator("[data-test=token-form]").wait_for(state="visible")
        assert await job_count(db) == jobs_before

        # An unknown token: 401, said so.
        await use_token(page, "icepack_not_a_real_token")
        text = await click_maintain(page, "error")
        assert "Not allowed" in text and "INVALID_TOKEN" in text, text

        # A real token, but the planner never recommended anything for users: 409.
        await use_token(page, token)
        text = await click_maintain(page, "error")
        assert "Refused:" in text and "NOTHING_RECOMMENDED" in text, text
        assert "demo.crm.users has no recommendation yet" in text
        assert await job_count(db) == jobs_before

        # clicks: the planner already queued a job: 200, "already active", linked.
        await page.goto(f"{base}/ui/#/table/demo/web/clicks")
        await page.locator("[data-test=recommendation]").wait_for()
        text = await click_maintain(page, "result")
        assert "Already active:" in text and f"job {fleet.jobs['queued']}" in text, text
        assert (
            await page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
            <= 0
        )
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(
            path=str(ARTIFACTS / "maintain-already-active-390.png"), full_page=True
        )
        await page.click("[data-test=maintain-job-link]")
        await page.wait_for_function(f"({JOB_STATE})() === 'queued'")
        assert page.url.endswith(f"#/job/{fleet.jobs['queued']}")
        # Not finished, so the page says it follows the job.
        await page.locator("[data-test=job-polling]").wait_for(state="visible")
        assert await job_count(db) == jobs_before
        assert all("401" in e or "409" in e for e in errors), errors
    finally:
        await context.close()


async def test_job_page_follows_the_job_to_its_end(
    base: str, browser: object, db: asyncpg.Pool, fleet: Fleet, auth: dict[str, str]
) -> None:
    """Without reloading, the page shows the cancel the API made meanwhile, then stops."""
    job_id = fleet.jobs["queued"]
    errors: list[str] = []
    context, page = await _page(browser, 1280, 900, errors)
    try:
        await page.goto(f"{base}/ui/#/job/{job_id}")
        await page.wait_for_function(f"({JOB_STATE})() === 'queued'")
        async with httpx.AsyncClient(base_url=base) as client:
            r = await client.post(f"/jobs/{job_id}/cancel", headers=auth)
            assert r.status_code == 200 and r.json()["cancelled"], r.text
        await page.wait_for_function(f"({JOB_STATE})() === 'cancelled'", timeout=15_000)
        await page.locator("[data-test=job-polling]").wait_for(state="hidden")
        assert errors == [], errors
    finally:
        await context.close()


@pytest.fixture
def flow_settings(database_url: str, spark_catalog_settings: Settings, tmp_path: Path) -> Settings:
    """The services' settings on the Spark fixtures' catalog, for this test's namespace only
    (the same shape as tests/e2e/test_maintenance_flow.py)."""
    return service_settings(database_url, spark_catalog_settings, tmp_path, include=[f"{NS}.*"])


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_maintain_now_runs_the_recommendation_to_succeeded(
    spark: Any, flow_settings: Settings, db: asyncpg.Pool, browser: object
) -> None:
    table = make_small_files_table(spark, NS, "clicks", batches=12)
    rows_before, files_before = fingerprint(spark, table), data_file_count(spark, table)
    catalog = flow_settings.effective_catalogs()[0].name

    async def planned() -> asyncpg.Record | None:
        return await db.fetchrow(
            "SELECT r.table_id, r.actions, r.job_id, j.state FROM icepack.recommendations r "
            "JOIN icepack.tables t ON t.id = r.table_id JOIN icepack.jobs j ON j.id = r.job_id "
            "WHERE t.namespace = $1 AND t.name = 'clicks' ORDER BY r.id DESC LIMIT 1",
            NS,
        )

    # The real services find, inspect and plan the table; the planner queues its own job.
    async with running([DiscoveryService(), InspectorService(), PlannerService()], flow_settings):
        rec = await eventually(
            planned, timeout=180, interval=0.5, what="the planner's recommendation and job"
        )
        assert rec is not None
    assert rec["state"] == "queued"
    recommended = [a["action"] for a in rec["actions"]["actions"]]
    assert "rewrite_data_files" in recommended

    token, _ = await TokenStore(db).create("operator")
    errors: list[str] = []
    async with serving(db, flow_settings) as url:
        # Cancel the planner's job through the API, so the job that runs is the UI's.
        async with httpx.AsyncClient(base_url=url) as client:
            r = await client.post(
                f"/jobs/{rec['job_id']}/cancel", headers={"Authorization": f"Bearer {token}"}
            )
            assert r.status_code == 200 and r.json()["cancelled"], r.text
        context, page = await _page(browser, 1280, 900, errors)
        try:
            await page.goto(f"{url}/ui/#/table/{catalog}/{NS}/clicks")
            await page.locator("[data-test=recommendation]").wait_for()
            await use_token(page, token)
            text = await click_maintain(page, "result")
            assert "Queued:" in text, text
            link = await page.locator("[data-test=maintain-job-link]").inner_text()
            job_id = int(link.removeprefix("job "))
            assert job_id != rec["job_id"]
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "maintain-queued-1280.png"), full_page=True)
            await page.click("[data-test=maintain-job-link]")
            await page.wait_for_function(f"({JOB_STATE})() === 'queued'")
            # The page shows the job, then starts polling and Alpine renders the indicator a
            # tick later: wait for it (an instant ``is_visible`` failed on a busy machine).
            await page.locator("[data-test=job-polling]").wait_for(state="visible")

            # The real executor runs it; the open page follows it to the end by itself.
            async with running([ExecutorService()], flow_settings):
                await page.wait_for_function(
                    f"({JOB_STATE})() === 'succeeded'", timeout=300_000, polling=500
                )
            await page.locator("[data-test=job-polling]").wait_for(state="hidden")
            verdict = page.locator("[data-test=verdict]").first
            await verdict.wait_for()
            assert await verdict.inner_text() == "verified"
            await page.screenshot(
                path=str(ARTIFACTS / "maintain-succeeded-1280.png"), full_page=True
            )
        finally:
            await context.close()
    assert errors == [], errors

    job = await db.fetchrow(
        "SELECT state, trigger, actions FROM icepack.jobs WHERE id = $1", job_id
    )
    assert job is not None
    assert job["state"] == "succeeded" and job["trigger"] == "manual"
    assert [a["action"] for a in job["actions"]] == recommended  # the recommendation, as is
    assert fingerprint(spark, table) == rows_before  # same rows, same contents
    assert data_file_count(spark, table) < files_before
