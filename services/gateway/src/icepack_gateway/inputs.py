"""What requests carry, as pydantic models: path parameters and query parameters of each route.

Each model forbids extra keys, so an unknown query parameter (``?heatlh=``) is a 422 naming it
instead of being silently ignored. Identifiers only ever reach SQL as bind parameters; their
limits exist so a bad value is a clear 422 instead of a driver error (Postgres text cannot hold
NUL, bigint has a top).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from icepack_core.types import Health, JobState, PolicyType

MAX_IDENT = 512
MAX_BIGINT = 2**63 - 1
DEFAULT_LIMIT = 50
MAX_LIMIT = 500


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


Ident = Annotated[str, Field(min_length=1, max_length=MAX_IDENT), AfterValidator(_no_nul)]
Id = Annotated[int, Field(ge=1, le=MAX_BIGINT)]
Scope = Literal["catalog", "namespace", "table"]


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- path parameters --------------------------------------------------------------------------


class TablePath(Params):
    catalog: Ident
    namespace: Ident
    table: Ident


class JobPath(Params):
    id: Id


class PolicyPath(Params):
    """``/policies/{scope}/.../{policy_type}``: the target of one policy."""

    policy_type: PolicyType
    scope: ClassVar[Scope]

    def target(self) -> tuple[str, str | None, str | None]:
        """(catalog, namespace, table) of the target; None where the scope has none."""
        raise NotImplementedError


class CatalogPolicyPath(PolicyPath):
    scope: ClassVar[Scope] = "catalog"
    catalog: Ident

    def target(self) -> tuple[str, str | None, str | None]:
        return self.catalog, None, None


class NamespacePolicyPath(PolicyPath):
    scope: ClassVar[Scope] = "namespace"
    catalog: Ident
    namespace: Ident

    def target(self) -> tuple[str, str | None, str | None]:
        return self.catalog, self.namespace, None


class TablePolicyPath(PolicyPath):
    scope: ClassVar[Scope] = "table"
    catalog: Ident
    namespace: Ident
    table: Ident

    def target(self) -> tuple[str, str | None, str | None]:
        return self.catalog, self.namespace, self.table


SCOPE_PATHS: dict[Scope, type[PolicyPath]] = {
    "catalog": CatalogPolicyPath,
    "namespace": NamespacePolicyPath,
    "table": TablePolicyPath,
}


# -- query parameters -------------------------------------------------------------------------


class Page(Params):
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)
    cursor: str | None = Field(None, description="opaque; the next_cursor of the previous page")


class StatusHistoryQuery(Page):
    limit: int = Field(200, ge=1, le=MAX_LIMIT)


class HistoryQuery(Page):
    limit: int = Field(20, ge=1, le=MAX_LIMIT)


class DeletionsQuery(Page):
    """A page of a job's deletion ledger, in the order the rows were recorded."""

    limit: int = Field(200, ge=1, le=MAX_LIMIT)


class Sort(StrEnum):
    SCORE = "score"  # worst first (lowest score); never-assessed tables last
    SCORE_DESC = "-score"  # best first; never-assessed tables last
    NAME = "name"  # catalog, namespace, name


class TablesQuery(Page):
    catalog: Ident | None = None
    namespace: Ident | None = None
    health: Health | None = None
    # A pattern, not the IssueCode enum: a well-formed code no table has is an empty page.
    issue: str | None = Field(
        None, pattern=r"^[A-Z][A-Z0-9_]{0,63}$", description="an issue code such as SMALL_FILES"
    )
    q: Ident | None = Field(None, description="substring of catalog.namespace.table")
    sort: Sort = Field(Sort.SCORE, description="score: worst first; -score: best first")


class TableFilter(Page):
    table: Ident | None = Field(None, description="CATALOG.NAMESPACE.TABLE")
    table_id: Id | None = None


class JobsQuery(TableFilter):
    state: JobState | None = None


class EventsQuery(TableFilter):
    # A pattern, not the Topic enum: the UI's filter box sends any well-formed topic.
    topic: str | None = Field(
        None, pattern=r"^[a-z]+\.[a-z_]+$", description="a topic such as job.finished"
    )


class PolarisPoliciesQuery(Params):
    catalog: Ident | None = None


class PoliciesQuery(Params):
    policy_type: PolicyType | None = None
    scope: Scope | None = None
    catalog: Ident | None = None
    namespace: Ident | None = None
    table: Ident | None = None
