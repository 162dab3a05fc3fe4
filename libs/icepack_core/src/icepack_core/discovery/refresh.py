"""Discovery: list every configured catalog and refresh ``tables`` atomically, with events.

Per catalog, the listing is diffed against the known rows in chunks of ``APPLY_CHUNK`` tables,
one transaction each (under a per-catalog advisory lock, so replicas do not interleave), and
each chunk's writes and events commit together:

* a new table -> insert, ``table.discovered``;
* a dropped table that is back -> clear ``dropped_at``, ``table.discovered``;
* a moved metadata location -> update, ``table.changed``;
* a known table missing from the listing -> set ``dropped_at``, ``table.dropped`` (in a last
  transaction, after every chunk).

A listing that fails (or exceeds its timeout) never touches ``tables``: the catalog's error is
recorded in ``catalog_status`` and the other catalogs carry on. A single table that cannot be
recorded (a NUL byte in a property, a name ``sql_ident`` refuses; see ``unfit_reason``) is
skipped alone (its row, if any, left as it was, never marked dropped): it is logged and listed
in ``catalog_status.skipped_tables``, and the rest of its catalog is refreshed.

The tables a listing finds but ``include``/``exclude`` leave out are recorded too, in
``unmaintained_tables`` (``discovery.unmaintained``), in the same last transaction: never
maintained, known only to the location checks.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import cast

import asyncpg
import structlog
from opentelemetry.trace import Span, SpanKind

from icepack_core.db.queries import load_query
from icepack_core.db.text import storable, unstorable, unstorable_properties
from icepack_core.discovery.catalogs import (
    CatalogSet,
    ListedTable,
    StoredEtag,
    list_table_locations,
    load_listed,
    table_selected,
)
from icepack_core.discovery.limits import CatalogCalls
from icepack_core.discovery.unmaintained import (
    UnmaintainedTable,
    read_unmaintained,
    record_unmaintained,
    recorded_unmaintained,
)
from icepack_core.errors import InvalidIdentifier
from icepack_core.polaris.refresh import PolicySources
from icepack_core.queue.events import Payload, publish, publish_many
from icepack_core.settings import CatalogConfig, Settings
from icepack_core.spark.sql import quote_identifier
from icepack_core.telemetry.logs import redact_text
from icepack_core.telemetry.tracing import current_traceparent, tracer
from icepack_core.types import TableRef, Topic, join_namespace

APPLY_CHUNK = 500  # listed tables per transaction (apply_listing)
CATALOG_TIMEOUT_SECONDS = 120.0  # one slow catalog must not hold up the others' refresh
log = structlog.get_logger("icepack.discovery")


@dataclass
class CatalogResult:
    """What one catalog's refresh did."""

    catalog: str
    tables: int = 0
    discovered: int = 0
    changed: int = 0
    dropped: int = 0
    unmaintained: int = 0  # tables listed but left out by include/exclude (recorded)
    error: str | None = None
    # Tables left out of this pass, as {"table": "ns.name", "reason": ...} (catalog_status).
    skipped: list[dict[str, str]] = field(default_factory=list)
    # Requests this pass sent the catalog, by kind (limits.KINDS), kept in catalog_status.
    calls: dict[str, int] = field(default_factory=dict)


@dataclass
class DiscoveryResult:
    """What one discovery pass did, per catalog."""

    catalogs: list[CatalogResult] = field(default_factory=list)

    @property
    def discovered(self) -> int:
        return sum(c.discovered for c in self.catalogs)

    @property
    def changed(self) -> int:
        return sum(c.changed for c in self.catalogs)

    @property
    def dropped(self) -> int:
        return sum(c.dropped for c in self.catalogs)

    @property
    def errors(self) -> dict[str, str]:
        return {c.catalog: c.error for c in self.catalogs if c.error is not None}


def _table_span(
    topic: Topic, catalog: str, key: tuple[str, str], table_id: int
) -> AbstractContextManager[Span]:
    """The root span of one table event's trace (discovery starts it)."""
    return tracer().start_as_current_span(
        f"discovery {topic}",
        kind=SpanKind.PRODUCER,
        attributes={
            "icepack.catalog": catalog,
            "icepack.namespace": key[0],
            "icepack.table": key[1],
            "icepack.table_id": table_id,
        },
    )


