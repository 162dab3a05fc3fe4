"""``action_safety`` with scoped verification evidence: the rows of the fingerprinted
partitions are not the table's live rows, so those come from metadata."""

from __future__ import annotations

from icepack_core.safety.evidence import action_safety
from icepack_core.safety.verification import Evidence, Scope, SnapshotCheck

IMPACT = {
    "before": {"record_count": 1000, "delete_record_count": 0},
    "after": {"record_count": 1000, "delete_record_count": 0},
}


def record(snapshot_id: int, scope: Scope | None, rows: int) -> SnapshotCheck:
    return SnapshotCheck(
        snapshot_id=snapshot_id,
        parent_id=snapshot_id - 1,
        rows_before=rows,
        rows_after=rows,
        checksum_before="7",
        checksum_after="7",
        checked="parent",
        ok=True,
        scope=scope,
    )


def stored(*checks: SnapshotCheck) -> dict[str, object]:
    evidence = Evidence(status="verified", start_snapshot_id=1, snapshots=list(checks))
    return {"verification": evidence.to_json()}


def test_scoped_records_verify_but_live_rows_come_from_metadata() -> None:
    out = stored(record(2, "partitions", 24), record(3, "none", 0))
    s = action_safety("rewrite_data_files", "succeeded", out, IMPACT).model_dump()
    assert s["verdict"] == "verified"
    assert s["live_rows"] == {"before": 1000, "after": 1000, "source": "metadata"}
    assert [r["scope"] for r in s["snapshots"]] == ["partitions", "none"]


def test_whole_table_records_still_give_the_live_rows() -> None:
    for scope in (None, "table"):
        out = stored(record(2, scope, 1000))
        s = action_safety("rewrite_data_files", "succeeded", out, IMPACT).model_dump()
        assert s["live_rows"] == {"before": 1000, "after": 1000, "source": "verification"}


def test_a_scoped_violation_still_fails() -> None:
    bad = record(2, "partitions", 24).model_copy(update={"rows_after": 23, "ok": False})
    out = stored(bad)
    assert (
        action_safety("rewrite_data_files", "failed", out, IMPACT).model_dump()["verdict"]
        == "failed"
    )
