async def test_migrated_database_has_core_tables(db):
    names = {r["table_name"] for r in await db.fetch(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'icepack'")}
    assert {"tables", "events", "jobs", "work_items", "table_locks", "v_queue"} <= names
