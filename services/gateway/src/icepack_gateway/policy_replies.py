"""What the gateway answers about policies (``/policies``: stored attachments, Polaris' kept
policies, effective policies and simulations), as pydantic models; the same contract as
``models`` (every model forbids extra keys, checked by the conformance test).
"""

from __future__ import annotations

from pydantic import Field

from icepack_core.policy import (
    DataCompactionConfig,
    MetadataCompactionConfig,
    OrphanFileRemovalConfig,
    SnapshotExpiryConfig,
    TableStatisticsConfig,
)
from icepack_core.types import (
    Action,
    JSONObject,
    PolicyType,
)
from icepack_gateway.models import (
    Model,
    RecommendedAction,
    Scope,
    SkippedAction,
    Table,
    Timestamp,
)


class Policy(Model):
    id: int
    policy_type: PolicyType
    scope: Scope
    catalog: str
    namespace: str | None
    table_name: str | None
    enabled: bool
    config: JSONObject = Field(description="only the keys that were set")
    created_at: Timestamp
    updated_at: Timestamp


class PolicyList(Model):
    items: list[Policy]


class PolarisPolicy(Model):
    """A policy read from Polaris, as Icepack mapped it (``icepack_core.polaris.mapping``)."""

    catalog: str
    scope: Scope
    namespace: str = Field(description="'' for the catalog")
    table_name: str = Field(description="'' unless the scope is table")
    policy_type: str
    name: str
    version: int
    enabled: bool
    config: JSONObject = Field(description="Icepack's fields, mapped from Polaris' keys")
    unknown: JSONObject = Field(description="keys Icepack does not use, kept and shown")
    invalid: str | None = Field(description="why Icepack cannot use it (passed over)")
    fetched_at: Timestamp


class PolarisSource(Model):
    catalog: str
    is_polaris: bool
    last_pass_at: Timestamp | None
    last_success_at: Timestamp | None
    last_error: str | None = Field(description="the last failed refresh; policies kept meanwhile")
    last_error_at: Timestamp | None
    last_requests: int = Field(description="policy requests of the last pass")


class PolarisPolicyList(Model):
    sources: list[PolarisSource] = Field(description="REST catalogs checked for Polaris")
    items: list[PolarisPolicy]
    truncated: bool = Field(description="more policies are kept than the listing shows")


class PolicyStored(Model):
    policy: Policy
    created: bool


class PolicyConfigs(Model):
    """Each type's effective config; null when the type is disabled for the table."""

    data_compaction: DataCompactionConfig | None = Field(alias="system.data-compaction")
    metadata_compaction: MetadataCompactionConfig | None = Field(alias="system.metadata-compaction")
    snapshot_expiry: SnapshotExpiryConfig | None = Field(alias="system.snapshot-expiry")
    orphan_file_removal: OrphanFileRemovalConfig | None = Field(alias="system.orphan-file-removal")
    table_statistics: TableStatisticsConfig | None = Field(
        default=None, alias="icepack.table-statistics"
    )


class EffectivePolicy(Model):
    maintenance_enabled: bool
    cadence_hours: float
    sources: dict[PolicyType, str] = Field(
        description="where each came from: default, catalog, namespace NS, table, ..."
    )
    policies: PolicyConfigs


class Proposal(Model):
    """What the recommender would propose (``Recommendation.to_json``)."""

    actions: list[RecommendedAction]
    skipped: list[SkippedAction]
    policy_sources: dict[str, str] = Field(
        default_factory=dict, description="per policy type, where its settings came from"
    )


class Simulation(Model):
    table: Table
    effective_policy: EffectivePolicy
    status_snapshot_id: int | None
    recommendation: Proposal | None = Field(description="null until the table is inspected")


class TableChange(Model):
    catalog: str
    namespace: str
    table: str
    current_actions: list[Action]
    proposed_actions: list[Action]
    estimated: dict[str, int]
    reasons: dict[str, str]


class SkippedTable(Model):
    table: str = Field(description="catalog.namespace.table")
    reason: str = Field(description="why its stored status could not be evaluated")


class BudgetNeedFigures(Model):
    rewrite_bytes_per_hour: int = Field(
        description="sum over tables with work of bytes_to_rewrite / max(cadence hours, 1): "
        "the hourly rewrite budget that keeps up"
    )
    backlog_bytes: int = Field(description="sum of bytes_to_rewrite: the first pass, all due")
    jobs_per_hour: float = Field(description="sum of 1 / max(cadence hours, 1)")
    peak_concurrent_jobs: int = Field(
        description="tables with work: one job per table at a time, all due at once"
    )


class BudgetNeed(BudgetNeedFigures):
    by_namespace: dict[str, BudgetNeedFigures]


class FleetSimulation(Model):
    tables_evaluated: int
    tables_changed: int
    totals: dict[str, int]
    changes: list[TableChange]
    skipped: list[SkippedTable]
    budget_needed: BudgetNeed = Field(
        description="the maintenance budget the proposed policies need (catalog, namespaces)"
    )