async def _announce(
    conn: asyncpg.Connection,
    topic: Topic,
    catalog: str,
    key: tuple[str, str],
    table_id: int,
    payload: Payload | None = None,
) -> None:
    """Publish one table event as the root span of that table's trace."""
    with _table_span(topic, catalog, key, table_id):
        await publish(conn, topic, table_id=table_id, payload=payload)


def unfit_reason(item: ListedTable) -> str | None:
    """Why a listed table cannot be recorded, or None when it can.

    Postgres refuses a NUL byte (and a lone surrogate) in ``text`` and ``jsonb``, and a name
    ``sql_ident`` refuses could never be maintained: such a table is skipped alone, with this
    reason, instead of failing its whole catalog's refresh. Values are shown escaped.
    """
    for part in (*item.ref.namespace.split("."), item.ref.name):
        try:
            quote_identifier(part)
        except InvalidIdentifier as exc:
            return f"invalid name: {exc}"
    return unstorable("metadata location", item.metadata_location) or unstorable_properties(
        item.properties or {}
    )


Known = dict[tuple[str, str], tuple[int, str | None, bool]]  # key -> (id, location, dropped)


async def known_tables(conn: asyncpg.Pool | asyncpg.Connection, cfg: CatalogConfig) -> Known:
    """Every row of ``cfg``'s tables (dropped ones too): (id, metadata location, dropped)."""
    return {
        (r["namespace"], r["name"]): _known_entry(r)
        for r in await conn.fetch(load_query("table_list_catalog"), cfg.name)
    }


async def apply_listing(
    pool: asyncpg.Pool,
    cfg: CatalogConfig,
    listed: list[ListedTable],
    calls: CatalogCalls,
    before: Known | None = None,
    unmaintained: list[UnmaintainedTable] | None = None,
) -> CatalogResult:
    """Diff ``listed`` against ``cfg``'s known rows and record it, APPLY_CHUNK tables per
    transaction (each under the catalog's lock), then mark the tables the listing lacks dropped.

    Chunks, not one transaction: a first pass over a large catalog commits as it goes, so the
    inspectors start on its first tables at once (one transaction held 100,000 new tables for
    minutes). ``before`` is the rows as they were before the listing was read (read now when
    not given). A row written since then (a pushed change, which may be newer than the
    listing) is left as it is, never overwritten by the listing nor marked dropped; the next
    pass diffs it again. ``unmaintained`` (the tables the listing left out, None: not read)
    replaces the catalog's ``unmaintained_tables`` in the last transaction.
    """
    if before is None:
        before = await known_tables(pool, cfg)
    result = CatalogResult(cfg.name, tables=len(listed))
    async with pool.acquire() as raw:
        conn = cast(asyncpg.Connection, raw)
        seen_keys: set[tuple[str, str]] = set()
        for start in range(0, len(listed), APPLY_CHUNK):
            chunk = listed[start : start + APPLY_CHUNK]
            async with conn.transaction():
                await conn.execute(load_query("table_lock_catalog"), cfg.name)
                await _apply_chunk(conn, cfg, chunk, before, result, seen_keys)
        async with conn.transaction():
            await conn.execute(load_query("table_lock_catalog"), cfg.name)
            await _mark_missing(conn, cfg, before, seen_keys, result)
            if unmaintained is not None:
                await record_unmaintained(conn, cfg.name, unmaintained)
                result.unmaintained = len(unmaintained)
            await conn.execute(
                load_query("catalog_status_ok"),
                cfg.name,
                len(listed),
                result.skipped,
                calls.as_json(),
                calls.elapsed(),
            )
    result.calls = calls.as_json()
    return result


