"""The schema snapshot and the migrations agree: one database from all migrations, one from
schema.sql, same shape (columns, indexes, constraints, views, triggers)."""

from importlib import resources
from typing import Any

import asyncpg

from tests.db.test_migrations import shape


async def test_snapshot_matches_the_migrations(empty_database_url: str, database_url: str) -> None:
    snapshot = resources.files("icepack_core.db").joinpath("schema.sql").read_text()
    conn = await asyncpg.connect(empty_database_url)
    try:
        await conn.execute(snapshot)
    finally:
        await conn.close()

    def without_bookkeeping(
        items: list[tuple[Any, ...]],
    ) -> list[tuple[Any, ...]]:  # schema_migrations is migrate()'s own record, not dumped
        return [i for i in items if "schema_migrations" not in i[1]]

    assert without_bookkeeping(await shape(empty_database_url)) == without_bookkeeping(
        await shape(database_url)
    ), "schema.sql is out of date: run `make schema` after adding a migration"
