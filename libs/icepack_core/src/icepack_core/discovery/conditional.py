"""Conditional REST table loads: ``GET .../tables/{table}`` with ``If-None-Match``.

Contract of ``rest_load(catalog, ident, etag)`` (blocking; discovery calls it from a thread, through
the catalog's ``CatalogGate``):

* ``etag`` None: an ordinary full load. The answer must be 200; it returns the metadata location,
  the table properties and the ``ETag`` header (None when the server sent none).
* ``etag`` given: the same request with ``If-None-Match: <etag>`` (the stored value, verbatim).
  ``304 Not Modified`` returns ``not_modified=True`` and nothing else: the caller keeps the
  metadata location and properties it stored with that ETag. 200 is a full load as above (the
  table changed, or the server ignores ``If-None-Match``).
* Anything else raises: 404 ``NoSuchTableError`` and the other statuses as PyIceberg's own
  ``load_table`` maps them (``_handle_non_200_response``: 5xx ``ServerError``, ...); a 304 to a
  request without ``If-None-Match``, or another status below 400 than 200/304, raises
  ``UnexpectedCatalogAnswer``. The caller lists the table with that error, as for a failed load.

Both kinds are sent with ``Accept-Encoding: identity``: a server that compresses its answer may
change the ETag to say so (Jetty 12.1's compression handler, as in Iceberg's REST fixture, sends
``<etag>--gzip`` and then never matches that value in ``If-None-Match``; Apache's mod_deflate
does the same with ``-gzip``), so an ETag from a compressed answer would never yield a 304. The
price is uncompressed metadata on full loads, which conditional loads make rare.

PyIceberg's ``RestCatalog.load_table`` has no conditional form and does not expose response
headers, so the request is made here through the catalog's own authenticated ``requests``
session, URL building (``url``, the config ``prefix``, ``_split_identifier_for_path``), snapshot
mode and answer parsing (``TableResponse``), with its retry after an expired token. These are
PyIceberg internals (checked against 0.12): a PyIceberg upgrade must keep this module's test
(tests/discovery/test_conditional_loads.py) green.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyiceberg.catalog.rest import (
    SNAPSHOT_LOADING_MODE,
    Capability,
    Endpoints,
    RestCatalog,
    TableResponse,
)
from pyiceberg.catalog.rest.response import _handle_non_200_response
from pyiceberg.exceptions import AuthorizationExpiredError, NoSuchTableError, UnauthorizedError
from requests import HTTPError

from icepack_core.errors import UnexpectedCatalogAnswer

NOT_MODIFIED = 304


@dataclass(frozen=True, slots=True)
class RestLoad:
    """One load's answer: ``not_modified``, or the table's location, properties and ETag."""

    not_modified: bool
    metadata_location: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    etag: str | None = None
    location: str | None = None  # the table's root, as its metadata says


def rest_load(catalog: RestCatalog, ident: tuple[str, ...], etag: str | None) -> RestLoad:
    """Load ``ident`` from ``catalog``, conditionally when ``etag`` is given (see the module).

    Like PyIceberg's own loads, a 401/419 refreshes the token and tries once more."""
    try:
        return _load_once(catalog, ident, etag)
    except (AuthorizationExpiredError, UnauthorizedError):
        catalog._refresh_token()
        return _load_once(catalog, ident, etag)


def _load_once(catalog: RestCatalog, ident: tuple[str, ...], etag: str | None) -> RestLoad:
    catalog._check_endpoint(Capability.V1_LOAD_TABLE)
    params: dict[str, str] = {}
    if mode := catalog.properties.get(SNAPSHOT_LOADING_MODE):
        if mode not in {"all", "refs"}:
            raise ValueError(f"invalid {SNAPSHOT_LOADING_MODE}: {mode!r} (expected all or refs)")
        params["snapshots"] = mode
    url = catalog.url(
        Endpoints.load_table, prefixed=True, **catalog._split_identifier_for_path(ident)
    )
    # identity: the ETag must be the server's own, not a compressed variant (see the module).
    headers = {"Accept-Encoding": "identity"}
    if etag is not None:
        headers["If-None-Match"] = etag
    response = catalog._session.get(url, params=params, headers=headers)
    status = response.status_code
    if status == NOT_MODIFIED:
        if etag is None:
            raise UnexpectedCatalogAnswer(
                status, "304 Not Modified to a load without If-None-Match"
            )
        return RestLoad(not_modified=True)
    try:
        response.raise_for_status()
    except HTTPError as exc:
        _handle_non_200_response(exc, {404: NoSuchTableError})
    if status != 200:
        raise UnexpectedCatalogAnswer(status, f"expected 200 or 304 to a table load, got {status}")
    table = TableResponse.model_validate_json(response.text)
    return RestLoad(
        not_modified=False,
        metadata_location=table.metadata_location,
        properties=dict(table.metadata.properties),
        etag=response.headers.get("ETag"),
        location=table.metadata.location,
    )
