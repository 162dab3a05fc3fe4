"""One job run's context: everything ``JobExecution`` works from, each obtained once.

The table row, its reference, the job's validated intents, what the safety choke point
established (``Admission``), the table's metadata (``TableMetadata``) and the
``TableMaintenance`` bound to them, plus the job (its fence), the caller's lock guard and the
caller's ``record``. Built by ``JobExecution`` before any Spark call; the pipeline's steps take
it instead of re-reading the row, re-admitting or reloading the table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import asyncpg
from pyiceberg.table import Table

from icepack_core.execution.failures import ActionRecord
from icepack_core.execution.maintenance import TableMaintenance
from icepack_core.execution.verification.verifier import Guard
from icepack_core.inspection.inspector import Inspector, LoadedTable
from icepack_core.intents import Intent
from icepack_core.queue.jobs import Job
from icepack_core.safety.admission import Admission
from icepack_core.types import TableRef

Record = Callable[[ActionRecord], Awaitable[None]]


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
    row: asyncpg.Record
    ref: TableRef
    maintenance: TableMaintenance
    metadata: TableMetadata
    record: Record
    job: Job | None = None
    guard: Guard | None = None
    intents: list[Intent] = field(default_factory=list)
    admission: Admission | None = None
