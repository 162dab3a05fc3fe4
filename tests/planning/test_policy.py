"""Policy inheritance, table-property overrides and validation."""

from typing import Any

import pytest

from icepack_core.errors import PolicyError
from icepack_core.polaris.mapping import Scope
from icepack_core.policy import OrphanFileRemovalConfig, PolicyAttachment, parse_config, resolve
from icepack_core.types import PolicyType

DATA_COMPACTION = PolicyType.DATA_COMPACTION
ORPHAN_FILE_REMOVAL = PolicyType.ORPHAN_FILE_REMOVAL
SNAPSHOT_EXPIRY = PolicyType.SNAPSHOT_EXPIRY


def att(
    policy_type: PolicyType,
    scope: Scope,
    namespace: str | None = None,
    table: str | None = None,
    enabled: bool = True,
    **config: Any,
) -> PolicyAttachment:
    return PolicyAttachment(policy_type, scope, "cat", namespace, table, enabled, config)


def test_defaults_enable_everything_but_orphan_removal() -> None:
    policy = resolve([], "db", "t")
    assert policy.maintenance_enabled and policy.cadence_hours == 24
    assert policy.data_compaction is not None
    assert policy.data_compaction.min_input_files == 5
    assert policy.snapshot_expiry is not None
    assert policy.snapshot_expiry.max_snapshot_age_hours == 120
    assert policy.orphan_file_removal is None
    assert set(policy.sources.values()) == {"default"}


def test_table_beats_namespace_beats_catalog() -> None:
    attachments = [
        att(SNAPSHOT_EXPIRY, "catalog", max_snapshot_age_hours=240),
        att(SNAPSHOT_EXPIRY, "namespace", "db", max_snapshot_age_hours=48),
        att(SNAPSHOT_EXPIRY, "table", "db", "t", max_snapshot_age_hours=6),
    ]
    expiry = resolve(attachments, "db", "t").snapshot_expiry
    assert expiry is not None and expiry.max_snapshot_age_hours == 6
    expiry = resolve(attachments, "db", "other").snapshot_expiry
    assert expiry is not None and expiry.max_snapshot_age_hours == 48
    expiry = resolve(attachments, "sales", "t").snapshot_expiry
    assert expiry is not None and expiry.max_snapshot_age_hours == 240
    assert resolve(attachments, "db", "other").sources[SNAPSHOT_EXPIRY] == "namespace db"


def test_deeper_namespace_wins_and_siblings_do_not_match() -> None:
    attachments = [
        att(DATA_COMPACTION, "namespace", "a", min_input_files=10),
        att(DATA_COMPACTION, "namespace", "a.b", min_input_files=20),
        att(DATA_COMPACTION, "namespace", "ab", min_input_files=30),
    ]
    compaction = resolve(attachments, "a.b.c", "t").data_compaction
    assert compaction is not None and compaction.min_input_files == 20
    compaction = resolve(attachments, "a.x", "t").data_compaction
    assert compaction is not None and compaction.min_input_files == 10
    compaction = resolve(attachments, "abc", "t").data_compaction
    assert compaction is not None and compaction.min_input_files == 5  # no match


def test_disabled_policy_turns_the_action_off() -> None:
    policy = resolve([att(DATA_COMPACTION, "catalog", enabled=False)], "db", "t")
    assert policy.data_compaction is None


def test_table_properties_override_last() -> None:
    attachments = [att(SNAPSHOT_EXPIRY, "table", "db", "t", retain_last=3)]
    policy = resolve(
        attachments,
        "db",
        "t",
        {
            "icepack.snapshot-expiry.retain-last": "7",
            "icepack.compaction.enabled": "false",
            "icepack.maintenance.cadence-hours": "6",
        },
    )
    assert policy.snapshot_expiry is not None
    assert policy.snapshot_expiry.retain_last == 7
    assert policy.data_compaction is None
    assert policy.cadence_hours == 6
    assert "property icepack.snapshot-expiry.retain-last" in policy.sources[SNAPSHOT_EXPIRY]


def test_need_scheduling_properties() -> None:
    """The minimum interval (default from the setting) and the count-based retention (off
    unless set) come from table properties too."""
    default = resolve([], "db", "t", default_min_interval_minutes=7)
    assert default.snapshot_expiry is not None
    assert default.min_interval_minutes == 7 and default.snapshot_expiry.max_snapshots is None
    policy = resolve(
        [],
        "db",
        "t",
        {
            "icepack.maintenance.min-interval-minutes": "2.5",
            "icepack.snapshot-expiry.max-count": "1000",
        },
    )
    assert policy.min_interval_minutes == 2.5
    assert policy.snapshot_expiry is not None
    assert policy.snapshot_expiry.max_snapshots == 1000
    assert "property icepack.snapshot-expiry.max-count" in policy.sources[SNAPSHOT_EXPIRY]


def test_opt_out_property() -> None:
    assert not resolve([], "db", "t", {"icepack.maintenance.enabled": "false"}).maintenance_enabled


@pytest.mark.parametrize(
    ("props", "named"),
    [
        ({"icepack.maintenance.enabled": "maybe"}, "icepack.maintenance.enabled='maybe'"),
        ({"icepack.snapshot-expiry.retain-last": "lots"}, "icepack.snapshot-expiry.retain-last"),
        ({"icepack.snapshot-expiry.max-age-hours": "-1"}, "icepack.snapshot-expiry.max-age-hours"),
        ({"icepack.no-such-knob": "1"}, "icepack.no-such-knob"),
        ({"icepack.compaction.min-input-files": "1"}, "min_input_files"),
        ({"icepack.maintenance.min-interval-minutes": "soon"}, "min-interval-minutes='soon'"),
        ({"icepack.maintenance.min-interval-minutes": "-5"}, "min-interval-minutes='-5'"),
        ({"icepack.maintenance.min-interval-minutes": "1e12"}, "at most"),
        ({"icepack.snapshot-expiry.max-count": "0"}, "max_snapshots"),
        ({"icepack.snapshot-expiry.max-count": "many"}, "icepack.snapshot-expiry.max-count"),
    ],
)
def test_invalid_property_is_rejected_naming_the_key(props: dict[str, Any], named: str) -> None:
    with pytest.raises(PolicyError) as exc:
        resolve([], "db", "t", props)
    assert named in str(exc.value)


def test_spark_sql_properties_are_not_policy_properties() -> None:
    resolve([], "db", "t", {"icepack.spark.sql.shuffle.partitions": "8"})


def test_orphan_removal_below_72h_needs_explicit_consent() -> None:
    with pytest.raises(PolicyError, match="below the 72 h safety floor"):
        parse_config(ORPHAN_FILE_REMOVAL, {"older_than_hours": 1})
    ok = parse_config(ORPHAN_FILE_REMOVAL, {"older_than_hours": 1, "allow_unsafe_older_than": True})
    assert isinstance(ok, OrphanFileRemovalConfig) and ok.older_than_hours == 1
    with pytest.raises(PolicyError, match="72 h"):
        resolve(
            [att(ORPHAN_FILE_REMOVAL, "catalog")],
            "db",
            "t",
            {"icepack.orphan-removal.older-than-hours": "24"},
        )


def test_unknown_config_key_and_type_are_named() -> None:
    with pytest.raises(PolicyError, match="retain_lats"):
        parse_config(SNAPSHOT_EXPIRY, {"retain_lats": 1})
    with pytest.raises(PolicyError, match=r"unknown policy type 'system\.vacuum'"):
        parse_config("system.vacuum", {})
