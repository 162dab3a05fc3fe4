"""Tables a catalog lists that Icepack does not maintain, recorded for the location checks.

A table that the catalog's ``include``/``exclude`` leave out is never inspected, planned or
maintained, but its files are still its own: another table's expiry, orphan removal, purge or
restore must not delete or move them. So each successful listing records every such table in
``icepack.unmaintained_tables`` with what its metadata says of where its files are (location,
metadata location, ``write.*.path`` properties), and ``safety.confinement`` counts them among
the other known tables.

Reading a table's location costs one load of its metadata through the catalog's gate (its
concurrency and rate limits, counted as ``unmaintained_load``), and only when its metadata
location may have moved: a SQL catalog's listing names each table's metadata file, so a table
whose file is the one recorded last time is not loaded again; REST and Glue tables are loaded
each pass, as the maintained ones are (conditionally, with the ETag of the last full load,
where the catalog has ``conditional_loads``: a 304 keeps what was recorded). A table whose
metadata cannot be read keeps what was recorded of it before, with the error; one never read
has no location, and the location checks refuse while it is so (``LOCATION_UNKNOWN``, naming
it) rather than ignore it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import asyncpg
import structlog
from pyiceberg.catalog import Catalog

from icepack_core.db.queries import load_query
from icepack_core.db.text import storable, unstorable
from icepack_core.discovery.catalogs import ListedTable, conditional_capable
from icepack_core.discovery.limits import CatalogCalls, CatalogGate
from icepack_core.settings import CatalogConfig
from icepack_core.telemetry.logs import redact_text

UNMAINTAINED_LOAD = "unmaintained_load"  # the request kind of these loads (limits.KINDS)
EXCLUDED = "excluded"  # the reason recorded for a table include/exclude leave out
# Iceberg's properties that put a table's files outside its location (safety.confinement
# reads the same keys; kept here too so discovery does not import the safety package).
WRITE_PATH_PROPERTIES = (
    "write.data.path",
    "write.metadata.path",
    "write.object-storage.path",
    "write.folder-storage.path",
)
log = structlog.get_logger("icepack.discovery")


@dataclass(frozen=True)
class UnmaintainedTable:
    """What discovery knows of one unmaintained table's files (module doc)."""

    namespace: str
    name: str
    reason: str
    metadata_location: str | None
    location: str | None
    write_paths: dict[str, str] = field(default_factory=dict)
    load_error: str | None = None
    catalog_etag: str | None = None


Recorded = dict[tuple[str, str], UnmaintainedTable]


async def recorded_unmaintained(pool: asyncpg.Pool, cfg: CatalogConfig) -> Recorded:
    """What the last pass recorded of ``cfg``'s unmaintained tables, by (namespace, name)."""
    rows = await pool.fetch(load_query("table_unmaintained_list_catalog"), cfg.name)
    return {
        (r["namespace"], r["name"]): UnmaintainedTable(
            r["namespace"],
            r["name"],
            EXCLUDED,
            r["metadata_location"],
            r["location"],
            dict(r["write_paths"] or {}),
            catalog_etag=r["catalog_etag"],
        )
        for r in rows
    }


async def read_unmaintained(
    catalog: Catalog,
    cfg: CatalogConfig,
    gate: CatalogGate,
    calls: CatalogCalls,
    listed: Sequence[ListedTable],
    recorded: Recorded,
) -> list[UnmaintainedTable]:
    """Where each of ``listed`` (tables left out of maintenance) keeps its files: reused from
    ``recorded`` while its metadata location is unchanged (or a conditional REST load answers
    304), else read by one load through ``gate``, at most ``cfg.max_concurrent_requests``
    threads waiting on it (module doc)."""
    slots = asyncio.Semaphore(cfg.max_concurrent_requests)

    async def one(item: ListedTable) -> UnmaintainedTable:
        key = (item.ref.namespace, item.ref.name)
        before = recorded.get(key)
        if (
            before is not None
            and before.location is not None
            and item.metadata_location is not None
            and before.metadata_location == item.metadata_location
        ):
            return before
        async with slots:
            try:
                return await _load(catalog, cfg, gate, calls, item, before)
            except Exception as exc:
                error = storable(redact_text(f"{type(exc).__name__}: {exc}"))[:2000]
                log.warning("discovery.unmaintained_unreadable", table=str(item.ref), error=error)
                return UnmaintainedTable(
                    *key,
                    EXCLUDED,
                    item.metadata_location or (before.metadata_location if before else None),
                    before.location if before else None,
                    before.write_paths if before else {},
                    error,
                    before.catalog_etag if before else None,
                )

    return list(await asyncio.gather(*(one(item) for item in listed)))


async def _load(
    catalog: Catalog,
    cfg: CatalogConfig,
    gate: CatalogGate,
    calls: CatalogCalls,
    item: ListedTable,
    before: UnmaintainedTable | None,
) -> UnmaintainedTable:
    """One load of ``item``'s metadata (conditional on ``before``'s ETag where the catalog
    allows it), counted as ``unmaintained_load``."""
    key = (item.ref.namespace, item.ref.name)
    ident = (*item.ref.levels, item.ref.name)
    rest = conditional_capable(catalog, cfg)
    if rest is None:
        table = await asyncio.to_thread(
            gate.call, UNMAINTAINED_LOAD, calls, catalog.load_table, ident
        )
        meta = table.metadata
        return UnmaintainedTable(
            *key, EXCLUDED, table.metadata_location, meta.location, _write_paths(meta.properties)
        )
    from icepack_core.discovery.conditional import rest_load

    etag = before.catalog_etag if before is not None and before.location is not None else None
    got = await asyncio.to_thread(gate.call, UNMAINTAINED_LOAD, calls, rest_load, rest, ident, etag)
    if got.not_modified and before is not None:
        return before
    return UnmaintainedTable(
        *key,
        EXCLUDED,
        got.metadata_location,
        got.location,
        _write_paths(got.properties),
        catalog_etag=got.etag,
    )


def _write_paths(properties: Mapping[str, str]) -> dict[str, str]:
    return {k: properties[k] for k in WRITE_PATH_PROPERTIES if properties.get(k)}


def _fit(table: UnmaintainedTable) -> bool:
    """Whether Postgres can store the row (a NUL byte cannot be); an unfit one is logged."""
    values = {
        "namespace": table.namespace,
        "name": table.name,
        "metadata location": table.metadata_location,
        "location": table.location,
        **table.write_paths,
    }
    reason = next((r for k, v in values.items() if (r := unstorable(k, v)) is not None), None)
    if reason is not None:
        label = ascii(f"{table.namespace}.{table.name}")
        log.warning("discovery.unmaintained_unstorable", table=label, reason=reason)
    return reason is None


async def record_unmaintained(
    conn: asyncpg.Connection, catalog: str, tables: Sequence[UnmaintainedTable]
) -> None:
    """Replace ``catalog``'s unmaintained tables with ``tables`` (inside the caller's
    transaction, before its listing counts as finished: the checks then know them all)."""
    fit = [t for t in tables if _fit(t)]
    await conn.execute(
        load_query("table_unmaintained_forget_missing"),
        catalog,
        [t.namespace for t in fit],
        [t.name for t in fit],
    )
    if not fit:
        return
    await conn.execute(
        load_query("table_unmaintained_upsert_many"),
        catalog,
        [t.namespace for t in fit],
        [t.name for t in fit],
        [t.reason for t in fit],
        [t.metadata_location for t in fit],
        [t.location for t in fit],
        [json.dumps(t.write_paths) for t in fit],
        [t.load_error for t in fit],
        [t.catalog_etag for t in fit],
    )
