"""The quarantine's purge and restore on a PyIceberg table (SQL catalog, local warehouse), run
as jobs by the executor's ``JobRunner`` (no Spark statement runs):

* a restore an operator asked for (queued through ``POST /jobs/{id}/restore``) never loses to
  the hourly purge: the purge deletes every other due file and leaves that job's files alone;
* after a rename (discovery sees the old name dropped and the new one appear, same location),
  the old table id's quarantined files are restored through ``icepack restore`` and purged on
  schedule with the new table, instead of being reported "dropped" and kept for ever.

Every test checks the table's rows (and a checksum of them) before and after, and that every
file the table references still exists.
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pyarrow as pa
import pytest
import structlog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from icepack_core.access.tokens import TokenStore
from icepack_core.cli.restore import run_restore
from icepack_core.discovery.refresh import Discovery
from icepack_core.execution.job_runner import JobRunner
from icepack_core.execution.ledger.file_mover import FileMover
from icepack_core.execution.ledger.quarantine import OrphanQuarantine
from icepack_core.inspection.process import TableInspections
from icepack_core.queue.jobs import Job, JobQueue
from icepack_core.queue.upkeep import QueueUpkeep
from icepack_core.queue.work_items import WorkQueue
from icepack_core.settings import CatalogConfig, Settings, load_settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.types import JobState
from icepack_gateway.app import create_app
from tests.plugins.catalogs import rows


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def content(table: Any) -> tuple[int, str]:
    """Rows and a checksum of them (sorted by id)."""
    data: pa.Table = table.scan().to_arrow().sort_by("id")
    return data.num_rows, hashlib.sha256(str(data.to_pylist()).encode()).hexdigest()


def referenced_missing(table: Any) -> list[str]:
    """Data files the table's current snapshot references that no longer exist."""
    paths = [t.file.file_path for t in table.scan().plan_files()]
    return [p for p in paths if not Path(p.removeprefix("file://")).exists()]


@pytest.fixture
def lake(
    scratch_catalog: tuple[CatalogConfig, SqlCatalog], database_url: str, tmp_path: Path
) -> tuple[Settings, SqlCatalog, Table]:
    cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.events", rows(0).schema)
    table.append(rows(5))
    table.append(rows(3, start=5))
    settings = load_settings(
        database_url=database_url,
        data_dir=tmp_path / "data",
        catalogs=[cfg.model_dump(mode="json")],
        poll_interval_seconds=0.5,
    )
    return settings, catalog, table


async def discover(settings: Settings, db: asyncpg.Pool) -> dict[str, int]:
    """One discovery pass and an inspection of every live table (as the services do); the live
    tables by name."""
    await Discovery(settings, db).run_once()
    live = {
        r["name"]: r["id"]
        for r in await db.fetch("SELECT id, name FROM icepack.tables WHERE dropped_at IS NULL")
    }
    for table_id in live.values():
        await TableInspections(settings, db).inspect_and_record(table_id)
    return live


async def quarantine_orphans(
    db: asyncpg.Pool, table_id: int, table: Any, names: list[str]
) -> tuple[Job, dict[Path, str]]:
    """Plant orphan files under the table and quarantine them through the ledger (as a
    ``remove_orphan_files`` job's sink does), due for purging at once; the job and each file's
    digest."""
    root = Path(table.location().removeprefix("file://"))
    digests = {}
    for i, name in enumerate(names):
        path = root / "data" / name
        path.write_bytes(os.urandom(200 + i))
        digests[path] = sha(path)
    queue = JobQueue(db)
    await queue.enqueue(table_id, [], dedupe_key=f"orphans:{names[0]}")
    job = await queue.claim("executor@test", 60)
    assert job is not None
    quarantine = OrphanQuarantine(
        db,
        job.id,
        job.fence,
        table_id,
        table.location(),
        FileMover(table.io),
        lambda: datetime.now(UTC),
    )
    await quarantine.record([p.as_uri() for p in digests], "test orphans")
    assert (await quarantine.quarantine(timedelta(0))).moved == len(names)
    await queue.complete(job, {"actions": []})
    assert not any(p.exists() for p in digests)
    return job, digests


async def states(db: asyncpg.Pool, job_id: int) -> set[str]:
    rows_ = await db.fetch("SELECT state FROM icepack.deletions WHERE job_id = $1", job_id)
    return {r["state"] for r in rows_}


async def quarantine_copies(db: asyncpg.Pool, job_id: int) -> list[Path]:
    rows_ = await db.fetch(
        "SELECT quarantine_path FROM icepack.deletions WHERE job_id = $1", job_id
    )
    return [Path(r["quarantine_path"].removeprefix("file://")) for r in rows_]


async def run_job(db: asyncpg.Pool, settings: Settings, job_id: int) -> Job:
    """Claim one named job and run it as the executor does."""
    queue = JobQueue(db)
    job = await queue.claim_id(job_id, "executor@test", 60)
    assert job is not None
    engine = LocalEngine(settings)  # never opened: purge and restore run no Spark
    try:
        run = await JobRunner(db, settings, queue, engine, "executor@test").run(job)
    finally:
        await engine.close()
    assert run.job is not None
    return run.job


