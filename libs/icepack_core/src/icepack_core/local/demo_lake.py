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
* ``demo.customers``: one write, healthy from the start, plus two stray files a writer left
  behind three days ago (``STRAY_FILES``) under a table-level orphan-removal policy: the planner
  proposes orphan removal, and the executor quarantines both files through the deletion ledger
  (restorable with ``icepack restore JOB`` until the purge).

The live summary shows each job's predicted and measured benefit, and what was quarantined.

Every table sets ``write.target-file-size-bytes`` to 1 MiB, so "small" (under target/8) means
something for tables of a few hundred rows. Tables that already exist are left as they are.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

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
# Files no snapshot references, dated three days back: what a writer that died before its commit
# leaves. The orphan policy below lets removal act on files older than a day.
STRAY_FILES = ("data/00000-stray-writer-a.parquet", "data/00001-stray-writer-b.parquet")
STRAY_AGE_SECONDS = 3 * 24 * 3600
ORPHAN_OLDER_THAN_HOURS = 24.0


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
    _plant_stray_files(spark, table)


def _table_root(spark: SparkSession, table: str) -> str | None:
    """The table's location as a local directory (None when it is not on the local disk)."""
    for row in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect():
        if str(row["col_name"]).strip() == "Location":
            parts = urlsplit(str(row["data_type"]).strip())
            if parts.scheme in ("", "file"):
                return parts.path
    return None


