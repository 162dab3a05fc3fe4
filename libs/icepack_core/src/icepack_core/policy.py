"""Maintenance policies: Polaris-compatible types, inheritance, and table-property overrides.

A policy has a type (``system.data-compaction``, ``system.metadata-compaction``,
``system.snapshot-expiry``, ``system.orphan-file-removal``, and Icepack's own
``icepack.table-statistics``), ``enable`` and a typed ``config``; it is attached to a catalog, a
namespace or a table. Attachments come from Icepack's own store (``origin="icepack"``) or from a
Polaris catalog's policies (``origin="polaris"``, ``icepack_core.polaris``). The precedence, per
type:

1. the most specific attachment wins (table > deepest namespace > catalog), as in Polaris;
2. at the same scope, Icepack's own attachment wins over Polaris' (an operator's explicit
   override in the tool that acts);
3. an invalid Polaris policy (``PolicyAttachment.invalid``: a value Icepack cannot accept) is
   passed over, and the next attachment in this order applies, else the defaults (which keep
   every safety floor);
4. table properties ``icepack.*`` override last.

Invalid values are rejected with a message naming the key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from icepack_core.errors import PolicyError
from icepack_core.types import MAX_HOURS, MIN_CADENCE_HOURS, PolicyType

POLICY_TYPES = tuple(PolicyType)

# An absolute location: an optional scheme, then a path from the root or an authority.
_ABSOLUTE_LOCATION = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.\-]*:)?/")
# Orphan removal deletes files: anything younger than this may belong to a writer still in flight.
ORPHAN_SAFE_HOURS = 72.0
MAX_ZORDER_COLUMNS = 16
# A column name as a policy may give it: printable, no control or bidi characters (the SQL
# quoting refuses those anyway); whether the table has it is checked against its schema.
_COLUMN_NAME = re.compile(r"^[^\x00-\x1f\x7f\u200e\u200f\u202a-\u202e\u2066-\u2069]{1,255}$")


def zorder_problem(strategy: str, columns: Sequence[str]) -> str | None:
    """What is wrong with a strategy's z-order key, or None (its shape only: whether the table
    has the columns is checked against its schema, ``inspection.clustering.key_fields``)."""
    if strategy == "zorder" and not columns:
        return "strategy zorder needs zorder_columns (at least one column name)"
    if strategy != "zorder" and columns:
        return f"zorder_columns is only used with strategy zorder, not {strategy!r}"
    seen: set[str] = set()
    for index, name in enumerate(columns):
        if not _COLUMN_NAME.match(name):
            return (
                f"zorder_columns[{index}]: {name!r} is not a column name (1-255 characters, no "
                "control or bidi characters)"
            )
        if name in seen:
            return f"zorder_columns[{index}]: {name!r} is given twice"
        seen.add(name)
    return None


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataCompactionConfig(_Config):
    """Bin-pack small files and rewrite delete files (Iceberg ``rewrite_data_files``)."""

    # None: the table's write.target-file-size-bytes (Iceberg default 512 MiB).
    target_file_size_bytes: int | None = Field(None, gt=0)
    # Iceberg's binpack needs >= 5 input files per group before a rewrite pays off.
    min_input_files: int = Field(5, ge=2)
    # binpack: small files into target-sized ones. sort: each rewritten partition sorted by
    # the table's sort order (a table without one falls back to binpack, the recommendation
    # says why). zorder: sorted by the z-order of ``zorder_columns``. sort and zorder are also
    # proposed for well-sized files whose key ranges overlap (inspection.clustering).
    strategy: Literal["binpack", "sort", "zorder"] = "binpack"
    # The z-order key (strategy zorder only): column names, each checked against the table's
    # schema when the table is inspected and again before the rewrite runs.
    zorder_columns: list[str] = Field(default_factory=list, max_length=MAX_ZORDER_COLUMNS)
    # sort, zorder: a partition is rewritten when its files' mean overlap depth on the key is
    # above this many times the depth the rewrite would leave it (inspection.clustering:
    # 1 for a sort, k^(1-1/d) for a z-order of d columns into k files). At or below: clustered,
    # left alone (no churn).
    max_overlap_ratio: float = Field(2.0, ge=1.0, le=1_000_000)
    rewrite_delete_files: bool = True
    # A data file with at least this many delete files is rewritten with its deletes applied
    # (Iceberg's ``delete-file-threshold``).
    min_delete_files: int = Field(1, ge=1)
    # Apply merge-on-read deletes by rewriting data once they reach the health rule's levels
    # (DELETE_FILE_BUILDUP): a share of deleted records, or a number of delete files.
    delete_ratio_threshold: float = Field(0.10, gt=0, le=1)
    max_delete_files: int = Field(100, ge=1)
    max_partitions_per_run: int = Field(100, ge=1, le=10_000)
    # A partition a writer added a file to within this long is still being written (open): it
    # is compacted only once it holds more than ``open_partition_max_small_files`` small files
    # (execution.scoping.metadata_scope). 0 treats every partition as closed.
    open_partition_quiet_minutes: float = Field(10.0, ge=0, le=7 * 24 * 60)
    open_partition_max_small_files: int = Field(100, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _zorder_key(self) -> DataCompactionConfig:
        problem = zorder_problem(self.strategy, self.zorder_columns)
        if problem is not None:
            raise ValueError(problem)
        return self


class MetadataCompactionConfig(_Config):
    """Rewrite manifests once a table has too many of them (``rewrite_manifests``)."""

    max_manifests: int = Field(100, ge=2)
    target_manifest_size_bytes: int = Field(8 * 1024 * 1024, gt=0)  # Iceberg's default 8 MiB


class SnapshotExpiryConfig(_Config):
    """Expire snapshots older than a max age, keeping the newest ``retain_last``."""

    max_snapshot_age_hours: float = Field(120.0, gt=0, le=MAX_HOURS)  # Iceberg's default: 5 days
    retain_last: int = Field(1, ge=1)
    # Count-based retention, off unless set: keep at most this many snapshots even when they
    # are younger than the max age (never those younger than ICEPACK_EXPIRY_MIN_AGE_HOURS).
    # For tables committed every few seconds, whose max age alone keeps too many.
    max_snapshots: int | None = Field(None, ge=1)
    # Roots outside the table's own location and write paths whose files its expiry may delete
    # (a table built with add_files over files it owns elsewhere). Only an operator-attached
    # policy grants them (no table property maps here); another known table's roots stay
    # refused whatever this says (``safety.confinement``).
    delete_outside_location: list[str] = Field(default_factory=list, max_length=100)

    @model_validator(mode="after")
    def _valid_roots(self) -> SnapshotExpiryConfig:
        # The shape only (``safety.locations`` reads them fully where they are used).
        for index, root in enumerate(self.delete_outside_location):
            if not _ABSOLUTE_LOCATION.match(root):
                raise ValueError(
                    f"delete_outside_location[{index}]: {root!r} is not an absolute location "
                    "(scheme://authority/path or /path)"
                )
        return self


class OrphanFileRemovalConfig(_Config):
    """Delete files no snapshot references (``remove_orphan_files``); off unless enabled."""

    older_than_hours: float = Field(ORPHAN_SAFE_HOURS, gt=0, le=MAX_HOURS)
    # Going below 72 h risks deleting files of in-flight writers; only an explicit opt-in.
    allow_unsafe_older_than: bool = False
    dry_run_first: bool = True
    # A dry run that lists more than this stops the job and holds the table with the list: a
    # wrong location or a writer's lost commit looks like a flood of orphans.
    max_orphan_files: int = Field(10_000, ge=1)
    max_orphan_fraction: float = Field(0.10, gt=0, le=1)  # of live files, from 100 files on
    # Orphans are moved to a quarantine prefix, not deleted; a purge job deletes them this many
    # days later (until then ``icepack restore JOB`` puts them back).
    quarantine_days: float = Field(7.0, gt=0, le=MAX_HOURS / 24)
    # Polaris' ``locations``: where to look for orphans instead of the table's location. Every
    # entry must lie within the table's own location, or the removal is refused at the choke
    # point (``safety.admission``); the scan itself always covers the table's location.
    locations: list[str] = Field(default_factory=list, max_length=100)

    @model_validator(mode="after")
    def _safe_age(self) -> OrphanFileRemovalConfig:
        for index, root in enumerate(self.locations):
            if not _ABSOLUTE_LOCATION.match(root):
                raise ValueError(
                    f"locations[{index}]: {root!r} is not an absolute location "
                    "(scheme://authority/path or /path)"
                )
        if self.older_than_hours < ORPHAN_SAFE_HOURS and not self.allow_unsafe_older_than:
            raise ValueError(
                f"older_than_hours={self.older_than_hours} is below the {ORPHAN_SAFE_HOURS:g} h "
                "safety floor; set allow_unsafe_older_than=true to mean it"
            )
        return self


class TableStatisticsConfig(_Config):
    """Keep statistics current: Iceberg's ``compute_table_stats`` (Puffin NDV sketches, read
    by cost-based optimizers) and ``compute_partition_stats``. Off unless enabled: the table
    statistics read every row of their columns (a full scan), and only engines with a
    cost-based optimizer that reads them gain anything, which a fleet default cannot know.

    Statistics are *stale* once the table has moved ``stale_after_snapshots`` snapshots past
    the snapshot they describe, or rows were added amounting to ``stale_added_rows_share`` of
    the table's rows (``inspection.statistics.staleness``); *missing* when no statistics
    describe the current snapshot or one of its ancestors. Either makes them due."""

    # The columns to sketch (top-level or dotted nested names); empty: every column Iceberg
    # supports (compute_table_stats' own default).
    columns: list[str] = Field(default_factory=list, max_length=1000)
    table_stats: bool = True
    partition_stats: bool = True
    # None: the snapshot count alone never makes them stale.
    stale_after_snapshots: int | None = Field(100, ge=1, le=1_000_000)
    stale_added_rows_share: float = Field(0.2, gt=0, le=1000)

    @model_validator(mode="after")
    def _valid(self) -> TableStatisticsConfig:
        for index, column in enumerate(self.columns):
            if not column or len(column) > 255 or any(ord(c) < 32 for c in column):
                raise ValueError(
                    f"columns[{index}]: {column!r} must be a column name of 1 to 255 "
                    "characters without control characters"
                )
        if len(set(self.columns)) != len(self.columns):
            raise ValueError("columns: a column is named twice")
        if not (self.table_stats or self.partition_stats):
            raise ValueError("table_stats and partition_stats are both false: disable the policy")
        return self


CONFIG_TYPES: dict[str, type[_Config]] = {
    PolicyType.DATA_COMPACTION: DataCompactionConfig,
    PolicyType.METADATA_COMPACTION: MetadataCompactionConfig,
    PolicyType.SNAPSHOT_EXPIRY: SnapshotExpiryConfig,
    PolicyType.ORPHAN_FILE_REMOVAL: OrphanFileRemovalConfig,
    PolicyType.TABLE_STATISTICS: TableStatisticsConfig,
}
DEFAULT_ENABLED = {
    PolicyType.DATA_COMPACTION: True,
    PolicyType.METADATA_COMPACTION: True,
    PolicyType.SNAPSHOT_EXPIRY: True,
    PolicyType.ORPHAN_FILE_REMOVAL: False,  # the one action that can destroy data
    PolicyType.TABLE_STATISTICS: False,  # a full scan per run: opt in (TableStatisticsConfig)
}


@dataclass(frozen=True, slots=True)
class PolicyAttachment:
    """One row of ``icepack.policies``, or one Polaris policy mapped onto it
    (``icepack_core.polaris.mapping``)."""

    policy_type: str
    scope: Literal["catalog", "namespace", "table"]
    catalog: str
    namespace: str | None
    table_name: str | None
    enabled: bool
    config: Mapping[str, Any]
    origin: Literal["icepack", "polaris"] = "icepack"
    # Polaris: the policy's name and version, what Icepack does not use (kept and shown), why
    # it cannot be used (then ``resolve`` passes over it), and when it was fetched.
    name: str | None = None
    version: int | None = None
    unknown: Mapping[str, Any] = field(default_factory=dict)
    invalid: str | None = None
    fetched_at: datetime | None = None
    stale: str | None = None  # the last refresh failed: why (the policy is the last known one)

    def label(self) -> str:
        """Where this attachment is, as ``sources`` shows it ("namespace a.b", "polaris table
        policy compact1 v0, fetched ...")."""
        where = self.scope if self.scope != "namespace" else f"namespace {self.namespace}"
        if self.origin == "icepack":
            return where
        text = f"polaris {where} policy {self.name} v{self.version}"
        if self.fetched_at is not None:
            text += f", fetched {self.fetched_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
        if self.unknown:
            text += f", not used: {', '.join(sorted(self.unknown))}"
        if self.stale:
            text += f", last known (refresh failing: {self.stale})"
        return text


def parse_config(policy_type: str, config: Mapping[str, Any]) -> _Config:
    """Validate a policy's config.

    Raises:
        PolicyError: unknown type, unknown key, or a bad value (the message names it).
    """
    model = CONFIG_TYPES.get(policy_type)
    if model is None:
        raise PolicyError(f"unknown policy type {policy_type!r}; one of {', '.join(POLICY_TYPES)}")
    try:
        return model.model_validate(dict(config))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'config'}: "
            f"{str(e['msg']).removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise PolicyError(f"{policy_type}: {problems}") from None


