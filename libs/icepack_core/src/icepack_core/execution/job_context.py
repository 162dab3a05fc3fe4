"""One job run's context: everything ``JobExecution`` works from, each obtained once.

The table row, its reference, the job's validated intents, what the safety choke point
established (``Admission``), and the ``TableMaintenance`` bound to them, plus the job (its
fence), the caller's lock guard and the caller's ``record``. Built by ``JobExecution`` before any
Spark call; the pipeline's steps take it instead of re-reading the row or re-admitting.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import asyncpg

from icepack_core.execution.failures import ActionRecord
from icepack_core.execution.maintenance import TableMaintenance
from icepack_core.execution.verification.verifier import Guard
from icepack_core.intents import Intent
from icepack_core.queue.jobs import Job
from icepack_core.safety.admission import Admission
from icepack_core.types import TableRef

Record = Callable[[ActionRecord], Awaitable[None]]


@dataclass
class JobContext:
    """One run on table ``table_id`` (module doc). ``admission`` is None when only a pending
    verification is settled (a cancelled job: nothing new is admitted); ``job`` is None for a
    run without the durable verification record."""

    table_id: int
    row: asyncpg.Record
    ref: TableRef
    maintenance: TableMaintenance
    record: Record
    job: Job | None = None
    guard: Guard | None = None
    intents: list[Intent] = field(default_factory=list)
    admission: Admission | None = None
