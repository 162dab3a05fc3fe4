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
from typing import Any

from icepack_core.safety.verification import Evidence
from icepack_core.types import REWRITES

# Actions that rewrite data (their commits must keep the live contents) ...
DELETE_FILE_FIELDS = (
    "position_delete_file_count",
    "equality_delete_file_count",
    "deletion_vector_count",
)
RECORD_FIELDS = (
    "snapshot_id",
    "parent_id",
    "rows_before",
    "rows_after",
    "checksum_before",
    "checksum_after",
    "checked",
    "rolled_back",
    "scope",
)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def verification_records(output: Any) -> list[dict[str, Any]]:
    """The snapshot records of an action's stored evidence (``output.verification``), in the
    order checked, each with ``RECORD_FIELDS``: ``rolled_back`` is set on the violating
    snapshot's record (whether the rollback happened), None on the others."""
    evidence = Evidence.stored(output)
    if evidence is None:
        return []
    bad = evidence.rollback.bad_snapshot_id if evidence.rollback is not None else None
    return [
        {
            **check.model_dump(include=set(RECORD_FIELDS)),
            "scope": check.scope,
            "rolled_back": evidence.rolled_back if check.snapshot_id == bad else None,
        }
        for check in evidence.snapshots
    ]


def _record_ok(record: Mapping[str, Any]) -> bool:
    if record.get("rows_before") != record.get("rows_after"):
        return False
    return record.get("checksum_before") == record.get("checksum_after")


def _pair(impact: Mapping[str, Any], key: str) -> tuple[int | None, int | None]:
    before, after = impact.get("before"), impact.get("after")
    return (
        _int(before.get(key)) if isinstance(before, Mapping) else None,
        _int(after.get(key)) if isinstance(after, Mapping) else None,
    )


def _delete_files(impact: Mapping[str, Any], side: int) -> int | None:
    values = [_pair(impact, k)[side] for k in DELETE_FILE_FIELDS]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _live(stored: int | None, deleted: int | None, equality_files: int | None) -> int | None:
    # Equality deletes hide an unknown number of rows: no estimate from metadata then.
    if stored is None or deleted is None or equality_files:
        return None
    return stored - deleted


def action_safety(action: str, state: str, output: Any, impact: Any) -> dict[str, Any]:
    """What one action did to the table's rows, and the proof.

    Returns ``{"verdict", "summary", "live_rows", "stored_rows", "deleted_rows_removed",
    "delete_files_applied", "snapshots", "rolled_back"}``. ``verdict`` is ``verified`` (every
    rewrite snapshot kept its parent's live rows and checksum), ``failed`` (one did not),
    ``nothing_rewritten``, ``unverified`` (a rewrite without recorded evidence) or
    ``not_applicable`` (actions that never change table contents). ``live_rows`` comes from
    the verification scans when they covered the whole table (``source: "verification"``),
    else from metadata (``record_count - delete_record_count``, ``source: "metadata"``).
    """
    impact = impact if isinstance(impact, Mapping) else {}
    records = verification_records(output)
    stored = _pair(impact, "record_count")
    deleted = _pair(impact, "delete_record_count")
    equality = _pair(impact, "equality_delete_file_count")
    files = (_delete_files(impact, 0), _delete_files(impact, 1))

    # A scoped verification's rows are those of the partitions it fingerprinted, not the
    # table's: live rows then come from metadata like when nothing was verified.
    if records and all(r.get("scope") in (None, "table") for r in records):
        live_before = _int(records[0].get("rows_before"))
        live_after = _int(records[-1].get("rows_after"))
        source = "verification"
    else:
        live_before = _live(stored[0], deleted[0], equality[0])
        live_after = _live(stored[1], deleted[1], equality[1])
        source = "metadata"
    live = {"before": live_before, "after": live_after, "source": source}
    removed = None
    if (
        stored[0] is not None
        and stored[1] is not None
        and live_before is not None
        and live_after is not None
    ):
        removed = (stored[0] - stored[1]) - (live_before - live_after)
    applied = files[0] - files[1] if files[0] is not None and files[1] is not None else None
    rolled_back = any(r.get("rolled_back") for r in records)

    has_key = Evidence.stored(output) is not None
    if records:
        verdict = (
            "verified" if all(_record_ok(r) for r in records) and state != "failed" else "failed"
        )
    elif action not in REWRITES:
        verdict = "not_applicable"
    elif has_key and state == "succeeded":
        verdict = "nothing_rewritten"
    else:
        verdict = "unverified"
    summary = {
        "verified": f"{len(records)} rewrite snapshot(s) checked: live rows and contents unchanged",
        "failed": "verification FAILED: a rewrite changed the live rows or contents"
        + ("; rolled back" if rolled_back else "; not rolled back"),
        "nothing_rewritten": "no rewrite snapshot was committed; nothing to verify",
        "unverified": "no verification was recorded for this rewrite",
        "not_applicable": "does not change table contents",
    }[verdict]
    return {
        "verdict": verdict,
        "summary": summary,
        "live_rows": live,
        "stored_rows": {"before": stored[0], "after": stored[1]},
        "deleted_rows_removed": removed,
        "delete_files_applied": applied,
        "snapshots": records,
        "rolled_back": rolled_back,
    }