def _plant_stray_files(spark: SparkSession, table: str) -> None:
    """Leave ``STRAY_FILES`` under the table's root, dated ``STRAY_AGE_SECONDS`` back."""
    root = _table_root(spark, table)
    if root is None:
        return
    dated = time.time() - STRAY_AGE_SECONDS
    for relative in STRAY_FILES:
        path = os.path.join(root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as out:
            out.write(b"PAR1 an uncommitted write: no snapshot references this file PAR1")
        os.utime(path, (dated, dated))


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
DEMO_TABLES: tuple[DemoTable, ...] = (
    DemoTable("clicks", "20 one-file appends; snapshot-expiry policy of 36 s", _clicks),
    DemoTable("events", "12 appends of 2 tiny files each: SMALL_FILES", _events),
    DemoTable(
        "orders",
        "merge-on-read, 2 deletes of a tenth each: DELETE_FILE_BUILDUP",
        _orders,
        MERGE_ON_READ,
    ),
    DemoTable(
        "customers", "one write: healthy; 2 stray files left by a writer (local disk)", _customers
    ),
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

        def build(table: DemoTable) -> None:
            name = qualified_name(catalog, [NAMESPACE], table.name)
            table.build(spark, name, table.tblproperties())

        # All at once on the one session: each append mostly waits on its commit, so the
        # tables take about as long together as the longest alone.
        with ThreadPoolExecutor(max_workers=len(missing)) as pool:
            list(pool.map(build, missing))  # list(): the first error is raised here
    finally:
        spark.stop()
    return [t.name for t in missing]


async def attach_demo_policies(
    conn: asyncpg.Connection, catalog: str, *, orphans: bool = True
) -> None:
    """The table-level policies that let the planner expire ``demo.clicks``' snapshots now and
    (``orphans``) quarantine ``demo.customers``' stray files (older than a day: below the 72 h
    floor, which only an explicit ``allow_unsafe_older_than`` permits; fine for a demo nobody
    writes to). On an object store there are no stray files to remove: an object's age is its
    upload time, which cannot be set back three days."""
    if orphans:
        await _attach_orphan_policy(conn, catalog)
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


async def _attach_orphan_policy(conn: asyncpg.Connection, catalog: str) -> None:
    await conn.execute(
        load_query("policy_upsert"),
        PolicyType.ORPHAN_FILE_REMOVAL,
        "table",
        catalog,
        NAMESPACE,
        "customers",
        True,
        {"older_than_hours": ORPHAN_OLDER_THAN_HOURS, "allow_unsafe_older_than": True},
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
         WHERE a.job_id = j.id AND a.impact ? 'after' ORDER BY a.id DESC LIMIT 1) AS after,
       (j.outcome ->> 'predicted_benefit')::float8 AS predicted_benefit,
       (j.outcome ->> 'benefit')::float8 AS measured_benefit
  FROM icepack.jobs j JOIN icepack.tables t ON t.id = j.table_id
 WHERE t.catalog = $1 AND t.namespace = $2 ORDER BY j.id"""
_QUEUE = "SELECT state, jobs FROM icepack.v_queue"
_LEDGER = """SELECT d.job_id, d.table_name, d.action, d.state, count(*) AS files,
       coalesce(sum(d.size_bytes), 0) AS bytes, min(d.purge_after) AS purge_after
  FROM icepack.v_deletions d WHERE d.catalog = $1 AND d.namespace = $2
 GROUP BY d.job_id, d.table_name, d.action, d.state ORDER BY d.job_id, d.state"""


@dataclass(frozen=True)
class DemoState:
    """One reading of the demo fleet."""

    tables: tuple[tuple[Any, ...], ...]
    jobs: tuple[tuple[Any, ...], ...]
    queue: tuple[tuple[str, int], ...]
    # (job id, table, predicted benefit, measured benefit) of jobs with a measured outcome
    outcomes: tuple[tuple[Any, ...], ...] = ()
    # (job id, table, action, state, files, bytes, purge after) from the deletion ledger
    ledger: tuple[tuple[Any, ...], ...] = ()
    # stray files of demo.customers that must be quarantined (none on an object store)
    strays: int = len(STRAY_FILES)

    @property
    def healthy(self) -> bool:
        """Every demo table assessed healthy, no demo job queued or running, and the stray
        files of ``demo.customers`` quarantined (what the demo shows of the deletion ledger)."""
        healthy = {t[0] for t in self.tables if t[1] == "healthy"}
        busy = any(j[2] in ("queued", "running") for j in self.jobs)
        quarantined = sum(
            row[4] for row in self.ledger if row[1] == "customers" and row[3] == "quarantined"
        )
        return healthy >= set(DEMO_TABLE_NAMES) and not busy and quarantined >= self.strays


def _pair(before: Any, after: Any, key: str) -> str:
    if not isinstance(before, dict) or not isinstance(after, dict):
        return "?"
    return f"{before.get(key)}->{after.get(key)}"


async def read_state(
    conn: asyncpg.Connection, catalog: str, strays: int = len(STRAY_FILES)
) -> DemoState:
    """The demo tables' latest health, their jobs with impact and outcome, what the deletion
    ledger holds for them, and the queue; ``strays`` stray files must be quarantined."""
    tables = await conn.fetch(_TABLES, catalog, NAMESPACE)
    jobs = await conn.fetch(_JOBS, catalog, NAMESPACE)
    queue = await conn.fetch(_QUEUE)
    ledger = await conn.fetch(_LEDGER, catalog, NAMESPACE)
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
        tuple(_job_line(r) for r in jobs),
        tuple((r["state"], r["jobs"]) for r in queue),
        tuple(
            (r["id"], r["name"], r["predicted_benefit"], r["measured_benefit"])
            for r in jobs
            if r["measured_benefit"] is not None
        ),
        tuple(
            (
                r["job_id"],
                r["table_name"],
                r["action"],
                r["state"],
                r["files"],
                r["bytes"],
                r["purge_after"],
            )
            for r in ledger
        ),
        strays,
    )


def _job_line(r: asyncpg.Record) -> tuple[Any, ...]:
    """One job as ``DemoState.jobs`` holds it: id, table, state, trigger, actions, the files,
    snapshots and delete files before->after, and the start of its error."""
    return (
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


def render_state(state: DemoState, elapsed: float) -> Any:
    """A rich renderable of ``state``: tables, then jobs, then the queue (fits 80 columns)."""
    from rich.console import Group

    parts: list[Any] = [_tables_table(state, elapsed)]
    if state.jobs:
        parts.append(_jobs_table(state))
    for job_id, name, predicted, measured in state.outcomes:
        share = f" ({measured / predicted:.0%})" if predicted else ""
        guess = "none" if predicted is None else f"{predicted:g}"
        parts.append(
            f"outcome of job {job_id} ({name}): benefit predicted {guess}, "
            f"measured {measured:g}{share}"
        )
    for job_id, name, _action, ledger_state, files, size, purge_after in state.ledger:
        # Two short lines: the summary is printed 80 columns wide.
        parts.append(f"{ledger_state} by job {job_id} ({name}): {files} files, {size} B")
        if ledger_state == "quarantined" and purge_after is not None:
            parts.append(f"  until {purge_after:%Y-%m-%d %H:%M}; undo: icepack restore {job_id}")
    parts.append("queue: " + ", ".join(f"{s} {n}" for s, n in state.queue))
    return Group(*parts)


def _tables_table(state: DemoState, elapsed: float) -> Any:
    """The demo tables' health and files, snapshots and delete files."""
    from rich import box
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
    return tables


def _jobs_table(state: DemoState) -> Any:
    """The maintenance jobs with their files, snapshots and delete files before and after."""
    from rich import box
    from rich.table import Column, Table

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
        # Two spaces between columns, none at the edge: the widest rows (a two-digit job
        # id, "customers", the longest action name) still fit 80 columns unwrapped.
        show_edge=False,
        collapse_padding=True,
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
    return jobs
