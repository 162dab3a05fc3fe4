"""Changes pushed in from SQL catalogs in Postgres: commit -> ``NOTIFY`` -> ``table.changed``.

The PyIceberg SQL catalog and Iceberg Java's ``JdbcCatalog`` keep one row per table in
``iceberg_tables`` and commit by updating its ``metadata_location``. For a catalog configured
with ``notify: true``, discovery installs (idempotently) a trigger on that table which sends
``NOTIFY icepack_catalog_change`` with the catalog, namespace, table and new location, and a
``CatalogWatcher`` LISTENs on the catalog's database and refreshes just that table, through the
same code as a poll (``refresh.apply_change``), in the same transaction as its events.

A notification is only a hint of which table to look at. Any role that can connect to the
catalog's database can ``NOTIFY``, so the table's location, and whether it still exists, are
read from the catalog's own row, never taken from the payload: a forged "dropped" would
otherwise take a live table out of the location-overlap checks of orphan removal.

The trigger must never break a writer's commit: it catches every error of its own, and a
payload too large for ``NOTIFY`` (8000 bytes) becomes ``{"overflow": true}``, on which the
watcher refreshes the whole catalog. After every (re)connect the watcher refreshes the whole
catalog once, so notifications sent while it was away are caught at once; whatever is still
missed is caught by the next poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Any

import asyncpg
import structlog

from icepack_core.discovery.catalogs import CatalogSet, sql_table_row, table_selected
from icepack_core.discovery.refresh import CATALOG_TIMEOUT_SECONDS, apply_change, refresh_catalog
from icepack_core.queue.events import Listener
from icepack_core.settings import CatalogConfig
from icepack_core.telemetry.logs import redact_text
from icepack_core.types import join_namespace

CHANNEL = "icepack_catalog_change"
APPLICATION_NAME = "icepack-discovery-push"  # how the LISTEN connection shows in pg_stat_activity
log = structlog.get_logger("icepack.discovery.push")

# Installed in the catalog's database. CREATE OR REPLACE keeps concurrent replicas harmless.
INSTALL_TRIGGER = f"""
CREATE OR REPLACE FUNCTION icepack_notify_table_change() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    r record;
    payload text;
BEGIN
    IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
    IF TG_OP = 'UPDATE' AND NEW.metadata_location IS NOT DISTINCT FROM OLD.metadata_location
       AND NEW.table_name = OLD.table_name AND NEW.table_namespace = OLD.table_namespace THEN
        RETURN NULL;
    END IF;
    payload := json_build_object(
        'op', TG_OP, 'catalog', r.catalog_name, 'namespace', r.table_namespace,
        'table', r.table_name,
        'metadata_location', CASE WHEN TG_OP = 'DELETE' THEN NULL ELSE r.metadata_location END
    )::text;
    IF octet_length(payload) > 7900 THEN
        payload := json_build_object('catalog', r.catalog_name, 'overflow', true)::text;
    END IF;
    PERFORM pg_notify('{CHANNEL}', payload);
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;  -- a notification is a hint; the writer's commit matters more
END
$fn$;
CREATE OR REPLACE TRIGGER icepack_notify_table_change
    AFTER INSERT OR UPDATE OR DELETE ON iceberg_tables
    FOR EACH ROW EXECUTE FUNCTION icepack_notify_table_change();
