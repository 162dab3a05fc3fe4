"""The event outbox over HTTP: ``/events``, newest first, filterable by topic and table."""

from __future__ import annotations

from starlette.responses import Response

from icepack_core.db.queries import load_query
from icepack_gateway import models
from icepack_gateway.api_jobs import table_id_filter, table_key
from icepack_gateway.endpoint import AnyEndpoint, Call, Endpoint, NoBody, NoParams
from icepack_gateway.inputs import EventsQuery
from icepack_gateway.jsonutil import reply
from icepack_gateway.models import error, ok
from icepack_gateway.params import decode_cursor, encode_cursor
from icepack_gateway.state import gateway


async def list_events(call: Call[NoParams, EventsQuery, NoBody]) -> Response:
    q = call.query
    size = q.limit
    before = decode_cursor(q.cursor, "events", (int,))
    pool = gateway(call.request).pool
    table_id = await table_id_filter(pool, q)
    rows = await pool.fetch(
        load_query("event_page"), q.topic, table_id, before[0] if before else None, size
    )
    next_cursor = encode_cursor("events", [rows[-1]["id"]]) if len(rows) == size else None
    items = [models.Event.of_row(r, table=table_key(r)) for r in rows]
    return reply(models.EventPage(items=items, next_cursor=next_cursor))


endpoints: list[AnyEndpoint] = [
    Endpoint(
        "GET",
        "/events",
        list_events,
        summary="Outbox events newest first",
        query=EventsQuery,
        responses={200: ok(models.EventPage), 404: error("table= names an unknown table")},
    ),
]
