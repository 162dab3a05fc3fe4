"""The whole pipeline on an object store, with a planted secret: discovery -> inspector ->
planner -> executor (the real services, the executor on a Spark Connect server configured
with ``S3FileIO`` for SeaweedFS) heal a small-files table whose data files are spelled
``s3a://`` (``write.data.path``; SeaweedFS's catalog refuses an ``s3a://`` table location)
under its ``s3://`` location. Then orphan removal on it: every object under ``data/`` is aged,
referenced ones included, so only the scheme folding (Iceberg's ``equal_schemes``, Icepack's
``safety.locations``) keeps the ``s3a://`` files a snapshot references from being listed as
``s3://`` orphans; exactly the one real orphan is quarantined.

The S3 secret key (also the REST catalog's OAuth2 client secret) is unique to this module.
While the services run, logging is at DEBUG; afterwards every captured log line, the Spark
server's log, every row of every ``icepack`` table, every span and the gateway's answers about
the table and its jobs are searched for it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from icepack_core.intents import RemoveOrphanFiles, RemoveOrphanFilesParams
from icepack_core.safety.locations import location_key
from icepack_core.spark.engine import ConnectEngine
from icepack_core.spark.sql import qualified_name
from icepack_core.telemetry.logs import setup_logging
from icepack_core.types import JobState
from icepack_discovery.service import DiscoveryService
from icepack_executor.service import ExecutorService
from icepack_gateway.app import create_app
from icepack_inspector.service import InspectorService
from icepack_planner.service import PlannerService
from tests.objectstore.conftest import PLANTED_S3_SECRET
from tests.objectstore.lake import (
    CATALOG,
    Lake,
    age,
    content,
    ledger,
    missing_objects,
    object_exists,
    run_job,
    split_s3,
)
from tests.support.services import running
from tests.support.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.catalog_server, pytest.mark.slow]
NS = "s3_flow"


@pytest.fixture
def debug_logging() -> Iterator[None]:
    """Debug logging for one test; the root logger is put back after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    setup_logging("s3-pipeline", "debug", "json")
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


async def make_small_files_table(engine: ConnectEngine, name: str, data_path: str) -> str:
    table = qualified_name(CATALOG, [NS], name)
    await engine.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], NS)}")
    await engine.sql(
        f"CREATE TABLE {table} (id BIGINT, payload STRING) USING iceberg "
        f"TBLPROPERTIES ('format-version'='2', 'write.data.path'='{data_path}')"
    )
    for b in range(12):
        await engine.sql(
            f"INSERT INTO {table} SELECT id, concat('row-', id) FROM range({b * 20}, {b * 20 + 20})"
        )
    return table


async def healed(db: Any) -> Any:
    row = await db.fetchrow(
        "SELECT t.id, h.health, (SELECT count(*) FROM icepack.jobs j WHERE j.table_id = t.id"
        "  AND j.state = 'succeeded') AS done "
        "FROM icepack.tables t JOIN LATERAL (SELECT * FROM icepack.health_assessments a "
        "  WHERE a.table_id = t.id ORDER BY a.id DESC LIMIT 1) h ON true "
        "WHERE t.namespace = $1 AND t.name = 'events'",
        NS,
    )
    return row if row and row["done"] >= 1 and row["health"] == "healthy" else None


async def all_rows(db: Any) -> list[str]:
    """Every row of every table in the ``icepack`` schema, as JSON text."""
    names = await db.fetch(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = 'icepack' AND table_type = 'BASE TABLE'"
    )
    rows: list[str] = []
    for r in names:
        rows += await db.fetchval(
            f"SELECT coalesce(array_agg(row_to_json(t)::text), '{{}}') FROM icepack.\"{r[0]}\" t"
        )
    return rows


async def assert_secret_nowhere(db: Any, lake: Lake, spans: Any, lines: list[str]) -> None:
    """The planted S3 secret in no captured log line, Spark server log line, ``icepack`` row,
    span or gateway answer about the table and its jobs."""
    assert any("job.succeeded" in line for line in lines), lines[-20:]
    leaked = [line for line in lines if PLANTED_S3_SECRET in line]
    assert leaked == [], leaked[:3]
    spark_log = lake.spark_log.read_text(errors="replace")
    # The server was given the credential (and logged that it uses it), never its value.
    assert "since property credential was provided" in spark_log
    assert PLANTED_S3_SECRET not in spark_log
    rows = await all_rows(db)
    assert any("rewrite_data_files" in r for r in rows)
    assert any("quarantined" in r for r in rows)
    assert [r for r in rows if PLANTED_S3_SECRET in r] == []
    exported = [s.to_json() for s in spans.get_finished_spans()]
    assert any('"executor job"' in s for s in exported)
    assert [s for s in exported if PLANTED_S3_SECRET in s] == []
    jobs = [r["id"] for r in await db.fetch("SELECT id FROM icepack.jobs")]
    transport = httpx.ASGITransport(app=create_app(db))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        answers = []
        for path in (
            "/tables",
            f"/tables/{CATALOG}/{NS}/events/status",
            f"/tables/{CATALOG}/{NS}/events/jobs",
            "/jobs",
            *(f"/jobs/{job}" for job in jobs),
            *(f"/jobs/{job}/deletions" for job in jobs),
        ):
            response = await client.get(path)
            assert response.status_code == 200, (path, response.text[:300])
            answers.append(response.text)
    assert any("rewrite_data_files" in a for a in answers)
    assert [a for a in answers if PLANTED_S3_SECRET in a] == []
    print(json.dumps({"jobs": len(jobs), "log_lines": len(lines), "rows": len(rows)}))


