"""What the gateway answers, as pydantic models: the source of the OpenAPI response schemas and
of every JSON answer.

Handlers build these models from rows (``Model.of_row``: each field from the column of its name)
and domain values, and answer them with ``jsonutil.reply``: a row without a field's column, a
value of the wrong type or a key the model lacks fails where the answer is built, not only in the
conformance test (``tests/gateway/test_conformance.py``). Every model forbids extra keys;
timestamps serialise as RFC 3339 (``datetime.isoformat``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal, Self

import asyncpg
from pydantic import BaseModel, Field, PlainSerializer

from icepack_core.db.tables import TableRow
from icepack_core.inspection.health import Issue
from icepack_core.types import (
    Action,
    Health,
    IssueCode,
    JobState,
    JobTrigger,
    JSONObject,
    Severity,
    Topic,
)
from icepack_gateway.endpoint import Reply
from icepack_gateway.errors import ErrorBody
from icepack_gateway.jsonutil import ReplyModel

Scope = Literal["catalog", "namespace", "table"]
# A timestamp; in JSON RFC 3339 as ``datetime.isoformat`` writes it (``+00:00``, not ``Z``).
Timestamp = Annotated[
    datetime, PlainSerializer(datetime.isoformat, return_type=str, when_used="json")
]
Row = asyncpg.Record | Mapping[str, Any]


class Model(ReplyModel):
    @classmethod
    def of_row(cls, row: Row, **values: Any) -> Self:
        """The model of a database row: each field from ``values``, else from the row's column
        of its name (a row without it raises ``KeyError`` here, where the answer is built)."""
        return cls.model_validate(
            {k: values[k] if k in values else row[k] for k in cls.model_fields}
        )


class TableKey(Model):
    """A table as a job or event names it."""

    id: int
    catalog: str
    namespace: str
    name: str


class Table(Model):
    """A ``tables`` row."""

    id: int
    catalog: str
    namespace: str
    name: str
    metadata_location: str | None
    properties: dict[str, Any]
    first_seen_at: Timestamp
    last_seen_at: Timestamp
    dropped_at: Timestamp | None
    maintenance_hold: JSONObject | None = Field(
        description="set when a verification failed: {reason, action, evidence, at}"
    )

    @classmethod
    def of(cls, table: TableRow) -> Self:
        """A table row as answered (a row read without a column this answer has is refused)."""
        return cls.of_row({k: getattr(table, k) for k in cls.model_fields})


class IssueSummary(Model):
    code: IssueCode
    severity: Severity


class ListMetrics(Model):
    """The current metrics a fleet listing carries per table (all of them: the status)."""

    data_file_count: int | None
    data_file_bytes: int | None
    record_count: int | None
    small_file_count: int | None
    snapshot_count: int | None
    manifest_count: int | None
    position_delete_file_count: int | None
    equality_delete_file_count: int | None
    deletion_vector_count: int | None


class TableListItem(Model):
    id: int
    catalog: str
    namespace: str
    name: str
    health: Health
    score: int | None
    issues: list[IssueSummary]
    assessed_at: Timestamp | None
    inspected_at: Timestamp | None
    metrics: ListMetrics | None = Field(description="null until the table is inspected")


class TablePage(Model):
    items: list[TableListItem]
    next_cursor: str | None = Field(
        description="pass as ?cursor= for the next page; null at the end"
    )


class Summary(Model):
    tables: int
    health: dict[Health, int]
    issues: dict[IssueCode, int]
    jobs: dict[JobState, int]


class HealthAssessment(Model):
    id: int
    status_snapshot_id: int | None = Field(description="null when the inspection failed")
    health: Health
    score: int = Field(ge=0, le=100)
    issues: list[Issue]
    assessed_at: Timestamp


class StatusSnapshot(Model):
    id: int
    inspected_at: Timestamp
    inspector: str
    metadata_location: str | None
    current_snapshot_id: int | None
    status: JSONObject = Field(description="the TableStatus contract (docs/table-status.md)")


class StatusPoint(Model):
    id: int
    inspected_at: Timestamp
    data_file_count: int | None
    data_file_bytes: int | None
    record_count: int | None
    small_file_count: int | None
    snapshot_count: int | None
    manifest_count: int | None
    delete_file_count: int | None


class StatusPage(Model):
    items: list[StatusPoint] = Field(description="oldest first")
    next_cursor: str | None


class TableShape(Model):
    """What maintenance changes in a table (``planning.prediction.Shape``)."""

    data_files: int
    data_bytes: int
    manifests: int
    delete_files: int = Field(description="position + equality delete files + deletion vectors")
    snapshots: int


class PredictedStatistics(Model):
    """What a statistics action is predicted to leave (``planning.prediction``)."""

    present_for_current: bool
    snapshot_id: int | None = Field(description="the snapshot the statistics will describe")
    bytes_written: int | None = Field(description="about the file it replaces; null without one")


class MeasuredStatistics(Model):
    """What a statistics action measurably left (``execution.outcome``)."""

    present_for_current: bool = Field(description="statistics describe the current snapshot")
    snapshot_id: int | None
    bytes_written: int


class PredictedEffect(Model):
    """An action's predicted effect on its table."""

    before: TableShape
    after: TableShape
    rewrite_bytes: int = Field(description="bytes the action rewrites (its rewrite budget charge)")
    benefit: int = Field(
        description="objects a full scan no longer opens: data + delete files + manifests removed"
    )
    statistics: PredictedStatistics | None = None


