"""The demo lake (``icepack demo``): four small Iceberg tables in the embedded catalog, written by
Spark, each needing a different kind of maintenance, and a live summary of the fleet's way back
to health, read from Postgres.

* ``demo.events``: tiny appends of two files each -> ``SMALL_FILES``; compaction heals it.
* ``demo.clicks``: tiny appends, one snapshot each, under a table-level snapshot-expiry policy of
  36 s, so the job that compacts it also expires its snapshots. (The health rule
  ``OLD_SNAPSHOTS`` keeps Iceberg's 5-day default: health is policy-independent, so a demo of
  minutes cannot honestly show that issue; the planner acts on the policy.)
* ``demo.orders``: merge-on-read (format v2) with position deletes over a fifth of its rows ->
  ``DELETE_FILE_BUILDUP`` and ``SMALL_FILES``; compaction applies the deletes and the
  position-delete rewrite drops the ones left dangling.
* ``demo.customers``: one write, healthy from the start.

Every table sets ``write.target-file-size-bytes`` to 1 MiB, so "small" (under target/8) means
something for tables of a few hundred rows. Tables that already exist are left as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from icepack_core.db.queries import load_query
from icepack_core.discovery.catalogs import load_catalog
from icepack_core.settings import CatalogConfig, Settings
from icepack_core.spark.sql import qualified_name, sql_string_literal
from icepack_core.types import PolicyType

if TYPE_CHECKING:
    import asyncpg
    from pyspark.sql import SparkSession

NAMESPACE = "demo"
TARGET_FILE_SIZE = 1_048_576  # 1 MiB: small files (< target/8) are meaningful for tiny tables
CLICKS_EXPIRY_HOURS = 0.01  # 36 s: demo.clicks' snapshots are expirable by the time it is planned
Build = Callable[["SparkSession", str, str], None]  # (spark, quoted table name, TBLPROPERTIES)


def _appends(spark: SparkSession, table: str, batches: int, rows: int, select: str) -> None:
    for b in range(batches):
        spark.sql(f"INSERT INTO {table} {select.format(lo=b * rows, hi=(b + 1) * rows)}")


def _clicks(spark: SparkSession, table: str, props: str) -> None:
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, url STRING, user_id INT) USING iceberg "
        f"TBLPROPERTIES ({props})"
    )
    _appends(
        spark,
        table,
        20,
        10,
        "SELECT /*+ REPARTITION(1) */ id, concat('/page/', id % 17), "
        "cast(id % 50 AS INT) FROM range({lo}, {hi})",
    )


def _events(spark: SparkSession, table: str, props: str) -> None:
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, kind STRING, at TIMESTAMP) USING iceberg "
        f"TBLPROPERTIES ({props})"
    )
    _appends(
        spark,
        table,
        12,
        25,
        "SELECT /*+ REPARTITION(2) */ id, concat('evt-', id % 7), "
        "timestamp_seconds(1700000000 + id * 60) FROM range({lo}, {hi})",
    )


def _orders(spark: SparkSession, table: str, props: str) -> None:
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, customer_id INT, amount DECIMAL(10, 2)) "
        f"USING iceberg TBLPROPERTIES ({props})"
    )
    _appends(
        spark,
        table,
        8,
        40,
        "SELECT id, cast(id % 40 AS INT), "
        "cast(id * 3 % 1000 AS DECIMAL(10, 2)) FROM range({lo}, {hi})",
    )
    for rest in (0, 5):  # cancelled orders: a tenth of the rows each time, in every file
        spark.sql(f"DELETE FROM {table} WHERE id % 10 = {rest}")


def _customers(spark: SparkSession, table: str, props: str) -> None:
    spark.sql(
        f"CREATE TABLE {table} (id INT, name STRING, country STRING) USING iceberg "
        f"TBLPROPERTIES ({props})"
    )
    spark.sql(
        f"INSERT INTO {table} SELECT /*+ REPARTITION(1) */ cast(id AS INT), "
        "concat('customer-', id), "
        "element_at(array('DE', 'FR', 'NL', 'US'), cast(id % 4 + 1 AS INT)) "
        "FROM range(0, 200)"
    )


@dataclass(frozen=True)
class DemoTable:
    name: str
    shows: str  # what the table demonstrates (printed while it is written)
    build: Build
    properties: tuple[tuple[str, str], ...] = ()

    def tblproperties(self) -> str:
        props = {
            "format-version": "2",
            "write.target-file-size-bytes": str(TARGET_FILE_SIZE),
            **dict(self.properties),
        }
        return ", ".join(
            f"{sql_string_literal(k)}={sql_string_literal(v)}" for k, v in props.items()
        )


MERGE_ON_READ = tuple((f"write.{op}.mode", "merge-on-read") for op in ("delete", "update", "merge"))
DEMO_TABLES: tuple[DemoTable, ...] = (  # clicks first: its snapshots are the oldest
    DemoTable("clicks", "20 one-file appends; snapshot-expiry policy of 36 s", _clicks),
    DemoTable("events", "12 appends of 2 tiny files each: SMALL_FILES", _events),
    DemoTable(
        "orders",
        "merge-on-read, 2 deletes of a tenth each: DELETE_FILE_BUILDUP",
        _orders,
        MERGE_ON_READ,
    ),
    DemoTable("customers", "one write: healthy", _customers),
)
DEMO_TABLE_NAMES = tuple(sorted(t.name for t in DEMO_TABLES))


def demo_catalog(settings: Settings) -> CatalogConfig:
    """The catalog the demo lake lives in: the first effective one (the embedded default)."""
    return settings.effective_catalogs()[0]


def existing_tables(settings: Settings) -> set[str]:
    """Names of the demo tables already in the catalog (PyIceberg: no JVM needed)."""
    from pyiceberg.exceptions import NoSuchNamespaceError

    catalog = load_catalog(demo_catalog(settings))
    try:
        listed = catalog.list_tables(NAMESPACE)
    except NoSuchNamespaceError:
        return set()
    return {ident[-1] for ident in listed if ident[-1] in DEMO_TABLE_NAMES}


def create_demo_lake(settings: Settings, say: Callable[[str], Any] = print) -> list[str]:
    """Write the missing demo tables with an in-process Spark session, stopped afterwards so the
    executor can start its own. Returns the names created.

    Raises:
        ConfigError: the Spark/Iceberg jars are missing (the message says how to get them).
        MissingExtra: tables are missing and PySpark (``icepack-core[spark]``) is not installed.
    """
    missing = [t for t in DEMO_TABLES if t.name not in existing_tables(settings)]
    if not missing:
        return []
    from icepack_core.spark.session import local_session

    catalog = demo_catalog(settings).name
    say(f"starting Spark to write {len(missing)} demo table(s) ...")
    spark = local_session(settings)
    try:
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(catalog, [], NAMESPACE)}")
        for table in missing:
            say(f"  {NAMESPACE}.{table.name}: {table.shows}")
            table.build(
                spark, qualified_name(catalog, [NAMESPACE], table.name), table.tblproperties()
            )
    finally:
        spark.stop()
    return [t.name for t in missing]


async def attach_demo_policies(conn: asyncpg.Connection, catalog: str) -> None:
    """The table-level policy that lets the planner expire ``demo.clicks``' snapshots now."""
    await conn.execute(
        load_query("policy_upsert"),
        PolicyType.SNAPSHOT_EXPIRY,
        "table",
        catalog,
        NAMESPACE,
        "clicks",
        True,
        {"max_snapshot_age_hours": CLICKS_EXPIRY_HOURS, "retain_last": 1},
    )


