"""Changes pushed from SQL catalogs: a commit becomes an event without waiting for a poll.

Real components: the SQL catalog's own Postgres database with the trigger discovery installs,
commits from PyIceberg and from Spark (Iceberg's JdbcCatalog), and the watcher LISTENing as the
discovery service runs it. No poll runs in these tests unless the test says so, so an event can
only come from the push path (or from the watcher's catch-up after a (re)connect, counted).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from icepack_core.discovery.catalogs import CatalogSet
from icepack_core.discovery.push import (
    APPLICATION_NAME,
    CHANNEL,
    CatalogWatcher,
    catalog_dsn,
    parse_change,
)
from icepack_core.discovery.refresh import Discovery
from icepack_core.settings import CatalogConfig, Settings, load_settings
from tests.plugins.catalogs import rows
from tests.support.waiting import eventually

DEADLINE = 30.0


async def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
    """Wait for ``condition()`` (a value or an awaitable) to be truthy, failing at ``timeout``."""

    async def probe() -> object:
        value = condition()
        return await value if inspect.isawaitable(value) else value

    await eventually(probe, timeout=timeout, what=what)


async def table_events(db: asyncpg.Pool, name: str) -> list[tuple[str, str | None]]:
    """(topic, metadata_location in the payload) of every event of table ``name``, in order."""
    recs = await db.fetch(
        "SELECT e.topic, e.payload->>'metadata_location' AS loc FROM icepack.events e "
        "JOIN icepack.tables t ON t.id = e.table_id WHERE t.name = $1 ORDER BY e.id",
        name,
    )
    return [(r["topic"], r["loc"]) for r in recs]


@contextlib.asynccontextmanager
async def watching(db: asyncpg.Pool, cfg: CatalogConfig) -> AsyncIterator[CatalogWatcher]:
    """A running watcher, connected and past its first catch-up."""
    watcher = CatalogWatcher(db, CatalogSet([cfg]), cfg, liveness_interval=0.5)
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        await wait_until(lambda: watcher.catch_ups >= 1, DEADLINE, "the watcher to connect")
        yield watcher
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_pyiceberg_commits_are_pushed_as_events(
    db: asyncpg.Pool, scratch_catalog: tuple[CatalogConfig, SqlCatalog]
) -> None:
    cfg, catalog = scratch_catalog
    cfg = cfg.model_copy(update={"notify": True})
    catalog.create_namespace("ns")
    async with watching(db, cfg) as watcher:
        table = catalog.create_table("ns.pushed", rows(0).schema)
        await wait_until_events(db, "pushed", ["table.discovered"])
        table.append(rows(3))
        location = catalog.load_table("ns.pushed").metadata_location
        await wait_until_events(db, "pushed", ["table.discovered", "table.changed"])
        assert (await table_events(db, "pushed"))[-1] == ("table.changed", location)
        catalog.drop_table("ns.pushed")
        await wait_until_events(
            db, "pushed", ["table.discovered", "table.changed", "table.dropped"]
        )
        assert watcher.catch_ups == 1  # only the first one: everything else was pushed
        assert watcher.applied >= 3
    row = await db.fetchrow(
        "SELECT metadata_location, dropped_at FROM icepack.tables WHERE name = 'pushed'"
    )
    assert row is not None
    assert row["metadata_location"] == location and row["dropped_at"] is not None


async def wait_until_events(db: asyncpg.Pool, name: str, topics: list[str]) -> None:
    async def arrived() -> bool:
        return [t for t, _ in await table_events(db, name)] == topics

    await wait_until(arrived, DEADLINE, f"events {topics} of {name}")


async def test_a_commit_missed_while_away_is_caught_on_reconnect_and_by_polling(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    cfg, catalog = scratch_catalog
    cfg = cfg.model_copy(update={"notify": True})
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.away", rows(0).schema)
    async with watching(db, cfg):
        await wait_until_events(db, "away", ["table.discovered"])

    table.append(rows(2))  # nobody listens: the notification is lost
    await asyncio.sleep(0)
    assert [t for t, _ in await table_events(db, "away")] == ["table.discovered"]
    # Polling, the safety net, catches it exactly once.
    discovery = Discovery(
        load_settings(database_url=database_url, data_dir=tmp_path / "d", catalogs=[cfg]), db
    )
    result = await discovery.run_once()
    assert result.changed == 1
    assert [t for t, _ in await table_events(db, "away")] == ["table.discovered", "table.changed"]

    table.append(rows(2))  # missed again; this time a (re)connecting watcher catches up
    async with watching(db, cfg) as watcher:
        await wait_until_events(db, "away", ["table.discovered", "table.changed", "table.changed"])
        assert watcher.applied == 0  # caught by the catch-up, not by a notification


async def test_the_watcher_reconnects_after_its_connection_is_killed(
    db: asyncpg.Pool, scratch_catalog: tuple[CatalogConfig, SqlCatalog]
) -> None:
    cfg, catalog = scratch_catalog
    cfg = cfg.model_copy(update={"notify": True})
    catalog.create_namespace("ns")
    async with watching(db, cfg) as watcher:
        admin = await asyncpg.connect(catalog_dsn(cfg))
        try:
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = $1",
                APPLICATION_NAME,
            )
        finally:
            await admin.close()
        assert killed >= 1
        await wait_until(lambda: watcher.listener.connections >= 2, DEADLINE, "a reconnect")
        await wait_until(lambda: watcher.catch_ups >= 2, DEADLINE, "the catch-up")
        catalog.create_table("ns.after", rows(0).schema)
        await wait_until_events(db, "after", ["table.discovered"])


@pytest.mark.spark
async def test_a_spark_commit_is_pushed(
    db: asyncpg.Pool, spark: Any, spark_catalog_settings: Settings
) -> None:
    (cfg,) = spark_catalog_settings.effective_catalogs()
    cfg = cfg.model_copy(update={"notify": True, "include": ["push_ns"]})
    spark.sql("CREATE NAMESPACE IF NOT EXISTS icepack.push_ns")
    spark.sql("DROP TABLE IF EXISTS icepack.push_ns.sparked")
    async with watching(db, cfg):
        await asyncio.to_thread(
            spark.sql, "CREATE TABLE icepack.push_ns.sparked (id bigint) USING iceberg"
        )
        await wait_until_events(db, "sparked", ["table.discovered"])
        await asyncio.to_thread(
            lambda: spark.sql("INSERT INTO icepack.push_ns.sparked VALUES (1), (2)").collect()
        )
        await wait_until_events(db, "sparked", ["table.discovered", "table.changed"])
    count = await asyncio.to_thread(
        lambda: spark.sql("SELECT count(*) AS n FROM icepack.push_ns.sparked").collect()[0]["n"]
    )
    assert count == 2


def test_malformed_notifications_are_ignored_not_fatal() -> None:
    assert parse_change("not json") is None
    assert parse_change('{"namespace": "x"}') is None
    overflow = parse_change('{"catalog": "c", "overflow": true}')
    assert overflow is not None and overflow.overflow
    change = parse_change(
        '{"op": "DELETE", "catalog": "c", "namespace": "a.b", "table": "t",'
        ' "metadata_location": null}'
    )
    assert change is not None and change.dropped and change.namespace == "a.b"


async def test_a_forged_notification_changes_only_what_the_catalog_says(
    db: asyncpg.Pool, scratch_catalog: tuple[CatalogConfig, SqlCatalog]
) -> None:
    """Any role that can connect to the catalog's database can NOTIFY. A notification names a
    table to look at; whether it exists and where its metadata is come from the catalog's row."""
    cfg, catalog = scratch_catalog
    cfg = cfg.model_copy(update={"notify": True})
    catalog.create_namespace("ns")
    catalog.create_table("ns.real", rows(0).schema)
    real = catalog.load_table("ns.real").metadata_location
    forged = [
        {"op": "DELETE", "catalog": cfg.name, "namespace": "ns", "table": "real"},
        {
            "op": "UPDATE",
            "catalog": cfg.name,
            "namespace": "ns",
            "table": "real",
            "metadata_location": "file:///elsewhere/00009-x.metadata.json",
        },
        {
            "op": "INSERT",
            "catalog": cfg.name,
            "namespace": "ns",
            "table": "ghost",
            "metadata_location": "file:///elsewhere/00001-y.metadata.json",
        },
    ]
    async with watching(db, cfg) as watcher:
        await wait_until_events(db, "real", ["table.discovered"])
        conn = await asyncpg.connect(catalog_dsn(cfg))
        try:
            for payload in forged:
                await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, json.dumps(payload))
        finally:
            await conn.close()
        await wait_until(lambda: watcher.applied >= 3, DEADLINE, "the notifications handled")
    row = await db.fetchrow(
        "SELECT metadata_location, dropped_at FROM icepack.tables WHERE name = 'real'"
    )
    assert row is not None
    assert row["dropped_at"] is None and row["metadata_location"] == real
    assert [t for t, _ in await table_events(db, "real")] == ["table.discovered"]
    assert await db.fetchval("SELECT count(*) FROM icepack.tables WHERE name = 'ghost'") == 0
