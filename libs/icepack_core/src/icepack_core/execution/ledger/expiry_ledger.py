"""Snapshot expiry that records every file in the deletion ledger before anything is deleted.

``ExpiryLedger.expire`` replaces the bare ``CALL expire_snapshots(older_than, retain_last)``
for a job (the executor and ``icepack maintain`` always run one):

1. **Plan** from the table's metadata (PyIceberg): the snapshots the retention rules expire (E,
   ``expiry_retention``) and the files reachable only from them (``expiry_files``). E empty:
   no CALL, and the output says so. Every planned file must pass the table's confinement rule
   (``safety.confinement``: under its own roots, under no other known table's): a manifest
   naming another table's files stops the job here (``DeletionOutsideTable``; the caller holds
   the table), before anything is recorded or deleted.
2. **Record** every file in ``icepack.deletions`` (state ``recorded``) under the job's fence.
3. **Check** the recorded rows (read back from Postgres) against what the snapshots outside E
   reference, read again from the metadata as the catalog has it now with Icepack's own
   streaming manifest reader (``expiry_live``: every kept snapshot's manifest list, each
   distinct manifest once, its live entries one block at a time; memory bounded by one
   manifest, not snapshots x files), and against a bounded sample of Spark's own view
   (``spark_sample``: every manifest list, and the newest kept snapshots' manifests and files
   looked up for a sample of the recorded paths). A recorded file still live stops the job
   before the CALL (``DeletionLedgerViolation``; the caller holds the table).
4. **Call** ``expire_snapshots(snapshot_ids => E, older_than => epoch, retain_last)``: with the
   epoch, Iceberg's age rule keeps every unreferenced snapshot and branch ancestor, so it removes
   exactly E (``expiring_ids`` refused the one case it would not: a branch's own max age).
5. **Compare** the procedure's counts per kind with the ledger's and the snapshots removed with
   E. Equal: the rows become ``deleted``. Different: ``DeletionLedgerViolation`` with both.

Statistics files have no Spark metadata table; they are checked against the metadata's records
for the retained snapshots (in the plan and in ``expiry_live``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypedDict

import asyncpg
import structlog

from icepack_core.db.queries import load_query
from icepack_core.errors import DeletionLedgerViolation, PermanentError, StaleFence, brief
from icepack_core.execution.ledger.expiry_files import COUNT_COLUMNS, ExpiryPlan, plan_expiry
from icepack_core.execution.ledger.expiry_live import (
    LiveCheck,
    LiveConflict,
    live_conflicts,
    path_key,
)
from icepack_core.execution.ledger.expiry_retention import ANCIENT_MS
from icepack_core.execution.maintenance import ActionOutcome, summarise
from icepack_core.inspection.inspector import LoadedTable
from icepack_core.intents import ExpireSnapshots
from icepack_core.safety.confinement import Confinement, refuse_foreign
from icepack_core.spark.engine import SparkEngine
from icepack_core.spark.sql import (
    BigintArray,
    ProcedureValue,
    procedure_call,
    qualified_name,
    sql_literal,
)
from icepack_core.types import TableRef

log = structlog.get_logger("icepack.expiry")
ACTION = "expire_snapshots"
# The Spark cross-check's sample (``spark_sample``): the newest kept snapshots it reads, and the
# recorded paths it looks for in them.
SAMPLE_SNAPSHOTS = 4
SAMPLE_PATHS = 200
EVIDENCE_PATHS = 200


class ExpiryLedger:
    """Record, check, call and reconcile one job's ``expire_snapshots`` (see the module)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        job_id: int,
        fence: int,
        table_id: int,
        load: Callable[[], Awaitable[LoadedTable]],
        confine: Callable[[LoadedTable], Awaitable[Confinement]] | None = None,
    ) -> None:
        self.pool = pool
        self.job_id = job_id
        self.fence = fence
        self.table_id = table_id
        self.load = load
        # The table's confinement rule, from the table as loaded for the plan (None: tests of
        # the ledger mechanics alone).
        self.confine = confine

    async def plan(self, intent: ExpireSnapshots) -> ExpiryPlan:
        """E and its files, from the table's current metadata.

        Raises:
            PermanentError: the metadata cannot be read by PyIceberg's model, or the retention
                rules cannot be applied exactly.
        """
        return (await self._plan(intent))[0]

    async def _plan(self, intent: ExpireSnapshots) -> tuple[ExpiryPlan, LoadedTable]:
        loaded = await self.load()
        if loaded.table is None:
            raise PermanentError(
                f"expire_snapshots refused: metadata {loaded.metadata_location} is not readable "
                "by PyIceberg's model, so the files to delete cannot be recorded first"
            )
        metadata = loaded.table.metadata
        older_than_ms = int(intent.params.older_than.timestamp() * 1000)
        plan = await asyncio.to_thread(
            plan_expiry,
            metadata,
            loaded.io,
            older_than_ms=older_than_ms,
            retain_last=intent.params.retain_last,
            now_ms=int(time.time() * 1000),
        )
        return plan, loaded

    async def expire(
        self, engine: SparkEngine, ref: TableRef, intent: ExpireSnapshots, outcome: ActionOutcome
    ) -> None:
        """Steps 1-5 of the module; fills ``outcome`` (SQL sent, output).

        Raises:
            DeletionLedgerViolation: a recorded file is still live (nothing deleted), or the
                procedure's counts or removed snapshots differ from the ledger.
            DeletionOutsideTable: a file to delete is not the table's (``safety.confinement``;
                nothing recorded or deleted).
            ActionRefused: the confinement rule cannot be established (its reason).
            StaleFence: the job lost its fence (nothing recorded, or the rows left
                ``recorded``).
            PermanentError: see ``plan``.
        """
        await self._note_earlier_attempts(outcome)
        started = time.monotonic()
        plan, loaded = await self._plan(intent)
        expiring = sorted(plan.expiring)
        outcome.output["expiring_snapshot_ids"] = expiring
        outcome.output["plan_ms"] = int((time.monotonic() - started) * 1000)
        if not expiring:
            outcome.output["expired"] = (
                "no snapshot is expired by the retention rules: procedure not called"
            )
            outcome.output["ledger"] = {"files": 0}
            return
        if self.confine is not None:  # before anything is recorded or deleted
            confinement = await self.confine(loaded)
            paths = [f.path for f in plan.files]  # ~40 us each: off the event loop
            await asyncio.to_thread(refuse_foreign, confinement, paths, ACTION)
        await self._record(plan)
        recorded = await self.pool.fetch(
            load_query("deletion_expiry_recorded"), self.job_id, [f.path for f in plan.files]
        )
        started = time.monotonic()
        check = await self._check_live(engine, ref, plan.expiring, [r["path"] for r in recorded])
        outcome.output["check_ms"] = int((time.monotonic() - started) * 1000)
        outcome.output["live_check"] = check.counters()
        if check.conflict_count:
            raise _still_live(ref, check, recorded, expiring)
        snapshots_before = check.snapshot_ids
        await _call_expire(engine, ref, intent, expiring, outcome)
        after = await snapshot_ids(engine, ref)
        await self._reconcile(ref, plan, outcome.output, snapshots_before - after)

    async def _check_live(
        self, engine: SparkEngine, ref: TableRef, expiring: frozenset[int], recorded: list[str]
    ) -> LiveCheck:
        """Step 3: the recorded paths a kept snapshot still references, read from the table's
        metadata as the catalog has it now (``expiry_live``: every kept snapshot, each distinct
        manifest once), plus Spark's own view of a sample (``spark_sample``). The snapshot
        ids returned are Spark's (compared with those left after the CALL).

        Raises:
            PermanentError: the metadata or a manifest cannot be read (nothing is deleted).
        """
        loaded = await self.load()
        try:
            check = await asyncio.to_thread(
                live_conflicts, loaded.io, loaded.metadata_location, expiring, recorded
            )
        except Exception as exc:
            raise PermanentError(
                f"expire_snapshots on {ref} stopped before deleting: cannot read what the kept "
                f"snapshots reference ({brief(exc)})"
            ) from exc
        sampled, spark_ids = await spark_sample(engine, ref, expiring, recorded)
        for conflict in sampled:
            check.found(conflict.path, conflict.live_in)
        check.snapshot_ids = spark_ids
        return check

    async def _note_earlier_attempts(self, outcome: ActionOutcome) -> None:
        """Rows an earlier attempt of this job left ``recorded`` (it stopped between recording
        and reconciling; whether their files went is unknown): counted in the output and the
        log for an operator, never changed here."""
        rows = await self.pool.fetch(load_query("deletion_counts_by_kind"), self.job_id, ACTION)
        left = sum(int(r["files"]) for r in rows if r["state"] == "recorded")
        if left:
            outcome.output["earlier_attempt_recorded_files"] = left
            log.warning("expiry.earlier_attempt_rows", job_id=self.job_id, files=left)

    async def _record(self, plan: ExpiryPlan) -> None:
        files = plan.files
        inserted = await self.pool.fetch(
            load_query("deletion_expiry_record"),
            self.job_id,
            self.fence,
            self.table_id,
            [f.path for f in files],
            [f.size_bytes for f in files],
            [f.kind for f in files],
            plan.reason(),
        )
        if len(inserted) == len(files):
            return
        if await self.pool.fetchval(load_query("job_running_fence"), self.job_id) != self.fence:
            raise StaleFence(self.job_id, self.fence, "record the expiry's deletion ledger")
        raise DeletionLedgerViolation(
            f"expire_snapshots: {len(files) - len(inserted)} file(s) to delete are already in "
            f"job {self.job_id}'s ledger as no longer 'recorded'",
            {"status": "ledger_conflict", "expiring_snapshot_ids": sorted(plan.expiring)},
        )

    async def _reconcile(
        self,
        ref: TableRef,
        plan: ExpiryPlan,
        output: Mapping[str, Any],
        removed: set[int],
    ) -> None:
        ledger = plan.counts()
        procedure = {col: int(output.get(col) or 0) for col in ledger}
        result: LedgerCheck = {
            "files": len(plan.files),
            "bytes": sum(f.size_bytes or 0 for f in plan.files),
            "ledger_counts": ledger,
            "procedure_counts": procedure,
        }
        if procedure != ledger or removed != plan.expiring:
            raise DeletionLedgerViolation(
                f"expire_snapshots on {ref}: the procedure deleted {procedure} but the ledger "
                f"recorded {ledger} (snapshots removed {sorted(removed)}, expected "
                f"{sorted(plan.expiring)}); Icepack's view of the deleted files is wrong",
                {
                    "status": "count_mismatch",
                    **result,
                    "snapshots_removed": sorted(removed),
                    "expiring_snapshot_ids": sorted(plan.expiring),
                },
            )
        marked = await self.pool.fetch(
            load_query("deletion_expiry_mark_deleted"),
            self.job_id,
            self.fence,
            [f.path for f in plan.files],
        )
        if len(marked) != len(plan.files):
            log.error(
                "expiry.ledger_not_marked",
                job_id=self.job_id,
                marked=len(marked),
                files=len(plan.files),
            )
            raise StaleFence(self.job_id, self.fence, "mark the expiry's ledger rows deleted")
        if isinstance(output, dict):
            output["ledger"] = result