# The live summary: read-only queries over the plain-named views and the job history.
_TABLES = """SELECT name, health, score, issues, data_files, small_files, snapshots, delete_files
  FROM icepack.v_table_health WHERE catalog = $1 AND namespace = $2 ORDER BY name"""
_JOBS = """SELECT j.id, t.name, j.state, j.trigger, j.error,
       (SELECT string_agg(a.action, ' + ' ORDER BY a.id) FROM icepack.job_actions a
         WHERE a.job_id = j.id) AS actions,
       (SELECT a.impact -> 'before' FROM icepack.job_actions a
         WHERE a.job_id = j.id AND a.impact ? 'before' ORDER BY a.id LIMIT 1) AS before,
       (SELECT a.impact -> 'after' FROM icepack.job_actions a
         WHERE a.job_id = j.id AND a.impact ? 'after' ORDER BY a.id DESC LIMIT 1) AS after
  FROM icepack.jobs j JOIN icepack.tables t ON t.id = j.table_id
 WHERE t.catalog = $1 AND t.namespace = $2 ORDER BY j.id"""
_QUEUE = "SELECT state, jobs FROM icepack.v_queue"


@dataclass(frozen=True)
class DemoState:
    """One reading of the demo fleet."""

    tables: tuple[tuple[Any, ...], ...]
    jobs: tuple[tuple[Any, ...], ...]
    queue: tuple[tuple[str, int], ...]

    @property
    def healthy(self) -> bool:
        """Every demo table assessed healthy, and no demo job queued or running."""
        healthy = {t[0] for t in self.tables if t[1] == "healthy"}
        busy = any(j[2] in ("queued", "running") for j in self.jobs)
        return healthy >= set(DEMO_TABLE_NAMES) and not busy


