"""Action intents: the one typed description of a maintenance action.

An intent is what the planner recommends, what a job stores in ``jobs.actions``, what an
operator submits with ``POST /jobs`` and what ``icepack maintain`` runs: ``{"action": NAME,
"params": {...}, "reason": "..."}``. Each action has its own pydantic model (a discriminated
union on ``action``) with ``extra="forbid"`` at every level, so a misspelt parameter is an error
naming it, never silently ignored.

``parse_intents`` is the only way raw JSON becomes intents. It runs where a user's JSON arrives
(the gateway answers 422 naming the field; ``JobQueue.enqueue`` takes intents only) and again
when a job is read, before any Spark call, so a row written by hand is checked too. Code that
builds intents from typed values wraps the constructor in ``checked`` to refuse a bad value in
the same words. Safety floors that
depend on the table (hold, opt-out, orphan policy, age floors, overlapping locations) are checked
by ``icepack_core.safety.admission``, not here: this module knows only the shape of an action.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from icepack_core.errors import IntentError
from icepack_core.policy import MAX_ZORDER_COLUMNS, zorder_problem
from icepack_core.types import Action

MAX_ACTIONS = 10
MAX_REASON_LENGTH = 2_000
MAX_WHERE_LENGTH = 65_536
# Iceberg's rewrite options (RewriteDataFiles / SizeBasedFileRewritePlanner / BinPackRewrite...,
# 1.10). Values are plain tokens: numbers, booleans, enum names.
REWRITE_DATA_OPTIONS = frozenset(
    {
        "min-input-files",
        "target-file-size-bytes",
        "min-file-size-bytes",
        "max-file-size-bytes",
        "max-file-group-size-bytes",
        "max-files-to-rewrite",
        "delete-file-threshold",
        "delete-ratio-threshold",
        "rewrite-all",
        "partial-progress.enabled",
        "partial-progress.max-commits",
        "partial-progress.max-failed-commits",
        "max-concurrent-file-group-rewrites",
        "use-starting-sequence-number",
        "rewrite-job-order",
        "remove-dangling-deletes",
        "output-spec-id",
        "shuffle-partitions-per-file",
        "compression-factor",
    }
)
REWRITE_DELETE_OPTIONS = frozenset(
    {
        "min-input-files",
        "target-file-size-bytes",
        "min-file-size-bytes",
        "max-file-size-bytes",
        "max-file-group-size-bytes",
        "rewrite-all",
        "partial-progress.enabled",
        "partial-progress.max-commits",
        "max-concurrent-file-group-rewrites",
        "rewrite-job-order",
    }
)
_OPTION_VALUE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_M = TypeVar("_M", bound=BaseModel)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_options(value: dict[str, str], allowed: frozenset[str]) -> dict[str, str]:
    for key, option in value.items():
        if key not in allowed:
            raise ValueError(f"unknown option {key!r}; known: {', '.join(sorted(allowed))}")
        if not _OPTION_VALUE.match(option):
            raise ValueError(f"option {key}={option!r} must be a number, boolean or name")
    return value


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class RewriteDataFilesParams(_Model):
    # zorder runs Iceberg's sort strategy with ``sort_order => 'zorder(<columns>)'``, each
    # column quoted by ``spark.sql.quote_identifier``; sort uses the table's sort order.
    strategy: Literal["binpack", "sort", "zorder"] = "binpack"
    zorder_columns: list[str] = Field(default_factory=list, max_length=MAX_ZORDER_COLUMNS)
    # sort/zorder: the executor also selects partitions whose files' mean overlap depth on the
    # key is above this many times what the rewrite reaches (inspection.clustering), and
    # rewrites all their files. None: only partitions with enough small files, as for binpack.
    max_overlap_ratio: float | None = Field(default=None, ge=1.0, le=1_000_000)
    options: dict[str, str] = Field(default_factory=dict)
    # "partitions": the executor narrows the rewrite to partitions with enough small files.
    scope: Literal["table", "partitions"] | None = Field(default=None)
    # A filter built by icepack_core.spark.sql (planner) or given by an operator; Spark parses
    # it as an expression on this table only, passed as a quoted string argument.
    where: str | None = Field(default=None, min_length=1, max_length=MAX_WHERE_LENGTH)
    # With scope "partitions" (execution.scoping.metadata_scope): at most this many partitions
    # per run, those with the most small files first; the rest wait for the next run.
    max_partitions: int = Field(default=100, ge=1, le=10_000)
    # A partition a writer added a file to within this many seconds is open: it is compacted
    # only once it holds more than ``open_max_small_files`` small files. 0: none is open (the
    # planner passes the policy's ``open_partition_quiet_minutes``, default 10).
    open_quiet_seconds: float = Field(default=0.0, ge=0, le=7 * 24 * 3600)
    open_max_small_files: int = Field(default=100, ge=1, le=1_000_000)

    @field_validator("options")
    @classmethod
    def _options(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_options(value, REWRITE_DATA_OPTIONS)

    @model_validator(mode="after")
    def _zorder_key(self) -> RewriteDataFilesParams:
        problem = zorder_problem(self.strategy, self.zorder_columns)
        if problem is not None:
            raise ValueError(problem)
        if self.max_overlap_ratio is not None and self.strategy == "binpack":
            raise ValueError("max_overlap_ratio is only used with strategy sort or zorder")
        return self


class RewritePositionDeleteFilesParams(_Model):
    options: dict[str, str] = Field(default_factory=dict)

    @field_validator("options")
    @classmethod
    def _options(cls, value: dict[str, str]) -> dict[str, str]:
        return _check_options(value, REWRITE_DELETE_OPTIONS)


class RewriteManifestsParams(_Model):
    use_caching: bool = True


class ExpireSnapshotsParams(_Model):
    older_than: datetime
    retain_last: int = Field(1, ge=1, le=1_000_000)

    @field_validator("older_than")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return _utc(value)


class RemoveOrphanFilesParams(_Model):
    older_than: datetime
    dry_run: bool = False  # list only, delete nothing
    dry_run_first: bool = True  # record the list before deleting (always true in effect)

    @field_validator("older_than")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return _utc(value)


MAX_STATISTICS_COLUMNS = 1000


class ComputeTableStatsParams(_Model):
    """Iceberg's ``compute_table_stats`` of the current snapshot: a Puffin file of NDV
    sketches (``apache-datasketches-theta-v1``) for ``columns`` (empty: every column Iceberg
    supports). Metadata-only: no snapshot is committed (``execution.statistics``)."""

    columns: list[str] = Field(default_factory=list, max_length=MAX_STATISTICS_COLUMNS)

    @field_validator("columns")
    @classmethod
    def _columns(cls, value: list[str]) -> list[str]:
        for index, column in enumerate(value):
            if not 1 <= len(column) <= 255 or any(ord(c) < 32 or ord(c) == 127 for c in column):
                raise ValueError(
                    f"columns[{index}]: {column!r} must be a column name of 1 to 255 "
                    "characters without control characters"
                )
        if len(set(value)) != len(value):
            raise ValueError("a column is named twice")
        return value


class ComputePartitionStatsParams(_Model):
    """Nothing to choose: Iceberg's ``compute_partition_stats`` of the current snapshot."""


