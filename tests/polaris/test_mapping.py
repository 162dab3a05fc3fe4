"""Polaris policy content -> Icepack policy, and the precedence between the sources.

Pure functions: the content strings are the shapes a Polaris 1.4.1 server stores and answers
(its content schemas for the four ``system.*`` types); no server is needed here.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal

from hypothesis import given
from hypothesis import strategies as st

from icepack_core.polaris.mapping import POLARIS_KEYS, PolarisPolicy, Scope, map_content, map_policy
from icepack_core.policy import CONFIG_TYPES, ORPHAN_SAFE_HOURS, PolicyAttachment, resolve
from icepack_core.types import PolicyType

DC = PolicyType.DATA_COMPACTION
MC = PolicyType.METADATA_COMPACTION
SE = PolicyType.SNAPSHOT_EXPIRY
OR = PolicyType.ORPHAN_FILE_REMOVAL
FETCHED = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)


def polaris(policy_type: str, name: str = "p1", **content: Any) -> PolarisPolicy:
    body = {"version": "2025-02-03", **content}
    return PolarisPolicy.model_validate(
        {"policy-type": policy_type, "name": name, "content": json.dumps(body), "version": 2}
    )


def mapped(
    policy_type: str,
    scope: Scope = "table",
    ns: tuple[str, ...] = ("db",),
    table: str | None = "t",
    name: str = "p1",
    **content: Any,
) -> PolicyAttachment:
    return map_policy(polaris(policy_type, name, **content), "cat", scope, ns, table, FETCHED)


def icepack(
    policy_type: str,
    scope: Scope,
    namespace: str | None = None,
    table: str | None = None,
    enabled: bool = True,
    **config: Any,
) -> PolicyAttachment:
    return PolicyAttachment(policy_type, scope, "cat", namespace, table, enabled, config)


def test_schema_examples_map_to_icepack_fields_and_keep_unknown_keys() -> None:
    dc = mapped(
        DC,
        enable=True,
        config={
            "target_file_size_bytes": 134217728,
            "compaction_strategy": "bin-pack",
            "max-concurrent-file-group-rewrites": 5,
            "key1": "value1",
        },
    )
    assert dc.invalid is None and dc.enabled
    assert dc.config == {"target_file_size_bytes": 134217728, "strategy": "binpack"}
    assert dc.unknown == {"max-concurrent-file-group-rewrites": 5, "key1": "value1"}

    se = mapped(
        SE,
        enable=True,
        config={"min_snapshot_to_keep": 1, "max_snapshot_age_days": 2, "max_ref_age_days": 3},
    )
    assert se.invalid is None
    assert se.config == {"retain_last": 1, "max_snapshot_age_hours": 48.0}
    assert "max_ref_age_days" in se.unknown  # shown, with why it is not applied

    orphan = mapped(
        OR,
        enable=True,
        max_orphan_file_age_in_days=30,
        locations=["s3://b/db/t"],
        config={"prefix_mismatch_mode": "ignore"},
    )
    assert orphan.invalid is None
    assert orphan.config == {"older_than_hours": 720.0, "locations": ["s3://b/db/t"]}
    assert orphan.unknown == {"prefix_mismatch_mode": "ignore"}

    mc = mapped(MC, enable=True, config={"spec_id": 1, "max_manifests": 40})
    assert mc.config == {"max_manifests": 40} and mc.unknown == {"spec_id": 1}


def test_bad_values_make_the_policy_invalid_naming_the_polaris_key() -> None:
    cases = [
        (DC, {"enable": True, "config": {"compaction_strategy": "shuffle"}}, "compaction_strategy"),
        (DC, {"enable": True, "config": {"target_file_size_bytes": -1}}, "target_file_size_bytes"),
        (
            DC,
            {"enable": True, "config": {"target_file_size_bytes": True}},
            "target_file_size_bytes",
        ),
        (SE, {"enable": True, "config": {"min_snapshot_to_keep": 0}}, "min_snapshot_to_keep"),
        (SE, {"enable": True, "config": {"min_snapshot_to_keep": 1.5}}, "min_snapshot_to_keep"),
        (SE, {"enable": "yes"}, "enable"),
        (OR, {"enable": True, "max_orphan_file_age_in_days": 1}, "max_orphan_file_age_in_days"),
        (OR, {"enable": True, "locations": ["relative/dir"]}, "locations"),
    ]
    for policy_type, content, key in cases:
        assert isinstance(content, dict)
        att = mapped(policy_type, **content)
        assert att.invalid is not None and key in att.invalid, (content, att.invalid)


def test_orphan_age_below_the_floor_only_when_the_policy_says_so() -> None:
    explicit = mapped(
        OR,
        enable=True,
        max_orphan_file_age_in_days=1,
        config={"allow_unsafe_older_than": True},
    )
    assert explicit.invalid is None
    assert explicit.config["older_than_hours"] == 24.0


def test_content_that_is_not_an_object_or_a_wrong_version_is_invalid() -> None:
    for content in ("not json", "[1]", json.dumps({"version": "1999", "enable": True})):
        policy = PolarisPolicy.model_validate(
            {"policy-type": DC, "name": "x", "content": content, "version": 0}
        )
        assert map_policy(policy, "cat", "table", ("db",), "t").invalid


def test_zorder_strategy_maps_to_strategy_and_columns() -> None:
    assert map_content(DC, json.dumps({"enable": True, "config": {}})).config == {}
    m = map_content(
        DC, json.dumps({"enable": True, "config": {"compaction_strategy": "zorder(a, b)"}})
    )
    assert m.config == {"strategy": "zorder", "zorder_columns": ["a", "b"]}


def test_an_invalid_table_policy_falls_back_to_the_namespace_one() -> None:
    attachments = [
        mapped(
            SE,
            "namespace",
            table=None,
            name="ns_expiry",
            enable=True,
            config={"max_snapshot_age_days": 3},
        ),
        mapped(SE, "table", name="bad", enable=True, config={"min_snapshot_to_keep": -4}),
    ]
    policy = resolve(attachments, "db", "t")
    assert policy.snapshot_expiry is not None
    assert policy.snapshot_expiry.max_snapshot_age_hours == 72
    source = policy.sources[SE]
    assert source.startswith("polaris namespace db policy ns_expiry v2")
    assert "passed over polaris table policy bad" in source and "min_snapshot_to_keep" in source


def test_an_invalid_orphan_policy_never_drops_the_safety_floor() -> None:
    bad = mapped(OR, enable=True, max_orphan_file_age_in_days=0.5)
    policy = resolve([bad], "db", "t")
    assert policy.orphan_file_removal is None  # the default: disabled
    assert "passed over" in policy.sources[OR]


def test_icepack_wins_at_the_same_scope_the_more_specific_wins_across_sources() -> None:
    ns_icepack = icepack(DC, "namespace", "db", min_input_files=7)
    table_polaris = mapped(DC, enable=True, config={"min_input_files": 9})
    policy = resolve([ns_icepack, table_polaris], "db", "t")
    assert policy.data_compaction is not None
    assert policy.data_compaction.min_input_files == 9
    assert policy.sources[DC].startswith("polaris table policy p1")

    table_icepack = icepack(DC, "table", "db", "t", min_input_files=11)
    policy = resolve([ns_icepack, table_polaris, table_icepack], "db", "t")
    assert policy.data_compaction is not None
    assert policy.data_compaction.min_input_files == 11
    assert policy.sources[DC] == "table"


def test_table_properties_still_override_a_polaris_policy() -> None:
    att = mapped(SE, enable=True, config={"min_snapshot_to_keep": 2})
    policy = resolve([att], "db", "t", {"icepack.snapshot-expiry.retain-last": "5"})
    assert policy.snapshot_expiry is not None
    assert policy.snapshot_expiry.retain_last == 5
    assert policy.sources[SE].endswith("+ property icepack.snapshot-expiry.retain-last")


SCOPES: st.SearchStrategy[Scope] = st.sampled_from(["catalog", "namespace", "table"])
ORIGINS: st.SearchStrategy[Literal["icepack", "polaris"]] = st.sampled_from(["icepack", "polaris"])


@st.composite
def attachment(draw: st.DrawFn) -> tuple[PolicyAttachment, int]:
    scope = draw(SCOPES)
    origin = draw(ORIGINS)
    value = draw(st.integers(2, 1000))
    invalid = draw(st.booleans()) if origin == "polaris" else False
    return (
        PolicyAttachment(
            DC,
            scope,
            "cat",
            None if scope == "catalog" else "db",
            "t" if scope == "table" else None,
            True,
            {"min_input_files": value},
            origin=origin,
            name=f"p{value}",
            version=0,
            invalid="bad value" if invalid else None,
        ),
        value,
    )


@given(st.lists(attachment(), max_size=8))
def test_precedence_is_scope_then_icepack_then_validity(
    cands: list[tuple[PolicyAttachment, int]],
) -> None:
    """The winner is the valid candidate with the highest (scope, icepack-over-polaris) rank;
    with no valid candidate, the default (5) applies."""
    rank = {"catalog": 0, "namespace": 1, "table": 2}
    valid = [(a, v) for a, v in cands if a.invalid is None]
    compaction = resolve([a for a, _ in cands], "db", "t").data_compaction
    assert compaction is not None
    got = compaction.min_input_files
    if not valid:
        assert got == 5
        return
    best = max(rank[a.scope] * 2 + (a.origin == "icepack") for a, _ in valid)
    winners = {v for a, v in valid if rank[a.scope] * 2 + (a.origin == "icepack") == best}
    assert got in winners


JSON_SCALARS = st.one_of(st.booleans(), st.integers(-(10**6), 10**12), st.text(max_size=8))


@given(
    st.dictionaries(st.text(min_size=1, max_size=12), JSON_SCALARS, max_size=6),
    st.sampled_from([DC, MC, SE, OR]),
    st.booleans(),
)
def test_any_config_maps_or_is_invalid_never_raises(
    config: dict[str, bool | int | str], policy_type: PolicyType, enable: bool
) -> None:
    """Whatever config a Polaris policy carries, mapping yields a usable attachment or one
    marked invalid; every key is either applied, kept as unknown, or named in the reason."""
    att = mapped(policy_type, enable=enable, config=config)
    if att.invalid is None:
        resolve([att], "db", "t")  # a valid mapping resolves
        applied = set(POLARIS_KEYS[policy_type]) | set(CONFIG_TYPES[policy_type].model_fields)
        applied.discard("delete_outside_location")  # never from Polaris: see mapping
        for key in config:
            assert (key in att.unknown) != (key in applied | {"compaction_strategy"}), key
    if policy_type == OR and att.invalid is None and att.enabled:
        older = resolve([att], "db", "t").orphan_file_removal
        assert older is not None
        assert older.older_than_hours >= ORPHAN_SAFE_HOURS or older.allow_unsafe_older_than


def test_content_nested_deeper_than_python_parses_is_invalid_not_a_crash() -> None:
    policy = PolarisPolicy.model_validate(
        {"policy-type": DC, "name": "deep", "content": "[" * 100_000, "version": 0}
    )
    assert map_policy(policy, "cat", "table", ("db",), "t").invalid == "content is not JSON"
