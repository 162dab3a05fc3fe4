"""``GET /jobs/{id}/deletions`` on a million-row ledger: pages by cursor in bounded memory, with
the totals of every row computed by Postgres; and a restore that reads the ledger a batch at a
time.

The million rows are written with the executor's own recording statement
(``deletion_record_batch``, fenced by a running job), 50,000 paths per call instead of the
quarantine's 200: the same SQL, so the rows are what a real orphan removal records, without
planting a million files.
"""

from __future__ import annotations

import os
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from icepack_core.db.queries import load_query
from icepack_core.execution.ledger.file_mover import FileMover
from icepack_core.execution.ledger.quarantine import OrphanQuarantine
from icepack_core.queue.jobs import Job, JobQueue
from icepack_core.settings import CatalogConfig
from icepack_gateway.params import encode_cursor
from tests.gateway.seed import Fleet
from tests.plugins.catalogs import rows

ROWS = 1_000_000
CHUNK = 50_000
ROOT = "file:///lake/big/table/data"


async def running_job(db: asyncpg.Pool, table_id: int, key: str) -> Job:
    queue = JobQueue(db)
    await queue.enqueue(table_id, [], dedupe_key=key)
    job = await queue.claim("executor@test", 600)
    assert job is not None
    return job


async def record_million(db: asyncpg.Pool, table_id: int) -> tuple[Job, int]:
    """A job with ``ROWS`` recorded orphan rows (sizes 1..1000); their byte total."""
    job = await running_job(db, table_id, "big")
    total = 0
    for start in range(0, ROWS, CHUNK):
        paths = [f"{ROOT}/p={i % 100}/f-{i:07d}.parquet" for i in range(start, start + CHUNK)]
        sizes = [i % 1000 + 1 for i in range(start, start + CHUNK)]
        total += sum(sizes)
        row = await db.fetchrow(
            load_query("deletion_record_batch"),
            job.id,
            job.fence,
            table_id,
            "remove_orphan_files",
            "orphan",
            "not referenced by any snapshot",
            paths,
            sizes,
        )
        assert row is not None
        assert row["fenced"] and row["written"] == CHUNK
    return job, total


@pytest.mark.slow
async def test_a_million_row_ledger_is_served_in_bounded_pages_with_sql_totals(
    client: httpx.AsyncClient, db: asyncpg.Pool, fleet: Fleet, auth: dict[str, str]
) -> None:
    table_id = fleet.tables["sales.orders"]
    job, total = await record_million(db, table_id)
    # A few rows in other states, so the totals per state come from the rows, not a constant.
    await db.execute(
        "UPDATE icepack.deletions SET state = 'quarantined', quarantine_path = path || '.q',"
        " purge_after = now() WHERE job_id = $1 AND id % 100000 = 0",
        job.id,
    )
    moved = await db.fetchrow(
        "SELECT count(*) AS n, sum(size_bytes)::bigint AS b FROM icepack.deletions"
        " WHERE job_id = $1 AND state = 'quarantined'",
        job.id,
    )
    assert moved is not None

    tracemalloc.start()
    try:
        first = await client.get(f"/jobs/{job.id}/deletions?limit=500", headers=auth)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert first.status_code == 200, first.text[:500]
    # One page of 500 rows costs a few MB at most, whatever the ledger holds (all of it as
    # Python rows would be about 1 GB).
    assert peak < 16 * 2**20, peak
    assert len(first.content) < 2**20
    body: dict[str, Any] = first.json()
    assert body is not None
    assert len(body["items"]) == 500 and body["next_cursor"]
    assert body["totals"] == {"files": ROWS, "bytes": total}
    assert body["by_state"]["quarantined"] == {"files": moved["n"], "bytes": moved["b"]}
    assert body["by_state"]["recorded"]["files"] == ROWS - moved["n"]

    # Pages follow each other in recording order, without gaps or repeats.
    seen = [r["id"] for r in body["items"]]
    cursor = body["next_cursor"]
    for _ in range(3):
        page = (
            await client.get(f"/jobs/{job.id}/deletions?limit=500&cursor={cursor}", headers=auth)
        ).json()
        seen += [r["id"] for r in page["items"]]
        cursor = page["next_cursor"]
        assert page["totals"] == body["totals"]
    first_ids = await db.fetch(
        "SELECT id FROM icepack.deletions WHERE job_id = $1 ORDER BY id LIMIT 2000", job.id
    )
    assert seen == [r["id"] for r in first_ids]

    # The last page: from the cursor of the 10th row from the end, 10 rows and no next cursor.
    tail = await db.fetch(
        "SELECT id FROM icepack.deletions WHERE job_id = $1 ORDER BY id DESC LIMIT 11", job.id
    )
    near_end = encode_cursor("deletions", [tail[-1]["id"]])
    last = (
        await client.get(f"/jobs/{job.id}/deletions?limit=500&cursor={near_end}", headers=auth)
    ).json()
    assert [r["id"] for r in last["items"]] == sorted(r["id"] for r in tail[:-1])
    assert last["next_cursor"] is None
    # Another listing's cursor is refused, not misread.
    jobs_cursor = encode_cursor("jobs", [1])
    bad = await client.get(f"/jobs/{job.id}/deletions?cursor={jobs_cursor}", headers=auth)
    assert bad.status_code == 400 and bad.json()["code"] == "INVALID_CURSOR"


