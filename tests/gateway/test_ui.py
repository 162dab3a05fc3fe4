"""The web UI in a real headless Chromium (Debian's /usr/bin/chromium, never a downloaded one).

The gateway app runs in-process under uvicorn on a free loopback port, on this test's seeded
database. Screenshots go to ``test-artifacts/ui/`` (git-ignored).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from icepack_core.local.ports import free_port
from icepack_core.runtime.probes import make_server
from icepack_gateway.app import create_app
from tests.gateway.seed import Fleet
from tests.support.waiting import eventually

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"

# Counts the pixels a canvas has drawn (any non-transparent one).
DRAWN_PIXELS = """(id) => {
  const c = document.getElementById(id);
  if (!c || !c.width || !c.height) return 0;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
  return n;
}"""
OVERFLOW = "() => document.documentElement.scrollWidth - window.innerWidth"


def _need_chromium() -> None:
    if Path(CHROMIUM).exists() or shutil.which("chromium"):
        return
    message = "Debian chromium is not installed (make setup installs it)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
async def base_url(db: asyncpg.Pool) -> AsyncIterator[str]:
    port = free_port()
    server = make_server(create_app(db), "127.0.0.1", port)
    task = asyncio.create_task(server.serve())

    async def listening() -> bool:
        if task.done():  # failed to start (port taken...): say why instead of waiting
            task.result()
        return server.started

    try:
        await eventually(listening, timeout=30, interval=0.02, what="the gateway to listen")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


@pytest.fixture
async def browser() -> AsyncIterator[object]:
    _need_chromium()
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        chromium = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


async def _page(browser: Any, width: int, height: int, errors: list[str]) -> Any:
    context = await browser.new_context(viewport={"width": width, "height": height})
    page = await context.new_page()
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return context, page


async def test_ui_overview_table_and_jobs_in_chromium(
    base_url: str, browser: object, fleet: Fleet
) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    context, page = await _page(browser, 1280, 900, errors)
    try:
        # Fleet overview: worst first.
        await page.goto(f"{base_url}/ui/")
        rows = page.locator("[data-test=table-row]")
        await rows.first.wait_for()
        names = [(await rows.nth(i).locator(".name").inner_text()) for i in range(3)]
        assert names == ["demo.web.clicks", "demo.sales.orders", "demo.crm.users"]
        assert "1" in await page.locator(".count.critical .n").inner_text()
        await page.screenshot(path=str(ARTIFACTS / "fleet-1280.png"), full_page=True)

        # Search narrows the list.
        await page.fill("input[type=search]", "orders")
        await page.wait_for_function(
            "document.querySelectorAll('[data-test=table-row]').length === 1"
        )
        await page.fill("input[type=search]", "")
        await page.wait_for_function(
            "document.querySelectorAll('[data-test=table-row]').length === 3"
        )

        # Table detail: issues with value vs threshold, drawn history charts.
        await rows.first.click()
        issue = page.locator("[data-test=issue]").first
        await issue.wait_for()
        text = await issue.inner_text()
        assert "SMALL_FILES" in text and "340" in text and "threshold 101" in text
        await page.wait_for_function(f"({DRAWN_PIXELS})('chart-data_file_count') > 500")
        for key in ("data_file_count", "small_file_count", "snapshot_count", "delete_file_count"):
            box = await page.locator(f"#chart-{key}").bounding_box()
            assert box and box["width"] > 100 and box["height"] > 100, key
            assert await page.evaluate(DRAWN_PIXELS, f"chart-{key}") > 500, key
        assert "rewrite_data_files" in await page.locator("section[data-view=table]").inner_text()
        await page.screenshot(path=str(ARTIFACTS / "table-1280.png"), full_page=True)

        # Queue: the finished job, and its detail with SQL and before/after impact.
        await page.click("nav >> text=Queue")
        job_rows = page.locator("[data-test=job-row]")
        await job_rows.first.wait_for()
        assert await job_rows.count() == 3
        await page.locator("[data-test=job-row]", has_text="succeeded").click()
        impact = page.locator("[data-test=impact]").first
        await impact.wait_for()
        impact_text = await impact.inner_text()
        assert "before" in impact_text and "200" in impact_text and "90" in impact_text
        assert "-110" in impact_text
        sql = await page.locator("pre.sql").first.inner_text()
        assert "CALL demo.system.rewrite_data_files" in sql
        await page.screenshot(path=str(ARTIFACTS / "job-1280.png"), full_page=True)

        await page.click("nav >> text=Events")
        await page.locator("section[data-view=events] .row").first.wait_for()
        assert errors == [], errors

        # An unknown table shows a clear error (its 404 is the one expected console error).
        await page.goto(f"{base_url}/ui/#/table/demo/nope/missing")
        banner = page.locator(".banner.error").first
        await banner.wait_for()
        assert "TABLE_NOT_FOUND" in await banner.inner_text()
        assert all("404" in e for e in errors), errors
    finally:
        await context.close()


async def test_ui_fits_a_phone_and_shows_empty_states(
    base_url: str, browser: object, db: asyncpg.Pool, fleet: Fleet
) -> None:
    errors: list[str] = []
    context, page = await _page(browser, 390, 844, errors)
    try:
        views = {
            "fleet": "#/",
            "table": "#/table/demo/web/clicks",
            "jobs": "#/jobs",
            "job": f"#/job/{fleet.jobs['done']}",
            "events": "#/events",
        }
        for name, route in views.items():
            await page.goto(f"{base_url}/ui/{route}")
            await page.locator(f"section[data-view={name}]").wait_for()
            await page.wait_for_load_state("networkidle")
            overflow = await page.evaluate(OVERFLOW)
            await page.screenshot(path=str(ARTIFACTS / f"{name}-390.png"), full_page=True)
            assert overflow <= 0, f"{name} overflows by {overflow}px at 390px"
        # Empty states: a table never inspected, and a job filter with nothing in it.
        await db.execute(
            "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('demo', 'new', 'fresh')"
        )
        await page.goto(f"{base_url}/ui/#/table/demo/new/fresh")
        await page.get_by_text("No inspections recorded yet.").wait_for()
        await page.get_by_text("No maintenance has run on this table.").wait_for()
        await page.goto(f"{base_url}/ui/#/jobs")
        await page.locator("[data-test=job-row]").first.wait_for()
        await page.click(".tabs >> text=running")
        await page.get_by_text("No jobs in this state.").wait_for()
        assert errors == [], errors
    finally:
        await context.close()
