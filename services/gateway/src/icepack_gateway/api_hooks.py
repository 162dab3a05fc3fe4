"""``POST /hooks/catalog-events``: catalogs push table changes as CloudEvents.

A REST catalog's event listener (Polaris, Lakekeeper, Gravitino, ...) posts one CloudEvent in
structured JSON mode (``application/cloudevents+json``, or ``application/json``) per change:

    {"specversion": "1.0", "id": "...", "source": "...", "type": "...",
     "data": {"catalog": "polaris", "namespace": ["sales", "eu"], "table": "orders",
              "metadata-location": "s3://.../00042-....metadata.json"}}

``data.namespace`` is a list of levels or one string (levels joined by ``.``);
``metadata-location`` (or ``metadata_location``) is optional. The hook records a hint
(``icepack_core.discovery.hints.record_hint``: duplicates coalesce into one waiting row) and
answers 202 at once; discovery then refreshes that one table, loading it alone even when
Icepack has never seen it (no listing). Authentication is a bearer token of its own,
``ICEPACK_GATEWAY_HOOK_TOKEN``; operator tokens are never accepted here, and without a hook
token configured the hook is disabled (403 ``HOOK_DISABLED``).
"""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator
from starlette.responses import Response

from icepack_core.discovery.hints import record_hint
from icepack_core.types import join_namespace, split_namespace
from icepack_gateway import models
from icepack_gateway.auth import bearer
from icepack_gateway.endpoint import AnyEndpoint, Call, Endpoint, NoParams
from icepack_gateway.errors import HookDisabled, HookTokenError, UnknownCatalog
from icepack_gateway.inputs import MAX_IDENT, Ident
from icepack_gateway.jsonutil import reply
from icepack_gateway.models import error, ok
from icepack_gateway.state import gateway

MAX_LEVELS = 16
Location = Annotated[str, Field(min_length=1, max_length=4096)]


class TableChange(BaseModel):
    """``data`` of a catalog event: which table changed, and optionally its new metadata."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    catalog: Ident
    namespace: list[Ident] | Ident = Field(description="levels, or levels joined by '.'")
    table: Ident
    metadata_location: Location | None = Field(
        default=None,
        validation_alias=AliasChoices("metadata-location", "metadata_location"),
        description="the new metadata file, when the catalog knows it",
    )

    @field_validator("namespace")
    @classmethod
    def _levels(cls, value: list[str] | str) -> list[str] | str:
        levels = value if isinstance(value, list) else list(split_namespace(value))
        if not 1 <= len(levels) <= MAX_LEVELS or not all(levels):
            raise ValueError(f"must have 1 to {MAX_LEVELS} non-empty levels")
        return value

    def levels(self) -> tuple[str, ...]:
        if isinstance(self.namespace, list):
            return tuple(self.namespace)
        return split_namespace(self.namespace)


class CloudEvent(BaseModel):
    """A CloudEvents 1.0 event in structured JSON mode; extension attributes are allowed."""

    model_config = ConfigDict(extra="allow")

    specversion: str = Field(pattern=r"^1\.0$", description="must be 1.0")
    id: Annotated[str, Field(min_length=1, max_length=MAX_IDENT)]
    source: Annotated[str, Field(min_length=1, max_length=MAX_IDENT)]
    type: Annotated[str, Field(min_length=1, max_length=MAX_IDENT)]
    data: TableChange


def check_hook_token(headers: Any, configured: str | None) -> None:
    """Raise unless ``headers`` carry the configured hook token (compared in constant time)."""
    if configured is None:
        raise HookDisabled("the catalog event hook is disabled: set ICEPACK_GATEWAY_HOOK_TOKEN")
    given = bearer(headers)
    if given is None or not hmac.compare_digest(given.encode(), configured.encode()):
        raise HookTokenError("missing or wrong hook token (Authorization: Bearer <hook token>)")


async def catalog_event(call: Call[NoParams, NoParams, CloudEvent]) -> Response:
    state = gateway(call.request)
    check_hook_token(call.request.headers, state.hook_token)
    change = call.body.data
    if change.catalog not in state.catalogs:
        raise UnknownCatalog(
            f"catalog {change.catalog!r} is not watched by this Icepack "
            f"(watched: {', '.join(sorted(state.catalogs)) or 'none'})"
        )
    levels = change.levels()
    async with state.pool.acquire() as conn, conn.transaction():
        created, received = await record_hint(
            conn, change.catalog, levels, change.table, change.metadata_location
        )
    table = models.HookTable(
        catalog=change.catalog, namespace=join_namespace(levels), name=change.table
    )
    return reply(
        models.HookAccepted(accepted=True, coalesced=not created, received=received, table=table),
        status_code=202,
    )


endpoints: list[AnyEndpoint] = [
    Endpoint(
        "POST",
        "/hooks/catalog-events",
        catalog_event,
        summary="A catalog reports a table change (CloudEvents, structured JSON); discovery "
        "refreshes that one table",
        body=CloudEvent,
        responses={
            202: ok(models.HookAccepted, "recorded (coalesced with a waiting one)"),
            401: error("missing or wrong hook token (HOOK_TOKEN_INVALID)"),
            403: error("no hook token is configured (HOOK_DISABLED)"),
            404: error("a catalog Icepack does not watch (CATALOG_NOT_FOUND)"),
        },
    ),
]
