"""Iceberg catalogs: build a PyIceberg catalog from a ``CatalogConfig`` and walk its tables.

Every blocking PyIceberg call crosses into a thread here (``asyncio.to_thread``); the rest of
Icepack only awaits. Catalog properties may hold secrets: they are never logged, and errors
raised from here carry only the catalog name and what failed.
"""

from __future__ import annotations

import asyncio
import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.typedef import Identifier

from icepack_core import decompression
from icepack_core.discovery.limits import CatalogCalls, CatalogGate
from icepack_core.settings import ACCESS_DELEGATION_HEADER, VENDED_CREDENTIALS, CatalogConfig
from icepack_core.telemetry.logs import register_secrets, secret_key
from icepack_core.types import TableRef, join_namespace

if TYPE_CHECKING:
    from pyiceberg.catalog.rest import RestCatalog

MAX_NAMESPACE_DEPTH = 16  # guards against a catalog that lists a namespace as its own child


def catalog_properties(cfg: CatalogConfig) -> dict[str, str]:
    """PyIceberg properties for ``cfg`` (includes secrets: never log the result)."""
    if cfg.type == "sql":
        props = _sql_properties(cfg)
    elif cfg.type == "rest":
        props = _rest_properties(cfg)
    else:
        props = _glue_properties(cfg)
    if cfg.warehouse:
        props["warehouse"] = cfg.warehouse
    props.update(_s3_properties(cfg))
    props.update(cfg.properties)
    return props


def _sql_properties(cfg: CatalogConfig) -> dict[str, str]:
    """The SQL catalog's URI, with a Postgres URI spelled for SQLAlchemy's psycopg2 driver."""
    assert cfg.uri is not None
    uri = cfg.uri
    for prefix in ("postgresql://", "postgres://"):
        if uri.startswith(prefix):
            uri = "postgresql+psycopg2://" + uri.removeprefix(prefix)
    return {"uri": uri}


def _rest_properties(cfg: CatalogConfig) -> dict[str, str]:
    """A REST catalog's URI, OAuth2 credential or token, and request headers."""
    assert cfg.uri is not None
    props = {"uri": cfg.uri}
    if cfg.credential is not None:
        props["credential"] = cfg.credential.get_secret_value()
        props["scope"] = cfg.scope
    if cfg.token is not None:
        props["token"] = cfg.token.get_secret_value()
    if cfg.oauth2_server_uri:
        props["oauth2-server-uri"] = cfg.oauth2_server_uri
    elif cfg.credential is not None:
        # The REST spec's token endpoint, spelled out: PyIceberg's implicit fallback is
        # deprecated (and drops the slash when the URI has none).
        props["oauth2-server-uri"] = cfg.uri.rstrip("/") + "/v1/oauth/tokens"
    if cfg.vended_credentials:
        props[f"header.{ACCESS_DELEGATION_HEADER}"] = VENDED_CREDENTIALS
    for name, value in cfg.headers.items():
        props[f"header.{name}"] = value
    return props


def _glue_properties(cfg: CatalogConfig) -> dict[str, str]:
    """Glue's region, endpoint and static keys (the same keys the S3 FileIO gets)."""
    return _aws_properties(cfg, "glue", cfg.endpoint)


def _s3_properties(cfg: CatalogConfig) -> dict[str, str]:
    """The S3 FileIO's endpoint, region and static keys, whatever the catalog type."""
    return _aws_properties(cfg, "s3", cfg.s3_endpoint)


def _aws_properties(cfg: CatalogConfig, prefix: str, endpoint: str | None) -> dict[str, str]:
    """``<prefix>.endpoint``, ``<prefix>.region`` and the static keys (only as a pair) of an
    AWS client PyIceberg configures from properties: the Glue catalog's or the S3 FileIO's."""
    props: dict[str, str] = {}
    if endpoint:
        props[f"{prefix}.endpoint"] = endpoint
    if cfg.region:
        props[f"{prefix}.region"] = cfg.region
    if cfg.s3_access_key_id and cfg.s3_secret_access_key:
        props[f"{prefix}.access-key-id"] = cfg.s3_access_key_id
        props[f"{prefix}.secret-access-key"] = cfg.s3_secret_access_key.get_secret_value()
    return props


