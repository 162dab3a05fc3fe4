"""A throwaway Postgres with Icepack's schema, for benchmarks that start their own."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg

from icepack_core.db.migrate import migrate
from icepack_core.local.postgres import LocalPostgres


@asynccontextmanager
async def migrated_postgres(prefix: str) -> AsyncIterator[tuple[str, Path]]:
    """Yield ``(dsn, root)``: a non-durable Postgres under a new temporary ``root``, migrated.

    The server is stopped and ``root`` removed on exit, whatever happened inside.
    """
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)  # the server may run as user postgres
        server = LocalPostgres(root / "pg", durable=False)
        dsn = server.start()
        try:
            conn = await asyncpg.connect(dsn)
            try:
                await migrate(conn)
            finally:
                await conn.close()
            yield dsn, root
        finally:
            server.stop()