def _pair(before: Any, after: Any, key: str) -> str:
    if not isinstance(before, dict) or not isinstance(after, dict):
        return "?"
    return f"{before.get(key)}->{after.get(key)}"


async def read_state(conn: asyncpg.Connection, catalog: str) -> DemoState:
    """The demo tables' latest health, their jobs with impact, and the queue."""
    tables = await conn.fetch(_TABLES, catalog, NAMESPACE)
    jobs = await conn.fetch(_JOBS, catalog, NAMESPACE)
    queue = await conn.fetch(_QUEUE)
    return DemoState(
        tuple(
            (
                r["name"],
                r["health"],
                r["score"],
                r["issues"] or "",
                r["data_files"],
                r["small_files"],
                r["snapshots"],
                r["delete_files"],
            )
            for r in tables
        ),
        tuple(
            (
                r["id"],
                r["name"],
                r["state"],
                r["trigger"],
                r["actions"] or "",
                _pair(r["before"], r["after"], "data_file_count"),
                _pair(r["before"], r["after"], "snapshot_count"),
                _pair(r["before"], r["after"], "position_delete_file_count"),
                (r["error"] or "")[:80],
            )
            for r in jobs
        ),
        tuple((r["state"], r["jobs"]) for r in queue),
    )


def render_state(state: DemoState, elapsed: float) -> Any:
    """A rich renderable of ``state``: tables, then jobs, then the queue (fits 80 columns)."""
    from rich import box
    from rich.console import Group
    from rich.table import Column, Table

    colours = {"healthy": "green", "warning": "yellow", "critical": "red"}
    tables = Table(
        "table",
        "health",
        "score",
        Column("issues", min_width=19),
        "files",
        "snaps",
        "dels",
        title=f"demo lake ({NAMESPACE}.*) at {elapsed:.0f} s",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for name, health, score, issues, files, _small, snaps, deletes in state.tables:
        colour = colours.get(health, "magenta")
        tables.add_row(
            name,
            f"[{colour}]{health}[/]",
            "-" if score is None else str(score),
            (issues or "-").replace(",", "\n"),
            *("-" if c is None else str(c) for c in (files, snaps, deletes)),
        )
    parts: list[Any] = [tables]
    if state.jobs:
        jobs = Table(
            "job",
            "state",
            Column("actions", min_width=29),
            "files",
            "snaps",
            "dels",
            title="maintenance jobs (before->after)",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
        )
        for job_id, name, job_state, trigger, actions, files, snaps, deletes, error in state.jobs:
            jobs.add_row(
                f"{job_id} {name}",
                f"{job_state}\n({trigger})",
                (actions or "-").replace(" + ", "\n"),
                files,
                snaps,
                deletes,
            )
            if error:
                jobs.add_row("", "[red]error[/]", error, "", "", "")
        parts.append(jobs)
    parts.append("queue: " + ", ".join(f"{s} {n}" for s, n in state.queue))
    return Group(*parts)