def register_vended_secrets(io_properties: Mapping[str, str]) -> None:
    """Mask what a catalog vended (loadTable's ``config``: ``s3.secret-access-key``,
    ``s3.session-token``...) wherever it would appear: Icepack never configured those values,
    so the log, row and span redaction learns them here, when the table's FileIO gets them."""
    register_secrets(value for key, value in io_properties.items() if secret_key(key))


# Every catalog request ends: PyIceberg sets no timeout, and a request to a catalog that never
# answers (a half-open connection, a locked catalog table) held its worker thread for ever.
# Threads are shared (asyncio.to_thread), so one hung catalog starved every other catalog's
# discovery and every inspection. (connect, read) seconds for REST; SQL gets the same bounds.
REQUEST_TIMEOUT = (10.0, 60.0)


def _bounded_sql_uri(uri: str) -> str:
    """A Postgres catalog URI with a connect timeout and a statement timeout, unless it sets
    its own (``connect_timeout`` / ``options``)."""
    if not uri.startswith("postgresql"):
        return uri
    parts = urlsplit(uri)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.setdefault("connect_timeout", str(int(REQUEST_TIMEOUT[0])))
    query.setdefault("options", f"-c statement_timeout={int(REQUEST_TIMEOUT[1] * 1000)}")
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


def load_catalog(cfg: CatalogConfig) -> Catalog:
    """A PyIceberg catalog for ``cfg`` (blocking: REST fetches its config, SQL connects), whose
    every request is bounded by ``REQUEST_TIMEOUT``.

    Raises:
        Exception: whatever PyIceberg raises for an unreachable or misconfigured catalog.
    """
    decompression.install()  # its loads of gzip metadata and Avro files are bounded
    props = catalog_properties(cfg)
    if cfg.type == "sql":
        from pyiceberg.catalog.sql import SqlCatalog

        return SqlCatalog(cfg.name, **{**props, "uri": _bounded_sql_uri(props["uri"])})
    if cfg.type == "rest":
        from pyiceberg.catalog.rest import RestCatalog
        from requests import Session

        class BoundedRestCatalog(RestCatalog):
            def _create_session(self) -> Session:
                session = super()._create_session()
                unbounded = session.request

                def request(method: str, url: str, **kwargs: Any) -> Any:
                    kwargs.setdefault("timeout", REQUEST_TIMEOUT)
                    return unbounded(method, url, **kwargs)

                session.request = request  # type: ignore[method-assign,assignment]
                return session

            def load_table(self, identifier: str | Identifier) -> Table:
                table: Table = super().load_table(identifier)
                register_vended_secrets(table.io.properties)
                return table

        return BoundedRestCatalog(cfg.name, **props)
    from pyiceberg.catalog.glue import GlueCatalog

    return GlueCatalog(cfg.name, **props)


def table_selected(cfg: CatalogConfig, namespace: str, name: str) -> bool:
    """Whether ``cfg``'s include/exclude patterns keep ``namespace.name``.

    A pattern matches the namespace alone or the dotted ``namespace.table``.
    """
    candidates = (namespace, f"{namespace}.{name}")

    def hit(patterns: Iterable[str]) -> bool:
        return any(fnmatch.fnmatchcase(c, p) for p in patterns for c in candidates)

    return hit(cfg.include) and not hit(cfg.exclude)