async def _mark_missing(
    conn: asyncpg.Connection,
    cfg: CatalogConfig,
    before: Known,
    seen_keys: set[tuple[str, str]],
    result: CatalogResult,
) -> None:
    """Mark dropped (``table.dropped``) the live rows the listing lacks, unless written since
    the listing was read (``before``)."""
    now = await known_tables(conn, cfg)
    missing = {
        table_id: key
        for key, (table_id, _location, dropped) in now.items()
        if key not in seen_keys and not dropped and before.get(key) == now[key]
    }
    if not missing:
        return
    for dropped_row in await conn.fetch(load_query("table_mark_dropped"), list(missing)):
        table_id = dropped_row["id"]
        await _announce(conn, Topic.TABLE_DROPPED, cfg.name, missing[table_id], table_id)
        result.dropped += 1


async def _apply_chunk(
    conn: asyncpg.Connection,
    cfg: CatalogConfig,
    chunk: list[ListedTable],
    before: Known,
    result: CatalogResult,
    seen_keys: set[tuple[str, str]],
) -> None:
    """Record one chunk of a listing inside the caller's transaction.

    An unchanged table costs no statement of its own (one UPDATE touches them all); new tables
    are inserted and announced with one statement each for the chunk; any other write gets a
    savepoint, so whatever Postgres refuses costs that table alone.
    """
    rows = await conn.fetch(
        load_query("table_get_many_by_name"),
        cfg.name,
        [item.ref.namespace for item in chunk],
        [item.ref.name for item in chunk],
    )
    known = {(r["namespace"], r["name"]): r for r in rows}
    sorted_out = _sort_chunk(chunk, known, before, result, seen_keys)
    inserted = await _insert_new(conn, cfg, sorted_out.new, result)
    if inserted is None:  # the chunk's insert was refused: one table at a time finds which
        sorted_out.written.extend(sorted_out.new)
        inserted = {}
    inserted.update(await _write_each(conn, cfg, sorted_out.written, known, result))
    new_etags = sorted_out.new_etags
    for item in chunk:
        table_id = inserted.get((item.ref.namespace, item.ref.name))
        if table_id is not None and item.etag is not None:
            new_etags[table_id] = item.etag
    if sorted_out.unchanged:
        await conn.execute(load_query("table_touch_seen"), sorted_out.unchanged)
    if new_etags:
        await conn.execute(load_query("table_set_etags"), list(new_etags), list(new_etags.values()))


@dataclass
class _SortedChunk:
    """A chunk's tables by what recording them takes: ``unchanged`` row ids (one UPDATE for
    all, with the ``new_etags`` they answered), ``new`` tables (one batch insert), and the
    ``written`` rest (a savepoint each)."""

    unchanged: list[int] = field(default_factory=list)
    new_etags: dict[int, str] = field(default_factory=dict)
    new: list[ListedTable] = field(default_factory=list)
    written: list[ListedTable] = field(default_factory=list)


def _sort_chunk(
    chunk: list[ListedTable],
    known: dict[tuple[str, str], asyncpg.Record],
    before: Known,
    result: CatalogResult,
    seen_keys: set[tuple[str, str]],
) -> _SortedChunk:
    """Sort ``chunk`` against its rows (``known``); an unfit table is skipped, a row written
    since the listing was read, or a 304 for a row no longer live, is left alone."""
    out = _SortedChunk()
    for item in chunk:
        key = (item.ref.namespace, item.ref.name)
        seen_keys.add(key)  # a skipped table is still there: never mark it dropped
        reason = unfit_reason(item)
        if reason is not None:
            _skip(result, key, reason)
            continue
        row = known.get(key)
        if row is not None and before.get(key) != _known_entry(row):
            continue  # written since the listing was read: the listing may be the older one
        if item.not_modified and (row is None or row["dropped_at"] is not None):
            continue  # a 304 only ever confirms the live row its ETag was read from
        if row is None:
            out.new.append(item)
        elif _unchanged(item, row):
            out.unchanged.append(int(row["id"]))
            if item.etag is not None and item.etag != row["catalog_etag"]:
                out.new_etags[int(row["id"])] = item.etag
        else:
            out.written.append(item)
    return out


