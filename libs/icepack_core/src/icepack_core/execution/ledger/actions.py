"""The job side of the deletion ledger: orphan quarantine, purge and restore for ``JobExecution``.

``LedgerActions`` loads the table through the inspector's catalogs (so the FileIO carries the
catalog's storage properties and credentials), and hands ``OrphanQuarantine``
(``execution.ledger.quarantine``) the running job's id and fence. It gives ``TableMaintenance`` the
``orphan_sink`` that replaces the procedure's delete, and runs the two ledger actions
(``purge_quarantine``, ``restore_quarantine``), which need no Spark.

The sink trusts no listing: a listed path the table's current metadata references (read from
the catalog just before the quarantine, ``referenced_files``) is kept and reported
(``kept_referenced``), and when those references cannot be read nothing is moved.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import asyncpg
import structlog

from icepack_core.errors import PermanentError, brief
from icepack_core.execution.ledger.file_mover import FileMover
from icepack_core.execution.ledger.quarantine import (
    SAMPLE,
    AfterMove,
    OrphanQuarantine,
    quarantine_root,
    report_output,
)
from icepack_core.execution.ledger.referenced_files import referenced_paths, split_referenced
from icepack_core.execution.maintenance import ActionOutcome, OrphanSink
from icepack_core.inspection.inspector import Inspector, LoadedTable
from icepack_core.intents import Intent, PurgeQuarantine, RestoreQuarantine
from icepack_core.queue.jobs import Job
from icepack_core.queue.ledger import table_lineage
from icepack_core.safety.confinement import confinement_of
from icepack_core.types import TableRef

log = structlog.get_logger("icepack.ledger")

Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(UTC)


async def unreferenced(
    loaded: LoadedTable, listed: list[str], ref: TableRef
) -> tuple[list[str], list[str], frozenset[str]]:
    """``listed`` split into (free, kept), and the reference set they were split by: kept are
    the paths the table's current metadata references (``referenced_files``), which a listing
    from an older view can name.

    Raises:
        PermanentError: the references cannot be read, so no listed path can be trusted.
    """
    try:
        referenced = await asyncio.to_thread(referenced_paths, loaded.io, loaded.metadata_location)
    except Exception as exc:
        raise PermanentError(
            f"remove_orphan_files on {ref}: cannot read the files the table references "
            f"({brief(exc)}); nothing was moved"
        ) from exc
    free, kept = split_referenced(listed, referenced)
    if kept:
        log.warning(
            "orphans.referenced_kept",
            table=str(ref),
            kept=len(kept),
            sample=kept[:SAMPLE],
        )
    return free, kept, referenced


class LedgerActions:
    """Ledger-backed file actions of jobs; ``clock`` decides what is due (tests pin it)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        inspector: Inspector,
        *,
        clock: Clock = _utc_now,
        batch_size: int | None = None,
    ) -> None:
        self.pool = pool
        self.inspector = inspector
        self.clock = clock
        self.batch_size = batch_size
        # Test-only hook: runs after each quarantine move, before its row is marked.
        self.after_move: AfterMove | None = None

    async def quarantine_for(
        self, job: Job, table_id: int, ref: TableRef, location: str | None = None
    ) -> OrphanQuarantine:
        """The ledger of ``job`` on the table, moving files through the table's FileIO.

        Raises:
            InspectionFailed: the table cannot be loaded from its catalog.
        """
        loaded = await self.inspector.load(ref)
        return await self._quarantine(job, table_id, ref, loaded, location)

    async def _quarantine(
        self, job: Job, table_id: int, ref: TableRef, loaded: LoadedTable, location: str | None
    ) -> OrphanQuarantine:
        """The ledger of ``job``, confined to the table's own roots (``safety.confinement``).

        Raises:
            ActionRefused: the confinement rule cannot be established (its reason).
        """
        confinement = await confinement_of(
            self.pool,
            table_id,
            str(ref),
            location=location or loaded.location(),
            metadata_location=loaded.metadata_location,
            properties=loaded.properties,
        )
        quarantine = OrphanQuarantine(
            self.pool,
            job.id,
            job.fence,
            table_id,
            location or loaded.location(),
            FileMover(loaded.io),
            self.clock,
        )
        if self.batch_size is not None:
            quarantine.batch_size = self.batch_size
        quarantine.after_move = self.after_move
        quarantine.confinement = confinement
        return quarantine

    def orphan_sink(
        self, job: Job, table_id: int, ref: TableRef, quarantine_days: float
    ) -> OrphanSink:
        """Record then quarantine what an orphan dry run listed (``TableMaintenance``)."""

        async def sink(paths: list[str], location: str, older_than: datetime) -> dict[str, object]:
            loaded = await self.inspector.load(ref)
            paths, kept, referenced = await unreferenced(loaded, paths, ref)
            quarantine = await self._quarantine(job, table_id, ref, loaded, location)
            reason = f"not referenced by any snapshot; older than {older_than.isoformat()}"
            recorded = await quarantine.record(paths, reason)
            retention = timedelta(days=quarantine_days)
            # Rows an earlier attempt recorded are checked against the same fresh references.
            report = await quarantine.quarantine(retention, referenced)
            output: dict[str, object] = {
                "recorded": recorded,
                **report_output(report, "quarantined"),
                "quarantine_root": quarantine_root(location, job.id),
                "quarantine_days": quarantine_days,
            }
            if kept:
                output["kept_referenced"] = len(kept)
                output["kept_referenced_sample"] = kept[:SAMPLE]
            if quarantine.unusual:
                output["kept_unusual_names"] = quarantine.unusual[:SAMPLE]
            return output

        return sink

    async def run(
        self, intent: Intent, job: Job | None, table_id: int, ref: TableRef
    ) -> ActionOutcome:
        """Run one ledger action (purge or restore) for ``job``.

        Raises:
            PermanentError: not a ledger action, or no job to fence the ledger writes with.
            StaleFence: the job was lost midway (the next attempt continues from the ledger).
        """
        name = intent.kind.value
        if job is None:
            raise PermanentError(f"{name} writes the deletion ledger and needs a job")
        quarantine = await self.quarantine_for(job, table_id, ref)
        # Rows of the tables this one was renamed from are purged and restored with it.
        quarantine.lineage = await table_lineage(self.pool, table_id)
        if isinstance(intent, PurgeQuarantine):
            output = report_output(await quarantine.purge(), "purged")
        elif isinstance(intent, RestoreQuarantine):
            source = intent.params.job_id
            output = {
                "source_job_id": source,
                **report_output(await quarantine.restore(source), "restored"),
            }
        else:
            raise PermanentError(f"{name} is not a deletion ledger action")
        return ActionOutcome(name, name, [], output)
