import asyncpg

from icepack_core.settings import Settings


async def test_migrated_database_has_core_tables(db: asyncpg.Pool) -> None:
    names = {
        r["table_name"]
        for r in await db.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'icepack'"
        )
    }
    assert {"tables", "events", "jobs", "work_items", "table_locks", "v_queue"} <= names


async def test_every_session_gets_short_timeouts_and_its_service_name(
    db: asyncpg.Pool, settings: Settings
) -> None:
    async with db.acquire() as conn:
        assert await conn.fetchval("SHOW statement_timeout") == "1min"
        assert await conn.fetchval("SHOW idle_in_transaction_session_timeout") == "1min"
        assert await conn.fetchval("SHOW application_name") == "icepack-test"
