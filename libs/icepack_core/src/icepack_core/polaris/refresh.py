"""Refresh a Polaris catalog's policies into ``icepack.polaris_policies``, at fleet cost.

Polaris answers ``applicable-policies`` for one target: the catalog, a namespace, or a table
(with what it inherits). It has no call that lists a policy's mappings, so a policy attached to
a table is seen only by asking for that table. One pass (``refresh_policies``) therefore reads:

* the catalog's and each namespace's applicable policies once their last read is older than
  ``polaris_namespace_ttl_seconds`` (default 5 min): one request per namespace, not per table;
  from a namespace's answer only the policies attached to it (``inherited: false``) are kept,
  the inherited ones being the catalog's or a parent's, read for those;
* tables whose last read is older than ``polaris_table_ttl_seconds`` (default 6 h), never-read
  tables first, and at least the rolling share of the oldest read (tables x time since the
  last pass / period, so the reads spread evenly), at most ``polaris_max_table_reads_per_pass``
  (default 500) per pass, keeping only what is attached to the table itself. A new table is
  read within a pass or two; a table-level attach, detach or edit in Polaris is seen within
  the table period.

Every request goes through the catalog's ``CatalogGate`` (limits, counted as ``policy``), pages
followed. A 404 for a table (gone, or not visible) records it without policies. Any other
failure ends the pass: the rows of the targets not read stay as they were (the last known
policies, shown with their fetch time and the failure), and ``polaris_sources.last_error``
records why. Discovery calls this after its listing; a failure never stops discovery.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

import asyncpg
import structlog

from icepack_core.db.queries import load_query
from icepack_core.db.text import storable
from icepack_core.discovery.limits import CatalogCalls, CatalogGate
from icepack_core.polaris.client import PolarisClient, PolarisNotFound, PolarisUnavailable
from icepack_core.polaris.mapping import PolarisPolicy, map_policy
from icepack_core.settings import CatalogConfig
from icepack_core.telemetry.logs import redact_text
from icepack_core.types import join_namespace, split_namespace

log = structlog.get_logger("icepack.polaris")
Scope = Literal["catalog", "namespace", "table"]


@dataclass(frozen=True)
class Target:
    """One thing Polaris answers applicable policies for."""

    scope: Scope
    namespace: str = ""  # join_namespace form
    table: str = ""


@dataclass
class PolicyPass:
    """What one refresh pass did."""

    catalog: str
    is_polaris: bool = False
    requests: int = 0
    targets_read: int = 0
    tables_read: int = 0
    error: str | None = None


async def is_polaris(pool: asyncpg.Pool, cfg: CatalogConfig, client: PolarisClient) -> bool:
    """``cfg.polaris``, or the detected answer (detected once, then kept in the database).

    Raises:
        PolarisUnavailable: detection could not tell.
    """
    if cfg.type != "rest":
        return False
    if cfg.polaris is not None:
        found = cfg.polaris
    else:
        row = await pool.fetchrow(load_query("polaris_source_get"), cfg.name)
        if row is not None:
            return bool(row["is_polaris"])
        found = await asyncio.to_thread(client.detect, None)
    await pool.execute(load_query("polaris_source_detected"), cfg.name, found)
    return found


async def due_targets(
    pool: asyncpg.Pool, cfg: CatalogConfig, now: datetime
) -> tuple[list[Target], list[Target]]:
    """The catalog and namespace targets due now, and the due tables (at most the per-pass
    limit, oldest read first)."""
    fresh_ns = now - timedelta(seconds=cfg.polaris_namespace_ttl_seconds)
    upper: list[Target] = []
    checked = await pool.fetchval(load_query("polaris_target_checked"), cfg.name, "catalog", "", "")
    if checked is None or checked < fresh_ns:
        upper.append(Target("catalog"))
    seen: dict[str, datetime | None] = {}
    for row in await pool.fetch(load_query("polaris_due_namespaces"), cfg.name):
        levels = split_namespace(row["namespace"])
        seen[row["namespace"]] = row["checked_at"]
        for depth in range(1, len(levels)):  # parents hold policies their tables inherit
            seen.setdefault(join_namespace(levels[:depth]), None)
    for namespace, at in sorted(seen.items()):
        if at is None:
            at = await pool.fetchval(
                load_query("polaris_target_checked"), cfg.name, "namespace", namespace, ""
            )
        if at is None or at < fresh_ns:
            upper.append(Target("namespace", namespace))
    return upper, await _due_tables(pool, cfg, now)


async def _due_tables(pool: asyncpg.Pool, cfg: CatalogConfig, now: datetime) -> list[Target]:
    """The tables to read this pass: every overdue one (never read, or read a period ago),
    and at least the rolling share ``tables x time since the last pass / period`` (rounded
    down) of the oldest read, so reads spread evenly over the period instead of recurring in
    the burst of the first pass; at most ``polaris_max_table_reads_per_pass``."""
    limit = cfg.polaris_max_table_reads_per_pass
    query = load_query("polaris_due_tables")
    fresh = now - timedelta(seconds=cfg.polaris_table_ttl_seconds)
    rows = await pool.fetch(query, cfg.name, fresh, limit)
    last_pass = await pool.fetchval(load_query("polaris_source_last_pass"), cfg.name)
    if last_pass is not None and len(rows) < limit:
        elapsed = max(0.0, (now - last_pass).total_seconds())
        tables = await pool.fetchval(load_query("polaris_table_count"), cfg.name)
        share = math.floor(tables * elapsed / cfg.polaris_table_ttl_seconds)
        if share > len(rows):
            rows = await pool.fetch(query, cfg.name, now, min(limit, share))
    return [Target("table", r["namespace"], r["name"]) for r in rows]


def _read(client: PolarisClient, target: Target, calls: CatalogCalls) -> list[PolarisPolicy]:
    """``target``'s own policies (not those it inherits); a table Polaris does not know has
    none."""
    namespace = split_namespace(target.namespace) if target.namespace else None
    try:
        found = client.applicable(namespace, target.table or None, calls)
    except PolarisNotFound:
        if target.scope == "catalog":
            raise
        return []
    return [p for p in found if not p.inherited]


async def _store(
    pool: asyncpg.Pool,
    cfg: CatalogConfig,
    target: Target,
    policies: list[PolarisPolicy],
    now: datetime,
) -> None:
    key = (cfg.name, target.scope, target.namespace, target.table)
    namespace = split_namespace(target.namespace) if target.namespace else ()
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(load_query("polaris_target_clear"), *key)
        for policy in policies:
            att = map_policy(policy, cfg.name, target.scope, namespace, target.table, now)
            await conn.execute(
                load_query("polaris_policy_insert"),
                *key,
                att.policy_type,
                storable(att.name or ""),
                att.version or 0,
                att.enabled,
                dict(att.config),
                {k: _shown(v) for k, v in att.unknown.items()},
                att.invalid,
                now,
            )
        await conn.execute(load_query("polaris_target_mark"), *key, now)


def _shown(value: object) -> object:
    """An unknown key's value as kept: scalars as they are, anything else as text."""
    if isinstance(value, bool | int | float) or value is None:
        return value
    return storable(str(value))[:1000]


