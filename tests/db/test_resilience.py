"""``retry_db`` waits out a database without a free connection slot instead of failing."""

from __future__ import annotations

import asyncio
import secrets
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import structlog

from icepack_core.db.resilience import retry_db


async def test_a_full_connection_limit_is_waited_out(pg_admin_url: str) -> None:
    role = f"limited_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(pg_admin_url)
    await admin.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 1")
    parts = urlsplit(pg_admin_url)
    url = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))
    holder = await asyncpg.connect(url)
    try:
        with pytest.raises(asyncpg.exceptions.TooManyConnectionsError):
            await asyncpg.connect(url)  # the slot really is taken
        waiting = asyncio.create_task(
            retry_db(
                lambda: asyncpg.connect(url),
                asyncio.Event(),
                structlog.get_logger("test"),
                "test.connect",
                max_wait=0.5,
            )
        )
        await asyncio.sleep(1.0)
        assert not waiting.done()  # still retrying, not failed
        await holder.close()  # the slot frees up
        conn = await asyncio.wait_for(waiting, timeout=30)
        assert conn is not None and await conn.fetchval("SELECT current_user") == role
        await conn.close()
    finally:
        if not holder.is_closed():
            await holder.close()
        await admin.execute(f"DROP ROLE IF EXISTS {role}")
        await admin.close()