@dataclass(frozen=True)
class EffectivePolicy:
    """What applies to one table, with where each part came from (for "why" in the UI)."""

    maintenance_enabled: bool
    cadence_hours: float
    data_compaction: DataCompactionConfig | None  # None: disabled
    metadata_compaction: MetadataCompactionConfig | None
    snapshot_expiry: SnapshotExpiryConfig | None
    orphan_file_removal: OrphanFileRemovalConfig | None
    # policy type -> where it came from: "default", "catalog", "namespace a.b", "table", + props
    sources: Mapping[str, str]
    # The least time between two maintenance runs on the table (planning.due).
    min_interval_minutes: float = 5.0
    table_statistics: TableStatisticsConfig | None = None  # None: disabled (the default)


def _specificity(att: PolicyAttachment, namespace: str, table: str) -> int | None:
    """How specifically ``att`` targets the table (higher wins), or None if it does not."""
    if att.scope == "catalog":
        return 0
    ns = att.namespace or ""
    if att.scope == "namespace":
        if namespace == ns or namespace.startswith(ns + "."):
            return 1 + ns.count(".")  # a deeper namespace is more specific
        return None
    if att.namespace == namespace and att.table_name == table:
        return 10_000
    return None


def choose(
    attachments: Iterable[PolicyAttachment], namespace: str, table: str
) -> tuple[dict[str, PolicyAttachment], dict[str, list[PolicyAttachment]]]:
    """Per policy type, the attachment that applies to ``namespace.table`` (the module's
    precedence, steps 1-3), and the invalid ones that ranked above it (passed over)."""
    ranked: dict[str, list[tuple[tuple[int, int], PolicyAttachment]]] = {}
    for att in attachments:
        rank = _specificity(att, namespace, table)
        if rank is not None:
            origin_rank = 1 if att.origin == "icepack" else 0
            ranked.setdefault(att.policy_type, []).append(((rank, origin_rank), att))
    chosen: dict[str, PolicyAttachment] = {}
    passed_over: dict[str, list[PolicyAttachment]] = {}
    for policy_type, candidates in ranked.items():
        for _, att in sorted(candidates, key=lambda c: c[0], reverse=True):
            if att.invalid is None:
                chosen[policy_type] = att
                break
            passed_over.setdefault(policy_type, []).append(att)
    return chosen, passed_over


