"""Change hints pushed through the gateway (``POST /hooks/catalog-events``), applied by discovery.

The gateway records a hint (``record_hint``): one ``catalog_hints`` row per table, so duplicates
coalesce into the waiting row, and a ``catalog.hinted`` event in the same transaction wakes
discovery. ``HintConsumer`` claims due hints for a while (a claimer that dies gives them back),
refreshes each named table alone (``refresh.refresh_table``: one load, never a listing; an
unknown table is discovered that way, a table its catalog no longer has is marked dropped), and
deletes the hint unless it was received again meanwhile. A hint whose metadata location is the
one Icepack already has needs no load at all. A refresh that fails is retried with a growing
delay and given up after ``MAX_ATTEMPTS`` (the next poll covers the table); a hint for a catalog
discovery does not have is dropped with a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

import asyncpg
import structlog

from icepack_core.db.pool import Conn
from icepack_core.db.queries import load_query
from icepack_core.db.text import storable
from icepack_core.discovery.catalogs import CatalogSet
from icepack_core.discovery.refresh import refresh_table
from icepack_core.queue.events import publish
from icepack_core.settings import CatalogConfig
from icepack_core.telemetry.logs import redact_text
from icepack_core.types import Topic, join_namespace, split_namespace

CLAIM_BATCH = 50
CLAIM_SECONDS = 120.0  # longer than any single-table load; a dead claimer's hints come back
RETRY_SECONDS = 15.0  # times the attempt number
MAX_ATTEMPTS = 5
IDLE_SECONDS = 5.0  # a missed wake-up costs at most this
log = structlog.get_logger("icepack.discovery.hints")


async def record_hint(
    conn: Conn, catalog: str, levels: tuple[str, ...], name: str, metadata_location: str | None
) -> tuple[bool, int]:
    """Record a pushed change in the caller's transaction; returns (new row, times received)."""
    namespace = join_namespace(levels)
    row = await conn.fetchrow(
        load_query("catalog_hint_upsert"), catalog, namespace, name, metadata_location
    )
    assert row is not None
    await publish(
        conn,
        Topic.CATALOG_HINTED,
        payload={"catalog": catalog, "namespace": namespace, "table": name},
    )
    return bool(row["created"]), int(row["received_count"])


class HintConsumer:
    """Applies recorded hints for the catalogs in ``configs``."""

    def __init__(
        self, pool: asyncpg.Pool, catalogs: CatalogSet, configs: Mapping[str, CatalogConfig]
    ) -> None:
        self.pool = pool
        self.catalogs = catalogs
        self.configs = dict(configs)
        self.applied = 0  # hints handled (tests and logs)
        self.loads_saved = 0  # hints whose location Icepack already had: no catalog call

    async def run(self, stop: asyncio.Event, wake: asyncio.Event) -> None:
        """Drain due hints whenever ``wake`` is set (and every ``IDLE_SECONDS``) until ``stop``."""
        while not stop.is_set():
            wake.clear()
            try:
                await self.drain()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database went away: the next round tries again
                log.warning("discovery.hints_failed", error=redact_text(f"{exc!r}"))
            waiters = {asyncio.ensure_future(wake.wait()), asyncio.ensure_future(stop.wait())}
            try:
                await asyncio.wait(
                    waiters, timeout=IDLE_SECONDS, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for waiter in waiters:
                    waiter.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await waiter

    async def drain(self) -> int:
        """Handle every due hint; returns how many were handled."""
        handled = 0
        while True:
            hints = await self.pool.fetch(
                load_query("catalog_hint_claim"), CLAIM_BATCH, CLAIM_SECONDS
            )
            if not hints:
                return handled
            for hint in hints:
                await self._handle(hint)
                handled += 1

    async def _handle(self, hint: asyncpg.Record) -> None:
        key = (hint["catalog"], hint["namespace"], hint["name"])
        cfg = self.configs.get(hint["catalog"])
        if cfg is None:
            log.warning("discovery.hint_unknown_catalog", catalog=key[0])
            await self.pool.execute(load_query("catalog_hint_drop"), *key)
            return
        try:
            if not await self._already_known(hint):
                await refresh_table(self.pool, self.catalogs, cfg, split_namespace(key[1]), key[2])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = storable(redact_text(f"{type(exc).__name__}: {exc}"))[:2000]
            if hint["attempts"] >= MAX_ATTEMPTS:
                log.warning(
                    "discovery.hint_given_up",
                    catalog=key[0],
                    table=f"{key[1]}.{key[2]}",
                    attempts=hint["attempts"],
                    error=error,
                )
                await self.pool.execute(load_query("catalog_hint_drop"), *key)
            else:
                await self.pool.execute(
                    load_query("catalog_hint_failed"), *key, RETRY_SECONDS * hint["attempts"], error
                )
            return
        await self.pool.execute(load_query("catalog_hint_done"), *key, hint["received_at"])
        self.applied += 1

    async def _already_known(self, hint: asyncpg.Record) -> bool:
        """Whether the hint names the metadata location Icepack already has for a live table."""
        if hint["metadata_location"] is None:
            return False
        row = await self.pool.fetchrow(
            load_query("table_get_by_name"), hint["catalog"], hint["namespace"], hint["name"]
        )
        known = (
            row is not None
            and row["dropped_at"] is None
            and row["metadata_location"] == hint["metadata_location"]
        )
        if known:
            self.loads_saved += 1
        return known