class CountingPool:
    """The test's pool, remembering how many rows each ``fetch`` returned (the executor's
    reads of the ledger go through ``fetch``)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.sizes: list[int] = []

    async def fetch(self, *args: Any) -> list[Any]:
        rows: list[Any] = await self.pool.fetch(*args)
        self.sizes.append(len(rows))
        return rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)


async def test_restore_and_purge_read_the_ledger_a_batch_at_a_time(
    db: asyncpg.Pool, fleet: Fleet, scratch_catalog: tuple[CatalogConfig, SqlCatalog]
) -> None:
    """30 files quarantined from a PyIceberg table's folder, 8 of whose paths are taken again
    (refused, left quarantined): the restore brings back the other 22 reading at most one batch
    (4 rows) per query, and so does the purge of the 8 left. The table's rows and files are
    untouched throughout."""
    _cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.events", rows(0).schema)
    table.append(rows(5))
    table.append(rows(3, start=5))
    before = table.scan().to_arrow().sort_by("id")
    referenced = [t.file.file_path for t in table.scan().plan_files()]
    table_id = fleet.tables["sales.orders"]
    location = table.location()
    root = Path(location.removeprefix("file://"))
    files: dict[Path, bytes] = {}
    for i in range(30):
        path = root / "data" / f"p={i % 3}" / f"orphan-{i:02d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        files[path] = os.urandom(50 + i)
        path.write_bytes(files[path])
    mover = FileMover(table.io)
    source = await running_job(db, table_id, "orphans")
    quarantine = OrphanQuarantine(
        db, source.id, source.fence, table_id, location, mover, lambda: datetime.now(UTC), 4
    )
    await quarantine.record([f"file://{p}" for p in files], "test orphans")
    assert (await quarantine.quarantine(timedelta(0))).moved == 30
    await JobQueue(db).complete(source, {"actions": []})
    taken = sorted(files)[::4]  # 8 paths written again by someone else
    for path in taken:
        path.write_bytes(b"new bytes")

    counting = CountingPool(db)
    restorer = await running_job(db, table_id, "restore")
    back = OrphanQuarantine(
        counting,  # type: ignore[arg-type]  # a counting stand-in for the pool (see CountingPool)
        restorer.id,
        restorer.fence,
        table_id,
        location,
        mover,
        lambda: datetime.now(UTC),
        4,
    )
    report = await back.restore(source.id)
    assert report.moved == 22 and len(report.refused) == 8
    assert counting.sizes and max(counting.sizes) <= 4, counting.sizes
    for path, data in files.items():
        assert path.read_bytes() == (b"new bytes" if path in taken else data)

    counting.sizes.clear()
    purger = await running_job(db, table_id, "purge")
    purge = OrphanQuarantine(
        counting,  # type: ignore[arg-type]  # a counting stand-in for the pool (see CountingPool)
        purger.id,
        purger.fence,
        table_id,
        location,
        mover,
        lambda: datetime.now(UTC) + timedelta(seconds=1),
        4,
    )
    assert (await purge.purge()).moved == 8
    assert max(counting.sizes) <= 4, counting.sizes
    states = await db.fetch(
        "SELECT state, count(*) AS n FROM icepack.deletions WHERE job_id = $1 GROUP BY 1",
        source.id,
    )
    assert {r["state"]: r["n"] for r in states} == {"restored": 22, "purged": 8}
    assert all(path.read_bytes() == b"new bytes" for path in taken)
    assert catalog.load_table("ns.events").scan().to_arrow().sort_by("id") == before
    assert [p for p in referenced if not Path(p.removeprefix("file://")).exists()] == []
