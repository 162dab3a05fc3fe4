"""No expiry deletes another table's files (issue 28, findings 1 and 2).

Real Spark + Iceberg on the shared JDBC catalog, PyIceberg's ``add_files`` on that same catalog,
real Postgres, discovery's real pass registering the tables, and the executor's path
(``JobExecution``). Each test reproduces a way a table's manifests come to name files of
another table and checks that the other table's files survive (rows and checksum), the table is
held with evidence naming the other table, and nothing is recorded as deleted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pyarrow as pa
import pytest
from pyiceberg.expressions import AlwaysTrue

from icepack_core.discovery.catalogs import load_catalog
from icepack_core.discovery.refresh import Discovery
from icepack_core.errors import PermanentError
from icepack_core.execution.job_execution import JobExecution
from icepack_core.inspection.inspector import Inspector
from icepack_core.intents import (
    ExpireSnapshots,
    ExpireSnapshotsParams,
    Intent,
    RemoveOrphanFiles,
    RemoveOrphanFilesParams,
    RestoreQuarantine,
    RestoreQuarantineParams,
    RewriteDataFiles,
    RewriteDataFilesParams,
)
from icepack_core.queue.jobs import Backoff, JobQueue
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from tests.execution.spark_tables import (
    CATALOG,
    fingerprint,
    local_path,
    make_small_files_table,
    missing_referenced_files,
    snapshot_count,
    unique_name,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def engine(spark: Any, spark_catalog_settings: Settings) -> LocalEngine:
    return LocalEngine(spark_catalog_settings, session=spark)


def catalog(settings: Any) -> Any:
    (cfg,) = settings.effective_catalogs()
    return load_catalog(cfg)


def data_files(spark: Any, table: str) -> list[str]:
    rows = spark.sql(f"SELECT file_path FROM {table}.files").collect()
    return sorted(r["file_path"] for r in rows)


def adopt_files(settings: Any, namespace: str, name: str, schema: Any, paths: list[str]) -> Any:
    """A PyIceberg table in ``namespace`` whose first commit adopts ``paths`` (``add_files``)."""
    cat = catalog(settings)
    cat.create_namespace_if_not_exists(namespace)
    table = cat.create_table((namespace, name), schema=schema)
    table.add_files(paths)
    return cat.load_table((namespace, name))


async def table_id(db: Any, namespace: str, name: str) -> int:
    found = await db.fetchval(
        "SELECT id FROM icepack.tables WHERE catalog = $1 AND namespace = $2 AND name = $3",
        CATALOG,
        namespace,
        name,
    )
    assert found is not None, f"discovery did not register {namespace}.{name}"
    return int(found)


async def run_job(db: Any, engine: Any, settings: Any, tid: int, actions: Sequence[Intent]) -> Any:
    """One job through the executor's path; returns (job, the awaited run or its error)."""
    queue = JobQueue(db, Backoff(base_seconds=0, cap_seconds=0))
    await queue.enqueue(tid, actions, max_attempts=1)
    job = await queue.claim("test@confinement", 300)
    assert job is not None
    execution = JobExecution(db, engine, Inspector(settings), expiry_min_age_hours=0.0)

    async def record(action: Any) -> None:
        await queue.record_action(job, **vars(action))

    try:
        return job, await execution.run(tid, actions, record, job=job)
    except PermanentError as exc:
        return job, exc


def expire_action() -> ExpireSnapshots:
    older = datetime.now(UTC) + timedelta(milliseconds=1)
    return ExpireSnapshots(params=ExpireSnapshotsParams(older_than=older, retain_last=1))


async def ledger_rows(db: Any, job_id: int) -> list[Any]:
    query = "SELECT path, state FROM icepack.deletions WHERE job_id = $1"
    return list(await db.fetch(query, job_id))


async def hold_of(db: Any, tid: int) -> Any:
    return await db.fetchval("SELECT maintenance_hold FROM icepack.tables WHERE id = $1", tid)


async def test_a_sandbox_table_naming_prod_files_cannot_expire_them(
    spark: Any, engine: LocalEngine, db: asyncpg.Pool, spark_catalog_settings: Settings
) -> None:
    """The issue's reproduction: prod got three appends; sandbox adopted prod's data files with
    ``add_files``, dropped them again and appended one row of its own. Its expiry would delete
    prod's files (they are reachable only from sandbox's expired snapshots)."""
    await _sandbox_over_prod_is_held(spark, engine, db, spark_catalog_settings, exclude=False)


async def test_a_sandbox_naming_files_of_an_excluded_table_cannot_expire_them(
    spark: Any, engine: LocalEngine, db: asyncpg.Pool, spark_catalog_settings: Settings
) -> None:
    """As above with prod outside the catalog's ``include``/``exclude``: never maintained, yet
    discovery records where its files are, and the evidence names it as not maintained."""
    await _sandbox_over_prod_is_held(spark, engine, db, spark_catalog_settings, exclude=True)


