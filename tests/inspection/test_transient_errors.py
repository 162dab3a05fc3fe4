"""Which catalog errors are retried before a table is marked failed (``inspection.transient``):
decided by type over the whole cause chain, never by message text."""

from __future__ import annotations

import pytest
import requests
from botocore.exceptions import ClientError, EndpointConnectionError
from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.exceptions import (
    BadRequestError,
    ForbiddenError,
    NoSuchTableError,
    ServerError,
    ServiceUnavailableError,
    TooManyRequestsError,
    UnauthorizedError,
)
from sqlalchemy.exc import OperationalError

from icepack_core.errors import InspectionFailed
from icepack_core.inspection.transient import is_transient_catalog_error


def _wrapped(inner: BaseException) -> InspectionFailed:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise InspectionFailed("cannot load table") from exc
    except InspectionFailed as outer:
        return outer


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "GetTable",
    )


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("SELECT 1", {}, Exception("server closed the connection unexpectedly")),
        ConnectionResetError("reset by peer"),
        ConnectionRefusedError("refused"),
        ServerError("500 internal"),
        ServiceUnavailableError("503"),
        TooManyRequestsError("429"),
        requests.exceptions.ConnectionError("connection aborted"),
        EndpointConnectionError(endpoint_url="https://glue"),
        _client_error("ThrottlingException", 400),
        _client_error("Whatever", 502),
    ],
    ids=type,
)
def test_transient(error: BaseException) -> None:
    assert is_transient_catalog_error(error)
    assert is_transient_catalog_error(_wrapped(error))  # as Inspector.load raises it


@pytest.mark.parametrize(
    "error",
    [
        NoSuchTableError("gone"),
        BadRequestError("400"),
        UnauthorizedError("401"),
        ForbiddenError("403"),
        ValueError("not JSON"),
        TimeoutError("load took 120 s"),
        _client_error("EntityNotFoundException", 400),
        _client_error("AccessDeniedException", 403),
    ],
    ids=type,
)
def test_permanent(error: BaseException) -> None:
    assert not is_transient_catalog_error(error)
    assert not is_transient_catalog_error(_wrapped(error))


@given(st.text(max_size=200))
def test_the_message_text_never_decides(message: str) -> None:
    assert not is_transient_catalog_error(ValueError(message))
    assert is_transient_catalog_error(ServerError(message))
