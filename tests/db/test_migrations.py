"""Migrations: idempotent, safe when several services start at once, tamper-evident."""

import asyncio
import os
import sys
from typing import Any

import asyncpg
import pytest

from icepack_core.db.migrate import available_migrations, migrate
from icepack_core.errors import MigrationError

SCHEMA_SHAPE = """
SELECT 'column' AS kind, table_name || '.' || column_name || ' ' || data_type
       || ' null=' || is_nullable || ' default=' || coalesce(column_default, '') AS item
  FROM information_schema.columns WHERE table_schema = 'icepack'
UNION ALL
SELECT 'index', indexname || ' ' || indexdef FROM pg_indexes WHERE schemaname = 'icepack'
UNION ALL
SELECT 'constraint', conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
  FROM pg_constraint WHERE connamespace = 'icepack'::regnamespace
UNION ALL
SELECT 'view', viewname || ' ' || definition FROM pg_views WHERE schemaname = 'icepack'
UNION ALL
SELECT 'trigger', tgname FROM pg_trigger WHERE NOT tgisinternal
   AND tgrelid::regclass::text LIKE 'icepack.%'
ORDER BY 1, 2
"""


async def shape(url: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(url)
    try:
        return [tuple(r) for r in await conn.fetch(SCHEMA_SHAPE)]
    finally:
        await conn.close()


async def test_migrate_twice_applies_nothing_the_second_time(empty_database_url: str) -> None:
    conn = await asyncpg.connect(empty_database_url)
    try:
        first = await migrate(conn)
        second = await migrate(conn)
    finally:
        await conn.close()
    assert first == [m.version for m in available_migrations()]
    assert second == []


async def test_four_processes_migrating_at_once_agree(
    empty_database_url: str, database_url: str
) -> None:
    env = {**os.environ, "ICEPACK_DATABASE_URL": empty_database_url}
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "icepack_core.cli.app",
            "migrate",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(4)
    ]
    results = [await p.communicate() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], results
    outputs = sorted(out.decode().strip() for out, _ in results)
    assert outputs.count("schema is up to date") == 3  # exactly one process migrated
    assert await shape(empty_database_url) == await shape(database_url)
    conn = await asyncpg.connect(empty_database_url)
    try:
        versions = await conn.fetch("SELECT version FROM icepack.schema_migrations")
    finally:
        await conn.close()
    assert len(versions) == len(available_migrations())


async def test_a_changed_migration_is_refused(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("UPDATE icepack.schema_migrations SET checksum = 'x' WHERE version = 1")
        with pytest.raises(MigrationError, match="was changed after it was applied"):
            await migrate(conn)
    finally:
        await conn.close()


async def test_a_newer_database_is_refused(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("INSERT INTO icepack.schema_migrations VALUES (999, 'future', 'x')")
        with pytest.raises(MigrationError, match=r"\[999\]"):
            await migrate(conn)
    finally:
        await conn.close()


async def test_migrate_command_reports_a_bad_url_clearly() -> None:
    env = {**os.environ, "ICEPACK_DATABASE_URL": "mysql://nope/db"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "icepack_core.cli.app",
        "migrate",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 2
    assert "ICEPACK_DATABASE_URL" in err.decode() and "Traceback" not in err.decode()