async def _sandbox_over_prod_is_held(
    spark: Any, engine: Any, db: Any, settings: Any, *, exclude: bool
) -> None:
    prod_ns, sandbox_ns = unique_name("prod"), unique_name("sandbox")
    prod = make_small_files_table(spark, prod_ns, "orders", batches=3)
    prod_before, prod_files = fingerprint(spark, prod), data_files(spark, prod)
    assert len(prod_files) >= 3  # one file per append at least
    schema = catalog(settings).load_table((prod_ns, "orders")).schema()
    sandbox = adopt_files(settings, sandbox_ns, "t", schema, prod_files)
    sandbox.delete(AlwaysTrue())  # whole files: their entries become DELETED
    sandbox = catalog(settings).load_table((sandbox_ns, "t"))
    own_row = [{"id": 1, "part": "s", "payload": "mine"}]
    sandbox.append(pa.Table.from_pylist(own_row, schema.as_arrow()))
    sandbox_table = f"{CATALOG}.{sandbox_ns}.t"
    spark.sql(f"REFRESH TABLE {sandbox_table}")
    sandbox_before = fingerprint(spark, sandbox_table)
    snapshots_before = snapshot_count(spark, sandbox_table)

    discovery = Discovery(settings, db)
    owner = f"{CATALOG}.{prod_ns}.orders"
    if exclude:
        (cfg,) = discovery.configs
        discovery.configs = [cfg.model_copy(update={"exclude": [*cfg.exclude, prod_ns]})]
        owner += " (not maintained: excluded)"
    await discovery.mark_listing_started()  # discovery (re)started: its first pass is running
    await discovery.run_once()
    tid = await table_id(db, sandbox_ns, "t")
    if exclude:  # never registered, so never inspected, planned or maintained
        query = "SELECT count(*) FROM icepack.tables WHERE namespace = $1"
        assert await db.fetchval(query, prod_ns) == 0
    job, result = await run_job(db, engine, settings, tid, [expire_action()])

    assert isinstance(result, PermanentError), result
    assert "not the table's" in str(result) and owner in str(result)
    hold = await hold_of(db, tid)
    assert hold is not None and hold["action"] == "expire_snapshots"
    evidence = hold["evidence"]
    assert evidence["status"] == "outside_table"
    assert evidence["tables"] == [owner]
    assert evidence["foreign_count"] == len(prod_files)
    assert {f["path"] for f in evidence["foreign"]} == set(prod_files)
    assert await ledger_rows(db, job.id) == []  # nothing recorded, nothing deleted
    assert all(local_path(p).exists() for p in prod_files)
    spark.sql(f"REFRESH TABLE {prod}")
    assert fingerprint(spark, prod) == prod_before and missing_referenced_files(spark, prod) == []
    spark.sql(f"REFRESH TABLE {sandbox_table}")
    assert fingerprint(spark, sandbox_table) == sandbox_before
    assert snapshot_count(spark, sandbox_table) == snapshots_before


async def test_expiry_refuses_while_a_catalog_has_not_finished_its_first_listing(
    spark: Any, engine: LocalEngine, db: asyncpg.Pool, spark_catalog_settings: Settings
) -> None:
    """Discovery started and has not finished a pass: a table created meanwhile is unknown,
    so the confinement check refuses (naming why) and holds nothing."""
    ns = unique_name("unlisted")
    table = make_small_files_table(spark, ns, "t", batches=3)
    before, files = fingerprint(spark, table), data_files(spark, table)
    discovery = Discovery(spark_catalog_settings, db)
    await discovery.run_once()  # an earlier discovery process listed it
    tid = await table_id(db, ns, "t")
    await discovery.mark_listing_started()  # discovery restarted; its pass is still running
    snapshots = snapshot_count(spark, table)

    job, result = await run_job(db, engine, spark_catalog_settings, tid, [expire_action()])

    assert isinstance(result, PermanentError), result
    assert "not listed since discovery started" in str(result) and CATALOG in str(result)
    assert await hold_of(db, tid) is None
    assert await ledger_rows(db, job.id) == []
    assert snapshot_count(spark, table) == snapshots
    assert all(local_path(p).exists() for p in files) and fingerprint(spark, table) == before

    await discovery.run_once()  # the pass finishes: expiry runs, within the table's own roots
    job, result = await run_job(db, engine, spark_catalog_settings, tid, [expire_action()])
    assert not isinstance(result, Exception), result
    rows = await ledger_rows(db, job.id)
    assert rows and all(r["state"] == "deleted" for r in rows)
    spark.sql(f"REFRESH TABLE {table}")
    assert snapshot_count(spark, table) == 1
    assert fingerprint(spark, table) == before and missing_referenced_files(spark, table) == []


