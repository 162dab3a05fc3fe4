"""Fingerprints of small data files kept in Postgres (``icepack.data_file_fingerprints``)
from the moment the inspector first sees a file (``first_sight``) until a compaction's
verification takes them instead of reading the files again (``replaced_files``).

A data file never changes once written, so its row count and checksum, read once, hold for
its whole life. A stored fingerprint is used only for the same file read the same way: the
same path, size and record count as the manifest lists now, the same columns in the same
order with the same types (``schema_key``, which also names the reader's version: another
DuckDB may hash otherwise), the same identity partition columns left out and the same
checksum setting. A stored value never decides a verdict alone: the comparison it enters
only ever proves equality, and anything else goes to the Spark scan (``file_fingerprint``).

At most ``MAX_PER_TABLE`` rows are kept per table (the newest), so neither the table nor a
job's load of it grows without bound.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from importlib import metadata

import asyncpg
from pyiceberg.schema import Schema

from icepack_core.db.queries import load_query
from icepack_core.execution.verification.fingerprint import Fingerprint

MAX_PER_TABLE = 20_000


@dataclass(frozen=True)
class StoredFingerprint:
    """One data file's fingerprint as stored: the file (``path``, ``size``, ``records``) and
    the identity partition columns its read left out (``constant``)."""

    path: str
    size: int
    records: int
    constant: frozenset[int]
    fingerprint: Fingerprint


# A job's loader of its table's stored fingerprints read with a schema and checksum setting.
StoredLoader = Callable[[Schema, bool], Awaitable[Mapping[str, StoredFingerprint]]]
# The same, bound to one schema and setting, for another thread: blocking.
StoredSource = Callable[[], Mapping[str, StoredFingerprint]]
FETCH_WAIT_SECONDS = 10.0


def blocking_source(loader: StoredLoader, schema: Schema, checksum: bool) -> StoredSource:
    """``loader(schema, checksum)`` for a thread other than the event loop's: calling it runs
    the load on the running event loop (this call's) and waits for it, at most
    ``FETCH_WAIT_SECONDS`` (then ``TimeoutError``). Call it only while that loop runs and is
    not waiting for the calling thread.
    """
    loop = asyncio.get_running_loop()

    async def fetch() -> Mapping[str, StoredFingerprint]:
        return await loader(schema, checksum)

    def result() -> Mapping[str, StoredFingerprint]:
        return asyncio.run_coroutine_threadsafe(fetch(), loop).result(FETCH_WAIT_SECONDS)

    return result


def reader_version() -> str | None:
    """The in-process reader's (DuckDB's) version, or None when it is not installed."""
    try:
        return metadata.version("duckdb")
    except metadata.PackageNotFoundError:
        return None


def schema_key(schema: Schema) -> str | None:
    """What a file's fingerprint depends on besides the file: the reader's version and the
    columns read (field id, type, whether it has an initial default, in schema order), as a
    sha256 hex digest; None when the reader is not installed."""
    version = reader_version()
    if version is None:
        return None
    columns = [
        [int(c.field_id), str(c.field_type), c.initial_default is not None] for c in schema.fields
    ]
    text = json.dumps({"reader": f"duckdb {version}", "columns": columns})
    return hashlib.sha256(text.encode()).hexdigest()


async def load(
    conn: asyncpg.Pool | asyncpg.Connection, table_id: int, schema: Schema, checksum: bool
) -> dict[str, StoredFingerprint]:
    """Table ``table_id``'s stored fingerprints read with ``schema`` and ``checksum``, by
    path (at most ``MAX_PER_TABLE``)."""
    key = schema_key(schema)
    if key is None:
        return {}
    rows = await conn.fetch(
        load_query("fingerprint_of_table"), table_id, key, checksum, MAX_PER_TABLE
    )
    return {
        r["path"]: StoredFingerprint(
            r["path"],
            int(r["file_size"]),
            int(r["records"]),
            frozenset(int(i) for i in r["constant_ids"]),
            Fingerprint(int(r["rows_read"]), int(r["checksum"])),
        )
        for r in rows
    }


async def known_paths(
    conn: asyncpg.Pool | asyncpg.Connection,
    table_id: int,
    schema: Schema,
    checksum: bool,
    paths: Sequence[str],
) -> set[str]:
    """Which of ``paths`` table ``table_id`` holds a fingerprint of, read with ``schema`` and
    ``checksum``."""
    key = schema_key(schema)
    if key is None or not paths:
        return set()
    query = load_query("fingerprint_known_paths")
    return {r["path"] for r in await conn.fetch(query, table_id, list(paths), key, checksum)}


async def store(
    pool: asyncpg.Pool,
    table_id: int,
    schema: Schema,
    checksum: bool,
    taken: Sequence[StoredFingerprint],
) -> None:
    """Store ``taken`` (read with ``schema`` and ``checksum``) for table ``table_id`` and keep
    only its newest ``MAX_PER_TABLE``, in one transaction.

    Raises:
        ValueError: a fingerprint whose rows are not its file's record count.
    """
    key = schema_key(schema)
    if key is None or not taken:
        return
    for found in taken:
        if found.fingerprint.rows != found.records:
            raise ValueError(f"{found.fingerprint.rows} rows read from {found.path!r:.120}")
    constants = ["{" + ",".join(str(i) for i in sorted(f.constant)) + "}" for f in taken]
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            load_query("fingerprint_put"),
            table_id,
            [f.path for f in taken],
            [f.size for f in taken],
            [f.records for f in taken],
            key,
            checksum,
            constants,
            [Decimal(f.fingerprint.checksum) for f in taken],
        )
        await conn.execute(load_query("fingerprint_bound"), table_id, MAX_PER_TABLE)


async def keep_only(pool: asyncpg.Pool, table_id: int, paths: Sequence[str]) -> None:
    """Drop table ``table_id``'s fingerprints of files not among ``paths`` (its live ones)."""
    await pool.execute(load_query("fingerprint_keep_only"), table_id, list(paths))


async def drop_table(pool: asyncpg.Pool, table_id: int) -> None:
    """Drop every fingerprint of table ``table_id``."""
    await pool.execute(load_query("fingerprint_drop_table"), table_id)