class OverlapDepth(Model):
    """A table's mean overlap depth on its clustering key (``inspection.clustering``): how many
    files of its partition a data file's key range overlaps, itself included (1: clustered)."""

    before: float | None
    after: float | None


class PredictedAction(Model):
    """One action of a planned job and its predicted effect (``before``/``after`` null when the
    action predicts no table shape: orphan removal)."""

    action: Action
    before: TableShape | None
    after: TableShape | None
    rewrite_bytes: int
    benefit: int
    statistics: PredictedStatistics | None = None
    overlap_depth: OverlapDepth | None = Field(
        default=None, description="sort/z-order: the key's mean overlap depth before -> after"
    )


class JobPrediction(Model):
    """What the planner predicted for a job, per action in run order, with the totals."""

    actions: list[PredictedAction]
    rewrite_bytes: int
    benefit: float


class OwnCommits(Model):
    """A rewrite measured from its own commits because writers committed during it."""

    snapshots: list[int] = Field(description="the rewrite's own snapshots")
    writer_snapshots: int = Field(description="other snapshots committed since the start")
    table_benefit: int = Field(description="the table's shape around the action, writers' too")
    error: str | None = Field(description="why the own benefit could not be read (then null)")


class MeasuredAction(Model):
    """One action's measured effect (null when an inspection around it failed)."""

    action: Action
    before: TableShape | None
    after: TableShape | None
    benefit: int | None = Field(description="measured, same definition as the prediction's")
    predicted_benefit: float | None = Field(description="null for a job without a prediction")
    ratio: float | None = Field(description="measured / predicted benefit; null without one")
    own: OwnCommits | None = Field(
        default=None, description="present when writers committed: benefit is the rewrite's own"
    )
    statistics: MeasuredStatistics | None = None
    overlap_depth: OverlapDepth | None = Field(
        default=None, description="sort/z-order: the key's mean overlap depth before -> after"
    )


class ReadProbe(Model):
    """PyIceberg's ``table.scan().plan_files()`` on the current snapshot, timed; or why not."""

    snapshot_id: int | None = None
    files_planned: int | None = None
    delete_files_planned: int | None = None
    plan_ms: float | None = None
    error: str | None = None


class ReadProbes(Model):
    before: ReadProbe = Field(description="before the first action")
    after: ReadProbe = Field(description="after the last action")


class JobOutcome(Model):
    """What a successful job measurably did (``execution.outcome``)."""

    actions: list[MeasuredAction]
    benefit: int | None
    predicted_benefit: float | None
    ratio: float | None
    read_probe: ReadProbes


class RecommendedAction(Model):
    action: Action
    reason: str
    params: JSONObject
    estimated_benefit: dict[str, int] | None = None
    predicted: PredictedEffect | None = None


class SkippedAction(Model):
    action: Action
    reason: str


class Recommendation(Model):
    id: int
    status_snapshot_id: int | None
    actions: list[RecommendedAction] = Field(description="what the planner proposes, in run order")
    skipped: list[SkippedAction] = Field(description="what it did not propose, and why")
    policy_sources: dict[str, str] = Field(
        default_factory=dict,
        description="per policy type, where its settings came from: default, an Icepack "
        "attachment, a Polaris policy (named, with its version and fetch time), + properties",
    )
    job_id: int | None
    created_at: Timestamp


class Intent(Model):
    """One item of ``jobs.actions`` (``icepack_core.intents``)."""

    action: Action
    params: JSONObject
    reason: str = ""


