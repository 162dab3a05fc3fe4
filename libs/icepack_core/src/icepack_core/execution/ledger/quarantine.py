"""Orphan removal through the deletion ledger: record, quarantine, purge, restore.

Nothing an orphan listing finds is deleted at once. ``OrphanQuarantine.record`` writes every
listed path (with its size) to ``icepack.deletions`` before any file is touched; ``quarantine``
then moves each ``recorded`` row's file to ``<location>/data/_icepack_quarantine/job-<id>/
<path relative to the location>`` and marks the row ``quarantined`` (with ``purge_after``)
right after its move. Every ledger write carries the running job's id and fence and is refused
once the job is no longer its holder's (``StaleFence``).

Resuming after a crash (same job, new fence) continues from the ledger, one row at a time:

- source present, quarantine copy absent: move it;
- source absent, quarantine copy present: the move happened, only its mark was lost: mark it;
- both present (an object store's copy finished, its delete did not): when the copy has the
  recorded size the source is deleted, else the move is redone;
- neither present: reported as missing (someone else deleted it); the row stays ``recorded``.

So every file is in exactly one of its source and its quarantine path, and none is moved twice.
Only the job's orphan rows are moved (an expiry in the same job keeps its own rows), and none
whose path the table's current metadata references (``quarantine``'s ``referenced``), whichever
attempt recorded it.

Iceberg's orphan listing skips every directory whose name starts with ``.`` or ``_``
(``org.apache.iceberg.hadoop.HiddenPathFilter``), so quarantined files are never listed again;
``is_quarantined`` filters them out of a listing anyway, in case a listing ever does not.

``purge`` deletes quarantined files whose window ended (rows -> ``purged``); ``restore`` moves
one job's quarantined files back (rows -> ``restored``), refusing a file whose original path
exists again with other bytes (the same bytes: a copy back whose delete was lost, finished) and
reporting files already purged.

Every path moved or deleted (a listed orphan, its quarantine target, a purged copy, a restore's
source and destination) passes the table's confinement rule first (``safety.confinement``):
one foreign path in a batch stops the action before that batch is touched
(``DeletionOutsideTable``; the job holds the table).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from icepack_core.db.queries import load_query
from icepack_core.errors import PermanentError, StaleFence
from icepack_core.execution.ledger.file_mover import FileMover
from icepack_core.safety.confinement import Confinement, refuse_foreign
from icepack_core.safety.locations import (
    LocationError,
    has_dot_segments,
    location_key,
    parse_location,
)

# "_": hidden from Iceberg's orphan listing (as "." is), and accepted by object stores that
# refuse "."-prefixed key components (SeaweedFS table buckets deny them). Under ``data/``: such
# stores also refuse the directory markers pyarrow writes on a move or delete anywhere else.
QUARANTINE_DIR = "_icepack_quarantine"
QUARANTINE_PREFIX = f"data/{QUARANTINE_DIR}"
# Rows read and moved per round trip: bounded memory, and a killed job loses at most one batch
# of marks (which the resume re-derives from the files).
BATCH_SIZE = 200
# Paths kept in an action's output (the ledger has them all).
SAMPLE = 20
# Paths an output lists per problem (missing, refused, already purged) at most.
REPORTED = 1000
ORPHAN_ACTION = "remove_orphan_files"

# A test hook: called after each file's move, before its row is marked.
AfterMove = Callable[[str], Awaitable[None]]


def relative_path(location: str, path: str) -> str:
    """``path`` relative to the table ``location`` (scheme spellings folded).

    Raises:
        PermanentError: ``path`` is not under ``location``.
    """
    try:
        root, full = parse_location(location), parse_location(path)
    except LocationError as exc:
        raise PermanentError(f"orphan path {path!r}: {exc}") from None
    if not root.contains(full) or full == root:
        raise PermanentError(f"orphan path {path!r} is not under the table location {location!r}")
    return full.path[len(root.path) :].lstrip("/")


def quarantine_root(location: str, job_id: int) -> str:
    """Where job ``job_id`` quarantines the files of the table at ``location``."""
    return f"{location.rstrip('/')}/{QUARANTINE_PREFIX}/job-{job_id}"


def quarantine_path(location: str, job_id: int, path: str) -> str:
    """The quarantine path of one orphan ``path``."""
    return f"{quarantine_root(location, job_id)}/{relative_path(location, path)}"


def movable(location: str, paths: list[str]) -> tuple[list[str], list[str]]:
    """``paths`` split into (movable, kept): a path is kept when the location normalisation that
    names its quarantine path would not name it exactly (surrounding whitespace; a tab, CR or LF;
    a ``?`` or ``#``; a trailing ``/``; a repeated separator or a ``.``/``..`` segment, which
    ``safety.locations`` resolves), or when another listed path maps to the same quarantine
    path. Moving such a file could overwrite another's copy, or act on another object than the
    one recorded."""
    seen: dict[str, list[str]] = {}
    for path in paths:
        try:
            seen.setdefault(relative_path(location, path), []).append(path)
        except PermanentError:
            seen.setdefault(path, []).append(path)  # refused by ``record`` with its reason
    ok: list[str] = []
    kept: list[str] = []
    for path in paths:
        odd = (
            path != path.strip()
            or path.endswith("/")
            or any(c in path for c in "?#\t\r\n")
            or _respelled(path)
        )
        try:
            shared = len(seen[relative_path(location, path)]) > 1
        except PermanentError:
            shared = False
        (kept if odd or shared else ok).append(path)
    return ok, kept


def _respelled(path: str) -> bool:
    """Whether normalising ``path`` rewrites its path part (``a//b``, ``a/./b``, ``a/../b``)."""
    return has_dot_segments(path) or "//" in path.split("://", 1)[-1]


def is_quarantined(location: str, path: str) -> bool:
    """Whether ``path`` lies in a quarantine directory of the table (any job's; any directory of
    that name, to be safe)."""
    try:
        relative = relative_path(location, path)
    except PermanentError:
        return False
    return QUARANTINE_DIR in relative.split("/")[:-1]


@dataclass
class LedgerReport:
    """What one ledger action did; ``output`` is what its job action records.

    Bounded whatever the ledger's size: the problem lists keep their first ``REPORTED`` items
    and ``counts`` has how many there were (the ledger has every row)."""

    moved: int = 0
    resumed: int = 0
    bytes: int = 0
    missing: list[str] = field(default_factory=list)
    kept_referenced: list[str] = field(default_factory=list)
    refused: list[dict[str, str]] = field(default_factory=list)
    purged_before: list[str] = field(default_factory=list)
    sample: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def note(self, path: str, size: int | None) -> None:
        self.moved += 1
        self.bytes += size or 0
        if len(self.sample) < SAMPLE:
            self.sample.append(path)

    def problem(self, kind: str, item: Any) -> None:
        """Count one ``kind`` ("missing", "kept_referenced", "refused") and keep it while its
        list is shorter than ``REPORTED``."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        listed: list[Any] = getattr(self, kind)
        if len(listed) < REPORTED:
            listed.append(item)


@dataclass
class OrphanQuarantine:
    """The ledger actions of one running job (``job_id`` under ``fence``) on one table.

    ``mover`` works through the table's FileIO; ``now`` is the clock (``purge_after`` and purge
    due times are computed from it).
    """

    pool: asyncpg.Pool
    job_id: int
    fence: int
    table_id: int
    location: str
    mover: FileMover
    now: Callable[[], datetime]
    batch_size: int = BATCH_SIZE
    after_move: AfterMove | None = None
    # Paths the last ``record`` kept because their names cannot be moved exactly (``movable``).
    unusual: list[str] = field(default_factory=list)
    # The table ids whose rows purge and restore act on: the table and the ones it was renamed
    # from (``queue.ledger.table_lineage``); None: the table alone.
    lineage: list[int] | None = None
    # The table's confinement rule: every path moved or deleted must pass it (None: tests of
    # the mechanics alone).
    confinement: Confinement | None = None

    def _tables(self) -> list[int]:
        return self.lineage if self.lineage is not None else [self.table_id]

    def _confine(self, paths: Iterable[str], action: str) -> None:
        """Refuse (``DeletionOutsideTable``) before touching any of ``paths`` if one is not
        the table's (``safety.confinement``)."""
        if self.confinement is not None:
            refuse_foreign(self.confinement, paths, action)

    def _stale(self, what: str) -> StaleFence:
        return StaleFence(self.job_id, self.fence, what)

    async def _still_ours(self, what: str) -> None:
        """Refuse to touch a file once the job is not ours: a lost job moves nothing more.
        (A move racing the loss is harmless: the next attempt finds the file where it went.)

        Skipped right after a successful mark: the mark's fenced UPDATE proved the same thing
        one round trip earlier, so each file costs one round trip, not two."""
        fence = await self.pool.fetchval(load_query("job_running_fence"), self.job_id)
        if fence != self.fence:
            raise self._stale(what)

    async def record(self, paths: list[str], reason: str) -> int:
        """Record ``paths`` (skipping quarantine paths) with their sizes, in batches; returns how
        many rows were written (0 for paths a previous attempt already recorded).

        Raises:
            StaleFence: the job is no longer ours; nothing more was written.
            PermanentError: a path outside the table location.
        """
        candidates, self.unusual = movable(
            self.location, [p for p in paths if not is_quarantined(self.location, p)]
        )
        for path in candidates:
            relative_path(self.location, path)  # refuse before writing anything
        self._confine(candidates, ORPHAN_ACTION)
        written = 0
        for start in range(0, len(candidates), self.batch_size):
            batch = candidates[start : start + self.batch_size]
            sizes = await asyncio.to_thread(self._sizes, batch)
            row = await self.pool.fetchrow(
                load_query("deletion_record_batch"),
                self.job_id,
                self.fence,
                self.table_id,
                ORPHAN_ACTION,
                "orphan",
                reason,
                batch,
                sizes,
            )
            if row is None or not row["fenced"]:
                raise self._stale("record orphan files in the deletion ledger")
            written += int(row["written"])
        return written

    def _sizes(self, paths: list[str]) -> list[int | None]:
        return [self.mover.size(p) for p in paths]

    async def quarantine(
        self, retention: timedelta, referenced: frozenset[str] | None = None
    ) -> LedgerReport:
        """Move every ``recorded`` orphan row's file of this job to quarantine (module doc).

        ``referenced``: the normalized paths the table's current metadata references
        (``referenced_files``). A row whose path is in it is not moved, whichever attempt
        recorded it: a commit since that attempt may reference the file now. It stays
        ``recorded`` and is reported in ``kept_referenced``.
        """
        report = LedgerReport()
        after = 0  # rows are read by id: a row left as it was is passed, never read again
        proven = False  # the last round trip proved the fence (see _still_ours)
        while True:
            rows = await self._batch(self.job_id, "recorded", after, [self.table_id])
            if not rows:
                return report
            self._confine(
                [r["path"] for r in rows]
                + [quarantine_path(self.location, self.job_id, r["path"]) for r in rows],
                ORPHAN_ACTION,
            )
            for row in rows:
                after = row["id"]
                path = row["path"]
                if referenced is not None and location_key(path) in referenced:
                    report.problem("kept_referenced", path)
                    continue
                target = quarantine_path(self.location, self.job_id, path)
                if not proven:
                    await self._still_ours(f"quarantine {path}")
                proven = False
                step = asyncio.ensure_future(self._move_and_mark(row, target, retention))
                try:
                    outcome, marked = await asyncio.shield(step)
                except asyncio.CancelledError:
                    # A cancel (operator, lost lease) cannot stop the move's thread: let the move
                    # and its mark finish, so the ledger says where the file is, then stop.
                    with contextlib.suppress(Exception):
                        await step
                    raise
                if outcome == "missing":
                    report.problem("missing", path)
                    continue
                if not marked:
                    raise self._stale(f"mark {path} quarantined")
                proven = True
                if outcome == "resumed":
                    report.resumed += 1
                report.note(path, row["size_bytes"])

    async def _batch(
        self, job_id: int, state: str, after: int, tables: list[int]
    ) -> list[asyncpg.Record]:
        """The next ``batch_size`` orphan rows of ``job_id`` in ``state`` after row ``after``."""
        return list(
            await self.pool.fetch(
                load_query("deletion_recorded_batch"),
                job_id,
                state,
                self.batch_size,
                ORPHAN_ACTION,
                after,
                tables,
            )
        )

    async def _move_and_mark(
        self, row: asyncpg.Record, target: str, retention: timedelta
    ) -> tuple[str, bool]:
        """Move one row's file (``_quarantine_one``) and mark the row under the fence: the
        outcome, and whether the mark was accepted (a missing file is not marked)."""
        path = row["path"]
        outcome = await asyncio.to_thread(self._quarantine_one, path, target, row)
        if outcome == "missing":
            return outcome, False
        if self.after_move is not None:
            await self.after_move(path)
        marked = await self.pool.fetchval(
            load_query("deletion_mark_quarantined"),
            self.job_id,
            self.fence,
            row["id"],
            target,
            self.now() + retention,
        )
        return outcome, marked is not None

    def _quarantine_one(self, path: str, target: str, row: asyncpg.Record) -> str:
        """Bring one file to ``target``: "moved", "resumed" (it already was) or "missing"."""
        source_size = self.mover.size(path)
        target_size = self.mover.size(target)
        if source_size is None:
            return "missing" if target_size is None else "resumed"
        if target_size is not None and target_size == (row["size_bytes"] or source_size):
            self.mover.delete(path)  # the copy finished, its delete did not
            return "resumed"
        self.mover.move(path, target)
        return "moved"

    async def purge(self) -> LedgerReport:
        """Delete this table's quarantined files whose ``purge_after`` has passed."""
        report = LedgerReport()
        proven = False
        while True:
            rows = await self.pool.fetch(
                load_query("deletion_purge_due"), self._tables(), self.now(), self.batch_size
            )
            if not rows:
                return report
            self._confine([r["quarantine_path"] for r in rows], "purge_quarantine")
            for row in rows:
                if not proven:
                    await self._still_ours(f"purge {row['quarantine_path']}")
                await asyncio.to_thread(self.mover.delete, row["quarantine_path"])
                await self._mark(row, "purged")
                proven = True
                report.note(row["path"], row["size_bytes"])

    async def restore(self, source_job: int) -> LedgerReport:
        """Move job ``source_job``'s quarantined files of this table (or of the tables it was
        renamed from, ``lineage``) back to their paths, a batch of rows at a time."""
        report = LedgerReport()
        tables = self._tables()
        report.purged_before = [
            r["path"]
            for r in await self.pool.fetch(
                load_query("deletion_job_purged"), source_job, tables, REPORTED
            )
        ]
        after = 0  # rows are read by id: a refused row is passed, never read again
        proven = False
        while True:
            rows = await self._batch(source_job, "quarantined", after, tables)
            if not rows:
                return report
            self._confine(
                [r["path"] for r in rows] + [r["quarantine_path"] for r in rows],
                "restore_quarantine",
            )
            for row in rows:
                after = row["id"]
                if not proven:
                    await self._still_ours(f"restore {row['path']}")
                proven = False
                reason = await asyncio.to_thread(self._restore_one, row)
                if reason is not None and reason != "resumed":
                    report.problem("refused", {"path": row["path"], "reason": reason})
                    continue
                await self._mark(row, "restored")
                proven = True
                if reason == "resumed":
                    report.resumed += 1
                report.note(row["path"], row["size_bytes"])

    def _restore_one(self, row: asyncpg.Record) -> str | None:
        """Move one file back; None when moved, "resumed" when it already was, else why not."""
        path, held = row["path"], row["quarantine_path"]
        at_source = self.mover.size(path)
        in_quarantine = self.mover.size(held)
        if in_quarantine is None:
            if at_source is not None and at_source == (row["size_bytes"] or at_source):
                return "resumed"  # moved back by an attempt that lost its mark
            return f"its quarantine copy {held} is gone"
        if at_source is not None:
            if at_source == in_quarantine and self.mover.same_bytes(path, held):
                # An object store's copy back finished, its delete did not: finish it.
                self.mover.delete(held)
                return "resumed"
            return f"a file exists at {path} again; not overwritten"
        self.mover.move(held, path)
        return None

    async def _mark(self, row: asyncpg.Record, state: str) -> None:
        marked = await self.pool.fetchval(
            load_query("deletion_mark"), self.job_id, self.fence, row["id"], state
        )
        if marked is None:
            raise self._stale(f"mark {row['path']} {state}")


def report_output(report: LedgerReport, verb: str) -> dict[str, object]:
    """A report as a job action's output (stored JSON, keys named by ``verb`` and by the
    kinds counted): counts, bytes, samples and what went wrong."""
    output: dict[str, object] = {
        f"files_{verb}": report.moved,
        "bytes": report.bytes,
        "resumed": report.resumed,
        "sample": report.sample,
    }
    if report.missing:
        output["missing"] = report.missing[:REPORTED]
    if report.kept_referenced:
        output["kept_referenced_recorded"] = report.kept_referenced[:REPORTED]
    if report.refused:
        output["refused"] = report.refused[:REPORTED]
    if report.purged_before:
        output["already_purged"] = report.purged_before[:REPORTED]
    for kind, count in report.counts.items():
        if count > REPORTED:
            output[f"{kind}_count"] = count
    return output