# icepack.* table properties and the policy field each overrides.
PROPERTY_OVERRIDES: dict[str, tuple[PolicyType, str]] = {
    "icepack.compaction.enabled": (PolicyType.DATA_COMPACTION, "enable"),
    "icepack.compaction.target-file-size-bytes": (
        PolicyType.DATA_COMPACTION,
        "target_file_size_bytes",
    ),
    "icepack.compaction.min-input-files": (PolicyType.DATA_COMPACTION, "min_input_files"),
    "icepack.manifests.enabled": (PolicyType.METADATA_COMPACTION, "enable"),
    "icepack.manifests.max-count": (PolicyType.METADATA_COMPACTION, "max_manifests"),
    "icepack.snapshot-expiry.enabled": (PolicyType.SNAPSHOT_EXPIRY, "enable"),
    "icepack.snapshot-expiry.max-age-hours": (PolicyType.SNAPSHOT_EXPIRY, "max_snapshot_age_hours"),
    "icepack.snapshot-expiry.retain-last": (PolicyType.SNAPSHOT_EXPIRY, "retain_last"),
    "icepack.snapshot-expiry.max-count": (PolicyType.SNAPSHOT_EXPIRY, "max_snapshots"),
    "icepack.orphan-removal.enabled": (PolicyType.ORPHAN_FILE_REMOVAL, "enable"),
    "icepack.orphan-removal.older-than-hours": (PolicyType.ORPHAN_FILE_REMOVAL, "older_than_hours"),
    "icepack.statistics.enabled": (PolicyType.TABLE_STATISTICS, "enable"),
    "icepack.statistics.stale-after-snapshots": (
        PolicyType.TABLE_STATISTICS,
        "stale_after_snapshots",
    ),
}
MAINTENANCE_ENABLED = "icepack.maintenance.enabled"
CADENCE_HOURS = "icepack.maintenance.cadence-hours"
MIN_INTERVAL_MINUTES = "icepack.maintenance.min-interval-minutes"


