"""Which catalog errors are transient: worth a retry with backoff before a table is marked failed.

A Postgres restart under a SQL catalog (``OperationalError: server closed the connection
unexpectedly``), a connection reset or refused, a REST catalog's 5xx or 429, a Glue throttle:
each says the catalog could not answer *now*, not that the table is broken. Recording such an
error as ``INSPECTION_FAILED`` leaves a healthy table ``unknown`` until something else touches
it, so ``Inspector.load`` retries these a few times with backoff first.

Decided by type (and, for botocore, the error code), never by message text; the whole cause
chain is looked at, as catalogs wrap their driver's error.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyiceberg.exceptions import ServerError, ServiceUnavailableError, TooManyRequestsError

# REST answers that mean "not now": 5xx and 429 (PyIceberg maps them to these types).
_REST = (ServerError, ServiceUnavailableError, TooManyRequestsError)
_BOTO_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "InternalServiceException",
        "InternalServerException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "InternalFailure",
        "SlowDown",
    }
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _sqlalchemy_disconnect(exc: BaseException) -> bool:
    try:
        from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
    except ImportError:  # pragma: no cover - a declared dependency (pyiceberg[sql-postgres])
        return False
    if isinstance(exc, OperationalError | InterfaceError):
        return True  # the server went away, refused, or the connection broke
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def _botocore_transient(exc: BaseException) -> bool:
    try:
        from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError
    except ImportError:  # pragma: no cover - only with the glue extra
        return False
    if isinstance(exc, EndpointConnectionError | ConnectionClosedError):
        return True
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return error.get("Code") in _BOTO_CODES or int(status) >= 500 or int(status) == 429
    return False


def _requests_transient(exc: BaseException) -> bool:
    try:
        from requests.exceptions import ConnectionError as RequestsConnectionError
    except ImportError:  # pragma: no cover - PyIceberg's REST client needs requests
        return False
    return isinstance(exc, RequestsConnectionError)


def is_transient_catalog_error(exc: BaseException) -> bool:
    """True when ``exc`` (or anything in its cause chain) says the catalog or its connection
    was unavailable for a moment: a dropped or refused connection, a REST 5xx or 429, a
    throttled or failing AWS call. A timeout is not (a retry would wait as long again)."""
    for e in _chain(exc):
        if isinstance(e, (*_REST, ConnectionError)):  # reset, refused, broken pipe
            return True
        if _sqlalchemy_disconnect(e) or _botocore_transient(e) or _requests_transient(e):
            return True
    return False