def _walk(
    catalog: Catalog,
    cfg: CatalogConfig,
    gate: CatalogGate,
    calls: CatalogCalls | None,
    excluded: list[tuple[str, ...]] | None = None,
) -> list[tuple[str, ...]]:
    """Every selected table identifier under every namespace, nested ones included; the
    identifiers include/exclude leave out are appended to ``excluded`` when given (blocking)."""
    found: list[tuple[str, ...]] = []
    seen: set[tuple[str, ...]] = set()
    top = gate.call("list", calls, catalog.list_namespaces)
    pending: list[tuple[str, ...]] = [tuple(ns) for ns in top]
    while pending:
        ns = pending.pop()
        if ns in seen or len(ns) > MAX_NAMESPACE_DEPTH:
            continue
        seen.add(ns)
        for ident in gate.call("list", calls, catalog.list_tables, ns):
            ident = tuple(ident)
            if table_selected(cfg, join_namespace(ident[:-1]), ident[-1]):
                found.append(ident)
            elif excluded is not None:
                excluded.append(ident)
        for child in gate.call("list", calls, catalog.list_namespaces, ns):
            child = tuple(child)
            if len(child) > len(ns) and child not in seen:
                pending.append(child)
    return sorted(set(found))


async def list_tables(
    catalog: Catalog,
    cfg: CatalogConfig,
    gate: CatalogGate | None = None,
    calls: CatalogCalls | None = None,
    excluded: list[TableRef] | None = None,
) -> list[TableRef]:
    """Every selected table of the catalog, nested namespaces included; the tables
    include/exclude leave out are appended to ``excluded`` when given.

    Raises:
        Exception: the catalog could not be listed (the caller records the error).
    """
    gate = gate or gate_for(cfg)
    left_out: list[tuple[str, ...]] = []
    idents = await asyncio.to_thread(_walk, catalog, cfg, gate, calls, left_out)
    if excluded is not None:
        excluded += [
            TableRef(cfg.name, join_namespace(i[:-1]), i[-1]) for i in sorted(set(left_out))
        ]
    return [TableRef(cfg.name, join_namespace(i[:-1]), i[-1]) for i in idents]


@dataclass(frozen=True, slots=True)
class ListedTable:
    """A table as discovery saw it. ``metadata_location`` is None when it could not be loaded.

    ``etag`` is the ETag a REST full load answered with (None: none sent, or not loaded so).
    ``not_modified``: a conditional load answered 304; ``metadata_location`` is then the stored
    location that ETag belongs to.

    ``properties`` is None when this sighting did not read them (a SQL catalog's listing, a 304,
    a failed load): the stored ones stand. ``{}`` means the table has none.
    """

    ref: TableRef
    metadata_location: str | None
    properties: dict[str, str] | None = None
    error: str | None = None
    etag: str | None = None
    not_modified: bool = False


@dataclass(frozen=True, slots=True)
class StoredEtag:
    """What discovery stored for a table after a full REST load: its location and ETag."""

    metadata_location: str
    etag: str


def _sql_locations(
    catalog: Catalog, key: tuple[str, str] | None = None
) -> dict[tuple[str, str], str | None]:
    """Metadata locations straight from the SQL catalog's own table, without reading files:
    every table's, or only the one of ``key`` (namespace, name) when given (blocking)."""
    from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    assert isinstance(catalog, SqlCatalog)
    stmt = select(
        IcebergTables.table_namespace, IcebergTables.table_name, IcebergTables.metadata_location
    ).where(IcebergTables.catalog_name == catalog.name)
    if key is not None:
        stmt = stmt.where(
            IcebergTables.table_namespace == key[0], IcebergTables.table_name == key[1]
        )
    with Session(catalog.engine) as session:
        return {(ns, name): loc for ns, name, loc in session.execute(stmt)}


def sql_table_row(catalog: Catalog, namespace: str, name: str) -> tuple[bool, str | None]:
    """Whether a SQL catalog has the table ``namespace``/``name`` (its own key: levels joined by
    "." unescaped), and its metadata location, from the catalog's own row (blocking)."""
    found = _sql_locations(catalog, (namespace, name))
    return (namespace, name) in found, found.get((namespace, name))


