"""The gateway's route table: one ``Endpoint`` per (method, path) builds both its Starlette route
and its OpenAPI operation, so the document cannot drift from what is served.

An endpoint names pydantic models for its path parameters, query parameters and JSON body, and
one ``Reply`` per status it answers. The route parses the request into those models before the
handler runs (``Call``): an unknown or malformed path/query parameter is ``InvalidParameter``
(422, the message names it; unknown ones first, as a typo is the likely mistake), a body that
does not fit its model is pydantic's ``ValidationError`` (422, ``detail`` lists each problem).
Handlers build their answer as its reply model (a ``ReplyModel``) and return it serialised
(``jsonutil.reply``); a reply model that refuses what a handler built it from is a server error
(500 ``INVALID_REPLY``, ``ReplyInvalid``), never a 422 blaming the request. ``document`` turns
the table into OpenAPI 3.1 with every model under ``#/components/schemas``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.json_schema import models_json_schema
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from icepack_gateway.auth import needs_token
from icepack_gateway.errors import InvalidParameter, ReplyInvalid
from icepack_gateway.jsonutil import ReplyModel
from icepack_gateway.params import json_body

REF = "#/components/schemas/{model}"
# An object of the OpenAPI document (a JSON Schema, an operation, a response): open JSON by
# nature, its shape is OpenAPI's and pydantic's, not Icepack's.
Doc = dict[str, Any]


class NoParams(BaseModel):
    """No path parameters, no query parameters (any given is refused), or no body."""

    model_config = ConfigDict(extra="forbid")


class NoBody(NoParams):
    """The endpoint reads no request body."""


class AnyParams(BaseModel):
    """No parameters, and any given are ignored (``/``, ``/metrics``, ``/openapi.json``: what
    scrapers and browsers send is not the gateway's business)."""

    model_config = ConfigDict(extra="ignore")


P = TypeVar("P", bound=BaseModel)
Q = TypeVar("Q", bound=BaseModel)
B = TypeVar("B", bound=BaseModel)


P_co = TypeVar("P_co", bound=BaseModel, covariant=True)
Q_co = TypeVar("Q_co", bound=BaseModel, covariant=True)
B_co = TypeVar("B_co", bound=BaseModel, covariant=True)


@dataclass(frozen=True)
class Call(Generic[P_co, Q_co, B_co]):
    """One parsed request: what a handler gets."""

    request: Request
    path: P_co
    query: Q_co
    body: B_co


@dataclass(frozen=True)
class Reply:
    """One documented answer: a JSON body of ``model``, another media type, or no body."""

    description: str
    model: type[BaseModel] | None = None
    media_type: str | None = "application/json"


@dataclass(frozen=True)
class Endpoint(Generic[P, Q, B]):
    """A route and its contract: ``Endpoint(method, path, handler, summary=..., responses=...)``,
    every option by keyword (as Starlette's ``Route(path, endpoint, *, methods=...)``). Parameter
    and body models default to none (``NoParams``, ``NoBody``). ``handler`` None: served by
    another app (the runner's probes), documented here."""

    method: str
    path: str
    handler: Callable[[Call[P, Q, B]], Awaitable[Response]] | None
    _: KW_ONLY
    summary: str
    responses: Mapping[int, Reply]
    # The defaults are the "none" models; a handler typed for others names them (mypy cannot
    # tie a default to the type variable, hence the ignores).
    path_params: type[P] = NoParams  # type: ignore[assignment]
    query: type[Q] = NoParams  # type: ignore[assignment]
    body: type[B] = NoBody  # type: ignore[assignment]
    body_required: bool = True
    name: str | None = None

    def route(self) -> Route:
        handler = self.handler
        assert handler is not None, f"{self.method} {self.path} is served elsewhere"

        async def endpoint(request: Request) -> Response:
            query = parse_params(self.query, request.query_params)
            path = parse_params(self.path_params, request.path_params)
            body = await self.parse_body(request)
            try:
                return await handler(Call(request, path, query, body))
            except ValidationError as exc:
                if exc.title in ReplyModel.names:
                    raise ReplyInvalid.of(exc) from exc
                raise

        return Route(self.path, endpoint, methods=[self.method], name=self.operation_id)

    @property
    def operation_id(self) -> str:
        """``name``, else the handler's name (unique in the app; the route's name too)."""
        if self.name is not None:
            return self.name
        return self.handler.__name__ if self.handler is not None else self.path.strip("/")

    async def parse_body(self, request: Request) -> B:
        if self.body is NoBody:
            return self.body()
        raw: Any = await json_body(request) if self.body_required or await request.body() else {}
        return self.body.model_validate(raw)


AnyEndpoint = Endpoint[Any, Any, Any]


def parse_params(model: type[P], values: Mapping[str, Any]) -> P:
    """``values`` (path or query strings) as ``model``; InvalidParameter names the first bad one,
    an unknown one before any other."""
    try:
        return model.model_validate(dict(values))
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden")
        if unknown:
            known = ", ".join(sorted(model.model_fields)) or "none"
            raise InvalidParameter(
                unknown[0], f"is not a parameter of this endpoint (known: {known})"
            ) from None
        first = errors[0]
        name = str(first["loc"][0]) if first["loc"] else "parameters"
        raise InvalidParameter(name, first["msg"].removeprefix("Value error, ")) from None


def routes(endpoints: Iterable[AnyEndpoint]) -> list[Route]:
    return [e.route() for e in endpoints if e.handler is not None]


# -- the OpenAPI document ---------------------------------------------------------------------


def _models(endpoints: Iterable[AnyEndpoint]) -> list[type[BaseModel]]:
    seen: dict[type[BaseModel], None] = {}
    for e in endpoints:
        for model in (e.path_params, e.query, e.body, *(r.model for r in e.responses.values())):
            if model is not None and model not in (NoParams, NoBody, AnyParams):
                seen[model] = None
    return list(seen)


def _parameter_schema(schema: Doc) -> Doc:
    """A field's schema as a parameter's: an absent parameter is how it says "none", so the
    ``null`` branch of an optional field goes."""
    branches = schema.get("anyOf")
    if branches is not None:
        kept = [b for b in branches if b != {"type": "null"}]
        if len(kept) == 1:
            rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
            return {**kept[0], **rest}
    return {k: v for k, v in schema.items() if k != "default" or v is not None}


def _parameters(schema: Doc, where: str) -> list[Doc]:
    required = set(schema.get("required", ()))
    out = []
    for name, prop in schema.get("properties", {}).items():
        param: Doc = {
            "name": name,
            "in": where,
            "required": where == "path" or name in required,
            "schema": _parameter_schema(prop),
        }
        if "description" in prop:
            param["description"] = prop["description"]
        out.append(param)
    return out


def _content(reply: Reply) -> Doc:
    out: Doc = {"description": reply.description}
    if reply.model is not None:
        out["content"] = {
            reply.media_type: {"schema": {"$ref": REF.format(model=reply.model.__name__)}}
        }
    elif reply.media_type is not None:
        out["content"] = {reply.media_type: {"schema": {"type": "string"}}}
    return out


def _operation(e: AnyEndpoint, schemas: Doc, error: Reply) -> Doc:
    responses = {str(status): _content(reply) for status, reply in sorted(e.responses.items())}
    defaults = {"503": "the Icepack database did not answer (DATABASE_UNAVAILABLE)"}
    if (e.query, e.path_params, e.body) != (AnyParams, NoParams, NoBody):
        defaults["422"] = "a parameter or the body is invalid (INVALID_PARAMETER, naming it)"
    if "cursor" in e.query.model_fields:
        defaults["400"] = "the cursor is not one this listing returned (INVALID_CURSOR)"
    if e.body is not NoBody:
        defaults["413"] = "the body is over ICEPACK_GATEWAY_MAX_BODY_BYTES (BODY_TOO_LARGE)"
    if needs_token(e.method, e.path, read_auth=True):
        defaults["401"] = "no token, or one that matches none (AUTH_REQUIRED, INVALID_TOKEN)" + (
            "" if e.method != "GET" else "; reads only with ICEPACK_GATEWAY_READ_AUTH=true"
        )
        defaults["403"] = "the token was revoked (TOKEN_REVOKED)"
    for status, text in defaults.items():
        responses.setdefault(status, _content(Reply(text, error.model)))
    operation: Doc = {
        "summary": e.summary,
        "operationId": e.operation_id,
        "parameters": [
            *_parameters(schemas.get(e.path_params.__name__, {}), "path"),
            *_parameters(schemas.get(e.query.__name__, {}), "query"),
        ],
        "responses": dict(sorted(responses.items())),
    }
    if e.body is not NoBody:
        operation["requestBody"] = {
            "required": e.body_required,
            "content": {
                "application/json": {"schema": {"$ref": REF.format(model=e.body.__name__)}}
            },
        }
    if needs_token(e.method, e.path, read_auth=False):
        operation["security"] = [{"bearer": []}]
    return operation


def document(endpoints: Iterable[AnyEndpoint], *, error: Reply, info: Mapping[str, Any]) -> Doc:
    """The OpenAPI 3.1 document of ``endpoints``; ``error`` is the reply every route may give
    besides its own (422, 503, 400 with a cursor, 413 with a body, 401/403 with a token)."""
    endpoints = list(endpoints)
    models = _models(endpoints)
    if error.model is not None and error.model not in models:
        models.append(error.model)
    _, top = models_json_schema([(m, "validation") for m in models], ref_template=REF)
    schemas: Doc = top.get("$defs", {})
    params = {m.__name__ for e in endpoints for m in (e.path_params, e.query)}
    paths: dict[str, Doc] = {}
    for e in endpoints:
        paths.setdefault(e.path, {})[e.method.lower()] = _operation(e, schemas, error)
    # Parameter models are spread into each operation's parameters, not referenced.
    components = {k: v for k, v in sorted(schemas.items()) if k not in params}
    return {
        "openapi": "3.1.0",
        "info": dict(info),
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
