"""The UI's job page (predicted vs measured outcome; the files a job quarantined, and restoring
them) and its Budgets page, in headless Debian Chromium, on data written by the real producers:
the planner's prediction (``Planner.plan``), the executor's outcome builder
(``execution.outcome``, stored with the fenced ``job_outcome_record``), real files moved into
quarantine by ``OrphanQuarantine``, and budgets set and charged through ``queue.budgets`` and a
real claim."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO

from icepack_core.access.tokens import TokenStore
from icepack_core.db.queries import load_query
from icepack_core.execution.ledger.file_mover import FileMover
from icepack_core.execution.ledger.quarantine import OrphanQuarantine
from icepack_core.execution.outcome import Probe, job_outcome, measured_action
from icepack_core.inspection.status import TableStatus
from icepack_core.intents import RemoveOrphanFiles, RemoveOrphanFilesParams, RewriteManifests
from icepack_core.queue.budgets import set_budget
from icepack_core.queue.jobs import JobQueue
from tests.gateway.seed import add_table, status_doc
from tests.gateway.test_ui import ARTIFACTS, _page, browser  # noqa: F401 (fixture)
from tests.gateway.test_ui_maintain import use_token
from tests.gateway.test_ui_safety import base, planned_table  # noqa: F401 (fixture)

NOW = datetime.now(UTC)
LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)


async def planned_job_with_outcome(db: asyncpg.Pool) -> int:
    """A job the real planner queued with its prediction, claimed, its outcome built by the
    executor's own functions from two statuses (380 small files compacted into 1) and stored
    under the job's fence, then completed."""
    table_id, _ = await planned_table(db)
    queue = JobQueue(db)
    job = await queue.claim("executor@ui-test", 60)
    assert job is not None and job.table_id == table_id and job.predicted is not None
    before = TableStatus.model_validate(
        status_doc("shop", "carts", data_file_count=400, small_file_count=380, manifest_count=4)
    )
    after = TableStatus.model_validate(
        status_doc("shop", "carts", data_file_count=21, small_file_count=0, manifest_count=3)
    )
    predicted = {a["action"]: a["benefit"] for a in job.predicted["actions"]}
    actions = [
        measured_action(
            name, before if name == "rewrite_data_files" else after, after, predicted.get(name)
        )
        for name in predicted
    ]
    probe_before = Probe(snapshot_id=1, files_planned=400, delete_files_planned=0, plan_ms=9.5)
    probe_after = Probe(snapshot_id=2, files_planned=21, delete_files_planned=0, plan_ms=1.2)
    outcome = job_outcome(actions, probe_before, probe_after).to_json()
    assert await db.fetchval(load_query("job_outcome_record"), job.id, job.fence, outcome)
    await queue.complete(job, {})
    return job.id


async def quarantined_job(db: asyncpg.Pool, tmp_path: Path) -> tuple[int, list[str]]:
    """Three real files moved into quarantine by an orphan job, through the ledger."""
    async with db.acquire() as conn:
        table_id = await add_table(conn, "shop", "orders_raw")
    location = f"file://{tmp_path}/wh/orders_raw"
    paths = []
    for i in range(3):
        path = tmp_path / "wh" / "orders_raw" / "data" / f"stray-{i}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(1000 * (i + 1)))
        paths.append(f"file://{path}")
    queue = JobQueue(db)
    await queue.enqueue(
        table_id,
        [RemoveOrphanFiles(params=RemoveOrphanFilesParams(older_than=LONG_AGO))],
        priority=0,
    )
    job = await queue.claim("executor@ui-test", 60)
    assert job is not None and job.table_id == table_id
    ledger = OrphanQuarantine(
        db,
        job.id,
        job.fence,
        table_id,
        location,
        FileMover(PyArrowFileIO()),
        lambda: datetime.now(UTC),
    )
    assert await ledger.record(paths, "not referenced by any snapshot (UI test)") == 3
    await ledger.quarantine(timedelta(days=7))
    await queue.complete(job, {})
    for stored in paths:
        assert not os.path.exists(stored.removeprefix("file://"))
    return job.id, paths