class LedgerCheck(TypedDict):
    """An expiry's ``output["ledger"]``: the files and bytes the ledger recorded, and the
    counts per kind by the ledger and by the procedure (equal, or the table is held)."""

    files: int
    bytes: int
    ledger_counts: dict[str, int]
    procedure_counts: dict[str, int]


def _still_live(
    ref: TableRef, check: LiveCheck, recorded: Sequence[asyncpg.Record], expiring: list[int]
) -> DeletionLedgerViolation:
    """The refusal of an expiry whose recorded files a kept snapshot still references."""
    kinds = {r["path"]: r["kind"] for r in recorded}
    conflicts = [
        {"path": c.path, "kind": kinds.get(c.path), "live_in": c.live_in}
        for c in check.conflicts[:EVIDENCE_PATHS]
    ]
    return DeletionLedgerViolation(
        f"expire_snapshots on {ref} stopped before deleting: {check.conflict_count} recorded "
        f"file(s) are still referenced by a live snapshot, e.g. {conflicts[0]['path']}",
        {
            "status": "still_referenced",
            "conflicts": conflicts,
            "conflict_count": check.conflict_count,
            "expiring_snapshot_ids": expiring,
        },
    )


def _metadata_table(ref: TableRef, name: str) -> str:
    return qualified_name(ref.catalog, (*ref.levels, ref.name), name)