def _known_entry(row: asyncpg.Record) -> tuple[int, str | None, bool]:
    """A table row as ``Known`` holds it: (id, metadata location, dropped)."""
    return int(row["id"]), row["metadata_location"], row["dropped_at"] is not None


def _unchanged(item: ListedTable, row: asyncpg.Record) -> bool:
    """Whether ``item`` confirms its live row as it is (a 304, or the same or no location)."""
    return item.not_modified or (
        row["dropped_at"] is None and item.metadata_location in (None, row["metadata_location"])
    )


async def _write_each(
    conn: asyncpg.Connection,
    cfg: CatalogConfig,
    written: list[ListedTable],
    known: dict[tuple[str, str], asyncpg.Record],
    result: CatalogResult,
) -> dict[tuple[str, str], int]:
    """Record each of ``written`` in a savepoint of its own (what Postgres refuses is skipped
    alone); the ids recorded, by (namespace, name)."""
    recorded_ids: dict[tuple[str, str], int] = {}
    for item in written:
        key = (item.ref.namespace, item.ref.name)
        try:
            async with conn.transaction():
                recorded = await _apply_one(conn, cfg, item, known.get(key), result)
        except asyncpg.PostgresError as exc:
            _skip(result, key, f"refused by Postgres: {type(exc).__name__}: {exc}")
            continue
        if recorded is not None:
            recorded_ids[key] = recorded[0]
    return recorded_ids


async def _insert_new(
    conn: asyncpg.Connection, cfg: CatalogConfig, items: list[ListedTable], result: CatalogResult
) -> dict[tuple[str, str], int] | None:
    """Insert and announce (``table.discovered``) tables seen for the first time, in one
    savepoint; their ids by (namespace, name), or None when Postgres refused the batch (it is
    rolled back; the caller then records them one by one)."""
    if not items:
        return {}
    try:
        async with conn.transaction():
            rows = await conn.fetch(
                load_query("table_insert_many"),
                cfg.name,
                [item.ref.namespace for item in items],
                [item.ref.name for item in items],
                [item.metadata_location for item in items],
                [json.dumps(item.properties or {}) for item in items],
            )
            ids = {(r["namespace"], r["name"]): int(r["id"]) for r in rows}
            announced = []
            for item in items:
                key = (item.ref.namespace, item.ref.name)
                with _table_span(Topic.TABLE_DISCOVERED, cfg.name, key, ids[key]):
                    payload = {"metadata_location": item.metadata_location}
                    announced.append((ids[key], payload, current_traceparent()))
            await publish_many(conn, Topic.TABLE_DISCOVERED, announced)
    except asyncpg.PostgresError as exc:
        log.info("discovery.batch_refused", catalog=cfg.name, tables=len(items), error=str(exc))
        return None
    result.discovered += len(ids)
    return ids


def _skip(result: CatalogResult, key: tuple[str, str], reason: str) -> None:
    label = ".".join(ascii(p)[1:-1] for p in key)
    result.skipped.append({"table": label, "reason": reason[:500]})
    log.warning("discovery.table_skipped", catalog=result.catalog, table=label, reason=reason)


async def _apply_one(
    conn: asyncpg.Connection,
    cfg: CatalogConfig,
    item: ListedTable,
    row: asyncpg.Record | None,
    result: CatalogResult,
) -> tuple[int, bool] | None:
    """Record one listed table; returns its id and whether it was known and unchanged (None:
    nothing recorded).

    A 304 (``item.not_modified``) only ever confirms the live row its ETag was read from: it
    is unchanged whatever location the row holds now (a pushed change may have moved it
    meanwhile), and a row dropped or gone since is left to the next pass's full load.
    """
    key = (item.ref.namespace, item.ref.name)
    if item.not_modified:
        if row is None or row["dropped_at"] is not None:
            return None
        return int(row["id"]), True
    payload: dict[str, object] = {"metadata_location": item.metadata_location}
    if row is None:
        table_id = await conn.fetchval(
            load_query("table_insert"),
            cfg.name,
            key[0],
            key[1],
            item.metadata_location,
            item.properties or {},
        )
        await _announce(conn, Topic.TABLE_DISCOVERED, cfg.name, key, table_id, payload)
        result.discovered += 1
        return int(table_id), False
    if row["dropped_at"] is not None:
        topic = Topic.TABLE_DISCOVERED
        payload["reappeared"] = True
    elif item.metadata_location is not None and item.metadata_location != row["metadata_location"]:
        topic = Topic.TABLE_CHANGED
        payload["previous_metadata_location"] = row["metadata_location"]
    else:
        return int(row["id"]), True
    await conn.execute(
        load_query("table_update_seen"), row["id"], item.metadata_location, item.properties
    )
    await _announce(conn, topic, cfg.name, key, row["id"], payload)
    if topic == Topic.TABLE_CHANGED:
        result.changed += 1
    else:
        result.discovered += 1
    return int(row["id"]), False


