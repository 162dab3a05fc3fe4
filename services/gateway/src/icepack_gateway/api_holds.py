"""``POST /tables/{catalog}/{namespace}/{table}/hold/release``: an operator releases a table's
maintenance hold (``icepack_core.safety.holds.release_hold``; ``icepack hold release``
does the same).

A write, so ``BearerAuth`` has already checked the token; its name is recorded as who released.
The body is optional: ``{"reason": "..."}``. 404 unknown table, 409 ``TABLE_NOT_HELD``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from icepack_core.access.tokens import TokenInfo
from icepack_core.db.queries import load_query
from icepack_core.db.tables import TableRow
from icepack_core.errors import TableNotHeld, UnknownTableId
from icepack_core.safety.holds import MAX_REASON, release_hold
from icepack_gateway import models
from icepack_gateway.endpoint import AnyEndpoint, Call, Endpoint, NoParams
from icepack_gateway.errors import Conflict, InvalidParameter, TableNotFound
from icepack_gateway.inputs import TablePath
from icepack_gateway.jsonutil import reply
from icepack_gateway.models import error, ok
from icepack_gateway.state import find_table, gateway, stored_id


class HoldReleaseIn(BaseModel):
    """The optional body of a hold release."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(
        default=None,
        max_length=MAX_REASON,
        description="why the hold can go (kept in the table.hold_released event)",
    )


def released_by(request: Request) -> str:
    token = request.state.token if hasattr(request.state, "token") else None
    return f"token:{token.name}" if isinstance(token, TokenInfo) else "token:unknown"


async def release(call: Call[TablePath, NoParams, HoldReleaseIn]) -> Response:
    pool = gateway(call.request).pool
    catalog, namespace, name = call.path.catalog, call.path.namespace, call.path.table
    table = await find_table(pool, catalog, namespace, name)
    try:
        done = await release_hold(
            pool, stored_id(table), released_by=released_by(call.request), reason=call.body.reason
        )
    except ValueError as exc:
        raise InvalidParameter("reason", str(exc).removeprefix("reason ")) from None
    except TableNotHeld as exc:
        raise Conflict(exc.code, str(exc)) from None
    except UnknownTableId:  # deleted between the look-up and the lock
        raise TableNotFound(catalog, namespace, name) from None
    after = await pool.fetchrow(load_query("table_find"), catalog, namespace, name)
    released = models.Released(
        table_id=done.table_id,
        table=done.table,
        previous_hold=done.previous_hold,
        released_by=done.released_by,
        reason=done.reason,
        released_at=done.released_at,
        event_id=done.event_id,
    )
    table_after = models.Table.of(TableRow.from_record(after)) if after is not None else None
    return reply(models.HoldReleased(table=table_after, released=released))


endpoints: list[AnyEndpoint] = [
    Endpoint(
        "POST",
        "/tables/{catalog}/{namespace}/{table}/hold/release",
        release,
        summary=(
            "Release the table's maintenance hold (who and why go to the table.hold_released event)"
        ),
        path_params=TablePath,
        body=HoldReleaseIn,
        responses={
            200: ok(models.HoldReleased),
            404: error("unknown table (TABLE_NOT_FOUND)"),
            409: error("the table is not on hold (TABLE_NOT_HELD)"),
        },
        body_required=False,
    ),
]
