"""Errors at the HTTP boundary: typed gateway errors, and handlers looked up by exception class.

Every error answer is JSON ``{"code", "message", "detail"}``: ``code`` is stable (scripts match
on it), ``message`` is for people, ``detail`` is optional structure (e.g. validation errors).
The status of an ``IcepackError`` comes from ``STATUS``, walked along the exception's MRO, so a
new error class only needs a line there.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import structlog
from pydantic import Field, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from icepack_core.errors import (
    IcepackError,
    InvalidIdentifier,
    JobNotFound,
    TokenError,
    TokenInvalid,
    TokenMissing,
    TokenNameTaken,
    TokenNotFound,
    TokenReadOnly,
    TokenRevoked,
)
from icepack_gateway.jsonutil import ReplyModel, reply

log = structlog.get_logger("icepack.gateway")


class TableNotFound(IcepackError):
    """No table has that catalog/namespace/name (or it left its catalog)."""

    code = "TABLE_NOT_FOUND"

    def __init__(self, catalog: str, namespace: str, name: str, *, dropped: bool = False) -> None:
        self.table = f"{catalog}.{namespace}.{name}"
        why = "was dropped from its catalog" if dropped else "is not known to Icepack"
        super().__init__(f"table {self.table!r} {why}")


class NotFound(IcepackError):
    """A table exists but has no row of the requested kind yet (status, health, ...)."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


class InvalidParameter(IcepackError):
    """A request parameter is malformed; the message names it."""

    code = "INVALID_PARAMETER"

    def __init__(self, parameter: str, problem: str) -> None:
        self.parameter = parameter
        super().__init__(f"parameter {parameter!r}: {problem}")


class InvalidCursor(InvalidParameter):
    """A ``?cursor=`` this API did not hand out (garbled, forged or from another listing)."""

    code = "INVALID_CURSOR"

    def __init__(self, problem: str) -> None:
        super().__init__("cursor", problem)


class BodyTooLarge(IcepackError):
    """The request body is over the gateway's limit (``ICEPACK_GATEWAY_MAX_BODY_BYTES``)."""

    code = "BODY_TOO_LARGE"

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(
            f"request body is larger than {limit} bytes (ICEPACK_GATEWAY_MAX_BODY_BYTES={limit})"
        )


class ReplyInvalid(IcepackError):
    """An answer did not fit its reply model (a stored value of a shape the API does not
    describe): a server error, logged with where it failed, never the request's fault."""

    code = "INVALID_REPLY"

    @classmethod
    def of(cls, exc: ValidationError) -> ReplyInvalid:
        errors = exc.errors(include_url=False, include_input=False)
        where = ", ".join(sorted({".".join(str(p) for p in e["loc"]) or exc.title for e in errors}))
        log.error("gateway.invalid_reply", model=exc.title, fields=where)
        return cls(f"the {exc.title} answer could not be built ({where} does not fit)")


class Conflict(IcepackError):
    """The request is well-formed but the state does not allow it."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


class NotAvailable(IcepackError):
    """A feature needs a module this installation does not have yet."""

    code = "NOT_AVAILABLE"


class DatabaseUnavailable(IcepackError):
    """Postgres did not answer; the request can be retried."""

    code = "DATABASE_UNAVAILABLE"


class HookTokenError(IcepackError):
    """The hook's bearer token is missing or wrong (401)."""

    code = "HOOK_TOKEN_INVALID"


class HookDisabled(IcepackError):
    """No hook token is configured, so the hook accepts nothing (403)."""

    code = "HOOK_DISABLED"


class UnknownCatalog(IcepackError):
    """The event names a catalog this Icepack does not watch (404)."""

    code = "CATALOG_NOT_FOUND"


STATUS: dict[type[Exception], int] = {
    HookTokenError: 401,
    HookDisabled: 403,
    UnknownCatalog: 404,
    TableNotFound: 404,
    NotFound: 404,
    JobNotFound: 404,
    TokenNotFound: 404,
    InvalidCursor: 400,
    InvalidParameter: 422,
    BodyTooLarge: 413,
    InvalidIdentifier: 422,
    Conflict: 409,
    TokenNameTaken: 409,
    TokenMissing: 401,
    TokenInvalid: 401,
    TokenRevoked: 403,
    TokenReadOnly: 403,
    TokenError: 401,
    NotAvailable: 501,
    DatabaseUnavailable: 503,
    IcepackError: 500,
}

# Driver errors that mean "the database is not there right now", not "the request is wrong".
DATABASE_DOWN: tuple[type[Exception], ...] = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.QueryCanceledError,
    asyncpg.AdminShutdownError,
)


def status_for(exc: Exception) -> int:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


class ErrorDetail(ReplyModel):
    loc: list[str | int] = Field(description='where in the body, e.g. ["actions", 0]')
    message: str
    type: str = Field(description="pydantic's error type, e.g. missing")


class ErrorBody(ReplyModel):
    """Every error answer."""

    code: str = Field(description="stable, e.g. TABLE_NOT_FOUND (scripts match on it)")
    message: str = Field(description="for people; names the bad parameter")
    detail: list[ErrorDetail] | None = Field(description="each problem of an invalid body")


def error_body(code: str, message: str, detail: list[ErrorDetail] | None = None) -> ErrorBody:
    return ErrorBody(code=code, message=message, detail=detail)


def error_response(exc: IcepackError) -> Response:
    status = status_for(exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return reply(error_body(exc.code, str(exc)), status_code=status, headers=headers)


async def icepack_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, IcepackError)
    return error_response(exc)


async def validation_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ValidationError)
    detail = [
        ErrorDetail(loc=list(e["loc"]), message=e["msg"], type=e["type"])
        for e in exc.errors(include_url=False, include_input=False)
    ]
    fields = ", ".join(sorted({".".join(str(p) for p in d.loc) or "body" for d in detail}))
    return reply(
        error_body("INVALID_PARAMETER", f"invalid request body: {fields}", detail), status_code=422
    )


async def json_error(_request: Request, exc: Exception) -> Response:
    return reply(
        error_body("INVALID_PARAMETER", f"request body is not JSON: {exc}"), status_code=422
    )


async def http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    codes = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}
    code = codes.get(exc.status_code, f"HTTP_{exc.status_code}")
    return reply(
        error_body(code, str(exc.detail)), status_code=exc.status_code, headers=exc.headers
    )


async def database_down(request: Request, exc: Exception) -> Response:
    log.warning("gateway.database_unavailable", path=request.url.path, error=repr(exc))
    return error_response(
        DatabaseUnavailable(
            f"the Icepack database did not answer ({type(exc).__name__}); retry shortly"
        )
    )


def exception_handlers() -> dict[Any, Any]:
    """Handlers by exception class, for ``Starlette(exception_handlers=...)``."""
    handlers: dict[Any, Any] = {cls: icepack_error for cls in STATUS}
    handlers.update({cls: database_down for cls in DATABASE_DOWN})
    handlers[ValidationError] = validation_error
    handlers[json.JSONDecodeError] = json_error
    handlers[HTTPException] = http_error
    return handlers