async def apply_change(
    pool: asyncpg.Pool,
    cfg: CatalogConfig,
    levels: tuple[str, ...],
    name: str,
    metadata_location: str | None,
    *,
    dropped: bool = False,
    properties: dict[str, str] | None = None,
    etag: str | None = None,
) -> CatalogResult:
    """Refresh one table of ``cfg`` from a pushed change, exactly as a poll that listed it
    would: the same rows and events, in one transaction under the catalog's lock.

    ``dropped`` marks the table dropped (``table.dropped``); otherwise the table is recorded at
    ``metadata_location`` with ``properties`` (None: not read, the stored ones stand;
    ``table.discovered`` or ``table.changed``,
    nothing when unchanged), with ``etag`` when the load that read ``metadata_location``
    answered one. A table that cannot be recorded is skipped and logged, as in a poll.
    """
    ref = TableRef(cfg.name, join_namespace(levels), name)
    key = (ref.namespace, name)
    result = CatalogResult(cfg.name, tables=1)
    async with pool.acquire() as raw, raw.transaction():
        conn = cast(asyncpg.Connection, raw)
        await conn.execute(load_query("table_lock_catalog"), cfg.name)
        row = await conn.fetchrow(load_query("table_get_by_name"), cfg.name, *key)
        if dropped:
            if row is not None and row["dropped_at"] is None:
                for gone in await conn.fetch(load_query("table_mark_dropped"), [row["id"]]):
                    await _announce(conn, Topic.TABLE_DROPPED, cfg.name, key, gone["id"])
                    result.dropped += 1
            return result
        item = ListedTable(ref, metadata_location, properties)
        reason = unfit_reason(item)
        if reason is not None:
            _skip(result, key, reason)
            return result
        recorded = await _apply_one(conn, cfg, item, row, result)
        if recorded is not None and recorded[1]:
            await conn.execute(load_query("table_touch_seen"), [recorded[0]])
        if recorded is not None and etag is not None:
            await conn.execute(load_query("table_set_etags"), [recorded[0]], [etag])
    return result


async def refresh_table(
    pool: asyncpg.Pool,
    catalogs: CatalogSet,
    cfg: CatalogConfig,
    levels: tuple[str, ...],
    name: str,
) -> CatalogResult:
    """Load one named table from its catalog and record what it is now (a targeted refresh: no
    listing). A table the catalog no longer has is marked dropped.

    Raises:
        Exception: the catalog could not be reached or the table could not be loaded; nothing
            was written (the caller retries or leaves it to the next poll).
    """
    from pyiceberg.exceptions import NoSuchTableError

    catalog = await catalogs.get(cfg.name)
    ref = TableRef(cfg.name, join_namespace(levels), name)
    if not table_selected(cfg, ref.namespace, name):
        return CatalogResult(cfg.name)
    try:
        listed = await load_listed(catalog, cfg, ref, catalogs.gates[cfg.name])
    except NoSuchTableError:
        return await apply_change(pool, cfg, levels, name, None, dropped=True)
    return await apply_change(
        pool,
        cfg,
        levels,
        name,
        listed.metadata_location,
        properties=listed.properties,
        etag=listed.etag,
    )