async def test_a_table_built_with_add_files_over_another_is_compacted_then_never_expires_its_files(
    spark: Any, engine: LocalEngine, db: asyncpg.Pool, spark_catalog_settings: Settings
) -> None:
    """No attacker: table B adopts table A's files with ``add_files``; compacting B is fine
    (it deletes nothing), but B's expiry would then delete A's live files."""
    ns_a, ns_b = unique_name("owner"), unique_name("adopter")
    a = make_small_files_table(spark, ns_a, "a", batches=6)
    a_before, a_files = fingerprint(spark, a), data_files(spark, a)
    schema = catalog(spark_catalog_settings).load_table((ns_a, "a")).schema()
    adopt_files(spark_catalog_settings, ns_b, "b", schema, a_files)
    b = f"{CATALOG}.{ns_b}.b"
    spark.sql(f"REFRESH TABLE {b}")
    b_before = fingerprint(spark, b)
    assert b_before == a_before

    await Discovery(spark_catalog_settings, db).run_once()
    tid = await table_id(db, ns_b, "b")
    compact = RewriteDataFiles(
        params=RewriteDataFilesParams(strategy="binpack", options={"min-input-files": "2"})
    )
    _job, compacted = await run_job(db, engine, spark_catalog_settings, tid, [compact])
    assert not isinstance(compacted, Exception), compacted
    spark.sql(f"REFRESH TABLE {b}")
    assert set(data_files(spark, b)).isdisjoint(a_files)  # B now reads its own files
    assert fingerprint(spark, b) == b_before

    job, result = await run_job(db, engine, spark_catalog_settings, tid, [expire_action()])

    assert isinstance(result, PermanentError), result
    evidence = (await hold_of(db, tid))["evidence"]
    assert evidence["tables"] == [f"{CATALOG}.{ns_a}.a"]
    assert {f["path"] for f in evidence["foreign"]} == set(a_files)
    assert await ledger_rows(db, job.id) == []
    assert all(local_path(p).exists() for p in a_files)
    spark.sql(f"REFRESH TABLE {a}")
    assert fingerprint(spark, a) == a_before and missing_referenced_files(spark, a) == []
    spark.sql(f"REFRESH TABLE {b}")
    assert fingerprint(spark, b) == b_before and missing_referenced_files(spark, b) == []


async def test_a_restore_into_another_table_s_location_is_refused_and_held(
    spark: Any, engine: LocalEngine, db: asyncpg.Pool, spark_catalog_settings: Settings
) -> None:
    """Orphans quarantined from ``t/data/nested``; then a table is created at that directory.
    Restoring would write into the new table's location: refused, nothing moved back."""
    ns = unique_name("restore")
    table = make_small_files_table(spark, ns, "t", batches=2)
    before = fingerprint(spark, table)
    root = local_path(
        spark.sql(f"DESCRIBE TABLE EXTENDED {table}")
        .where("col_name = 'Location'")
        .first()["data_type"]
    )
    stray = root / "data" / "nested" / "orphan.parquet"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(os.urandom(300))
    week_ago = time.time() - 7 * 86400
    os.utime(stray, (week_ago, week_ago))
    await Discovery(spark_catalog_settings, db).run_once()
    tid = await table_id(db, ns, "t")
    await db.execute(
        "INSERT INTO icepack.policies (policy_type, scope, catalog, namespace, table_name, config)"
        " VALUES ('system.orphan-file-removal', 'table', $1, $2, 't', '{}'::jsonb)",
        CATALOG,
        ns,
    )
    older = datetime.now(UTC) - timedelta(hours=72)
    remove = RemoveOrphanFiles(params=RemoveOrphanFilesParams(older_than=older))
    quarantine_job, done = await run_job(db, engine, spark_catalog_settings, tid, [remove])
    assert not isinstance(done, Exception), done
    assert not stray.exists()
    (row,) = await db.fetch(
        "SELECT quarantine_path FROM icepack.deletions WHERE job_id = $1", quarantine_job.id
    )
    held_copy = local_path(row["quarantine_path"])
    assert held_copy.exists()

    squatter = f"{CATALOG}.{ns}.squatter"
    spark.sql(
        f"CREATE TABLE {squatter} (id BIGINT) USING iceberg LOCATION '{stray.parent.as_uri()}'"
    )
    await Discovery(spark_catalog_settings, db).run_once()
    restore = RestoreQuarantine(params=RestoreQuarantineParams(job_id=quarantine_job.id))
    _job, result = await run_job(db, engine, spark_catalog_settings, tid, [restore])

    assert isinstance(result, PermanentError), result
    evidence = (await hold_of(db, tid))["evidence"]
    assert evidence["status"] == "outside_table" and evidence["tables"] == [squatter]
    assert evidence["action"] == "restore_quarantine"
    assert held_copy.exists() and not stray.exists()  # nothing moved back
    states = await db.fetch(
        "SELECT state FROM icepack.deletions WHERE job_id = $1", quarantine_job.id
    )
    assert [r["state"] for r in states] == ["quarantined"]
    assert fingerprint(spark, table) == before and missing_referenced_files(spark, table) == []
    spark.sql(f"DROP TABLE {squatter}")  # the shared catalog outlives this test