def _parse_bool(key: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise PolicyError(f"table property {key}={raw!r} must be true or false")


def _parse_number(key: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise PolicyError(f"table property {key}={raw!r} must be a number") from None
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        raise PolicyError(f"table property {key}={raw!r} must be a finite number >= 0")
    return value


def resolve(
    attachments: Iterable[PolicyAttachment],
    namespace: str,
    table: str,
    properties: Mapping[str, str] | None = None,
    default_cadence_hours: float = 24.0,
    default_min_interval_minutes: float = 5.0,
) -> EffectivePolicy:
    """The effective policy of ``namespace.table`` in its catalog.

    ``attachments`` are the catalog's policies (any scope); the most specific per type wins,
    then ``icepack.*`` properties override.

    Raises:
        PolicyError: a stored policy or a table property is invalid (the message names it).
    """
    properties = properties or {}
    layers = _attached(*choose(attachments, namespace, table))
    for key, value in properties.items():
        _override(layers, key, value)
    maintenance = _parse_bool(MAINTENANCE_ENABLED, properties.get(MAINTENANCE_ENABLED, "true"))
    cadence = _cadence_hours(properties, default_cadence_hours)
    min_interval = _min_interval_minutes(properties, default_min_interval_minutes)
    configs = layers.configs()
    return EffectivePolicy(
        maintenance_enabled=maintenance,
        cadence_hours=cadence,
        data_compaction=configs[PolicyType.DATA_COMPACTION],  # type: ignore[arg-type]
        metadata_compaction=configs[PolicyType.METADATA_COMPACTION],  # type: ignore[arg-type]
        snapshot_expiry=configs[PolicyType.SNAPSHOT_EXPIRY],  # type: ignore[arg-type]
        orphan_file_removal=configs[PolicyType.ORPHAN_FILE_REMOVAL],  # type: ignore[arg-type]
        sources=layers.sources,
        min_interval_minutes=min_interval,
        table_statistics=configs[PolicyType.TABLE_STATISTICS],  # type: ignore[arg-type]
    )


@dataclass
class _Layers:
    """Per policy type, while ``resolve`` works: the raw config, whether it is enabled and
    where its settings came from."""

    raw: dict[str, dict[str, Any]] = field(default_factory=dict)
    enabled: dict[str, bool] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def configs(self) -> dict[str, _Config | None]:
        """Each type's parsed config (None: disabled).

        Raises:
            PolicyError: a config is invalid, naming where its bad value came from.
        """
        configs: dict[str, _Config | None] = {}
        for policy_type in POLICY_TYPES:
            try:
                configs[policy_type] = (
                    parse_config(policy_type, self.raw[policy_type])
                    if self.enabled[policy_type]
                    else None
                )
            except PolicyError as exc:  # name where the bad value came from (a property?)
                raise PolicyError(f"{exc} (from {self.sources[policy_type]})") from None
        return configs


def _attached(
    chosen: Mapping[str, PolicyAttachment], passed_over: Mapping[str, list[PolicyAttachment]]
) -> _Layers:
    """The chosen attachment of each type, or its default, with the invalid ones passed over."""
    layers = _Layers()
    for policy_type in POLICY_TYPES:
        if policy_type in chosen:
            att = chosen[policy_type]
            layers.raw[policy_type] = dict(att.config)
            layers.enabled[policy_type] = att.enabled
            layers.sources[policy_type] = att.label()
        else:
            layers.raw[policy_type] = {}
            layers.enabled[policy_type] = DEFAULT_ENABLED[policy_type]
            layers.sources[policy_type] = "default"
        for bad in passed_over.get(policy_type, []):
            layers.sources[policy_type] += f" (passed over {bad.label()}: invalid: {bad.invalid})"
    return layers


def _override(layers: _Layers, key: str, value: str) -> None:
    """Apply one table property to ``layers`` (``PROPERTY_OVERRIDES``).

    Raises:
        PolicyError: an unknown ``icepack.*`` property, or a bad value.
    """
    if key not in PROPERTY_OVERRIDES:
        if (
            key.startswith("icepack.")
            and key not in (MAINTENANCE_ENABLED, CADENCE_HOURS, MIN_INTERVAL_MINUTES)
            and not key.startswith("icepack.spark.sql.")
        ):
            raise PolicyError(f"unknown table property {key!r}")
        return
    policy_type, name = PROPERTY_OVERRIDES[key]
    sources = layers.sources
    if name == "enable" and policy_type == PolicyType.ORPHAN_FILE_REMOVAL:
        # Whoever can write the table can set its properties: they may turn orphan
        # removal off, never on (only an operator-attached policy enables it).
        if not _parse_bool(key, value):
            layers.enabled[policy_type] = False
            sources[policy_type] = f"{sources[policy_type]} + property {key}"
        elif sources[policy_type] == "default":
            sources[policy_type] = (
                f"default (property {key}=true ignored: only an "
                "operator policy enables orphan removal)"
            )
        return
    if name == "enable":
        layers.enabled[policy_type] = _parse_bool(key, value)
    else:
        number = _parse_number(key, value)
        if (policy_type, name) == (PolicyType.ORPHAN_FILE_REMOVAL, "older_than_hours"):
            # A property may make orphan removal more careful, never less.
            floor = float(layers.raw[policy_type].get(name, ORPHAN_SAFE_HOURS))
            if number < floor:
                raise PolicyError(
                    f"table property {key}={value!r} is below the {floor:g} h of the "
                    "policy; a table property may only raise it"
                )
        layers.raw[policy_type][name] = int(number) if number.is_integer() else number
    sources[policy_type] = f"{sources[policy_type]} + property {key}"


def _cadence_hours(properties: Mapping[str, str], default: float) -> float:
    if CADENCE_HOURS not in properties:
        return default
    cadence = _parse_number(CADENCE_HOURS, properties[CADENCE_HOURS])
    if not MIN_CADENCE_HOURS <= cadence <= MAX_HOURS:
        raise PolicyError(
            f"table property {CADENCE_HOURS}={properties[CADENCE_HOURS]!r} must be between "
            f"{MIN_CADENCE_HOURS:g} and {MAX_HOURS} hours"
        )
    return cadence


def _min_interval_minutes(properties: Mapping[str, str], default: float) -> float:
    if MIN_INTERVAL_MINUTES not in properties:
        return default
    minutes = _parse_number(MIN_INTERVAL_MINUTES, properties[MIN_INTERVAL_MINUTES])
    if minutes > MAX_HOURS * 60:
        raise PolicyError(
            f"table property {MIN_INTERVAL_MINUTES}={properties[MIN_INTERVAL_MINUTES]!r} "
            f"must be at most {MAX_HOURS * 60} minutes"
        )
    return minutes