@pytest.mark.parametrize("width", [1280, 390])
async def test_job_page_shows_outcome_and_quarantine_and_restores(
    base: str, browser: object, db: asyncpg.Pool, tmp_path: Path, width: int
) -> None:
    outcome_job = await planned_job_with_outcome(db)
    orphan_job, paths = await quarantined_job(db, tmp_path)
    token, _ = await TokenStore(db).create("operator")
    errors: list[str] = []
    context, page = await _page(browser, width, 900, errors)
    try:
        await page.goto(f"{base}/ui/#/job/{outcome_job}")
        outcome = page.locator("[data-test=outcome]")
        await outcome.wait_for()
        total = await outcome.locator("[data-test=outcome-total]").inner_text()
        stored = await db.fetchval("SELECT outcome FROM icepack.jobs WHERE id = $1", outcome_job)
        assert f"measured {stored['benefit']:,}" in total, total
        assert f"predicted {stored['predicted_benefit']:,}" in total, total
        rewrite = outcome.locator("[data-test=outcome-action]").first
        text = await rewrite.inner_text()
        assert "400 → 21" in text, text  # measured data files
        assert "of predicted" in await rewrite.locator("[data-test=outcome-benefit]").inner_text()
        probe = await outcome.locator("[data-test=read-probe]").inner_text()
        assert "before 400 files" in probe and "after 21 files" in probe, probe
        await page.locator("[data-test=deletions-none]").wait_for(state="visible")
        assert await page.locator("[data-test=restore-button]").is_hidden()

        await page.goto(f"{base}/ui/#/job/{orphan_job}")
        await page.locator("[data-test=deletions]").wait_for()
        rows = await page.locator("[data-test=deletion-row]").all_inner_texts()
        assert len(rows) == 3 and all("quarantined" in r and "orphan" in r for r in rows), rows
        assert any(p.removeprefix("file://") in "".join(rows) for p in paths), rows
        totals = await page.locator("[data-test=deletions-totals]").inner_text()
        assert "3 files" in totals and "5.9 KiB" in totals, totals
        await page.locator("[data-test=outcome-none]").wait_for(state="visible")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / f"job-quarantine-{width}.png"), full_page=True)
        assert (
            await page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
            <= 0
        )

        # Restore needs a token; with one it queues a restore job, linked.
        await use_token(page, token)
        await page.locator("[data-test=restore-button]").click()
        result = page.locator("[data-test=restore-result]")
        await result.wait_for()
        restore_id = await db.fetchval(
            "SELECT id FROM icepack.jobs WHERE dedupe_key = $1", f"restore:{orphan_job}"
        )
        assert restore_id is not None
        assert f"job {restore_id}" in await result.inner_text()
        actions = await db.fetchval("SELECT actions FROM icepack.jobs WHERE id = $1", restore_id)
        assert actions[0]["action"] == "restore_quarantine"
        assert actions[0]["params"]["job_id"] == orphan_job
        assert errors == [], errors
    finally:
        await context.close()


async def test_budgets_page_shows_use_against_each_limit(
    base: str, browser: object, db: asyncpg.Pool
) -> None:
    async with db.acquire() as conn:
        table_id = await add_table(conn, "etl", "facts", catalog="lake")
        await add_table(conn, "etl", "dims", catalog="lake")
    await set_budget(db, "lake", None, rewrite_bytes_per_hour=4 * 2**30, max_running=2)
    await set_budget(db, "lake", "etl", rewrite_bytes_per_hour=2**20, max_running=None)
    queue = JobQueue(db)
    # One job within the namespace budget (claimed: charged 512 KiB), one that never fits it.
    await queue.enqueue(table_id, [RewriteManifests()], rewrite_bytes=2**19)
    assert await queue.claim("executor@ui-test", 60) is not None
    oversized = await queue.enqueue(
        table_id, [RewriteManifests()], rewrite_bytes=2**21, dedupe_key="big"
    )
    errors: list[str] = []
    context, page = await _page(browser, 1280, 900, errors)
    try:
        await page.goto(f"{base}/ui/#/budgets")
        await page.locator("[data-test=budget-row]").first.wait_for()
        rows = await page.locator("[data-test=budget-row]").all_inner_texts()
        assert len(rows) == 2, rows
        catalog_row = next(r for r in rows if "whole catalog" in r)
        namespace_row = next(r for r in rows if "lake.etl" in r)
        assert "512.0 KiB of 4.0 GiB" in catalog_row and "1 of 2" in catalog_row, catalog_row
        assert "512.0 KiB of 1.0 MiB" in namespace_row, namespace_row
        assert "1 of unlimited" in namespace_row, namespace_row
        assert f"#{oversized.job.id}" in namespace_row, namespace_row
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "budgets-1280.png"), full_page=True)
        assert errors == [], errors
    finally:
        await context.close()


async def test_job_page_reads_a_long_ledger_a_page_at_a_time(
    base: str, browser: object, db: asyncpg.Pool, tmp_path: Path
) -> None:
    """230 recorded rows: the page shows the first 100 with the totals of all 230, and "Load
    more files" reads the next pages (``GET /jobs/{id}/deletions`` is paged) until none is left."""
    async with db.acquire() as conn:
        table_id = await add_table(conn, "shop", "long_ledger")
    queue = JobQueue(db)
    await queue.enqueue(table_id, [], dedupe_key="long-ledger")
    job = await queue.claim("executor@ui-test", 60)
    assert job is not None
    location = f"file://{tmp_path}/wh/long_ledger"
    ledger = OrphanQuarantine(
        db,
        job.id,
        job.fence,
        table_id,
        location,
        FileMover(PyArrowFileIO()),
        lambda: datetime.now(UTC),
    )
    paths = [f"{location}/data/f-{i:03d}.parquet" for i in range(230)]
    assert await ledger.record(paths, "not referenced by any snapshot (UI test)") == 230
    await queue.complete(job, {})
    errors: list[str] = []
    context, page = await _page(browser, 1280, 900, errors)
    try:
        await page.goto(f"{base}/ui/#/job/{job.id}")
        await page.locator("[data-test=deletions]").wait_for()
        rows = page.locator("[data-test=deletion-row]")
        assert await rows.count() == 100
        totals = await page.locator("[data-test=deletions-totals]").inner_text()
        assert "230 files" in totals and "showing the first 100" in totals, totals
        more = page.locator("[data-test=deletions-more]")
        await more.click()
        await page.locator("[data-test=deletion-row]").nth(199).wait_for()
        await more.click()
        await page.locator("[data-test=deletion-row]").nth(229).wait_for()
        await more.wait_for(state="hidden")
        texts = await rows.all_inner_texts()
        assert len(texts) == 230
        assert [t.split()[0] for t in texts] == paths
        assert "showing" not in await page.locator("[data-test=deletions-totals]").inner_text()
        assert errors == [], errors
    finally:
        await context.close()
