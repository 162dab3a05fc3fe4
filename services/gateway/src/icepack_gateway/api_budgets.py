"""Maintenance budgets over HTTP (``icepack_core.queue.budgets``; ``icepack budget`` does the
same): ``GET /budgets`` lists every budget with its use now, ``PUT /budgets/{catalog}`` sets one
(body names the optional namespace and the limits), ``DELETE /budgets/{catalog}`` clears one
(``?namespace=`` for a namespace's). Writes need a token. A bad limit is 422 naming it; clearing
a budget that is not set is 404 ``BUDGET_NOT_FOUND``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from icepack_core.errors import BudgetInvalid, BudgetNotFound
from icepack_core.queue.budgets import (
    MAX_BYTES_PER_HOUR,
    MAX_RUNNING,
    BudgetUse,
    clear_budget,
    list_budgets,
    set_budget,
)
from icepack_gateway.endpoint import AnyEndpoint, Call, Endpoint, NoBody, NoParams
from icepack_gateway.errors import InvalidParameter, NotFound
from icepack_gateway.inputs import Ident, Params
from icepack_gateway.jsonutil import reply
from icepack_gateway.models import Model, error, ok
from icepack_gateway.state import gateway


class Budget(Model):
    """One budget, its limits (null = unlimited) and its use now."""

    catalog: str
    namespace: str | None = Field(description="null: the budget covers the whole catalog")
    rewrite_bytes_per_hour: int | None = Field(
        description="bytes jobs in scope may be charged in any sliding hour"
    )
    max_running: int | None = Field(description="jobs in scope that may run at once")
    running: int = Field(description="jobs in scope running now")
    charged_bytes_last_hour: int = Field(
        description="rewrite_bytes of every claim in scope over the last hour (retries again)"
    )
    oversized_jobs: list[int] = Field(
        description="queued jobs in scope whose rewrite_bytes alone exceed the hourly budget: "
        "they can never be claimed until the budget grows or they are cancelled"
    )
    updated_at: str

    @classmethod
    def of(cls, use: BudgetUse) -> Budget:
        return cls(
            catalog=use.catalog,
            namespace=use.namespace,
            rewrite_bytes_per_hour=use.rewrite_bytes_per_hour,
            max_running=use.max_running,
            running=use.running,
            charged_bytes_last_hour=use.charged_bytes,
            oversized_jobs=use.oversized_jobs,
            updated_at=use.updated_at.isoformat(),
        )


class BudgetList(Model):
    items: list[Budget]


class CatalogPath(Params):
    catalog: Ident


class BudgetIn(BaseModel):
    """A budget to set; a limit left out (or null) is unlimited, but not both."""

    model_config = ConfigDict(extra="forbid")

    namespace: Ident | None = Field(default=None, description="omit for the whole catalog")
    # Ranges are checked by check_budget, whose 422 names the refused value.
    rewrite_bytes_per_hour: int | None = Field(
        default=None, description=f"1..{MAX_BYTES_PER_HOUR}; null or absent: unlimited"
    )
    max_running: int | None = Field(
        default=None, description=f"1..{MAX_RUNNING}; null or absent: unlimited"
    )


class NamespaceQuery(Params):
    namespace: Ident | None = Field(default=None, description="omit for the catalog's budget")


class BudgetCleared(Model):
    catalog: str
    namespace: str | None
    cleared: bool


async def get_budgets(call: Call[NoParams, NoParams, NoBody]) -> Response:
    budgets = await list_budgets(gateway(call.request).pool)
    return reply(BudgetList(items=[Budget.of(b) for b in budgets]))


async def put_budget(call: Call[CatalogPath, NoParams, BudgetIn]) -> Response:
    body = call.body
    try:
        use = await set_budget(
            gateway(call.request).pool,
            call.path.catalog,
            body.namespace,
            rewrite_bytes_per_hour=body.rewrite_bytes_per_hour,
            max_running=body.max_running,
        )
    except BudgetInvalid as exc:
        raise InvalidParameter(exc.field, str(exc).removeprefix(f"{exc.field}: ")) from None
    return reply(Budget.of(use))


async def delete_budget(call: Call[CatalogPath, NamespaceQuery, NoBody]) -> Response:
    catalog, namespace = call.path.catalog, call.query.namespace
    try:
        await clear_budget(gateway(call.request).pool, catalog, namespace)
    except BudgetNotFound as exc:
        raise NotFound(exc.code, str(exc)) from None
    return reply(BudgetCleared(catalog=catalog, namespace=namespace, cleared=True))


endpoints: list[AnyEndpoint] = [
    Endpoint(
        "GET",
        "/budgets",
        get_budgets,
        summary=(
            "Maintenance budgets with their use now (running jobs, bytes charged in the last hour)"
        ),
        responses={200: ok(BudgetList)},
    ),
    Endpoint(
        "PUT",
        "/budgets/{catalog}",
        put_budget,
        summary="Set the budget of a catalog, or of one of its namespaces (namespace in the body)",
        path_params=CatalogPath,
        body=BudgetIn,
        responses={200: ok(Budget)},
    ),
    Endpoint(
        "DELETE",
        "/budgets/{catalog}",
        delete_budget,
        summary="Clear the budget of a catalog, or of one of its namespaces (?namespace=)",
        path_params=CatalogPath,
        query=NamespaceQuery,
        responses={
            200: ok(BudgetCleared),
            404: error("no budget is set for that scope (BUDGET_NOT_FOUND)"),
        },
    ),
]
