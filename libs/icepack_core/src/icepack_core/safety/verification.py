"""A rewrite's verification evidence, typed: what ``RewriteVerifier.verify`` proves and stores.

One definition for the writer (``execution.verification``) and the readers (``safety.evidence``,
``icepack job``, the executor's outcome): an ``Evidence`` crosses every boundary as this model
and is stored once, as ``Evidence.to_json()``, under ``job_actions.output.verification`` (and as
a hold's ``evidence``). Its JSON is the model's dump without the fields that are unknown (None),
except ``start_snapshot_id`` and ``rollback``, which are always present.

Checksums are decimal strings: they exceed the 53-bit integers a JavaScript UI shows exactly.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)

from icepack_core.errors import IcepackError

Scope = Literal["partitions", "none", "table"]
ROLLED_BACK = frozenset({"rolled_back", "rolled_back_reverting_writer"})


class _Evidence(BaseModel):
    """Evidence models: unknown (None) fields are left out of the JSON (``KEEP``: kept)."""

    model_config = ConfigDict(extra="forbid")
    KEEP: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _known(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        dumped: dict[str, object] = handler(self)
        return {k: v for k, v in dumped.items() if v is not None or k in self.KEEP}

    def to_json(self) -> dict[str, Any]:
        """The one stored (JSON-safe) form."""
        return self.model_dump(mode="json")


class PartitionName(_Evidence):
    """A fingerprinted partition: its spec and its partition as Spark's ``entries`` shows it."""

    spec_id: int
    partition: str


class ScopeNote(_Evidence):
    """How one comparison was scoped and read (``RewriteVerifier``'s module doc). Filled while
    the comparison runs: a note is mutable until it lands in a ``SnapshotCheck``."""

    scope: Scope | None = None
    scope_reason: str | None = None
    partitions_total: int | None = None
    partitions_proven: int | None = None
    partitions_fingerprinted: int | None = None
    fingerprinted: list[PartitionName] | None = None
    reader: Literal["in_process", "engine"] | None = None
    reader_seconds: float | None = None
    reader_fallback: str | None = None
    # In-process reads: files read, and files whose fingerprint was taken while the rewrite ran.
    reader_files_read: int | None = None
    reader_files_prefetched: int | None = None
    files_diff: Literal["metadata", "engine"] | None = None
    files_diff_seconds: float | None = None
    files_diff_fallback: str | None = None

    def known(self) -> dict[str, object]:
        """The known fields as keyword arguments (to build a note or a check from)."""
        return {k: getattr(self, k) for k in ScopeNote.model_fields if getattr(self, k) is not None}

    def merged(self, over: ScopeNote) -> ScopeNote:
        """A copy with ``over``'s known fields in place of this note's."""
        return ScopeNote(**{**self.known(), **over.known()})


class SnapshotCheck(ScopeNote):
    """One checked ``replace`` snapshot: rows and checksum (of what was fingerprinted) before
    (its parent, or the chain's start) and after, and how (``checked``: ``chain`` or
    ``parent``)."""

    snapshot_id: int
    parent_id: int
    rows_before: int
    rows_after: int
    checksum_before: str
    checksum_after: str
    checked: Literal["chain", "parent"]
    ok: bool


class Rollback(_Evidence):
    """What a violation's rollback did (``RewriteVerifier._roll_back``)."""

    status: Literal["rolled_back", "rolled_back_reverting_writer", "not_rolled_back"]
    to_snapshot_id: int
    bad_snapshot_id: int
    current_snapshot_id: int | None = None
    previous_snapshot_id: int | None = None
    current_after_rollback: int | None = None
    reverted_snapshot_id: int | None = None
    reason: str | None = None

    @property
    def rolled_back(self) -> bool:
        """The bad snapshot is no longer current because of the rollback."""
        return self.status in ROLLED_BACK


class PendingOrigin(_Evidence):
    """The ``pending_verifications`` row a settled verification came from."""

    job_id: int
    fence: int
    action: str
    recorded_at: str
    start_snapshot_id: int | None = None
    KEEP: ClassVar[frozenset[str]] = frozenset({"start_snapshot_id"})


class Evidence(_Evidence):
    """A verification's evidence: ``status`` ``verified`` (every ``snapshots`` entry kept its
    contents), ``violation`` (``violation`` is the failing check, ``rollback`` what was done) or
    ``error`` (it could not run: ``error`` says why). ``seconds``: its wall time;
    ``pending``: the pending row it settled, when it settled one."""

    status: Literal["verified", "violation", "error"]
    start_snapshot_id: int | None
    snapshots: list[SnapshotCheck] = []
    rollback: Rollback | None = None
    violation: SnapshotCheck | None = None
    seconds: float | None = None
    error: str | None = None
    pending: PendingOrigin | None = None
    KEEP: ClassVar[frozenset[str]] = frozenset({"start_snapshot_id", "rollback"})

    @property
    def rolled_back(self) -> bool | None:
        """None without a rollback attempt, else whether the table was rolled back."""
        return None if self.rollback is None else self.rollback.rolled_back

    @classmethod
    def stored(cls, output: Any) -> Evidence | None:
        """The evidence stored in an action's ``output`` (under ``verification``), or None when
        there is none or it is not evidence. Never raises."""
        found = output.get("verification") if isinstance(output, dict) else None
        if not isinstance(found, dict):
            return None
        try:
            return cls.model_validate(found)
        except ValidationError:
            return None


class VerificationFailed(IcepackError):
    """A rewrite changed the table's live contents; ``evidence`` says how and what was done."""

    code = "VERIFICATION_FAILED"

    def __init__(self, message: str, evidence: Evidence) -> None:
        super().__init__(message)
        self.evidence = evidence