async def stored_etags(pool: asyncpg.Pool, cfg: CatalogConfig) -> dict[tuple[str, str], StoredEtag]:
    """The ETags stored for ``cfg``'s live tables, by (namespace, name), when its loads are
    conditional (a REST catalog with ``conditional_loads``); empty otherwise."""
    if cfg.type != "rest" or not cfg.conditional_loads:
        return {}
    rows = await pool.fetch(load_query("table_list_etags"), cfg.name)
    return {
        (r["namespace"], r["name"]): StoredEtag(r["metadata_location"], r["catalog_etag"])
        for r in rows
    }


async def refresh_catalog(
    pool: asyncpg.Pool,
    catalogs: CatalogSet,
    cfg: CatalogConfig,
    time_limit: float = CATALOG_TIMEOUT_SECONDS,
) -> CatalogResult:
    """List one catalog and apply the listing; on failure record the error and keep ``tables``."""

    calls = CatalogCalls()

    async def listing() -> tuple[Known, list[ListedTable], list[UnmaintainedTable]]:
        catalog = await catalogs.get(cfg.name)
        gate = catalogs.gates[cfg.name]
        before = await known_tables(pool, cfg)  # read first: see apply_listing
        stored = await stored_etags(pool, cfg)
        left_out: list[ListedTable] = []
        listed = await list_table_locations(catalog, cfg, gate, calls, stored, left_out)
        recorded = await recorded_unmaintained(pool, cfg)
        others = await read_unmaintained(catalog, cfg, gate, calls, left_out, recorded)
        return before, listed, others

    try:
        before, listed, others = await asyncio.wait_for(listing(), time_limit)
    except Exception as exc:
        catalogs.forget(cfg.name)  # reconnect (and re-authenticate) next time
        detail = str(exc).strip() or repr(exc)
        if isinstance(exc, TimeoutError):
            detail = f"listing took longer than {time_limit:g}s"
        error = storable(redact_text(f"{type(exc).__name__}: {detail}"))[:2000]
        log.warning("discovery.catalog_failed", catalog=cfg.name, error=error)
        await pool.execute(load_query("catalog_status_error"), cfg.name, error)
        return CatalogResult(cfg.name, error=error)
    result = await apply_listing(pool, cfg, listed, calls, before, others)
    log.info(
        "discovery.catalog_refreshed",
        catalog=cfg.name,
        tables=result.tables,
        discovered=result.discovered,
        changed=result.changed,
        dropped=result.dropped,
        unmaintained=result.unmaintained,
    )
    return result


class Discovery:
    """Discovery of every configured catalog; ``run_once`` is one pass."""

    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        catalogs: CatalogSet | None = None,
        timeout: float = CATALOG_TIMEOUT_SECONDS,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.configs = settings.effective_catalogs()
        self.catalogs = catalogs or CatalogSet(self.configs)
        self.timeout = timeout
        self.policies = PolicySources()  # Polaris catalogs' policies (icepack_core.polaris)

    async def mark_listing_started(self) -> None:
        """Record that discovery (re)started listing every configured catalog: until each
        finishes a listing, the location checks of actions that delete or move files refuse
        (``safety.confinement``), since a table created meanwhile is not known yet."""
        await self.pool.execute(
            load_query("catalog_status_listing_started"), [cfg.name for cfg in self.configs]
        )

    async def run_once(self) -> DiscoveryResult:
        """Refresh every catalog concurrently; one failing catalog does not stop the others."""
        results = await asyncio.gather(*(self._refresh(cfg) for cfg in self.configs))
        return DiscoveryResult(list(results))

    async def _refresh(self, cfg: CatalogConfig) -> CatalogResult:
        """List ``cfg``, then (a Polaris catalog) refresh its policies; a policy failure is
        recorded by ``polaris.refresh`` and never fails the listing."""
        result = await refresh_catalog(self.pool, self.catalogs, cfg, self.timeout)
        gate = self.catalogs.gates[cfg.name]
        await self.policies.refresh(self.pool, cfg, gate, datetime.now(UTC))
        return result
