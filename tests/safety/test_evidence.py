"""``action_safety``: live rows apart from deleted rows removed, and the verification verdict,
over the evidence the executor stores (``output.verification``) and garbage, which must never
raise."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from icepack_core.safety.evidence import action_safety, verification_records
from icepack_core.safety.verification import Evidence, Rollback, SnapshotCheck

IMPACT = {
    "before": {
        "record_count": 320,
        "delete_record_count": 64,
        "position_delete_file_count": 4,
        "equality_delete_file_count": 0,
        "deletion_vector_count": 0,
    },
    "after": {
        "record_count": 256,
        "delete_record_count": 0,
        "position_delete_file_count": 0,
        "equality_delete_file_count": 0,
        "deletion_vector_count": 0,
    },
}


def check(snapshot_id: int, rows_after: int = 256, checksum_after: str = "7") -> SnapshotCheck:
    return SnapshotCheck(
        snapshot_id=snapshot_id,
        parent_id=snapshot_id - 1,
        rows_before=256,
        rows_after=rows_after,
        checksum_before="7",
        checksum_after=checksum_after,
        checked="chain",
        ok=(rows_after, checksum_after) == (256, "7"),
    )


CHAIN = {
    "verification": Evidence(
        status="verified", start_snapshot_id=1, snapshots=[check(2), check(3)]
    ).to_json()
}


def test_a_delete_applying_rewrite_loses_no_live_row() -> None:
    s = action_safety("rewrite_data_files", "succeeded", CHAIN, IMPACT).model_dump()
    assert s["verdict"] == "verified" and len(s["snapshots"]) == 2
    assert s["live_rows"] == {"before": 256, "after": 256, "source": "verification"}
    assert s["stored_rows"] == {"before": 320, "after": 256}
    assert s["deleted_rows_removed"] == 64 and s["delete_files_applied"] == 4


def test_without_evidence_live_rows_come_from_metadata() -> None:
    s = action_safety("rewrite_data_files", "succeeded", {}, IMPACT).model_dump()
    assert s["verdict"] == "unverified"
    assert s["live_rows"] == {"before": 256, "after": 256, "source": "metadata"}
    assert s["deleted_rows_removed"] == 64
    equality = {side: {**IMPACT[side], "equality_delete_file_count": 1} for side in IMPACT}
    assert (
        action_safety("rewrite_data_files", "succeeded", {}, equality).model_dump()["live_rows"][
            "before"
        ]
        is None
    )  # equality deletes: no estimate


def test_a_failed_check_with_rollback() -> None:
    bad = check(9, rows_after=255, checksum_after="2")
    evidence = Evidence(
        status="violation",
        start_snapshot_id=7,
        snapshots=[check(8), bad],
        violation=bad,
        rollback=Rollback(status="rolled_back", to_snapshot_id=8, bad_snapshot_id=9),
    )
    s = action_safety(
        "rewrite_data_files", "failed", {"verification": evidence.to_json()}, {}
    ).model_dump()
    assert s["verdict"] == "failed" and s["rolled_back"] is True
    assert "rolled back" in s["summary"]
    assert [r["rolled_back"] for r in s["snapshots"]] == [None, True]


def test_records_under_the_verification_key_and_nothing_rewritten() -> None:
    assert [r.snapshot_id for r in verification_records(CHAIN)] == [2, 3]
    nothing = Evidence(status="verified", start_snapshot_id=4).to_json()
    s = action_safety("rewrite_data_files", "succeeded", {"verification": nothing}, {}).model_dump()
    assert s["verdict"] == "nothing_rewritten"
    assert (
        action_safety("expire_snapshots", "succeeded", {}, {}).model_dump()["verdict"]
        == "not_applicable"
    )


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "snapshot_id",
                    "rows_before",
                    "rows_after",
                    "checksum_before",
                    "verified_snapshots",
                    "verification",
                    "before",
                    "after",
                    "record_count",
                    "x",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=30,
)


@given(output=JSON, impact=JSON, state=st.sampled_from(["succeeded", "failed"]))
def test_any_stored_json_gives_an_answer(output: Any, impact: Any, state: str) -> None:
    s = action_safety("rewrite_data_files", state, output, impact).model_dump()
    assert s["verdict"] in {"verified", "failed", "nothing_rewritten", "unverified"}