"""


@dataclass(frozen=True, slots=True)
class PushedChange:
    """One notification, parsed: a table committed (or was dropped), or ``overflow``."""

    catalog: str
    namespace: str = ""
    table: str = ""
    metadata_location: str | None = None
    dropped: bool = False
    overflow: bool = False


def parse_change(payload: str) -> PushedChange | None:
    """The change a notification describes, or None for anything malformed (logged)."""
    try:
        data: Any = json.loads(payload)
        if data.get("overflow"):
            return PushedChange(catalog=str(data["catalog"]), overflow=True)
        return PushedChange(
            catalog=str(data["catalog"]),
            namespace=str(data["namespace"]),
            table=str(data["table"]),
            metadata_location=data.get("metadata_location"),
            dropped=data.get("op") == "DELETE",
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        log.warning("discovery.push_malformed", payload=payload[:200])
        return None


def catalog_dsn(cfg: CatalogConfig) -> str:
    """The asyncpg DSN of a SQL catalog's database (SQLAlchemy's ``+driver`` removed)."""
    assert cfg.uri is not None
    scheme, sep, rest = cfg.uri.partition("://")
    return f"{scheme.split('+', 1)[0]}{sep}{rest}"


class CatalogWatcher:
    """LISTENs for pushed commits of one SQL catalog and refreshes the tables they name."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        catalogs: CatalogSet,
        cfg: CatalogConfig,
        timeout: float = CATALOG_TIMEOUT_SECONDS,
        liveness_interval: float = 5.0,
    ) -> None:
        self.pool = pool
        self.catalogs = catalogs
        self.cfg = cfg
        self.timeout = timeout
        self.pending: list[str] = []
        self.listener = Listener(
            self._connect, liveness_interval, channel=CHANNEL, on_payload=self.pending.append
        )
        self.applied = 0  # pushed changes applied so far (tests and logs)
        self.catch_ups = 0  # whole-catalog refreshes after a (re)connect or an overflow

    async def _connect(self) -> asyncpg.Connection:
        conn: asyncpg.Connection = await asyncpg.connect(
            catalog_dsn(self.cfg),
            timeout=10,
            server_settings={"application_name": APPLICATION_NAME},
        )
        try:
            # The catalog creates iceberg_tables on first use: make sure it exists first.
            await self.catalogs.get(self.cfg.name)
            await conn.execute(INSTALL_TRIGGER)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def run(self, stop: asyncio.Event) -> None:
        """Listen and apply until ``stop``; one bad change is logged, never fatal."""
        wake = self.listener.subscribe()
        listening = asyncio.create_task(self.listener.run(stop))
        stop_wait = asyncio.ensure_future(stop.wait())
        seen_connections = 0
        try:
            while not stop.is_set():
                wake_wait = asyncio.ensure_future(wake.wait())
                await asyncio.wait({wake_wait, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                wake_wait.cancel()
                wake.clear()
                if stop.is_set():
                    break
                batch, self.pending[:] = list(self.pending), []
                try:
                    if self.listener.connections != seen_connections:
                        seen_connections = self.listener.connections
                        await self._catch_up("connected")
                        continue  # the whole catalog was just read: the batch is in it
                    await self._apply(batch)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # one bad round never stops discovery
                    log.exception(
                        "discovery.push_failed",
                        catalog=self.cfg.name,
                        error=redact_text(f"{type(exc).__name__}: {exc}"),
                    )
        finally:
            stop_wait.cancel()
            listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listening

    async def _catch_up(self, why: str) -> None:
        self.catch_ups += 1
        result = await refresh_catalog(self.pool, self.catalogs, self.cfg, self.timeout)
        log.info(
            "discovery.push_catch_up",
            catalog=self.cfg.name,
            why=why,
            discovered=result.discovered,
            changed=result.changed,
            dropped=result.dropped,
        )

    async def _apply(self, payloads: list[str]) -> None:
        changes = [
            c for p in payloads if (c := parse_change(p)) is not None and c.catalog == self.cfg.name
        ]
        if any(c.overflow for c in changes):
            await self._catch_up("overflow")
            return
        for change in changes:
            levels = tuple(change.namespace.split("."))  # the SQL catalog's own key
            if not table_selected(self.cfg, join_namespace(levels), change.table):
                continue
            catalog = await self.catalogs.get(self.cfg.name)
            exists, location = await asyncio.to_thread(
                self.catalogs.gates[self.cfg.name].call,
                "query",
                None,
                sql_table_row,
                catalog,
                change.namespace,
                change.table,
            )
            await apply_change(
                self.pool, self.cfg, levels, change.table, location, dropped=not exists
            )
            self.applied += 1