async def snapshot_ids(engine: SparkEngine, ref: TableRef) -> set[int]:
    """The table's snapshot ids as Spark sees them now."""
    rows = await engine.sql(f"SELECT snapshot_id FROM {_metadata_table(ref, 'snapshots')}")
    return {int(r["snapshot_id"]) for r in rows}


def _sample(items: Sequence[str], size: int) -> list[str]:
    """At most ``size`` of ``items``, evenly spread over them (deterministic)."""
    if len(items) <= size:
        return list(items)
    step = len(items) / size
    return [items[int(i * step)] for i in range(size)]


def _in_list(paths: Iterable[str]) -> str:
    """A Spark SQL ``IN`` list of the paths that can be written as literals."""
    literals = []
    for path in paths:
        try:
            literals.append(sql_literal(path))
        except ValueError:  # a path Spark SQL text cannot carry (InvalidIdentifier)
            continue
    return ", ".join(literals)


def _sample_query(ref: TableRef, snapshot_ids: list[int], in_list: str) -> str:
    """The recorded paths of ``in_list`` among the manifests and live files of the snapshots."""
    ids = ", ".join(sql_literal(sid) for sid in snapshot_ids)
    parts = [
        f"SELECT reference_snapshot_id AS snapshot_id, path, 'manifest' AS what "
        f"FROM {_metadata_table(ref, 'all_manifests')} "
        f"WHERE reference_snapshot_id IN ({ids}) AND path IN ({in_list})"
    ] + [
        f"SELECT {sql_literal(sid)} AS snapshot_id, file_path AS path, 'file' AS what "
        f"FROM {_metadata_table(ref, 'files')} VERSION AS OF {sql_literal(sid)} "
        f"WHERE file_path IN ({in_list})"
        for sid in snapshot_ids
    ]
    return " UNION ALL ".join(parts)