class PurgeQuarantineParams(_Model):
    """Nothing to choose: every quarantined file of the table whose window has passed."""


class RestoreQuarantineParams(_Model):
    # The job whose quarantined orphans go back to their original paths.
    job_id: int = Field(ge=1, le=2**63 - 1)


class _Intent(_Model):
    reason: str = Field("", max_length=MAX_REASON_LENGTH)

    @property
    def kind(self) -> Action:
        return Action(getattr(self, "action"))  # noqa: B009 - set by every subclass

    def to_json(self) -> dict[str, Any]:
        """The stored form (``jobs.actions`` items): JSON-safe, timestamps in ISO 8601."""
        return self.model_dump(mode="json")


class RewriteDataFiles(_Intent):
    action: Literal[Action.REWRITE_DATA_FILES] = Action.REWRITE_DATA_FILES
    params: RewriteDataFilesParams = Field(default_factory=RewriteDataFilesParams)


class RewritePositionDeleteFiles(_Intent):
    action: Literal[Action.REWRITE_POSITION_DELETE_FILES] = Action.REWRITE_POSITION_DELETE_FILES
    params: RewritePositionDeleteFilesParams = Field(
        default_factory=RewritePositionDeleteFilesParams
    )


class RewriteManifests(_Intent):
    action: Literal[Action.REWRITE_MANIFESTS] = Action.REWRITE_MANIFESTS
    params: RewriteManifestsParams = Field(default_factory=RewriteManifestsParams)


class ExpireSnapshots(_Intent):
    action: Literal[Action.EXPIRE_SNAPSHOTS] = Action.EXPIRE_SNAPSHOTS
    params: ExpireSnapshotsParams


class RemoveOrphanFiles(_Intent):
    action: Literal[Action.REMOVE_ORPHAN_FILES] = Action.REMOVE_ORPHAN_FILES
    params: RemoveOrphanFilesParams


class ComputeTableStats(_Intent):
    action: Literal[Action.COMPUTE_TABLE_STATS] = Action.COMPUTE_TABLE_STATS
    params: ComputeTableStatsParams = Field(default_factory=ComputeTableStatsParams)


class ComputePartitionStats(_Intent):
    action: Literal[Action.COMPUTE_PARTITION_STATS] = Action.COMPUTE_PARTITION_STATS
    params: ComputePartitionStatsParams = Field(default_factory=ComputePartitionStatsParams)


