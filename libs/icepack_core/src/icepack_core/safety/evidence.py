"""Was a maintenance action safe? The evidence of one ``job_actions`` row, read for people.

A rewrite that applies delete files lowers the table's stored ``record_count`` (deleted rows are
physically removed) while the *live* rows (stored minus deleted) stay exactly the same. Shown
as a bare ``record count 320 -> 256`` that reads as 64 rows lost; ``action_safety`` separates
the two and adds the post-commit verification (``TableMaintenance.verify_rewrites``): each
rewrite snapshot checked, its live rows and checksum before and after, and any rollback.

The gateway returns this as ``job_actions[].safety`` (the UI renders it) and ``icepack job``
prints it, so both say the same thing. Pure functions over stored JSON: the evidence is read in
its one form (``output.verification``, a ``safety.verification.Evidence``); anything else counts
as no evidence, and they never raise on unexpected input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel

from icepack_core.safety.verification import Evidence, Scope
from icepack_core.types import REWRITES

# Actions that rewrite data (their commits must keep the live contents) ...
DELETE_FILE_FIELDS = (
    "position_delete_file_count",
    "equality_delete_file_count",
    "deletion_vector_count",
)
Verdict = Literal["verified", "failed", "nothing_rewritten", "unverified", "not_applicable"]
SUMMARIES: dict[str, str] = {
    "verified": "{n} rewrite snapshot(s) checked: live rows and contents unchanged",
    "failed": "verification FAILED: a rewrite changed the live rows or contents",
    "nothing_rewritten": "no rewrite snapshot was committed; nothing to verify",
    "unverified": "no verification was recorded for this rewrite",
    "not_applicable": "does not change table contents",
}


class CheckedSnapshot(BaseModel):
    """One checked snapshot as people read it: ``rolled_back`` is set on the violating
    snapshot's record (whether the rollback happened), None on the others."""

    snapshot_id: int
    parent_id: int
    rows_before: int
    rows_after: int
    checksum_before: str
    checksum_after: str
    checked: Literal["chain", "parent"]
    rolled_back: bool | None
    scope: Scope | None = None

    @property
    def ok(self) -> bool:
        return (self.rows_before, self.checksum_before) == (self.rows_after, self.checksum_after)


class BeforeAfter(BaseModel):
    before: int | None
    after: int | None


class LiveRows(BeforeAfter):
    """Live rows (stored minus deleted) around the action, and where they come from."""

    source: Literal["verification", "metadata"]


class ActionSafety(BaseModel):
    """What one action did to the table's rows, and the proof (``action_safety``)."""

    verdict: Verdict
    summary: str
    live_rows: LiveRows
    stored_rows: BeforeAfter
    deleted_rows_removed: int | None
    delete_files_applied: int | None
    snapshots: list[CheckedSnapshot]
    rolled_back: bool


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def verification_records(output: Any) -> list[CheckedSnapshot]:
    """The checked snapshots of an action's stored evidence (``output.verification``), in the
    order checked."""
    evidence = Evidence.stored(output)
    if evidence is None:
        return []
    bad = evidence.rollback.bad_snapshot_id if evidence.rollback is not None else None
    return [
        CheckedSnapshot(
            **check.model_dump(include=set(CheckedSnapshot.model_fields) - {"rolled_back"}),
            rolled_back=evidence.rolled_back if check.snapshot_id == bad else None,
        )
        for check in evidence.snapshots
    ]


def _pair(impact: Mapping[str, Any], key: str) -> BeforeAfter:
    before, after = impact.get("before"), impact.get("after")
    return BeforeAfter(
        before=_int(before.get(key)) if isinstance(before, Mapping) else None,
        after=_int(after.get(key)) if isinstance(after, Mapping) else None,
    )


def _delete_files(impact: Mapping[str, Any]) -> int | None:
    """Delete files the action applied (removed), from the impact's counts."""
    pairs = [_pair(impact, k) for k in DELETE_FILE_FIELDS]
    before = [p.before for p in pairs if p.before is not None]
    after = [p.after for p in pairs if p.after is not None]
    return sum(before) - sum(after) if before and after else None


def _live(stored: int | None, deleted: int | None, equality_files: int | None) -> int | None:
    # Equality deletes hide an unknown number of rows: no estimate from metadata then.
    if stored is None or deleted is None or equality_files:
        return None
    return stored - deleted


def _live_rows(
    records: list[CheckedSnapshot], stored: BeforeAfter, impact: Mapping[str, Any]
) -> LiveRows:
    # A scoped verification's rows are those of the partitions it fingerprinted, not the
    # table's: live rows then come from metadata like when nothing was verified.
    if records and all(r.scope in (None, "table") for r in records):
        return LiveRows(
            before=records[0].rows_before, after=records[-1].rows_after, source="verification"
        )
    deleted = _pair(impact, "delete_record_count")
    equality = _pair(impact, "equality_delete_file_count")
    return LiveRows(
        before=_live(stored.before, deleted.before, equality.before),
        after=_live(stored.after, deleted.after, equality.after),
        source="metadata",
    )


def _removed(stored: BeforeAfter, live: LiveRows) -> int | None:
    """Deleted rows physically removed: the stored rows' drop beyond the live rows'."""
    if stored.before is None or stored.after is None:
        return None
    if live.before is None or live.after is None:
        return None
    return (stored.before - stored.after) - (live.before - live.after)


def _verdict(action: str, state: str, output: Any, records: list[CheckedSnapshot]) -> Verdict:
    if records:
        return "verified" if all(r.ok for r in records) and state != "failed" else "failed"
    if action not in REWRITES:
        return "not_applicable"
    if Evidence.stored(output) is not None and state == "succeeded":
        return "nothing_rewritten"
    return "unverified"


def action_safety(action: str, state: str, output: Any, impact: Any) -> ActionSafety:
    """What one action did to the table's rows, and the proof.

    ``verdict`` is ``verified`` (every rewrite snapshot kept its parent's live rows and
    checksum), ``failed`` (one did not), ``nothing_rewritten``, ``unverified`` (a rewrite
    without recorded evidence) or ``not_applicable`` (actions that never change table
    contents). ``live_rows`` comes from the verification scans when they covered the whole
    table (``source: "verification"``), else from metadata (``record_count -
    delete_record_count``, ``source: "metadata"``).
    """
    impact = impact if isinstance(impact, Mapping) else {}
    records = verification_records(output)
    stored = _pair(impact, "record_count")
    live = _live_rows(records, stored, impact)
    removed = _removed(stored, live)
    rolled_back = any(r.rolled_back for r in records)
    verdict = _verdict(action, state, output, records)
    summary = SUMMARIES[verdict].format(n=len(records))
    if verdict == "failed":
        summary += "; rolled back" if rolled_back else "; not rolled back"
    return ActionSafety(
        verdict=verdict,
        summary=summary,
        live_rows=live,
        stored_rows=stored,
        deleted_rows_removed=removed,
        delete_files_applied=_delete_files(impact),
        snapshots=records,
        rolled_back=rolled_back,
    )
