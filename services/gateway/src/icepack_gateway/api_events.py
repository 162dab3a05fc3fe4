"""The event outbox over HTTP: ``/events``, newest first, filterable by topic and table."""

from __future__ import annotations

from typing import Any

import asyncpg
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from icepack_core.db.queries import load_query
from icepack_gateway.api_jobs import table_id_filter
from icepack_gateway.jsonutil import ApiResponse
from icepack_gateway.params import TOPIC, decode_cursor, encode_cursor, limit, only, opt_pattern
from icepack_gateway.state import gateway


def event_json(row: asyncpg.Record) -> dict[str, Any]:
    event = {k: row[k] for k in ("id", "topic", "payload", "traceparent", "created_at")}
    event["table"] = None if row["table_id"] is None else {
        "id": row["table_id"], "catalog": row["catalog"], "namespace": row["namespace"],
        "name": row["table_name"]}
    return event


async def list_events(request: Request) -> Response:
    q = request.query_params
    only(q, {"limit", "cursor", "topic", "table", "table_id"})
    topic = opt_pattern(q, "topic", TOPIC, "a topic such as job.finished")
    size = limit(q)
    before = decode_cursor(q, "events", (int,))
    pool = gateway(request).pool
    table_id = await table_id_filter(pool, q)
    rows = await pool.fetch(load_query("event_page"), topic, table_id,
                            before[0] if before else None, size)
    next_cursor = encode_cursor("events", [rows[-1]["id"]]) if len(rows) == size else None
    return ApiResponse({"items": [event_json(r) for r in rows], "next_cursor": next_cursor})


routes = [Route("/events", list_events, methods=["GET"])]