async def orphans_across_spellings(
    db: Any, lake: Lake, settings: Any, table_id: int, rows_before: tuple[int, str]
) -> None:
    """Every object under ``data/`` aged, the ``s3a://``-referenced ones included: only the
    one real orphan is listed and quarantined."""
    await db.execute(
        "INSERT INTO icepack.policies (policy_type, scope, catalog, namespace, table_name)"
        " VALUES ('system.orphan-file-removal', 'table', $1, $2, 'events')",
        CATALOG,
        NS,
    )
    s3 = lake.s3()
    location = lake.table(NS, "events").location()
    bucket, root = split_s3(location)
    orphan = f"{location}/data/orphan of a failed s3a writer.parquet"
    s3.put_object(Bucket=bucket, Key=split_s3(orphan)[1], Body=b"orphan bytes")
    data_keys = [
        o["Key"].removeprefix(f"{root}/")
        for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"{root}/data/")["Contents"]
    ]
    assert len(data_keys) > 12  # the compacted files, the new ones and the orphan
    age(lake, location, data_keys, 7 * 86400)
    older_than = datetime.now(UTC) - timedelta(hours=72)
    remove = [RemoveOrphanFiles(params=RemoveOrphanFilesParams(older_than=older_than))]
    engine = ConnectEngine(lake.connect_url)
    try:
        job = await run_job(db, settings, engine, table_id, remove)
    finally:
        await engine.close()
    assert job.state == JobState.SUCCEEDED, job.error
    (row,) = await ledger(db, job.id)
    assert (location_key(row["path"]), row["state"]) == (location_key(orphan), "quarantined")
    assert not object_exists(s3, orphan) and object_exists(s3, row["quarantine_path"])
    final = lake.table(NS, "events")
    assert content(final) == rows_before and missing_objects(lake, final) == []


async def test_the_pipeline_heals_an_s3a_table_and_no_secret_leaks(
    lake: Lake,
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    spans: InMemorySpanExporter,
    capfd: pytest.CaptureFixture[str],
    debug_logging: None,
) -> None:
    settings = lake.settings(database_url, tmp_path, NS)
    (catalog,) = settings.catalogs
    assert catalog.s3_secret_access_key is not None
    assert catalog.s3_secret_access_key.get_secret_value() == PLANTED_S3_SECRET
    engine = ConnectEngine(lake.connect_url)
    try:
        table = await make_small_files_table(engine, "events", f"s3a://warehouse/{NS}/events/data")
    finally:
        await engine.close()
    before = lake.table(NS, "events")
    assert before.location() == f"s3://warehouse/{NS}/events"
    assert all(f.file.file_path.startswith("s3a://") for f in before.scan().plan_files())
    rows_before = content(before)
    capfd.readouterr()  # from here on, what the services and the orphan job write

    services = [DiscoveryService(), InspectorService(), PlannerService(), ExecutorService()]
    async with running(services, settings):
        done = await eventually(
            lambda: healed(db), timeout=600, interval=1, what=f"{table} healthy after a job"
        )

    after = lake.table(NS, "events")
    assert content(after) == rows_before
    assert missing_objects(lake, after) == []
    action = await db.fetchrow(
        "SELECT a.state, a.output FROM icepack.job_actions a JOIN icepack.jobs j "
        "ON j.id = a.job_id WHERE j.table_id = $1 AND a.action = 'rewrite_data_files'",
        done["id"],
    )
    assert action is not None
    assert action["state"] == "succeeded"
    (record,) = action["output"]["verification"]["snapshots"]
    assert record["ok"] and record["rows_before"] == record["rows_after"] == rows_before[0]
    assert len(after.metadata.snapshots) > len(before.metadata.snapshots)
    assert all(f.file.file_path.startswith("s3a://warehouse/") for f in after.scan().plan_files())

    await orphans_across_spellings(db, lake, settings, done["id"], rows_before)
    captured = capfd.readouterr()
    await assert_secret_nowhere(db, lake, spans, (captured.out + captured.err).splitlines())
