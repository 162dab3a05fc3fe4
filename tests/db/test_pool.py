"""The pool releases connections without asyncpg's reset query (``db.pool``): what asyncpg still
undoes itself (an open transaction) and what ``SET LOCAL`` scopes must not reach the next user."""

from __future__ import annotations

from icepack_core.db.pool import create_pool
from icepack_core.settings import Settings
from icepack_gateway.api_tables import _fetch_planned


async def test_a_released_connection_carries_no_transaction_or_local_setting(
    settings: Settings,
) -> None:
    pool = await create_pool(settings.model_copy(update={"db_pool_min": 1, "db_pool_max": 1}), "t")
    try:
        async with pool.acquire() as conn:
            pid = await conn.fetchval("SELECT pg_backend_pid()")
            await conn.execute("BEGIN")  # left open on purpose: released mid-transaction
            await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
            await conn.execute("CREATE TEMP TABLE left_behind (x int) ON COMMIT DROP")
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT pg_backend_pid()") == pid  # the same session
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SHOW plan_cache_mode") == "auto"
            assert await conn.fetchval("SELECT to_regclass('left_behind')") is None

        # The gateway's keyset pages force custom plans for their own read only.
        assert (await _fetch_planned(pool, "SHOW plan_cache_mode"))[0][0] == "force_custom_plan"
        assert await pool.fetchval("SHOW plan_cache_mode") == "auto"
    finally:
        await pool.close()
