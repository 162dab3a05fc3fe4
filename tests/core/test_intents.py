"""Action intents: the one validation of what an action may say, whoever wrote it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from icepack_core.errors import IntentError
from icepack_core.intents import (
    ExpireSnapshots,
    RemoveOrphanFiles,
    RewriteDataFiles,
    intents_json,
    parse_intents,
)
from icepack_core.planning.recommendation import recommend
from icepack_core.policy import resolve
from icepack_core.types import Action
from tests.support import statuses

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
STATUS = statuses.status(
    **{
        "small_file_count": 40,
        "small_file_bytes": 4_000_000,
        "data_file_count": 50,
        "equality_delete_file_count": 3,
        "position_delete_file_count": 4,
        "deletion_vector_count": 0,
        "record_count": 1000,
        "delete_record_count": 300,
        "manifest_count": 500,
        "manifest_bytes": 10_000_000,
        "snapshot_count": 40,
        "oldest_snapshot_at": "2026-01-01T00:00:00Z",
        "partition_count": 3,
        "current_snapshot_at": None,
    }
)


def test_the_planners_own_output_validates_and_round_trips() -> None:
    policy = resolve([], "db", "t", {"icepack.orphan-removal.enabled": "false"})
    rec = recommend(STATUS, policy, {}, NOW)
    raw = [
        {"action": a.action, "params": a.to_json()["params"], "reason": a.reason}
        for a in rec.actions
    ]
    intents = parse_intents(raw)
    assert [i.kind for i in intents] == [
        Action.REWRITE_DATA_FILES,
        Action.REWRITE_POSITION_DELETE_FILES,
        Action.REWRITE_MANIFESTS,
        Action.EXPIRE_SNAPSHOTS,
    ]
    assert parse_intents(intents_json(intents)) == intents  # the stored form parses the same
    expire = next(i for i in intents if isinstance(i, ExpireSnapshots))
    assert expire.params.older_than.tzinfo is not None


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        # What the gateway used to make of a stored recommendation: its keys as actions.
        (["actions", "skipped"], "actions[0]"),
        ({"actions": [], "skipped": []}, "must be a list"),
        ([], "at least one action"),
        ([{"params": {}}], 'needs an "action" name'),
        ([{"action": "drop_table"}], "unknown action 'drop_table'"),
        ([{"action": "rewrite_manifests", "params": []}], "actions[0].params"),
        ([{"action": "rewrite_manifests", "parms": {}}], "actions[0].parms"),
        ([{"action": "expire_snapshots", "params": {}}], "actions[0].params.older_than"),
        (
            [{"action": "expire_snapshots", "params": {"older_than": "2999-13-01"}}],
            "actions[0].params.older_than",
        ),
        (
            [
                {
                    "action": "expire_snapshots",
                    "params": {"older_than": "2026-01-01", "retain_last": 0},
                }
            ],
            "retain_last",
        ),
        (
            [{"action": "rewrite_data_files", "params": {"options": {"target-file-size": "1"}}}],
            "unknown option 'target-file-size'",
        ),
        (
            [
                {
                    "action": "rewrite_data_files",
                    "params": {"options": {"min-input-files": "5'; --"}},
                }
            ],
            "must be a number, boolean or name",
        ),
        ([{"action": "rewrite_data_files", "params": {"strategy": "zorder"}}], "strategy"),
        ([{"action": "rewrite_manifests"}, {"action": "rewrite_manifests"}], "given twice"),
        ([{"action": "rewrite_manifests"}] * 11, "at most 10"),
    ],
)
def test_malformed_actions_are_refused_naming_the_field(
    raw: list[dict[str, Any]], named: str
) -> None:
    with pytest.raises(IntentError) as exc:
        parse_intents(raw)
    assert named in str(exc.value)


def test_intents_are_ordered_rewrites_first_orphans_last() -> None:
    intents = parse_intents(
        [
            {"action": "remove_orphan_files", "params": {"older_than": "2026-01-01T00:00:00Z"}},
            {"action": "expire_snapshots", "params": {"older_than": "2026-01-01 00:00:00.000"}},
            {"action": "rewrite_data_files"},
        ]
    )
    assert [type(i) for i in intents] == [RewriteDataFiles, ExpireSnapshots, RemoveOrphanFiles]
    assert isinstance(intents[0], RewriteDataFiles)
    assert intents[0].params.strategy == "binpack"


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(
                st.sampled_from(["action", "params", "reason", "older_than", "x"])
                | st.text(max_size=5),
                children,
                max_size=4,
            )
        ),
        max_leaves=20,
    )
)
def test_any_json_either_parses_or_is_refused_with_intent_error(raw: object) -> None:
    try:
        intents = parse_intents(raw)
    except IntentError as exc:
        assert str(exc) and exc.field.startswith("actions")
    else:
        assert 1 <= len(intents) <= 10
        assert len({i.kind for i in intents}) == len(intents)
