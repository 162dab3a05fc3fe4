"""Small data files fingerprinted when the inspector first sees them.

A compaction's verification must know the rows of every file it replaced, and on a table of
small files reading them is most of its time (``replaced_files``). A streaming table's small
files exist for minutes before a compaction replaces them, and each is read the same whenever
it is read (a data file never changes once written). So the inspector, right after it records
a table's status, reads the small data files it has not fingerprinted yet and stores their
fingerprints (``stored_fingerprints``); the job then takes them from there and reads only what
the rewrite wrote. The reading moves out of the job's window, where it would share the CPUs
with the ``CALL``, into the minutes before it; every file is still read once.

The inspector passes over a table only when its status counts small files (a table without
them has nothing to compact, and is not listed). A pass reads only what the in-process reader
would read in a job (a table on the local file system, without live delete files, whose
columns and properties ``reader_blocker`` accepts), only files under the binpack threshold
(75 % of the table's target file size), and only the manifests added since the table's last
pass in this process (``FirstSight`` remembers the snapshot), at most ``MAX_FILES_PER_PASS``
files, in chunks, by one DuckDB thread at nice 19. A table gets at most one pass every
``PASS_INTERVAL_SECONDS``: one committing every second is read in batches, not file by file.
Every ``FULL_PASS_SECONDS`` (and on a process's first pass of a table) it lists every manifest
and drops the fingerprints of files that left the table. A table it cannot read loses its
fingerprints. Nothing here ever fails an inspection: an error is logged and the job reads the
files itself.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import asyncpg
from pyiceberg.table import Table

from icepack_core.execution.scoping.left_behind import snapshots_after
from icepack_core.execution.verification import stored_fingerprints
from icepack_core.execution.verification.file_fingerprint import (
    reader_blocker,
)
from icepack_core.execution.verification.fingerprint import Fingerprint
from icepack_core.execution.verification.replaced_files import (
    MAX_FILES,
    SmallFile,
    at_lowest_priority,
    grouped,
    read_chunks,
    small_files,
)
from icepack_core.execution.verification.stored_fingerprints import StoredFingerprint
from icepack_core.inspection.status import (
    DEFAULT_TARGET_FILE_SIZE,
    TARGET_FILE_SIZE_PROPERTY,
    parse_target_file_size,
)
from icepack_core.safety.locations import object_store_scheme

FULL_PASS_SECONDS = 600.0
# A streaming table is inspected at each commit; its small files wait minutes for their
# compaction, so one pass per table per this many seconds takes them in batches.
PASS_INTERVAL_SECONDS = 30.0
MAX_FILES_PER_PASS = 5_000
MAX_TABLES = 10_000  # tables whose last pass one process remembers
BINPACK_SMALL = 0.75  # Iceberg's binpack rewrites files under 75 % of the target size


@dataclass(frozen=True)
class Sighting:
    """What one pass did: files it read and stored (``taken``), small files it listed that
    were stored already (``known``), whether it listed every manifest (``full``), and why it
    read nothing (``skipped``; None: it did its work)."""

    taken: int
    known: int
    full: bool
    skipped: str | None = None


@dataclass(frozen=True)
class _Pass:
    snapshot_id: int
    full_at: float
    at: float


class FirstSight:
    """Fingerprints small data files at first sight (the module docstring), storing them in
    ``pool``; remembers each table's last pass (at most ``MAX_TABLES`` tables)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        checksum: bool = True,
        clock: Callable[[], float] = time.monotonic,
        full_pass_seconds: float = FULL_PASS_SECONDS,
        pass_interval_seconds: float = PASS_INTERVAL_SECONDS,
    ) -> None:
        self.pool = pool
        self.checksum = checksum  # the executor's verification setting (its default: on)
        self.clock = clock
        self.full_pass_seconds = full_pass_seconds
        self.pass_interval_seconds = pass_interval_seconds
        self._passes: OrderedDict[int, _Pass] = OrderedDict()

    async def take(self, table_id: int, table: Table) -> Sighting:
        """One pass over table ``table_id`` as ``table`` (PyIceberg's, loaded by the
        inspection); what it did.

        Raises:
            Exception: a manifest's, a database's or the reader's error (the caller logs it).
        """
        snapshot = table.metadata.current_snapshot()
        skipped = _unreadable(table)
        if skipped is not None or snapshot is None:
            return await self.forget(table_id, skipped or "the table has no snapshot")
        now = self.clock()
        previous = self._passes.get(table_id)
        if previous is not None and now - previous.at < self.pass_interval_seconds:
            return Sighting(0, 0, False, "the table's last pass was moments ago")
        added_in, full = self._new_snapshots(table_id, table, now)
        if added_in is not None and not added_in:
            return Sighting(0, 0, False, "no snapshot since the last pass")
        small = await asyncio.to_thread(
            small_files, table, _undersized(table), added_in=None if full else added_in
        )
        if small is None:
            return await self.forget(table_id, "the table holds live delete files")
        schema = table.metadata.schema()
        blocker = reader_blocker(schema, table.metadata.properties, grouped(table, small))
        if blocker is not None:
            return await self.forget(table_id, blocker)
        paths = [each.listed.path for each in small]
        known = await stored_fingerprints.known_paths(
            self.pool, table_id, schema, self.checksum, paths
        )
        unknown = [each for each in small if each.listed.path not in known]
        wanted = unknown[:MAX_FILES_PER_PASS]
        taken = await self._read(table, wanted)
        await stored_fingerprints.store(self.pool, table_id, schema, self.checksum, taken)
        if full and len(small) < MAX_FILES:  # a listing at the cap may have left files out
            await stored_fingerprints.keep_only(self.pool, table_id, paths)
        if len(unknown) > len(wanted):  # the rest next time: a full pass lists them again
            self._passes.pop(table_id, None)
        else:
            full_at = now if full or previous is None else previous.full_at
            self._remember(table_id, _Pass(snapshot.snapshot_id, full_at, now))
        return Sighting(len(taken), len(known), full)

    def _new_snapshots(
        self, table_id: int, table: Table, now: float
    ) -> tuple[frozenset[int] | None, bool]:
        """The snapshots since this table's last pass (None with ``True``: list every
        manifest, it is the first pass, a full one is due, or that snapshot is no longer
        an ancestor)."""
        previous = self._passes.get(table_id)
        if previous is None or now - previous.full_at >= self.full_pass_seconds:
            return None, True
        if table.metadata.current_snapshot_id == previous.snapshot_id:
            return frozenset(), False
        after = snapshots_after(table, previous.snapshot_id)
        parents = {s.snapshot_id: s.parent_snapshot_id for s in table.metadata.snapshots}
        if not any(parents.get(s) == previous.snapshot_id for s in after):
            return None, True
        return after, False

    async def _read(self, table: Table, wanted: Sequence[SmallFile]) -> list[StoredFingerprint]:
        """Fingerprints of ``wanted``, read in a thread of their own at nice 19 (the event loop
        waits for it without blocking)."""
        if not wanted:
            return []
        schema = table.metadata.schema()
        files = grouped(table, wanted)

        def read() -> dict[tuple[frozenset[int], str], Fingerprint]:
            return read_chunks(schema, files, self.checksum)

        # A thread of its own: the nice 19 it takes must not stay with a pooled thread.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="first-sight") as own:
            found = await asyncio.get_running_loop().run_in_executor(own, at_lowest_priority, read)
        by_path = {each.listed.path: each for each in wanted}
        return [
            StoredFingerprint(path, by_path[path].size, by_path[path].listed.records, c, value)
            for (c, path), value in found.items()
        ]

    async def forget(self, table_id: int, reason: str) -> Sighting:
        """Drop the table's fingerprints and its last pass: its files are not read here."""
        self._passes.pop(table_id, None)
        await stored_fingerprints.drop_table(self.pool, table_id)
        return Sighting(0, 0, False, reason)

    def _remember(self, table_id: int, seen: _Pass) -> None:
        self._passes[table_id] = seen
        self._passes.move_to_end(table_id)
        while len(self._passes) > MAX_TABLES:
            self._passes.popitem(last=False)


def _unreadable(table: Table) -> str | None:
    """Why no file of ``table`` is read in process whatever its files, or None."""
    if object_store_scheme(table.metadata.location) is not None:
        return "the table is not on the local file system"
    if stored_fingerprints.reader_version() is None:
        return "the in-process reader (duckdb) is not installed"
    return None


def _undersized(table: Table) -> int:
    """Iceberg's binpack threshold for ``table``: 75 % of its target file size (the
    property's, else Iceberg's default; a value Iceberg would refuse counts as the default)."""
    raw = table.metadata.properties.get(TARGET_FILE_SIZE_PROPERTY)
    try:
        target = parse_target_file_size(raw) if raw is not None else DEFAULT_TARGET_FILE_SIZE
    except ValueError:
        target = DEFAULT_TARGET_FILE_SIZE
    return int(target * BINPACK_SMALL)
