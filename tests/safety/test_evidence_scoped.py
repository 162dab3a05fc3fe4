"""``action_safety`` with scoped verification evidence: the rows of the fingerprinted
partitions are not the table's live rows, so those come from metadata."""

from __future__ import annotations

from icepack_core.safety.evidence import action_safety

IMPACT = {
    "before": {"record_count": 1000, "delete_record_count": 0},
    "after": {"record_count": 1000, "delete_record_count": 0},
}


def record(snapshot_id: int, scope: str | None, rows: int) -> dict[str, object]:
    found: dict[str, object] = {
        "snapshot_id": snapshot_id,
        "parent_id": snapshot_id - 1,
        "rows_before": rows,
        "rows_after": rows,
        "checksum_before": "7",
        "checksum_after": "7",
    }
    if scope is not None:
        found["scope"] = scope
    return found


def test_scoped_records_verify_but_live_rows_come_from_metadata() -> None:
    out = {"verified_snapshots": [record(2, "partitions", 24), record(3, "none", 0)]}
    s = action_safety("rewrite_data_files", "succeeded", out, IMPACT)
    assert s["verdict"] == "verified"
    assert s["live_rows"] == {"before": 1000, "after": 1000, "source": "metadata"}
    assert [r["scope"] for r in s["snapshots"]] == ["partitions", "none"]


def test_whole_table_records_still_give_the_live_rows() -> None:
    for scope in (None, "table"):
        out = {"verified_snapshots": [record(2, scope, 1000)]}
        s = action_safety("rewrite_data_files", "succeeded", out, IMPACT)
        assert s["live_rows"] == {"before": 1000, "after": 1000, "source": "verification"}


def test_a_scoped_violation_still_fails() -> None:
    bad = {**record(2, "partitions", 24), "rows_after": 23}
    assert action_safety("rewrite_data_files", "failed", bad, IMPACT)["verdict"] == "failed"