async def load_table(
    catalog: Catalog,
    ref: TableRef,
    gate: CatalogGate | None = None,
    calls: CatalogCalls | None = None,
) -> Table:
    """Load one table (its metadata JSON) in a thread; through ``gate`` when given (discovery's
    requests are limited and counted; an inspection's load is its own business)."""
    ident = (*ref.levels, ref.name)
    if gate is None:
        return await asyncio.to_thread(catalog.load_table, ident)
    return await asyncio.to_thread(gate.call, "load", calls, catalog.load_table, ident)


async def load_listed(
    catalog: Catalog, cfg: CatalogConfig, ref: TableRef, gate: CatalogGate
) -> ListedTable:
    """One table as a listing lists it, by one full load through ``gate`` (a targeted refresh):
    with its ETag from a REST catalog with ``conditional_loads``, so the next poll's load of it
    is conditional; without properties from a SQL catalog (its listing has none either).

    Raises:
        NoSuchTableError: the catalog has no such table.
        Exception: the catalog could not be reached or the table loaded.
    """
    rest = conditional_capable(catalog, cfg)
    if rest is not None:
        from icepack_core.discovery.conditional import rest_load

        ident = (*ref.levels, ref.name)
        got = await asyncio.to_thread(gate.call, "load", None, rest_load, rest, ident, None)
        return ListedTable(ref, got.metadata_location, got.properties, etag=got.etag)
    table = await load_table(catalog, ref, gate)
    properties = dict(table.metadata.properties) if cfg.type != "sql" else None
    return ListedTable(ref, table.metadata_location, properties)


async def list_table_locations(
    catalog: Catalog,
    cfg: CatalogConfig,
    gate: CatalogGate | None = None,
    calls: CatalogCalls | None = None,
    stored: Mapping[tuple[str, str], StoredEtag] | None = None,
    excluded: list[ListedTable] | None = None,
) -> list[ListedTable]:
    """Every selected table with its current metadata location; the tables include/exclude
    leave out are appended to ``excluded`` when given, not loaded (with their metadata location
    from a SQL catalog's rows, None from the others: ``discovery.unmaintained`` reads them).

    SQL catalogs answer from their ``iceberg_tables`` rows in one query (a broken metadata file
    still yields its table); REST and Glue load each table. A REST catalog with
    ``conditional_loads`` (the default) loads through ``discovery.conditional``: a table in
    ``stored`` (by ``(namespace, name)``) is loaded with ``If-None-Match`` and a 304 lists it at
    its stored location (``not_modified``); every full load records the ETag it answered with.
    Every request goes through ``gate`` (the catalog's concurrency and rate limits; counted into
    ``calls``). A table that fails to load is listed with ``metadata_location=None`` and the
    error, never dropped.

    Raises:
        Exception: the listing itself failed.
    """
    gate = gate or gate_for(cfg)
    left_out: list[TableRef] = []
    refs = await list_tables(catalog, cfg, gate, calls, left_out)
    if cfg.type == "sql":
        locations = await asyncio.to_thread(gate.call, "query", calls, _sql_locations, catalog)
        # The SQL catalog's own key: levels joined by "." without escaping.
        if excluded is not None:
            excluded += [
                ListedTable(r, locations.get((".".join(r.levels), r.name))) for r in left_out
            ]
        return [ListedTable(r, locations.get((".".join(r.levels), r.name))) for r in refs]
    if excluded is not None:
        excluded += [ListedTable(r, None) for r in left_out]
    return await _load_each(catalog, cfg, gate, calls, refs, stored or {})


