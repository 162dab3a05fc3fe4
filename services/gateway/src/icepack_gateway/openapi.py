"""``/openapi.json``: the OpenAPI 3.1 document, generated from the route table (``endpoint``).

Only what is the gateway's own is written here: the title, the error reply every route may
give, and the probes, which the runner's app serves (documented so clients see them).
"""

from __future__ import annotations

from starlette.responses import Response

from icepack_gateway import models
from icepack_gateway.endpoint import (
    AnyEndpoint,
    AnyParams,
    Call,
    Doc,
    Endpoint,
    NoBody,
    NoParams,
    document,
)
from icepack_gateway.jsonutil import ApiResponse
from icepack_gateway.models import error, ok

INFO = {
    "title": "Icepack gateway",
    "version": "0.1.0",
    "description": "Read APIs over Icepack's Postgres state, and operator writes "
    "(bearer token from `icepack token create NAME`).",
}


def build(endpoints: list[AnyEndpoint]) -> Doc:
    return document(endpoints, error=error("error"), info=INFO)


async def serve(call: Call[NoParams, AnyParams, NoBody]) -> Response:
    built: Doc = call.request.app.state.openapi
    return ApiResponse(built)


endpoints: list[AnyEndpoint] = [
    Endpoint(
        "GET",
        "/openapi.json",
        serve,
        summary="This document",
        query=AnyParams,
        responses={200: ok(models.OpenApiDocument)},
    ),
    Endpoint(
        "GET",
        "/healthz",
        None,
        summary="Liveness",
        query=AnyParams,
        responses={200: ok(models.Alive)},
    ),
    Endpoint(
        "GET",
        "/readyz",
        None,
        summary="Readiness: database reachable",
        query=AnyParams,
        responses={200: ok(models.Ready), 503: ok(models.NotReady, "not ready, and why")},
    ),
]
