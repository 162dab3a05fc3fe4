"""``action_safety``: live rows apart from deleted rows removed, and the verification verdict,
over every output shape the executor writes (and garbage, which must never raise)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from icepack_core.safety.evidence import action_safety, verification_records

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
CHAIN = {
    "verified_snapshots": [
        {
            "snapshot_id": 2,
            "parent_id": 1,
            "rows_before": 256,
            "rows_after": 256,
            "checked": "chain",
        },
        {
            "snapshot_id": 3,
            "parent_id": 2,
            "rows_before": 256,
            "rows_after": 256,
            "checked": "chain",
        },
    ]
}


def test_a_delete_applying_rewrite_loses_no_live_row() -> None:
    s = action_safety("rewrite_data_files", "succeeded", CHAIN, IMPACT)
    assert s["verdict"] == "verified" and len(s["snapshots"]) == 2
    assert s["live_rows"] == {"before": 256, "after": 256, "source": "verification"}
    assert s["stored_rows"] == {"before": 320, "after": 256}
    assert s["deleted_rows_removed"] == 64 and s["delete_files_applied"] == 4


def test_without_evidence_live_rows_come_from_metadata() -> None:
    s = action_safety("rewrite_data_files", "succeeded", {}, IMPACT)
    assert s["verdict"] == "unverified"
    assert s["live_rows"] == {"before": 256, "after": 256, "source": "metadata"}
    assert s["deleted_rows_removed"] == 64
    equality = {side: {**IMPACT[side], "equality_delete_file_count": 1} for side in IMPACT}
    assert (
        action_safety("rewrite_data_files", "succeeded", {}, equality)["live_rows"]["before"]
        is None
    )  # equality deletes: no estimate


def test_a_failed_check_with_rollback() -> None:
    evidence = {
        "snapshot_id": 9,
        "parent_id": 8,
        "rows_before": 10,
        "rows_after": 9,
        "checksum_before": 1,
        "checksum_after": 2,
        "rolled_back": True,
    }
    s = action_safety("rewrite_data_files", "failed", evidence, {})
    assert s["verdict"] == "failed" and s["rolled_back"] is True
    assert "rolled back" in s["summary"]


def test_records_under_a_verification_key_and_nothing_rewritten() -> None:
    out = {
        "verification": {
            "snapshots": [{"snapshot_id": 5, "parent_id": 4, "rows_before": 1, "rows_after": 1}]
        }
    }
    assert [r["snapshot_id"] for r in verification_records(out)] == [5]
    assert verification_records(
        {**out, "verified_snapshots": out["verification"]["snapshots"]}
    ) == verification_records(out)  # each record once
    s = action_safety("rewrite_data_files", "succeeded", {"verified_snapshots": []}, {})
    assert s["verdict"] == "nothing_rewritten"
    assert action_safety("expire_snapshots", "succeeded", {}, {})["verdict"] == "not_applicable"


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
    s = action_safety("rewrite_data_files", state, output, impact)
    assert s["verdict"] in {"verified", "failed", "nothing_rewritten", "unverified"}
