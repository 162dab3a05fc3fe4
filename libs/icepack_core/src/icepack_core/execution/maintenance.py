"""Running maintenance actions on one table through a Spark engine, and proving they lost nothing.

``TableMaintenance.run(intent)`` turns a typed action intent (``icepack_core.intents``) into one
Iceberg procedure call built by ``sql_ident``, runs it, and
returns what it did. For rewrites it first hands the start snapshot to ``before_call`` (the
executor records it durably) and, after the call, verifies every ``replace`` snapshot committed
since then through ``verification.RewriteVerifier``: the live row count and a content checksum
(``fingerprint``) must equal its parent's. On a violation it rolls the table back to the
snapshot before the bad commit (if nothing was committed on top of it and ``guard`` confirms the
lock is still ours) and raises ``VerificationFailed`` with the evidence.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import structlog
from pyiceberg.table import Table

from icepack_core.errors import OrphanLimitExceeded, PermanentError, brief
from icepack_core.execution.orphan_listing import OrphanLimits, listed_orphans
from icepack_core.execution.procedure_calls import procedure_args
from icepack_core.execution.scoping.binpack_scope import BinpackScoping
from icepack_core.execution.scoping.clustering_scope import (
    ClusteringScope,
    ScopeNote,
    clustering_after,
    clustering_run,
)
from icepack_core.execution.scoping.left_behind import (
    ScopedRun,
    record_lost,
    whole_table_run,
)
from icepack_core.execution.statistics import compute_statistics
from icepack_core.execution.table_confs import table_confs
from icepack_core.execution.verification.file_fingerprint import FileFingerprints
from icepack_core.execution.verification.fingerprint import Fingerprint
from icepack_core.execution.verification.replaced_files import Prefetch
from icepack_core.execution.verification.stored_fingerprints import (
    StoredLoader,
    blocking_source,
)
from icepack_core.execution.verification.verifier import Guard, RewriteVerifier, TableLoader
from icepack_core.intents import (
    LEDGER_INTENTS,
    STATISTICS_INTENTS,
    ExpireSnapshots,
    Intent,
    RemoveOrphanFiles,
    RewriteDataFiles,
)
from icepack_core.safety.locations import location_key
from icepack_core.safety.verification import Evidence, VerificationFailed
from icepack_core.spark.engine import Rows, SparkEngine
from icepack_core.spark.sql import (
    ProcedureValue,
    procedure_call,
    qualified_name,
    spark_conf_statements,
)
from icepack_core.types import REWRITES, JSONObject, TableRef

__all__ = [
    "ActionOutcome",
    "AfterCall",
    "BeforeCall",
    "Expiry",
    "Fingerprint",
    "OrphanLimitExceeded",
    "OrphanLimits",
    "TableMaintenance",
    "VerificationFailed",
    "summarise",
]

log = structlog.get_logger("icepack.maintenance")


@dataclass
class ActionOutcome:
    action: str
    procedure: str
    sql: list[str]
    # Stored as ``job_actions.output``: the procedure's own columns (``summarise``; Spark's,
    # open) with the typed notes (scope, clustering, statistics) merged in.
    output: JSONObject
    # A rewrite's verification (None for other actions); stored as ``output.verification``.
    verification: Evidence | None = None


AfterCall = Callable[[str], Awaitable[None]]  # test-only hook: runs after the procedure commits
# Takes over from an orphan dry run: given the listed paths (quarantine paths already filtered
# out), the confined location and ``older_than``, records and quarantines them through the
# deletion ledger (``execution.ledger.quarantine``) and returns what it did.
OrphanSink = Callable[[list[str], str, datetime], Awaitable[dict[str, object]]]
# Called with the start snapshot before a rewrite's CALL: the durable "to verify" record.
BeforeCall = Callable[[str, int | None], Awaitable[None]]


class Expiry(Protocol):
    """Runs ``expire_snapshots`` in place of the bare CALL (``expiry_ledger.ExpiryLedger``:
    record the files first, check them, call, reconcile). Fills ``outcome``."""

    async def expire(
        self,
        engine: SparkEngine,
        ref: TableRef,
        intent: ExpireSnapshots,
        outcome: ActionOutcome,
    ) -> None: ...


class TableMaintenance:
    """Maintenance of one table (``ref``) through one engine."""

    def __init__(
        self,
        engine: SparkEngine,
        ref: TableRef,
        properties: Mapping[str, str] | None = None,
        *,
        verify_checksum: bool = True,
        after_call: AfterCall | None = None,
        before_call: BeforeCall | None = None,
        guard: Guard | None = None,
        orphan_location: str | None = None,
        orphan_limits: OrphanLimits | None = None,
        expiry: Expiry | None = None,
        orphan_sink: OrphanSink | None = None,
        metadata: TableLoader | None = None,
        on_commit: Callable[[], None] | None = None,
        in_process_reader: bool = True,
        stored_fingerprints: StoredLoader | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engine = engine
        # Wall-clock seconds: when a partition last written counts as open (tests pin it).
        self.clock = clock
        self.ref = ref
        self.levels = ref.levels
        self.table = ref
        self.qualified = qualified_name(ref.catalog, self.levels, ref.name)
        self.properties = dict(properties or {})
        self.verify_checksum = verify_checksum
        self.after_call = after_call
        self.before_call = before_call
        self.guard = guard
        self.metadata = metadata
        self.on_commit = on_commit  # before a commit: ``job_context.TableMetadata`` reloads
        # Fingerprints of small files taken at first sight (with a job: its table's rows).
        self.stored_fingerprints = stored_fingerprints
        self.verifier = RewriteVerifier(
            engine, ref.catalog, ref, verify_checksum=verify_checksum, metadata=metadata,
            in_process=in_process_reader,
        )  # fmt: skip
        # Set by the safety choke point (safety.admission.admit) for orphan removal only.
        self.orphan_location = orphan_location
        self.orphan_limits = orphan_limits or OrphanLimits()
        # With a job, expiry records its files in the deletion ledger first (JobExecution).
        self.expiry = expiry
        # Orphans are never deleted by the procedure: without a ledger sink nothing is removed.
        self.orphan_sink = orphan_sink
        self.scoping = BinpackScoping(
            engine,
            catalog=ref.catalog,
            qualified=self.qualified,
            files_table=self.metadata_table("files"),
            properties=self.properties,
            clock=clock,
        )
        # The partitions the current rewrite selected from the manifests (``_scope``).
        self.scoped: ScopedRun | None = None

    def metadata_table(self, name: str) -> str:
        return qualified_name(self.ref.catalog, (*self.levels, self.ref.name), name)

    async def current_snapshot_id(self) -> int | None:
        return await self.verifier.current_snapshot_id()

    async def fingerprint(self, snapshot_id: int | None = None) -> Fingerprint:
        """Row count and checksum of the live rows (deletes applied) at a snapshot."""
        return await self.verifier.fingerprint(snapshot_id)

    async def snapshots_since(self, start: int | None) -> Rows:
        """Snapshots on the current branch after ``start``, oldest first."""
        return await self.verifier.snapshots_since(start)

    async def run(self, intent: Intent) -> ActionOutcome:
        """Run one action, parsed once where it arrived (``icepack_core.intents``); rewrites
        are verified (and rolled back on a violation).

        Raises:
            PermanentError: bad parameters (``IntentError``), or orphan removal whose table
                location is not the one admitted.
            OrphanLimitExceeded: the orphan dry run found more than the limits allow.
            VerificationFailed: a rewrite changed the live contents (rolled back if possible).
            Exception: the engine's error for a failed statement; a rewrite may have committed
                partial progress before it, which the caller must still verify.
        """
        self.scoped = None
        if isinstance(intent, LEDGER_INTENTS):
            raise PermanentError(
                f"{intent.kind.value} runs through the deletion ledger, not a Spark procedure"
            )
        # Iceberg's Spark catalog caches a loaded table until 30 s after its last access, so a
        # session that keeps maintaining a table keeps the metadata it first loaded. Every
        # action starts from the catalog's: an orphan listing from an older view would name
        # files committed since as orphans. An expiry through the ledger refreshes at the point
        # that matters, right before its check (``expiry_ledger.spark_sample``).
        if not (isinstance(intent, ExpireSnapshots) and self.expiry is not None):
            await self.engine.sql(f"REFRESH TABLE {self.qualified}")
        location = None
        if isinstance(intent, RemoveOrphanFiles):
            location = await self._confirmed_location()
        name, args = procedure_args(intent, self.table, location=location)
        # A rewrite's table as the catalog has it now: its scope and start snapshot.
        loaded = await self._load_metadata() if intent.kind in REWRITES else None
        clustered, scope_note = await self._scope(intent, args, loaded)
        if clustered is None and loaded is not None and "where" not in args:
            self._whole_table(intent)
        statements = spark_conf_statements(self.properties)
        # The session is shared by every table this engine maintains (``table_confs``).
        async with table_confs(self.engine, self.properties):
            outcome = await self._call(intent, name, args, location, statements, scope_note, loaded)
            if clustered is not None and isinstance(intent, RewriteDataFiles) and self.metadata:
                outcome.output["clustering"] = await clustering_after(
                    self.metadata,
                    intent.params,
                    clustered.before,
                    self.scoping.target(intent.params.options, strict=False),
                )
            return outcome

    def _whole_table(self, intent: Intent) -> None:
        """A table-wide binpack: every partition with enough small files forms a group, which
        ``scoping.left_behind`` checks after the call."""
        if isinstance(intent, RewriteDataFiles) and self.scoped is None:
            target = self.scoping.target(intent.params.options, strict=False)
            self.scoped = whole_table_run(intent.params.options, target)

    async def _scope(
        self, intent: Intent, args: dict[str, ProcedureValue], loaded: Table | None
    ) -> tuple[ClusteringScope | None, ScopeNote]:
        """A rewrite's scope and its note. Sort and z-order: the key is checked first, the
        scope is their own (``clustering_scope``). A binpack over partitions: the partitions
        worth compacting, as ``args["where"]`` (``binpack_scope``)."""
        clustered = (
            await clustering_run(
                loaded,
                self.engine,
                intent.params,
                args,
                catalog=self.ref.catalog,
                target_bytes=self.scoping.target(intent.params.options, strict=False),
            )
            if isinstance(intent, RewriteDataFiles) and intent.params.strategy != "binpack"
            else None
        )
        if clustered is not None:
            return clustered, ScopeNote(**clustered.note)
        if (
            isinstance(intent, RewriteDataFiles)
            and intent.params.scope == "partitions"
            and "where" not in args
        ):
            binpack = await self.scoping.scope(dict(intent.params.options), loaded, intent.params)
            if binpack.where is not None:
                args["where"] = binpack.where
            self.scoped = binpack.run
            return None, binpack.note
        return None, ScopeNote()

    async def _call(
        self,
        intent: Intent,
        name: str,
        args: dict[str, ProcedureValue],
        location: str | None,
        statements: Sequence[str],
        scope_note: ScopeNote,
        loaded: Table | None,
    ) -> ActionOutcome:
        """The procedure call of one admitted intent (confs already set). A rewrite starts
        from ``loaded``'s current snapshot when the table was loaded, else from the one Spark
        reports: either was current before the call, so every ``replace`` it commits comes
        after it and is verified."""
        start = None
        if intent.kind in REWRITES:
            start = (
                loaded.metadata.current_snapshot_id
                if loaded is not None
                else await self.current_snapshot_id()
            )
        outcome = ActionOutcome(name, name, list(statements), dict(scope_note))
        if isinstance(intent, STATISTICS_INTENTS):  # metadata-only, with its own evidence
            sql, output = await compute_statistics(
                self.engine, self.ref, intent, self._fresh_metadata()
            )
            outcome.sql.extend(sql)
            outcome.output.update(output)
            return outcome
        if isinstance(intent, ExpireSnapshots) and self.expiry is not None:
            self._committing()
            await self.expiry.expire(self.engine, self.ref, intent, outcome)
            return outcome
        if isinstance(intent, RemoveOrphanFiles) and not intent.params.dry_run:
            assert location is not None  # confirmed for every orphan removal
            return await self._remove_orphans(intent, name, args, location, outcome)
        return await self._procedure(intent, name, args, start, outcome, loaded)

    async def _remove_orphans(
        self,
        intent: RemoveOrphanFiles,
        name: str,
        args: dict[str, ProcedureValue],
        location: str,
        outcome: ActionOutcome,
    ) -> ActionOutcome:
        """Orphan removal: the dry run's listing, checked against the limits, handed to the
        deletion ledger (quarantine); the procedure never deletes."""
        dry = procedure_call(self.ref.catalog, name, {**args, "dry_run": True})
        outcome.sql.append(dry)
        paths = await listed_orphans(self.engine, self.ref, dry, location, self.orphan_limits)
        outcome.output.update(paths.output)
        if self.orphan_sink is None:
            raise PermanentError(
                f"remove_orphan_files on {self.ref}: orphans are only removed through the "
                "deletion ledger (quarantine), and this run has none"
            )
        started = time.monotonic()
        found = paths.paths
        outcome.output.update(await self.orphan_sink(found, location, intent.params.older_than))
        outcome.output["procedure_ms"] = int((time.monotonic() - started) * 1000)
        return outcome

    async def _procedure(
        self,
        intent: Intent,
        name: str,
        args: dict[str, ProcedureValue],
        start: int | None,
        outcome: ActionOutcome,
        loaded: Table | None = None,
    ) -> ActionOutcome:
        """The procedure's own CALL; a rewrite's start is recorded first (``before_call``) and
        every ``replace`` it committed after ``start`` is verified. While a binpack runs, the
        files it will most likely replace are fingerprinted beside it (``replaced_files``,
        from ``loaded``, the table at ``start``), so its verification reads only the rest."""
        call = procedure_call(self.ref.catalog, name, args)
        outcome.sql.append(call)
        if intent.kind in REWRITES and self.before_call is not None:
            await self.before_call(name, start)
        started = time.monotonic()
        self._committing()
        prefetch = self._prefetch(loaded)
        try:
            rows = await self.engine.sql(call)
            outcome.output.update(summarise(name, rows))
            outcome.output["procedure_ms"] = int((time.monotonic() - started) * 1000)
            if isinstance(intent, RewriteDataFiles):
                scoped, self.scoped = self.scoped, None
                await record_lost(self.metadata, start, scoped, outcome.output)
            if self.after_call is not None:
                self._committing()  # a test's hook may commit (a writer, a corrupt replace)
                await self.after_call(name)
            known = await prefetch.result() if prefetch is not None else None
        except BaseException:
            if prefetch is not None:
                prefetch.cancel()
            raise
        if intent.kind in REWRITES:
            outcome.verification = await self.verify_rewrites(start, self.guard, known)
        return outcome

    def _prefetch(self, loaded: Table | None) -> Prefetch | None:
        """The files a binpack (``scoped``) will most likely replace, fingerprinted beside its
        CALL when its verification reads in process (those fingerprinted at first sight taken
        from ``stored_fingerprints``, fetched by the prefetch's thread through this event
        loop); None when there is nothing to do."""
        if loaded is None or self.scoped is None or not self.verifier.in_process:
            return None
        source = None
        if self.stored_fingerprints is not None:
            schema = loaded.metadata.schema()
            source = blocking_source(self.stored_fingerprints, schema, self.verify_checksum)
        return Prefetch(loaded, self.scoped, checksum=self.verify_checksum, stored=source)

    def _committing(self) -> None:
        if self.on_commit is not None:
            self.on_commit()

    def _fresh_metadata(self) -> TableLoader | None:
        """``metadata`` loaded anew at each call (a statistics action reads the table before
        and after its commit)."""
        metadata = self.metadata
        if metadata is None:
            return None

        async def fresh() -> Table | None:
            self._committing()
            return await metadata()

        return fresh

    async def _confirmed_location(self) -> str:
        """The location orphan removal is confined to: the one the choke point admitted, and
        still the table's location as Spark sees it now."""
        if self.orphan_location is None:
            raise PermanentError(
                f"remove_orphan_files on {self.ref} was not admitted with a "
                "location (icepack_core.safety.admission.admit)"
            )
        rows = await self.engine.sql(f"DESCRIBE TABLE EXTENDED {self.qualified}")
        current = next(
            (
                str(r.get("data_type") or "").strip()
                for r in rows
                if str(r.get("col_name") or "").strip() == "Location"
            ),
            None,
        )
        if current is None or location_key(current) != location_key(self.orphan_location):
            raise PermanentError(
                f"remove_orphan_files on {self.ref}: Spark reports location {current!r}, not "
                f"the admitted {self.orphan_location!r}; refusing"
            )
        return self.orphan_location

    async def _load_metadata(self) -> Table | None:
        """The table through the executor's catalog (``metadata``), or None without a loader
        or when the load fails (logged): the Spark queries then answer instead."""
        if self.metadata is None:
            return None
        try:
            return await self.metadata()
        except Exception as exc:
            log.warning(
                "maintenance.metadata_load_failed",
                table=str(self.ref),
                error=brief(exc),
            )
            return None

    async def verify_rewrites(
        self,
        start: int | None,
        guard: Guard | None = None,
        known: FileFingerprints | None = None,
    ) -> Evidence:
        """Check every ``replace`` snapshot after ``start`` (see ``RewriteVerifier.verify``).

        Returns the evidence with ``seconds``, the verification's wall time (its share of the
        action's time is what an object store makes larger: there the Spark scan reads the
        touched files).
        """
        started = time.perf_counter()
        evidence = await self.verifier.verify(start, guard, known)
        evidence.seconds = round(time.perf_counter() - started, 3)
        return evidence


def summarise(name: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, object]:
    """Procedure output columns as JSON-safe values (orphan listings are counted, not kept)."""
    if name == "remove_orphan_files":
        return {
            "orphan_files_removed": len(rows),
            "sample": [str(next(iter(r.values()))) for r in rows[:20]],
        }
    if not rows:
        return {}
    return {
        str(k): (v if isinstance(v, int | float | str | bool) or v is None else str(v))
        for k, v in rows[0].items()
    }
