"""Shared vocabulary: job states, event topics, health levels, issue codes and severities,
maintenance actions, policy types, and table identity.

This is a leaf module: it imports nothing else of Icepack's, so every other module can use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeAlias

JSONObject: TypeAlias = dict[str, Any]
"""A genuinely free-form JSON object, as asyncpg's jsonb codec reads it back: stored JSON whose
keys the reader does not own (a job's ``result``, ``predicted`` and ``outcome`` as read from the
row). The one open-JSON alias: a shape the code builds gets a model with ``to_json()`` instead,
and a function that only stores JSON takes ``Mapping[str, object]``."""


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
    TABLE_HELD = "table.held"  # an executor stopped its automatic maintenance (a hold)
    TABLE_HOLD_RELEASED = "table.hold_released"  # an operator cleared its maintenance hold
    CATALOG_HINTED = "catalog.hinted"  # a catalog pushed a change (gateway hook): discovery looks
    STATUS_UPDATED = "status.updated"  # the inspector wrote a status snapshot and assessment
    RECOMMENDATION_CREATED = "recommendation.created"  # the planner recommended actions
    JOB_ENQUEUED = "job.enqueued"  # a job entered the queue
    JOB_STARTED = "job.started"  # an executor claimed it
    JOB_FINISHED = "job.finished"  # it reached a terminal state


# A notification kind that is not an outbox topic: a ``job.finished`` event whose job failed
# (ICEPACK_WEBHOOK_TOPICS may name it; the webhook's CloudEvent type ends in it).
WEBHOOK_JOB_FAILED = "job.failed"


class Health(StrEnum):
    """A table's health level, from a health assessment."""

    HEALTHY = "healthy"
    WARNING = "warning"
    CRITICAL = "critical"
    UNKNOWN = "unknown"


class Severity(StrEnum):
    """How bad one health issue is; a table's ``Health`` is its worst issue's severity."""

    WARNING = "warning"
    CRITICAL = "critical"


class IssueCode(StrEnum):
    """What a health issue is about (docs/architecture.md, "Health")."""

    SMALL_FILES = "SMALL_FILES"
    TOO_MANY_SNAPSHOTS = "TOO_MANY_SNAPSHOTS"
    OLD_SNAPSHOTS = "OLD_SNAPSHOTS"
    TOO_MANY_MANIFESTS = "TOO_MANY_MANIFESTS"
    DELETE_FILE_BUILDUP = "DELETE_FILE_BUILDUP"
    PARTITION_SKEW = "PARTITION_SKEW"
    METADATA_LOG_GROWTH = "METADATA_LOG_GROWTH"
    STATISTICS_MISSING = "STATISTICS_MISSING"
    STATISTICS_STALE = "STATISTICS_STALE"
    POOR_CLUSTERING = "POOR_CLUSTERING"
    INSPECTION_FAILED = "INSPECTION_FAILED"


class Action(StrEnum):
    """The maintenance actions Icepack runs, in the order a job runs them: rewrites first so
    that expiry can drop what they replaced, orphan removal last. Their parameters are the typed
    intents of ``icepack_core.intents``."""

    REWRITE_DATA_FILES = "rewrite_data_files"
    REWRITE_POSITION_DELETE_FILES = "rewrite_position_delete_files"
    REWRITE_MANIFESTS = "rewrite_manifests"
    # Metadata-only: statistics of the current snapshot (after the rewrites, so they describe
    # the snapshot the job leaves; before expiry, which keeps the current snapshot's files).
    COMPUTE_TABLE_STATS = "compute_table_stats"
    COMPUTE_PARTITION_STATS = "compute_partition_stats"
    EXPIRE_SNAPSHOTS = "expire_snapshots"
    REMOVE_ORPHAN_FILES = "remove_orphan_files"
    # Ledger actions (no Spark): delete quarantined orphans after their window, or put a
    # job's quarantined orphans back (``icepack_core.execution.ledger.quarantine``).
    PURGE_QUARANTINE = "purge_quarantine"
    RESTORE_QUARANTINE = "restore_quarantine"

    @property
    def rank(self) -> int:
        return list(Action).index(self)


# Actions on the deletion ledger's files (no Spark procedure; never planned, never `maintain`ed).
LEDGER_ACTIONS = frozenset({Action.PURGE_QUARANTINE, Action.RESTORE_QUARANTINE})
# Actions that commit `replace` snapshots: each is verified against its parent after the commit.
# A manifest rewrite must leave every live file entry as it was: its check is the file diff from
# metadata, which finds nothing touched and scans nothing unless an entry changed.
REWRITES = frozenset(
    {Action.REWRITE_DATA_FILES, Action.REWRITE_POSITION_DELETE_FILES, Action.REWRITE_MANIFESTS}
)


# Actions that only add statistics files to the metadata: no snapshot is committed, and the
# executor proves it (``execution.statistics``).
STATISTICS_ACTIONS = frozenset({Action.COMPUTE_TABLE_STATS, Action.COMPUTE_PARTITION_STATS})


class PolicyType(StrEnum):
    """Maintenance policy types (``icepack_core.policy`` gives each a config): Polaris'
    ``system.*`` types, and Icepack's own ``icepack.*`` for what Polaris has no type for."""

    DATA_COMPACTION = "system.data-compaction"
    METADATA_COMPACTION = "system.metadata-compaction"
    SNAPSHOT_EXPIRY = "system.snapshot-expiry"
    ORPHAN_FILE_REMOVAL = "system.orphan-file-removal"
    TABLE_STATISTICS = "icepack.table-statistics"


SERVICE_NAMES: tuple[str, ...] = ("discovery", "inspector", "planner", "executor", "gateway")


def join_namespace(levels: Sequence[str]) -> str:
    """Namespace levels as one string: joined by ``.``, with ``\\`` and ``.`` inside a level
    escaped by a backslash, so ``("a.b",)`` (``a\\.b``) and ``("a", "b")`` (``a.b``) differ.
    Levels without dots or backslashes read as before: ``db.events``."""
    return ".".join(level.replace("\\", "\\\\").replace(".", "\\.") for level in levels)


def split_namespace(namespace: str) -> tuple[str, ...]:
    """The levels of a ``join_namespace`` string (its exact inverse)."""
    levels: list[str] = []
    current: list[str] = []
    chars = iter(namespace)
    for char in chars:
        if char == "\\":
            current.append(next(chars, "\\"))
        elif char == ".":
            levels.append("".join(current))
            current = []
        else:
            current.append(char)
    levels.append("".join(current))
    return tuple(levels)


@dataclass(frozen=True, slots=True)
class TableRef:
    """A table's identity in one configured catalog; ``namespace`` is ``join_namespace`` of its
    levels (escaped, so that no two namespaces share a string)."""

    catalog: str
    namespace: str
    name: str

    @property
    def levels(self) -> tuple[str, ...]:
        return split_namespace(self.namespace)

    def __str__(self) -> str:
        return f"{self.catalog}.{self.namespace}.{self.name}"


# The longest duration, in hours, a policy, a table property or a setting may give: any real
# retention fits, and ``now - timedelta(hours=...)`` stays a date (a larger value raised
# OverflowError in the planner on every retry).
MAX_HOURS = 24 * 365 * 100
# The shortest maintenance cadence: an action that finds nothing to do (an expiry whose old
# snapshots a tag keeps) comes back at most this often, never in a loop of jobs.
MIN_CADENCE_HOURS = 0.25