class Job(Model):
    id: int
    state: JobState
    actions: list[Intent]
    priority: int
    attempts: int
    max_attempts: int
    lock_waits: int = Field(
        description="claims given back because another job held the table (no attempt spent)"
    )
    conflicts: int = Field(
        description="claims given back because a writer won an Iceberg commit conflict "
        "(no attempt spent): > 0 means the job was conflict-retried"
    )
    not_before: Timestamp
    lease_owner: str | None
    lease_until: Timestamp | None
    fence: int
    dedupe_key: str | None
    trigger: JobTrigger
    error: str | None
    result: JSONObject | None
    traceparent: str | None
    cancel_requested_at: Timestamp | None = Field(
        description="set by a cancel; a running job stops at its next heartbeat"
    )
    created_at: Timestamp
    started_at: Timestamp | None
    finished_at: Timestamp | None
    predicted: JobPrediction | None = Field(description="set by the planner when it enqueues")
    outcome: JobOutcome | None = Field(description="set when the job succeeded")
    table: TableKey | None


class JobAction(Model):
    id: int
    fence: int
    action: Action
    procedure: str | None
    sql_text: str | None
    state: Literal["succeeded", "failed", "skipped"]
    output: JSONObject
    impact: JSONObject = Field(description="{before: {...}, after: {...}} metrics")
    error: str | None
    started_at: Timestamp
    finished_at: Timestamp
    duration_ms: int | None


class JobWithActions(Job):
    job_actions: list[JobAction] = Field(description="what ran, in order, with its impact")


class TableDetail(Model):
    table: Table
    health: HealthAssessment | None
    status: StatusSnapshot | None
    recommendation: Recommendation | None
    latest_job: Job | None


class JobPage(Model):
    items: list[Job]
    next_cursor: str | None


class HistoryPage(Model):
    items: list[JobWithActions]
    next_cursor: str | None


class JobSubmitted(Model):
    job: Job
    created: bool = Field(description="false: a job for the table was already active")


DeletionState = Literal["recorded", "quarantined", "deleted", "restored", "purged"]


class Deletion(Model):
    """One row of the deletion ledger (``icepack.deletions``)."""

    id: int
    job_id: int
    table_id: int | None
    action: Literal["remove_orphan_files", "expire_snapshots"]
    kind: str
    path: str
    size_bytes: int | None
    state: DeletionState
    quarantine_path: str | None
    purge_after: Timestamp | None
    reason: str
    recorded_at: Timestamp
    changed_at: Timestamp


class DeletionTotal(Model):
    files: int
    bytes: int


class JobDeletions(Model):
    """A page of a job's ledger; ``totals`` and ``by_state`` cover the whole job."""

    job_id: int
    items: list[Deletion]
    next_cursor: str | None
    totals: DeletionTotal = Field(description="every row of the job, not only this page")
    by_state: dict[str, DeletionTotal] = Field(description="files and bytes per ledger state")


class JobCancelled(Model):
    job: Job
    cancelled: bool = Field(description="false: running, asked to stop")


class Event(Model):
    id: int
    topic: Topic
    payload: JSONObject
    traceparent: str | None
    created_at: Timestamp
    table: TableKey | None


class EventPage(Model):
    items: list[Event]
    next_cursor: str | None


class Released(Model):
    table_id: int
    table: str = Field(description="CATALOG.NAMESPACE.TABLE")
    previous_hold: Any = Field(description="the hold as it was: {reason, action, evidence, at}")
    released_by: str = Field(description="token:NAME")
    reason: str | None
    released_at: Timestamp
    event_id: int = Field(description="the table.hold_released event")


class HoldReleased(Model):
    table: Table | None
    released: Released


class HookTable(Model):
    catalog: str
    namespace: str = Field(description="levels joined by '.', a dot inside a level as \\.")
    name: str


class HookAccepted(Model):
    """A recorded catalog event."""

    accepted: bool
    coalesced: bool = Field(description="true when a hint for the table was already waiting")
    received: int = Field(description="how many events for the table the waiting hint holds")
    table: HookTable


class Alive(Model):
    status: Literal["ok"]
    service: str


class Ready(Model):
    status: Literal["ready"]
    service: str


class NotReady(Model):
    status: Literal["unavailable"]
    service: str
    reason: str


class OpenApiDocument(BaseModel):
    """This document (OpenAPI 3.1)."""

    openapi: str
    info: JSONObject
    paths: JSONObject
    components: JSONObject


def ok(model: type[BaseModel], text: str = "OK") -> Reply:
    return Reply(text, model)


def error(text: str) -> Reply:
    return Reply(text, ErrorBody)