async def _read_all(
    pool: asyncpg.Pool,
    cfg: CatalogConfig,
    client: PolarisClient,
    targets: list[Target],
    calls: CatalogCalls,
    now: datetime,
) -> int:
    """Read and store ``targets``, ``cfg.max_concurrent_requests`` at a time (the gate holds
    the rate); the number read. Raises the first ``PolarisUnavailable``."""
    read = 0
    width = max(1, cfg.max_concurrent_requests)
    for start in range(0, len(targets), width):
        chunk = targets[start : start + width]
        answers = await asyncio.gather(
            *(asyncio.to_thread(_read, client, t, calls) for t in chunk), return_exceptions=True
        )
        for target, answer in zip(chunk, answers, strict=True):
            if isinstance(answer, BaseException):
                raise answer
            await _store(pool, cfg, target, answer, now)
            read += 1
    return read


async def refresh_policies(
    pool: asyncpg.Pool, cfg: CatalogConfig, client: PolarisClient, now: datetime
) -> PolicyPass:
    """One refresh pass over ``cfg`` (see the module). Never raises for Polaris' sake: a
    failure is in the result and in ``polaris_sources``."""
    result = PolicyPass(cfg.name)
    calls = CatalogCalls()
    try:
        result.is_polaris = await is_polaris(pool, cfg, client)
        if not result.is_polaris:
            return result
        upper, tables = await due_targets(pool, cfg, now)
        result.targets_read = await _read_all(pool, cfg, client, upper, calls, now)
        result.tables_read = await _read_all(pool, cfg, client, tables, calls, now)
        result.targets_read += result.tables_read
    except (PolarisUnavailable, OSError) as exc:
        result.error = storable(redact_text(f"{type(exc).__name__}: {exc}"))[:2000]
        log.warning("polaris.refresh_failed", catalog=cfg.name, error=result.error)
    result.requests = calls.as_json().get("policy", 0)
    if result.is_polaris or result.error is not None:
        await pool.execute(
            load_query("polaris_source_pass"), cfg.name, now, result.requests, result.error
        )
    return result


class PolicySources:
    """Discovery's Polaris policy refresh: one client per REST catalog, kept for the
    process's life (its token with it), each catalog's requests through its gate."""

    def __init__(self) -> None:
        self._clients: dict[str, PolarisClient] = {}

    async def refresh(
        self, pool: asyncpg.Pool, cfg: CatalogConfig, gate: CatalogGate, now: datetime
    ) -> PolicyPass | None:
        """One pass over ``cfg`` (None: not a REST catalog, or ``polaris: false``)."""
        if cfg.type != "rest" or cfg.polaris is False:
            return None
        client = self._clients.get(cfg.name)
        if client is None:
            client = self._clients[cfg.name] = PolarisClient(cfg, gate)
        try:
            return await refresh_policies(pool, cfg, client, now)
        except Exception as exc:  # contained: discovery goes on (the database may be down)
            log.warning("polaris.refresh_crashed", catalog=cfg.name, error=type(exc).__name__)
            return PolicyPass(cfg.name, error=type(exc).__name__)

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
