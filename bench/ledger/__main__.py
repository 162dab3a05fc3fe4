"""Deletion-ledger benchmark: what the quarantine costs against deleting outright.

One run, one Postgres, one local disk, the same number of planted orphan files each time:
* baseline: delete every file through the table's FileIO, one call per file (what a deleting
  ``remove_orphan_files`` does, without a record);
* Icepack: record every file in ``icepack.deletions`` (batched, fenced), then move each into the
  job's quarantine folder and mark its row (``OrphanQuarantine.record`` + ``quarantine``);
* and restoring them all (``OrphanQuarantine.restore``), the way back an outright delete lacks.

Then expiry's "still live" check on a streaming table of 5,000 snapshots and 100,000 live files,
Icepack's streaming manifest check beside the Spark check it replaced (``live_check``).

Run: ``make bench`` (or ``uv run python -m bench.ledger [--files N] [--snapshots N]
[--budget S]``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
from pyiceberg.io.pyarrow import PyArrowFileIO

from bench.ledger import live_check
from icepack_core.db import pool as icedb
from icepack_core.db.migrate import migrate
from icepack_core.execution.ledger.file_mover import FileMover
from icepack_core.execution.ledger.quarantine import OrphanQuarantine
from icepack_core.intents import RemoveOrphanFiles, RemoveOrphanFilesParams
from icepack_core.local.postgres import LocalPostgres
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import load_settings

REASON = "not referenced by any snapshot (bench)"


def plant(root: Path, files: int) -> list[str]:
    """``files`` small orphan files spread over 20 partition folders of a table at ``root``."""
    paths = []
    for i in range(files):
        path = root / "data" / f"p={i % 20}" / f"orphan-{i:06d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(256))
        paths.append(f"file://{path}")
    return paths


async def running_job(pool: asyncpg.Pool, table_id: int) -> tuple[int, int]:
    queue = JobQueue(pool)
    await queue.enqueue(
        table_id, [RemoveOrphanFiles(params=RemoveOrphanFilesParams(older_than=datetime.now(UTC)))]
    )
    job = await queue.claim("bench", 3600)
    assert job is not None
    return job.id, job.fence


def main(files: int) -> None:
    with tempfile.TemporaryDirectory(prefix="icepack-bench-") as root:
        Path(root).chmod(0o755)  # Postgres runs as its own user under it
        asyncio.run(measure(Path(root), files))


async def measure(root: Path, files: int) -> None:
    server = LocalPostgres(root / "pg", durable=True)
    dsn = server.start()
    try:
        conn = await asyncpg.connect(dsn)
        await migrate(conn)
        await conn.close()
        pool = await icedb.create_pool(load_settings(database_url=dsn), "bench")
        mover = FileMover(PyArrowFileIO())

        paths = plant(root / "baseline", files)
        started = time.perf_counter()
        for path in paths:
            mover.delete(path)
        baseline = time.perf_counter() - started

        table = root / "wh" / "t"
        paths = plant(table, files)
        table_id = await pool.fetchval(
            "INSERT INTO icepack.tables (catalog, namespace, name) "
            "VALUES ('bench', 'ns', 't') RETURNING id"
        )
        job_id, fence = await running_job(pool, table_id)
        ledger = OrphanQuarantine(
            pool, job_id, fence, table_id, f"file://{table}", mover, lambda: datetime.now(UTC)
        )
        started = time.perf_counter()
        await ledger.record(paths, REASON)
        recorded = time.perf_counter() - started
        report = await ledger.quarantine(timedelta(days=7))
        quarantined = time.perf_counter() - started
        assert report.moved == files, report

        restore_id, restore_fence = await running_job(pool, table_id)
        back = OrphanQuarantine(
            pool,
            restore_id,
            restore_fence,
            table_id,
            f"file://{table}",
            mover,
            lambda: datetime.now(UTC),
        )
        started = time.perf_counter()
        restored_report = await back.restore(job_id)
        restored = time.perf_counter() - started
        assert restored_report.moved == files, restored_report
        assert all(mover.size(p) == 256 for p in paths)  # every file back, whole
        await pool.close()
    finally:
        server.stop()
    print(f"orphan removal of {files} files (local disk, Postgres fsync on):")
    print(f"  baseline: delete outright     : {files / baseline:8.0f} files/s  ({baseline:.2f} s)")
    print(
        f"  icepack: record + quarantine  : {files / quarantined:8.0f} files/s  "
        f"({quarantined:.2f} s, of which recording {recorded:.2f} s; "
        f"{quarantined / baseline:.1f}x the baseline's time)"
    )
    print(f"  icepack: restore all          : {files / restored:8.0f} files/s  ({restored:.2f} s)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--snapshots", type=int, default=live_check.SNAPSHOTS)
    parser.add_argument("--budget", type=float, default=180.0, help="baseline live check seconds")
    args = parser.parse_args()
    main(args.files)
    live_check.measure(args.snapshots, args.budget)
