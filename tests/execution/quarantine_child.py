"""A process that quarantines a job's recorded orphans and SIGKILLs itself after its Nth move,
before that move's row is marked: the worst moment for a crash (``test_orphan_ledger``).

Usage: ``python -m tests.execution.quarantine_child DSN JOB_ID FENCE TABLE_ID LOCATION KILL_AFTER``
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import UTC, datetime, timedelta

import asyncpg
from pyiceberg.io.pyarrow import PyArrowFileIO

from icepack_core.execution.ledger.file_mover import FileMover
from icepack_core.execution.ledger.quarantine import OrphanQuarantine

BATCH = 7  # several batches, and the kill falls inside one


async def main(dsn: str, job_id: int, fence: int, table_id: int, location: str, kill: int) -> None:
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    moves = 0

    async def after_move(_path: str) -> None:
        nonlocal moves
        moves += 1
        if moves == kill:
            os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no mark, no pool close

    quarantine = OrphanQuarantine(
        pool,
        job_id,
        fence,
        table_id,
        location,
        FileMover(PyArrowFileIO()),
        lambda: datetime.now(UTC),
        batch_size=BATCH,
        after_move=after_move,
    )
    await quarantine.quarantine(timedelta(days=7))
    await pool.close()


if __name__ == "__main__":
    dsn, job, fence, table, location, kill = sys.argv[1:7]
    asyncio.run(main(dsn, int(job), int(fence), int(table), location, int(kill)))