# Actions that add statistics files to the metadata and commit no snapshot.
STATISTICS_INTENTS = (ComputeTableStats, ComputePartitionStats)


class PurgeQuarantine(_Intent):
    action: Literal[Action.PURGE_QUARANTINE] = Action.PURGE_QUARANTINE
    params: PurgeQuarantineParams = Field(default_factory=PurgeQuarantineParams)


class RestoreQuarantine(_Intent):
    action: Literal[Action.RESTORE_QUARANTINE] = Action.RESTORE_QUARANTINE
    params: RestoreQuarantineParams


# Actions that run through the deletion ledger and the table's FileIO, never through Spark.
LEDGER_INTENTS = (PurgeQuarantine, RestoreQuarantine)

Intent = Annotated[
    RewriteDataFiles
    | RewritePositionDeleteFiles
    | RewriteManifests
    | ComputeTableStats
    | ComputePartitionStats
    | ExpireSnapshots
    | RemoveOrphanFiles
    | PurgeQuarantine
    | RestoreQuarantine,
    Field(discriminator="action"),
]
_INTENTS: TypeAdapter[list[Intent]] = TypeAdapter(list[Intent])
_INTENT: TypeAdapter[Intent] = TypeAdapter(Intent)


def _where(loc: tuple[int | str, ...], prefix: str) -> str:
    # pydantic puts the discriminator's tag in the path ("actions.0.expire_snapshots.params"):
    # drop it, the action is named in the message anyway.
    parts = [str(p) for p in loc if str(p) not in set(Action)]
    out = prefix
    for part in parts:
        out += f"[{part}]" if part.isdigit() else f".{part}"
    return out


def _message(exc: ValidationError, prefix: str) -> tuple[str, str]:
    first = exc.errors()[0]
    field = _where(tuple(first["loc"]), prefix)
    text = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "union_tag_invalid":
        text = f"unknown action {first.get('input', {}).get('action')!r}; known: " + ", ".join(
            a.value for a in Action
        )
    elif first["type"] == "union_tag_not_found":
        text = 'each action needs an "action" name'
    elif first["type"] == "model_attributes_type" or first["type"] == "dict_type":
        text = f"must be an object, got {type(first.get('input')).__name__}"
    problems = "; ".join(
        f"{_where(tuple(e['loc']), prefix)}: {str(e['msg']).removeprefix('Value error, ')}"
        for e in exc.errors()[1:3]
    )
    message = f"{field}: {text}" + (f" (also {problems})" if problems else "")
    return message, field


def parse_intents(raw: Any, *, field: str = "actions", allow_empty: bool = False) -> list[Intent]:
    """Validate raw actions (a JSON list) into ordered, unique intents. ``allow_empty`` accepts
    ``[]`` (the executor runs such a job as a no-op; enqueue paths refuse it).

    Raises:
        IntentError: not a non-empty list of at most ``MAX_ACTIONS`` known actions with valid
            parameters, or an action given twice; the message names the first bad field.
    """
    if not isinstance(raw, list):
        raise IntentError(f"{field}: must be a list of actions, got {type(raw).__name__}", field)
    if not raw:
        if allow_empty:
            return []
        raise IntentError(f"{field}: must name at least one action", field)
    if len(raw) > MAX_ACTIONS:
        raise IntentError(f"{field}: at most {MAX_ACTIONS} actions, got {len(raw)}", field)
    try:
        intents = _INTENTS.validate_python(raw)
    except ValidationError as exc:
        message, where = _message(exc, field)
        raise IntentError(message, where) from None
    seen: set[Action] = set()
    for intent in intents:
        if intent.kind in seen:
            raise IntentError(f"{field}: {intent.kind.value} is given twice", field)
        seen.add(intent.kind)
    return sorted(intents, key=lambda i: i.kind.rank)


def parse_intent(raw: Any, *, field: str = "action") -> Intent:
    """One intent (see ``parse_intents``)."""
    try:
        return _INTENT.validate_python(raw)
    except ValidationError as exc:
        message, where = _message(exc, field)
        raise IntentError(message, where) from None


def checked(build: Callable[[], _M], *, field: str = "action") -> _M:
    """``build()``, which constructs an intent (and its parameters) from typed values, its
    validation error raised as the ``IntentError`` that ``parse_intent`` raises for the same
    value: the bad field named under ``field``, or ``field.params`` when a parameters model
    (``*Params``) refused it. Code that builds intents directly refuses a bad value in the
    same words as the API.
    """
    try:
        return build()
    except ValidationError as exc:
        prefix = f"{field}.params" if exc.title.endswith("Params") else field
        message, where = _message(exc, prefix)
        raise IntentError(message, where) from None


def intents_json(intents: list[Intent]) -> list[dict[str, Any]]:
    """What ``jobs.actions`` stores."""
    return [i.to_json() for i in intents]