def upkeep(db: asyncpg.Pool) -> QueueUpkeep:
    return QueueUpkeep(
        db, JobQueue(db), WorkQueue(db, "planner", "test"), 3600, 3600, structlog.get_logger("t")
    )


async def test_a_queued_restore_wins_over_the_purge(
    db: asyncpg.Pool, lake: tuple[Settings, SqlCatalog, Table]
) -> None:
    settings, _catalog, table = lake
    before = content(table)
    (table_id,) = (await discover(settings, db)).values()
    asked, asked_files = await quarantine_orphans(db, table_id, table, ["a-0.bin", "a-1.bin"])
    other, other_files = await quarantine_orphans(db, table_id, table, ["b-0.bin", "b-1.bin"])

    token, _ = await TokenStore(db).create("operator")
    transport = httpx.ASGITransport(app=create_app(db))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        answer = await client.post(
            f"/jobs/{asked.id}/restore", headers={"Authorization": f"Bearer {token}"}
        )
    assert answer.status_code == 201, answer.text
    restore_id = answer.json()["job"]["id"]

    # The hourly purge comes before an executor took the restore.
    (purge_id,) = await upkeep(db).purge(datetime.now(UTC) + timedelta(seconds=1))
    purge = await run_job(db, settings, purge_id)
    assert purge.state == JobState.SUCCEEDED, purge.error
    assert await states(db, other.id) == {"purged"}
    assert not any(p.exists() for p in await quarantine_copies(db, other.id))
    assert await states(db, asked.id) == {"quarantined"}  # left for the restore
    assert all(p.exists() for p in await quarantine_copies(db, asked.id))
    # Nothing due is left that a purge may touch while the restore is queued.
    assert await upkeep(db).purge(datetime.now(UTC) + timedelta(seconds=1)) == []

    restore = await run_job(db, settings, restore_id)
    assert restore.state == JobState.SUCCEEDED, restore.error
    assert await states(db, asked.id) == {"restored"}
    assert all(sha(p) == digest for p, digest in asked_files.items())
    assert not any(p.exists() for p in other_files)
    assert content(table) == before and referenced_missing(table) == []


async def test_quarantined_files_follow_a_renamed_table(
    db: asyncpg.Pool, lake: tuple[Settings, SqlCatalog, Table]
) -> None:
    settings, catalog, table = lake
    before = content(table)
    (old_id,) = (await discover(settings, db)).values()
    back, back_files = await quarantine_orphans(db, old_id, table, ["r-0.bin", "r-1.bin"])
    due, _due_files = await quarantine_orphans(db, old_id, table, ["p-0.bin", "p-1.bin"])

    catalog.rename_table("ns.events", "ns.renamed")
    live = await discover(settings, db)
    new_id = live["renamed"]
    assert new_id != old_id and "events" not in live
    renamed = catalog.load_table("ns.renamed")

    # icepack restore JOB: the job's files come back through the table's new name.
    restored = await run_restore(settings, db, back.id)
    assert restored["state"] == "succeeded", restored
    assert restored["output"]["files_restored"] == 2
    restore_job = await JobQueue(db).get(restored["job"])
    assert restore_job.table_id == new_id
    assert await states(db, back.id) == {"restored"}
    assert all(sha(p) == digest for p, digest in back_files.items())

    # The purge is queued for the new table and deletes the old id's due copies.
    (purge_id,) = await upkeep(db).purge(datetime.now(UTC) + timedelta(seconds=1))
    assert (await JobQueue(db).get(purge_id)).table_id == new_id
    purge = await run_job(db, settings, purge_id)
    assert purge.state == JobState.SUCCEEDED, purge.error
    assert await states(db, due.id) == {"purged"}
    assert not any(p.exists() for p in await quarantine_copies(db, due.id))
    assert content(renamed) == before and referenced_missing(renamed) == []


async def test_a_dropped_table_with_no_successor_keeps_its_files(
    db: asyncpg.Pool, lake: tuple[Settings, SqlCatalog, Table]
) -> None:
    """Without a live table at its location, a dropped table's quarantine is left alone (as
    before): the restore is refused naming the drop, and no purge is queued."""
    settings, catalog, table = lake
    (table_id,) = (await discover(settings, db)).values()
    job, _files = await quarantine_orphans(db, table_id, table, ["d-0.bin"])
    copies = await quarantine_copies(db, job.id)
    catalog.drop_table("ns.events")
    assert await discover(settings, db) == {}
    with pytest.raises(Exception, match="was dropped"):
        await run_restore(settings, db, job.id)
    assert await upkeep(db).purge(datetime.now(UTC) + timedelta(seconds=1)) == []
    assert all(p.exists() for p in copies) and await states(db, job.id) == {"quarantined"}
