"""Shared primitives: job states, event topics, health levels and table identity.

This is a leaf module: it imports nothing else of Icepack's, so every other module can use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class JobState(StrEnum):
    """Where a job is in its life. See the state machine in ``migrations/0001_core_schema.sql``."""

    QUEUED = "queued"  # enqueued by planner/operator/CLI; back here after a retryable failure
    RUNNING = "running"  # claimed by one executor, which holds the lease and the current fence
    SUCCEEDED = "succeeded"  # every action ran (terminal)
    FAILED = "failed"  # a permanent failure or attempts exhausted (terminal)
    CANCELLED = "cancelled"  # an operator cancelled it (terminal)

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


class JobTrigger(StrEnum):
    """Who asked for a job."""

    MANUAL = "manual"  # an operator through the gateway
    PLANNER = "planner"  # the planner service
    CLI = "cli"  # `icepack maintain` on the command line


class Topic(StrEnum):
    """Event topics in the outbox (``events.topic``)."""

    TABLE_DISCOVERED = "table.discovered"  # discovery saw a table for the first time
    TABLE_CHANGED = "table.changed"  # its metadata location moved
    TABLE_DROPPED = "table.dropped"  # it left its catalog
    STATUS_UPDATED = "status.updated"  # the inspector wrote a status snapshot and assessment
    RECOMMENDATION_CREATED = "recommendation.created"  # the planner recommended actions
    JOB_ENQUEUED = "job.enqueued"  # a job entered the queue
    JOB_STARTED = "job.started"  # an executor claimed it
    JOB_FINISHED = "job.finished"  # it reached a terminal state


class Health(StrEnum):
    """A table's health level, from a health assessment."""

    HEALTHY = "healthy"
    WARNING = "warning"
    CRITICAL = "critical"
    UNKNOWN = "unknown"


SERVICE_NAMES: tuple[str, ...] = ("discovery", "inspector", "planner", "executor", "gateway")


@dataclass(frozen=True, slots=True)
class TableRef:
    """A table's identity in one configured catalog; ``namespace`` levels are joined by ``.``."""

    catalog: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.catalog}.{self.namespace}.{self.name}"