async def spark_sample(
    engine: SparkEngine, ref: TableRef, expiring: frozenset[int], recorded: Sequence[str]
) -> tuple[list[LiveConflict], set[int]]:
    """Spark's own view of what is live, sampled so that it stays bounded: every kept
    snapshot's manifest list (``snapshots``: one row per snapshot), and for the
    ``SAMPLE_SNAPSHOTS`` newest kept snapshots (the head among them) whether Spark sees any of
    ``SAMPLE_PATHS`` recorded paths (spread over them) among their manifests
    (``all_manifests``) or live files (``files VERSION AS OF``). Only matches come back to
    Python. Also returns the snapshot ids Spark saw (to compare with those left after the
    CALL). ``expiry_live`` reads everything; this sample checks that reading against Iceberg's
    own at the snapshots readers read now."""
    await engine.sql(f"REFRESH TABLE {qualified_name(ref.catalog, ref.levels, ref.name)}")
    snaps = await engine.sql(
        f"SELECT snapshot_id, manifest_list, committed_at FROM {_metadata_table(ref, 'snapshots')}"
    )
    seen = {int(r["snapshot_id"]) for r in snaps}
    kept = sorted(
        (r for r in snaps if int(r["snapshot_id"]) not in expiring),
        key=lambda r: (r["committed_at"], int(r["snapshot_id"])),
        reverse=True,
    )
    wanted = {path_key(p): p for p in recorded}
    conflicts = [
        LiveConflict(
            wanted[path_key(str(r["manifest_list"]))],
            f"manifest list of snapshot {r['snapshot_id']} (Spark)",
        )
        for r in kept
        if r["manifest_list"] and path_key(str(r["manifest_list"])) in wanted
    ]
    sample_ids = [int(r["snapshot_id"]) for r in kept[:SAMPLE_SNAPSHOTS]]
    in_list = _in_list(_sample(sorted(recorded), SAMPLE_PATHS))
    if not sample_ids or not in_list:
        return conflicts, seen
    for r in await engine.sql(_sample_query(ref, sample_ids, in_list)):
        path = wanted.get(path_key(str(r["path"])))
        if path is not None:
            where = f"{r['what']} of snapshot {r['snapshot_id']} (Spark)"
            conflicts.append(LiveConflict(path, where))
    return conflicts, seen


__all__ = ["COUNT_COLUMNS", "ExpiryLedger", "snapshot_ids", "spark_sample"]


async def _call_expire(
    engine: SparkEngine,
    ref: TableRef,
    intent: ExpireSnapshots,
    expiring: list[int],
    outcome: ActionOutcome,
) -> None:
    """Call ``expire_snapshots`` on exactly the ``expiring`` snapshots (``older_than`` long
    past, so the ids alone decide); the SQL and the procedure's counts go into ``outcome``."""
    args: dict[str, ProcedureValue] = {
        "table": ref,
        "older_than": datetime.fromtimestamp(ANCIENT_MS / 1000, UTC),
        "retain_last": intent.params.retain_last,
        "snapshot_ids": BigintArray(tuple(expiring)),
    }
    call = procedure_call(ref.catalog, ACTION, args)
    outcome.sql.append(call)
    started = time.monotonic()
    rows = await engine.sql(call)
    outcome.output.update(summarise(ACTION, rows))
    outcome.output["procedure_ms"] = int((time.monotonic() - started) * 1000)
