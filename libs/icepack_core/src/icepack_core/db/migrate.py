"""Versioned schema migrations for the ``icepack`` schema.

Migrations are the ordered ``migrations/NNNN_description.sql`` files. ``migrate()`` applies the
missing ones, each in its own transaction, under a session advisory lock, and records each
version with its checksum in ``icepack.schema_migrations``, so any number of services can start
at once and exactly one of them migrates. A recorded migration whose file changed is an error.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

from icepack_core.errors import MigrationError

# Any fixed 64-bit key; every Icepack process agrees on it.
MIGRATION_LOCK_KEY = 0x1CE_9AC4_0001
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def available_migrations() -> list[Migration]:
    """Every migration shipped with this code, in version order."""
    found = []
    for entry in resources.files("icepack_core.db").joinpath("migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(
                Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8"))
            )
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise MigrationError(f"migration versions must be 1..N without gaps, found {versions}")
    return found


async def migrate(conn: asyncpg.Connection) -> list[int]:
    """Bring the schema up to date on this connection.

    Returns:
        The versions applied by this call (empty when the schema was current).

    Raises:
        MigrationError: a recorded migration differs from the shipped file, or the database
            has a newer schema than this code knows.
    """
    migrations = available_migrations()
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
    try:
        recorded = await _recorded(conn, migrations)
        applied_now: list[int] = []
        for migration in migrations:
            row = recorded.get(migration.version)
            if row is not None:
                if row["checksum"] != migration.checksum:
                    raise MigrationError(
                        f"migration {migration.version:04d}_{migration.name} was changed after "
                        "it was applied; add a new migration instead"
                    )
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO icepack.schema_migrations (version, name, checksum) "
                    "VALUES ($1, $2, $3)",
                    migration.version,
                    migration.name,
                    migration.checksum,
                )
            applied_now.append(migration.version)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)
    return applied_now


async def _recorded(
    conn: asyncpg.Connection, migrations: list[Migration]
) -> dict[int, asyncpg.Record]:
    """The migrations the database records, by version (the bookkeeping table created when
    missing).

    Raises:
        MigrationError: the database records a version ``migrations`` does not have.
    """
    await conn.execute(
        """
        CREATE SCHEMA IF NOT EXISTS icepack;
        CREATE TABLE IF NOT EXISTS icepack.schema_migrations (
            version    integer     PRIMARY KEY,
            name       text        NOT NULL,
            checksum   text        NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now()
        );
        """
    )
    rows = await conn.fetch("SELECT version, name, checksum FROM icepack.schema_migrations")
    recorded = {r["version"]: r for r in rows}
    unknown = sorted(set(recorded) - {m.version for m in migrations})
    if unknown:
        raise MigrationError(
            f"the database has schema versions {unknown} that this Icepack does not know; "
            "run a newer Icepack or restore the database"
        )
    return recorded
