"""One job run's context: everything ``JobExecution`` works from, each obtained once.

The table row, its reference, the job's validated intents, what the safety choke point
established (``Admission``), the table's metadata (``TableMetadata``) and the
``TableMaintenance`` bound to them, plus the job (its fence), the caller's lock guard and the
caller's ``record``. Built by ``JobExecution`` before any Spark call; the pipeline's steps take
it instead of re-reading the row, re-admitting or reloading the table. ``with_manifests_first``
reorders its intents once the table's status before the first action is known.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

import structlog
from pyiceberg.table import Table

from icepack_core.db.tables import TableRow
from icepack_core.execution.failures import ActionRecord
from icepack_core.execution.maintenance import TableMaintenance
from icepack_core.execution.verification.verifier import Guard
from icepack_core.inspection.inspector import Inspector, LoadedTable
from icepack_core.inspection.status import TableStatus
from icepack_core.intents import Intent
from icepack_core.planning.manifest_merge import ManifestMerge, manifests_first_at_run
from icepack_core.queue.jobs import Job
from icepack_core.safety.admission import Admission
from icepack_core.types import Action, TableRef

Record = Callable[[ActionRecord], Awaitable[None]]
log = structlog.get_logger("icepack.maintenance")


class TableMetadata:
    """The table's metadata for one run, loaded from the catalog once per state of the table.

    Every reader of the run -- the inspection before and after an action, the read probes, a
    rewrite's scope and start snapshot, its verification, the own-commit measurement -- takes
    the table from here. ``changed`` is called right before anything that may commit to the
    table (``TableMaintenance``'s procedure calls) and after a failed action, so the next read
    loads it again: a compaction job loads the table twice, once before its CALL and once
    after. A load that fails is not kept (the next read tries again).
    """

    def __init__(self, inspector: Inspector, ref: TableRef) -> None:
        self.inspector = inspector
        self.ref = ref
        self._loaded: LoadedTable | None = None

    async def loaded(self) -> LoadedTable:
        """The table as loaded since the last change.

        Raises:
            InspectionFailed: the catalog or the metadata cannot be read.
        """
        if self._loaded is None:
            self._loaded = await self.inspector.load(self.ref)
        return self._loaded

    async def table(self) -> Table | None:
        """PyIceberg's table (None when its model rejected the metadata): a ``TableLoader``."""
        return (await self.loaded()).table

    def changed(self) -> None:
        """The table may have changed: the next read loads it again."""
        self._loaded = None


@dataclass
class JobContext:
    """One run on table ``table_id`` (module doc). ``admission`` is None when only a pending
    verification is settled (a cancelled job: nothing new is admitted); ``job`` is None for a
    run without the durable verification record."""

    table_id: int
    row: TableRow
    ref: TableRef
    maintenance: TableMaintenance
    metadata: TableMetadata
    record: Record
    job: Job | None = None
    guard: Guard | None = None
    intents: list[Intent] = field(default_factory=list)
    admission: Admission | None = None
    # Per action name, why the executor runs it other than as planned (``with_manifests_first``);
    # kept in the action's recorded output as ``run_reason``.
    run_reasons: dict[str, str] = field(default_factory=dict)


def with_manifests_first(ctx: JobContext, status: TableStatus | None) -> JobContext:
    """``ctx`` whose intents run a manifest rewrite before the compaction when a writer
    committed since the job was planned and the manifests would merge
    (``planning.manifest_merge.manifests_first_at_run``)."""
    if ctx.job is None or ctx.admission is None or status is None:
        return ctx
    merge = ManifestMerge.of(ctx.row.properties)
    planned_at = ctx.job.created_at
    intents = manifests_first_at_run(ctx.intents, status, merge, ctx.admission.policy, planned_at)
    if [i.kind for i in intents] == [i.kind for i in ctx.intents]:
        return ctx
    log.info(
        "maintenance.manifests_first",
        table=str(ctx.ref),
        job_id=ctx.job.id,
        manifests=status.manifest_count,
        actions=[i.kind.value for i in intents],
    )
    moved = next(i for i in intents if i.kind is Action.REWRITE_MANIFESTS)
    reasons = ctx.run_reasons | {moved.kind.value: moved.reason}
    return replace(ctx, intents=intents, run_reasons=reasons)
