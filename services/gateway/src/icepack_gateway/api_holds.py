"""``POST /tables/{catalog}/{namespace}/{table}/hold/release``: an operator releases a table's
maintenance hold (``icepack_core.safety.holds.release_hold``; ``icepack hold release``
does the same).

A write, so ``BearerAuth`` has already checked the token; its name is recorded as who released.
The body is optional: ``{"reason": "..."}``. 404 unknown table, 409 ``TABLE_NOT_HELD``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from icepack_core.access.tokens import TokenInfo
from icepack_core.db.queries import load_query
from icepack_core.errors import TableNotHeld, UnknownTableId
from icepack_core.safety.holds import MAX_REASON, release_hold
from icepack_gateway.errors import Conflict, InvalidParameter, TableNotFound
from icepack_gateway.jsonutil import ApiResponse
from icepack_gateway.params import json_body, only
from icepack_gateway.state import find_table, gateway, table_json, table_ref


class HoldReleaseIn(BaseModel):
    """The optional body of a hold release."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=MAX_REASON,
                               description="why the hold can go (kept in the "
                                           "table.hold_released event)")


def released_by(request: Request) -> str:
    token = request.state.token if hasattr(request.state, "token") else None
    return f"token:{token.name}" if isinstance(token, TokenInfo) else "token:unknown"


async def release(request: Request) -> Response:
    only(request.query_params, set())
    body: Any = await json_body(request) if await request.body() else {}
    spec = HoldReleaseIn.model_validate(body)
    pool = gateway(request).pool
    catalog, namespace, name = table_ref(request)
    table = await find_table(pool, catalog, namespace, name)
    try:
        done = await release_hold(pool, table["id"], released_by=released_by(request),
                                  reason=spec.reason)
    except ValueError as exc:
        raise InvalidParameter("reason", str(exc).removeprefix("reason ")) from None
    except TableNotHeld as exc:
        raise Conflict(exc.code, str(exc)) from None
    except UnknownTableId:  # deleted between the look-up and the lock
        raise TableNotFound(catalog, namespace, name) from None
    after = await pool.fetchrow(load_query("table_find"), catalog, namespace, name)
    return ApiResponse({"table": table_json(after) if after is not None else None,
                        "released": done.to_json()})


routes = [Route("/tables/{catalog}/{namespace}/{table}/hold/release", release,
                methods=["POST"])]
