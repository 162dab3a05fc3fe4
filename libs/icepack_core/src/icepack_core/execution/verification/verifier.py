"""Proving a rewrite lost nothing, and undoing one that did.

``RewriteVerifier.verify(start)`` checks every ``replace`` snapshot committed on the current
branch after ``start``: its live contents must equal its parent's. Partitions whose live data
and delete files are the same at both snapshots are proven unchanged from metadata (the
manifests read in this process, ``metadata_diff``, when a table loader is given; else, or when
that cannot be exact, the Spark ``entries`` query, ``verification_scope.diff_files``); only the
others (the *touched* partitions) are fingerprinted (row count and content checksum):
when no delete file applies to them, first by reading their files in this process
(``file_fingerprint``), which can only prove them equal; otherwise, or when it does not, in
both snapshots by one partition-pruned Spark scan (``fingerprint``, ``verification_scope``).
With a table loader, that first attempt asks Spark nothing (``proven_in_process``: the file
diff from the manifests, partitioning from the metadata); Spark's view of the table
(``REFRESH TABLE``, then ``DESCRIBE``) is read only when it proves nothing.
When scoping would not be sound or cheap (unpartitioned or transform-partitioned table, deletes
of an unpartitioned spec changed, a filter Spark cannot answer from partition values...), the
whole table is fingerprinted at both snapshots, and the evidence says why. On a violation it
rolls the table back to the bad snapshot's parent, but only

- when the bad snapshot is still the table's current snapshot (nothing committed on top), and
- after ``guard`` confirmed that the caller still holds the table lock under a valid fence
  (``guard`` raises, typically ``StaleFence``, and that exception propagates: the caller must
  then leave the pending verification for the next lock holder).

Iceberg's ``rollback_to_snapshot`` cannot be made conditional, so the check before it is
completed by a check after it: the procedure returns the snapshot that was current when the
rollback committed (``previous_snapshot_id``); if that is not the bad snapshot, a writer
committed in between and its commit was reverted, and the evidence names it. Either way the
caller puts the table on hold (``VerificationFailed``).

Evidence is typed (``safety.verification``: ``Evidence``, ``SnapshotCheck``, ``Rollback``) and
stored as its one JSON form. Each checked snapshot's record has
``rows_*``/``checksum_*`` of what was fingerprinted and ``scope``: ``partitions`` (only the
touched partitions; ``partitions_fingerprinted``, ``fingerprinted`` lists up to 20 of them),
``none`` (no file changed: proven from metadata alone, rows and checksum 0) or ``table`` (with
``scope_reason``); ``partitions_total`` and ``partitions_proven`` whenever the metadata
comparison ran.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import NoReturn

from pyiceberg.table import Table

from icepack_core.errors import (
    InProcessUnsupported,
    MetadataDiffUnsupported,
    ScopeFallback,
    brief,
)
from icepack_core.execution.scoping.metadata_scope import shared_fields, spec_columns
from icepack_core.execution.scoping.partition_filter import identity_columns, transform_columns
from icepack_core.execution.verification.comparison import (
    Comparison,
    counts,
    snapshot_record,
    unchanged,
    whole_table,
)
from icepack_core.execution.verification.file_fingerprint import FileFingerprints, compare_files
from icepack_core.execution.verification.fingerprint import (
    Fingerprint,
    SparkType,
    as_int,
    fingerprint,
    table_columns,
)
from icepack_core.execution.verification.metadata_diff import (
    is_partitioned,
    manifest_diff,
    metadata_diff,
)
from icepack_core.execution.verification.scope import (
    FileDiff,
    TableLayout,
    diff_files,
    layout_from_describe,
    partition_fingerprints,
)
from icepack_core.execution.verification.snapshots import snapshots_after
from icepack_core.safety.locations import object_store_scheme
from icepack_core.safety.verification import (
    Evidence,
    PartitionName,
    Rollback,
    ScopeNote,
    SnapshotCheck,
    VerificationFailed,
)
from icepack_core.spark.engine import Rows, SparkEngine
from icepack_core.spark.sql import procedure_call, qualified_name
from icepack_core.types import TableRef

# Partitions named in one snapshot's evidence (the counts are always complete).
EVIDENCE_PARTITIONS = 20

# Raises when the caller no longer holds the table lock under a valid fence.
Guard = Callable[[], Awaitable[None]]
# The table as PyIceberg loads it now from the catalog (None: PyIceberg could not model it).
TableLoader = Callable[[], Awaitable[Table | None]]


class RewriteVerifier:
    """Verification of the rewrites of one table (``catalog`` + ``table``) through ``engine``.

    ``metadata`` loads the table through the executor's own catalog: the file diff is then
    computed from its manifests in this process (``metadata_diff``) instead of by a Spark
    query (``diff_files``), which stays the fallback whenever that cannot be exact.
    """

    def __init__(
        self,
        engine: SparkEngine,
        catalog: str,
        table: TableRef,
        *,
        verify_checksum: bool = True,
        metadata: TableLoader | None = None,
        in_process: bool = True,
    ) -> None:
        self.engine = engine
        self.metadata = metadata
        self.in_process = in_process
        # The table as loaded for the current verify(), or why it could not be; that
        # verify()'s whole-table fingerprints and Spark layout (or why it could not be read).
        self._loaded: list[tuple[Table | None, str | None]] = []
        self._memo: dict[int, Fingerprint] = {}
        self._layouts: list[TableLayout | str] = []
        self.catalog = catalog
        self.table = table
        self.qualified = qualified_name(catalog, table.levels, table.name)
        self.verify_checksum = verify_checksum
        self._columns: list[tuple[str, SparkType]] | None = None
        self._known: FileFingerprints | None = None  # the current verify()'s prefetched files

    def metadata_table(self, name: str) -> str:
        return qualified_name(self.catalog, (*self.table.levels, self.table.name), name)

    async def current_snapshot_id(self) -> int | None:
        rows = await self.engine.sql(
            f"SELECT snapshot_id FROM {self.metadata_table('history')} "
            "WHERE is_current_ancestor ORDER BY made_current_at DESC LIMIT 1"
        )
        return as_int(rows[0]["snapshot_id"]) if rows else None

    async def fingerprint(self, snapshot_id: int | None = None) -> Fingerprint:
        """Row count and checksum of the live rows (deletes applied) at a snapshot."""
        if self.verify_checksum and self._columns is None:
            self._columns = await table_columns(self.engine, self.qualified)
        columns = self._columns if self.verify_checksum else None
        return await fingerprint(self.engine, self.qualified, snapshot_id, columns)

    async def layout(self) -> TableLayout:
        """The table's partitioning as ``DESCRIBE TABLE EXTENDED`` shows it now. Where that
        shows a non-identity transform, or the table has more than one partition spec, the
        current spec's fields with their transforms as the loaded metadata has them
        (``metadata_scope.spec_columns``) and the fields every spec shares
        (``TableLayout.shared``); without the metadata, the transforms ``DESCRIBE`` lists
        (``transform_columns``). The scoped scan filters on them and ``EXPLAIN`` decides
        whether that is sound."""
        rows = await self.engine.sql(f"DESCRIBE TABLE EXTENDED {self.qualified}")
        layout = layout_from_describe(rows, identity_columns(rows))
        table = None
        if self.metadata is not None:
            table, _ = await self._load()
        if table is None:
            if layout.columns is None:
                return replace(layout, columns=transform_columns(rows, self.catalog))
            return layout
        specs = table.metadata.specs()
        if layout.columns is not None and len(specs) < 2:
            return layout
        try:
            named, _ = spec_columns(table, table.metadata.default_spec_id, self.catalog)
        except (ScopeFallback, MetadataDiffUnsupported):
            return layout  # the scoped scan says why it is not sound
        return replace(
            layout, columns=named, shared=shared_fields(table) if len(specs) > 1 else None
        )

    async def proven_in_process(
        self, before: int, after: int, source: ScopeNote
    ) -> Comparison | None:
        """``before`` and ``after`` proven equal without asking Spark anything: the file diff
        from the manifests (partitioning from the metadata, no ``DESCRIBE``) and the touched
        partitions read in this process. None when that proves nothing -- no loader, a diff
        that needs a whole-table comparison, delete files, a difference... -- with
        ``source`` holding the evidence so far (``reader_fallback``: why the read did not
        prove it); ``scoped_comparison`` then decides with Spark's view of the table."""
        if not self.in_process or self.metadata is None:
            return None
        table, _ = await self._load()
        if table is None:
            return None  # scoped_comparison records why
        started = time.perf_counter()
        try:
            diff, _ = await asyncio.to_thread(
                manifest_diff, table, before, after, is_partitioned(table)
            )
        except Exception as exc:  # the Spark-side path decides, and says why
            source.reader_fallback = f"manifest diff: {brief(exc)}"
            return None
        source.files_diff = "metadata"
        source.files_diff_seconds = round(time.perf_counter() - started, 3)
        if diff.unsound is not None:
            return None
        if not diff.touched:
            return unchanged(counts(diff).merged(source))
        return await self._read_in_process(table, diff, source)

    async def scoped_comparison(
        self,
        before: int,
        after: int,
        layout: TableLayout,
        source: ScopeNote | None = None,
    ) -> Comparison | ScopeNote:
        """Compare ``before`` and ``after`` on the partitions whose files differ; or, when that
        is not sound or cheap, the scope evidence (``scope: table``, ``scope_reason``) for a
        whole-table comparison. Any error while scoping or in the scoped scan only widens the
        comparison to the whole table (whose errors then propagate); cancellation
        propagates. ``source``: the evidence of a ``proven_in_process`` that proved nothing
        (its read is not tried again)."""
        diff: FileDiff | None = None
        tried = source is not None and source.reader_fallback is not None
        source = ScopeNote() if source is None else source
        try:
            diff, _ = await self.file_diff(before, after, layout, source)
            scope = counts(diff).merged(source)
            if diff.unsound is not None:
                return whole_table(scope, diff.unsound)
            if not diff.touched:
                return unchanged(scope)
            if not tried and self.in_process and diff.files is not None:
                table, _ = await self._load()  # file_diff loaded it, or diff.files is None
                read = await self._read_in_process(table, diff, source) if table else None
                if read is not None:
                    return read
            if self.verify_checksum and self._columns is None:
                self._columns = await table_columns(self.engine, self.qualified)
            scoped = await self._scoped_scan(before, after, layout, diff)
        except ScopeFallback as exc:
            return whole_table(counts(diff).merged(source), exc.reason)
        except Exception as exc:  # scoping must never fail a verification
            reason = f"partition scoping failed: {brief(exc)}"
            return whole_table(counts(diff).merged(source), reason)
        return replace(scoped, scope=scoped.scope.merged(source))

    async def file_diff(
        self,
        before: int,
        after: int,
        layout: TableLayout,
        source: ScopeNote | None = None,
    ) -> tuple[FileDiff, ScopeNote]:
        """The live files of ``before`` and ``after`` compared per partition, and evidence of
        how (also written into ``source``, before the Spark query runs, so that it survives
        that query's error): ``files_diff`` ``metadata`` (read here) or ``engine`` (the Spark
        query, with ``files_diff_fallback`` saying why when the metadata path was tried), and
        ``files_diff_seconds`` (table load included).

        Raises:
            ScopeUnsound | Exception: from the Spark query (the caller widens the comparison).
        """
        reason = None
        source = ScopeNote() if source is None else source
        started = time.perf_counter()
        if self.metadata is not None:
            try:
                table, reason = await self._load()
                if table is not None:
                    diff = await metadata_diff(table, self.engine, before, after, layout)
                    source.files_diff = "metadata"
                    source.files_diff_seconds = round(time.perf_counter() - started, 3)
                    return diff, source
            except MetadataDiffUnsupported as exc:
                reason = str(exc)
            except Exception as exc:  # the Spark query decides
                reason = brief(exc)
        source.files_diff = "engine"
        if reason is not None:
            source.files_diff_fallback = reason
        diff = await diff_files(self.engine, self.metadata_table("entries"), before, after, layout)
        source.files_diff_seconds = round(time.perf_counter() - started, 3)
        return diff, source

    async def _read_in_process(
        self, table: Table, diff: FileDiff, source: ScopeNote
    ) -> Comparison | None:
        """The touched partitions proven equal by reading their files in this process
        (``file_fingerprint``); None when that reader cannot prove it -- it cannot read them
        exactly, or they differ -- with the reason in ``source.reader_fallback``: the Spark
        scan then decides."""
        if diff.files is None:
            source.reader_fallback = "the file diff did not list the files"
            return None
        store = object_store_scheme(table.metadata.location)
        if store is not None:
            # Not tried file by file: every file would be refused for the same reason.
            source.reader_fallback = (
                f"the table is on an object store ({store}): the in-process reader reads "
                "local files only"
            )
            return None
        started = time.perf_counter()
        try:
            compared = await asyncio.to_thread(
                compare_files,
                table.metadata.schema(),
                diff.files,
                properties=table.metadata.properties,
                checksum=self.verify_checksum,
                known=self._known,
            )
        except InProcessUnsupported as exc:
            source.reader_fallback = exc.reason
            return None
        except Exception as exc:  # the Spark scan decides
            source.reader_fallback = brief(exc)
            return None
        if compared.differs is not None:
            source.reader_fallback = f"the in-process read differs ({compared.differs})"
            return None
        took = round(time.perf_counter() - started, 3)
        read = ScopeNote(
            reader="in_process",
            reader_seconds=took,
            reader_files_read=compared.files_read,
            reader_files_prefetched=compared.files_prefetched,
        )
        note = self._scoped_note(diff, read)
        return Comparison(compared.before, compared.after, note.merged(source))

    async def _scoped_scan(
        self, before: int, after: int, layout: TableLayout, diff: FileDiff
    ) -> Comparison:
        columns = self._columns if self.verify_checksum else None
        scoped = await partition_fingerprints(
            self.engine, self.qualified, before, after, layout, diff.touched, columns
        )
        note = self._scoped_note(diff, ScopeNote(reader="engine"))
        return Comparison(scoped.before, scoped.after, note)

    @staticmethod
    def _scoped_note(diff: FileDiff, reader: ScopeNote) -> ScopeNote:
        scoped = ScopeNote(
            scope="partitions",
            partitions_fingerprinted=len(diff.touched),
            fingerprinted=[
                PartitionName(spec_id=p.spec_id, partition=p.label)
                for p in diff.touched[:EVIDENCE_PARTITIONS]
            ],
        )
        return counts(diff).merged(scoped).merged(reader)

    async def _load(self) -> tuple[Table | None, str | None]:
        """The table through ``metadata``, loaded once per ``verify()`` (after every checked
        snapshot was committed), or None and why not."""
        if not self._loaded:
            if self.metadata is None:
                self._loaded.append((None, "no table loader"))
            else:
                try:
                    table = await self.metadata()
                    why = None if table is not None else "PyIceberg did not load the table"
                    self._loaded.append((table, why))
                except Exception as exc:
                    self._loaded.append((None, brief(exc)))
        return self._loaded[0]

    async def snapshots_since(self, start: int | None) -> Rows:
        """Snapshots on the current branch after ``start``, oldest first.

        Ordered by following parent links, not by commit time: commits of one rewrite
        (partial progress) can share a millisecond.
        """
        rows = await self.engine.sql(
            "SELECT s.snapshot_id, s.parent_id, s.operation, s.committed_at "
            f"FROM {self.metadata_table('snapshots')} s "
            f"JOIN {self.metadata_table('history')} h ON h.snapshot_id = s.snapshot_id "
            "WHERE h.is_current_ancestor"
        )
        for row in rows:  # the Thrift engine returns ids as text or int; normalise once
            row["snapshot_id"] = as_int(row["snapshot_id"])
            row["parent_id"] = as_int(row["parent_id"]) if row["parent_id"] is not None else None
        by_parent = {r["parent_id"]: r for r in rows}
        known = {r["snapshot_id"] for r in rows}
        # The oldest ancestor still in the metadata (its parent may have been expired).
        roots = [r for r in rows if r["parent_id"] is None or r["parent_id"] not in known]
        # start None (no snapshot before) or no longer an ancestor: check from the root.
        cursor = by_parent.get(start) if start in known else (roots[0] if roots else None)
        chain: Rows = []
        while cursor is not None:
            chain.append(cursor)
            cursor = by_parent.get(cursor["snapshot_id"])
        return chain

    async def verify(
        self, start: int | None, guard: Guard | None = None, known: FileFingerprints | None = None
    ) -> Evidence:
        """Check every ``replace`` snapshot after ``start``; return the evidence
        (``status: verified``, ``snapshots`` checked).

        When nothing but replaces was committed since ``start`` (no concurrent writer), the
        chain as a whole is checked with one comparison (start vs. newest); only if that
        differs, or other commits are interleaved, is each replace checked against its own
        parent. A comparison fingerprints only the partitions whose files differ
        (``scoped_comparison``), or the whole table when scoping is not sound; whole-table
        fingerprints are memoised, so consecutive replaces share scans.

        Raises:
            VerificationFailed: a replace changed the live contents (rolled back if possible).
            Exception: whatever ``guard`` raises before a rollback, or the engine's error when a
                query fails; the caller holds the table or leaves the verification pending.

        ``known``: data files fingerprinted already (``replaced_files.prefetch``, while the
        rewrite ran); the in-process reader does not read them again.
        """
        self._known = known
        self._loaded.clear()
        self._memo.clear()
        self._layouts.clear()
        snaps = await self._snapshots(start)
        replaces = [s for s in snaps if s["operation"] == "replace" and s["parent_id"] is not None]
        evidence = Evidence(status="verified", start_snapshot_id=start)
        if not replaces:
            return evidence
        if start is not None and len(replaces) == len(snaps) and snaps[0]["parent_id"] == start:
            chain = await self._compare(start, snaps[-1]["snapshot_id"])
            if chain.ok:
                evidence.snapshots = [
                    snapshot_record(s["snapshot_id"], s["parent_id"], chain, "chain")
                    for s in replaces
                ]
                return evidence
        for snap in replaces:
            snapshot_id, parent_id = snap["snapshot_id"], snap["parent_id"]
            comparison = await self._compare(parent_id, snapshot_id)
            record = snapshot_record(snapshot_id, parent_id, comparison, "parent")
            evidence.snapshots.append(record)
            if not comparison.ok:
                await self._violated(evidence, record, comparison, guard)
        return evidence

    async def _snapshots(self, start: int | None) -> Rows:
        """``snapshots_since(start)``; with a loader, from the metadata the file diff reads."""
        loaded = (await self._load())[0] if self.metadata is not None else None
        if loaded is not None:
            return snapshots_after(loaded, start)
        return await self.snapshots_since(start)

    async def _spark_layout(self) -> TableLayout | str:
        """Spark's view of the table, refreshed once per verify() on first use: Spark reads
        each snapshot through its cached table (Iceberg's CachingCatalog), which may not know
        a commit another client made since the CALL. A string: why it could not be read."""
        if not self._layouts:
            await self.engine.sql(f"REFRESH TABLE {self.qualified}")
            try:
                self._layouts.append(await self.layout())
            except Exception as exc:  # only widens the comparison
                self._layouts.append(f"DESCRIBE failed: {brief(exc)}")
        return self._layouts[0]

    async def _whole_fingerprint(self, snapshot_id: int) -> Fingerprint:
        """``fingerprint(snapshot_id)``, memoised per verify()."""
        if snapshot_id not in self._memo:
            self._memo[snapshot_id] = await self.fingerprint(snapshot_id)
        return self._memo[snapshot_id]

    async def _compare(self, before: int, after: int) -> Comparison:
        """``before`` and ``after`` compared as cheaply as is sound: in process, scoped to the
        touched partitions, or the whole table (``verify``)."""
        source = ScopeNote()
        proven = await self.proven_in_process(before, after, source)
        if proven is not None:
            return proven
        layout = await self._spark_layout()
        scoped = (
            await self.scoped_comparison(before, after, layout, source)
            if isinstance(layout, TableLayout)
            else whole_table(source, layout)
        )
        if isinstance(scoped, Comparison):
            return scoped
        before_fp = await self._whole_fingerprint(before)
        return Comparison(before_fp, await self._whole_fingerprint(after), scoped)

    async def _violated(
        self,
        evidence: Evidence,
        record: SnapshotCheck,
        comparison: Comparison,
        guard: Guard | None,
    ) -> NoReturn:
        """Record the violation ``record`` in ``evidence``, roll back (``_roll_back``), and
        raise ``VerificationFailed`` with the evidence."""
        evidence.status, evidence.violation = "violation", record
        evidence.rollback = await self._roll_back(record.snapshot_id, record.parent_id, guard)
        before, after = comparison.before, comparison.after
        where = " in the rewritten partitions" if comparison.scope.scope == "partitions" else ""
        raise VerificationFailed(
            f"rewrite snapshot {record.snapshot_id} changed the live contents of "
            f"{self.qualified}: {before.rows} rows -> {after.rows} rows{where}"
            f"{', checksum differs' if before.checksum != after.checksum else ''}",
            evidence,
        )

    async def _roll_back(self, bad: int, parent: int, guard: Guard | None) -> Rollback:
        """Make ``parent`` current again if ``bad`` still is; say exactly what happened."""
        # The check and the procedure must see the catalog's current snapshot, not the one
        # Spark cached: a writer in another process may have committed on top of the bad one,
        # and rolling back would revert it while reporting a clean rollback.
        await self.engine.sql(f"REFRESH TABLE {self.qualified}")
        current = await self.current_snapshot_id()
        if current != bad:
            # Rolling back would also revert the commits made on top of the bad one.
            return Rollback(
                status="not_rolled_back",
                to_snapshot_id=parent,
                bad_snapshot_id=bad,
                current_snapshot_id=current,
                reason="snapshots were committed on top of the bad one",
            )
        if guard is not None:
            await guard()  # raises when we no longer hold the table under a valid fence
        rows = await self.engine.sql(
            procedure_call(
                self.catalog, "rollback_to_snapshot", {"table": self.table, "snapshot_id": parent}
            )
        )
        previous = as_int(rows[0]["previous_snapshot_id"]) if rows else None
        now = as_int(rows[0]["current_snapshot_id"]) if rows else None
        after = await self.current_snapshot_id()  # a writer may also have committed since
        result = Rollback(
            status="rolled_back",
            to_snapshot_id=parent,
            bad_snapshot_id=bad,
            previous_snapshot_id=previous,
            current_snapshot_id=now,
            current_after_rollback=after,
        )
        if previous != bad:
            # A writer committed between the check and the rollback, and the rollback
            # reverted it: its data is still in snapshot `previous` (the hold stops expiry).
            result.status = "rolled_back_reverting_writer"
            result.reverted_snapshot_id = previous
            result.reason = (
                f"snapshot {previous} was committed on top of {bad} while rolling "
                f"back and is no longer current; restore it by hand"
            )
        return result