async def _load_each(
    catalog: Catalog,
    cfg: CatalogConfig,
    gate: CatalogGate,
    calls: CatalogCalls | None,
    refs: list[TableRef],
    known: Mapping[tuple[str, str], StoredEtag],
) -> list[ListedTable]:
    """``refs`` each loaded (conditionally from a capable REST catalog), a failure listed with
    its error and no location."""
    # At most as many threads waiting on the gate as it lets through at once.
    slots = asyncio.Semaphore(cfg.max_concurrent_requests)
    rest = conditional_capable(catalog, cfg)

    async def one(ref: TableRef) -> ListedTable:
        async with slots:
            try:
                if rest is not None:
                    stored = known.get((ref.namespace, ref.name))
                    return await _rest_listed(rest, ref, stored, gate, calls)
                table = await load_table(catalog, ref, gate, calls)
            except Exception as exc:
                return ListedTable(ref, None, error=f"{type(exc).__name__}: {exc}")
            return ListedTable(ref, table.metadata_location, dict(table.metadata.properties))

    return list(await asyncio.gather(*(one(r) for r in refs)))


async def _rest_listed(
    rest: RestCatalog,
    ref: TableRef,
    known_etag: StoredEtag | None,
    gate: CatalogGate,
    calls: CatalogCalls | None,
) -> ListedTable:
    """One REST load, conditional on ``known_etag`` when there is one (a 304 lists the table
    at its stored location)."""
    from icepack_core.discovery.conditional import rest_load

    ident = (*ref.levels, ref.name)
    if known_etag is None:
        got = await asyncio.to_thread(gate.call, "load", calls, rest_load, rest, ident, None)
    else:
        got = await asyncio.to_thread(
            gate.call, "conditional", calls, rest_load, rest, ident, known_etag.etag
        )
        if got.not_modified:
            gate.count("not_modified", calls)
            return ListedTable(ref, known_etag.metadata_location, not_modified=True)
        gate.count("load", calls)
    return ListedTable(ref, got.metadata_location, got.properties, etag=got.etag)


def conditional_capable(catalog: Catalog, cfg: CatalogConfig) -> RestCatalog | None:
    """The ``RestCatalog`` to load through ``discovery.conditional``, or None for PyIceberg's
    own ``load_table`` (other catalog types, or ``conditional_loads`` off)."""
    if cfg.type != "rest" or not cfg.conditional_loads:
        return None
    from pyiceberg.catalog.rest import RestCatalog

    return catalog if isinstance(catalog, RestCatalog) else None


def gate_for(cfg: CatalogConfig) -> CatalogGate:
    """A gate with ``cfg``'s limits (``CatalogSet.gate`` keeps one per catalog)."""
    return CatalogGate(cfg.name, cfg.max_concurrent_requests, cfg.max_requests_per_second)


class CatalogSet:
    """Loaded catalogs by name, created on first use and kept for the process's life, each
    with its request gate."""

    def __init__(self, configs: Iterable[CatalogConfig]) -> None:
        self.configs = {c.name: c for c in configs}
        self.gates = {c.name: gate_for(c) for c in self.configs.values()}
        self._loaded: dict[str, Catalog] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, name: str) -> Catalog:
        """The catalog named ``name``.

        Raises:
            KeyError: no such catalog is configured.
            Exception: it could not be created (unreachable, bad credentials).
        """
        cfg = self.configs[name]
        async with self._locks.setdefault(name, asyncio.Lock()):
            if name not in self._loaded:
                self._loaded[name] = await asyncio.to_thread(load_catalog, cfg)
            return self._loaded[name]

    def forget(self, name: str) -> None:
        """Drop a cached catalog (after an error, so the next use reconnects)."""
        self._loaded.pop(name, None)


async def metadata_location_hint(catalog: Catalog, ref: TableRef) -> str | None:
    """The metadata file a SQL catalog points at, read from its row alone (to name a file
    that fails to load); None for other catalogs or on any error."""
    from pyiceberg.catalog.sql import SqlCatalog

    if not isinstance(catalog, SqlCatalog):
        return None
    try:
        locations = await asyncio.to_thread(_sql_locations, catalog)
    except Exception:
        return None
    return locations.get((".".join(ref.levels), ref.name))
