"""``icepack recommend`` / ``icepack maintain`` on a Spark-written table, and ``icepack demo
--until-healthy`` from an empty data dir to a healthy demo lake."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from typer.testing import CliRunner, Result

from icepack_core.cli.app import app
from icepack_core.db.queries import load_query
from icepack_core.queue.locks import TableLocks
from icepack_core.settings import Settings
from tests.e2e.test_local_stack import free_port_block
from tests.execution.spark_tables import (
    data_file_count,
    fingerprint,
    make_small_files_table,
    missing_referenced_files,
    snapshot_count,
    unique_name,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "clitest"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_DEADLINE_S = 300


@pytest.fixture
def cli(
    database_url: str, spark_catalog_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Result]:
    """Run ``icepack ...`` in-process against this test's database and the Spark catalog (the
    local engine reuses the session's SparkSession, so no second JVM starts)."""
    (catalog,) = spark_catalog_settings.effective_catalogs()
    catalogs = [
        {"name": "icepack", "type": "sql", "uri": catalog.uri, "warehouse": catalog.warehouse}
    ]
    monkeypatch.setenv("ICEPACK_DATABASE_URL", database_url)
    monkeypatch.setenv("ICEPACK_CATALOGS", json.dumps(catalogs))
    monkeypatch.setenv("ICEPACK_SPARK_JARS_DIR", str(spark_catalog_settings.spark_jars_dir))
    monkeypatch.setenv("ICEPACK_SPARK_ENGINE", "local")
    monkeypatch.setenv("COLUMNS", "200")
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


def query(url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    async def go() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(url)
        try:
            return await conn.fetch(sql, *args)
        finally:
            await conn.close()

    return asyncio.run(go())


def test_recommend_dry_run_and_maintain_compact_without_losing_a_row(
    cli: Callable[..., Result], spark: Any, database_url: str
) -> None:
    name = unique_name("small")
    table = make_small_files_table(spark, NS, name, batches=12)
    before, files_before = fingerprint(spark, table), data_file_count(spark, table)
    snapshots_before = snapshot_count(spark, table)

    rec = cli("recommend", f"{NS}.{name}", "--json")
    assert rec.exit_code == 0, rec.output
    answer = json.loads(rec.stdout)
    assert "SMALL_FILES" in {i["code"] for i in answer["health"]["issues"]}
    (intent,) = [
        a for a in answer["recommendation"]["actions"] if a["action"] == "rewrite_data_files"
    ]
    assert intent["reason"] and intent["params"]["strategy"] == "binpack"
    assert intent["estimated_benefit"]["files_removed"] > 0
    predicted = intent["predicted"]
    assert predicted["before"]["data_files"] == files_before
    assert predicted["after"]["data_files"] == 1 and predicted["benefit"] == files_before - 1
    text = cli("recommend", f"icepack.{NS}.{name}")
    assert text.exit_code == 0 and "rewrite_data_files" in text.stdout
    assert f"predicted: data files {files_before} -> 1" in text.stdout
    assert "skipped expire_snapshots" in text.stdout

    dry = cli("maintain", f"{NS}.{name}", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert (
        f"CALL `icepack`.`system`.`rewrite_data_files`(table => '`icepack`.`{NS}`."
        f"`{name}`', strategy => 'binpack'"
    ) in dry.stdout
    assert fingerprint(spark, table) == before
    assert data_file_count(spark, table) == files_before
    assert snapshot_count(spark, table) == snapshots_before
    assert query(database_url, "SELECT id FROM icepack.jobs") == []
    assert query(database_url, "SELECT id FROM icepack.tables") == []  # nothing written

    done = cli("maintain", f"{NS}.{name}", "--json")
    assert done.exit_code == 0, done.output
    result = json.loads(done.stdout)
    assert result["state"] == "succeeded"
    assert fingerprint(spark, table) == before
    assert data_file_count(spark, table) < files_before
    assert missing_referenced_files(spark, table) == []

    (job,) = query(database_url, "SELECT * FROM icepack.jobs")
    assert (job["id"], job["trigger"], job["state"]) == (result["job"], "cli", "succeeded")
    actions = query(
        database_url,
        "SELECT action, state, sql_text, impact::text AS impact "
        "FROM icepack.job_actions WHERE job_id = $1 ORDER BY id",
        job["id"],
    )
    assert [a["action"] for a in actions] == ["rewrite_data_files"]
    impact = json.loads(actions[0]["impact"])
    assert impact["before"]["data_file_count"] == files_before
    assert impact["after"]["data_file_count"] == data_file_count(spark, table)
    assert impact["before"]["record_count"] == before[0]
    assert "CALL `icepack`.`system`.`rewrite_data_files`" in actions[0]["sql_text"]
    assert query(database_url, "SELECT * FROM icepack.table_locks") == []  # released

    again = cli("maintain", f"{NS}.{name}")  # healthy now, and the cadence says not again
    assert again.exit_code == 0, again.output
    assert len(query(database_url, "SELECT id FROM icepack.jobs")) == 1


def test_maintain_refuses_a_table_another_job_holds(
    cli: Callable[..., Result], spark: Any, database_url: str
) -> None:
    name = unique_name("locked")
    table = make_small_files_table(spark, NS, name, batches=6)
    files_before = data_file_count(spark, table)
    location = spark.sql(
        f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1"
    ).first()["file"]

    async def hold() -> None:
        pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
        try:
            table_id = await pool.fetchval(
                load_query("table_insert"), "icepack", NS, name, location, "{}"
            )
            await TableLocks(pool).acquire(table_id, "executor-elsewhere", 0, 600)
        finally:
            await pool.close()

    asyncio.run(hold())
    refused = cli("maintain", f"{NS}.{name}")
    assert refused.exit_code == 1
    assert "locked by executor-elsewhere" in refused.output
    assert "Traceback" not in refused.output
    assert data_file_count(spark, table) == files_before
    assert query(database_url, "SELECT id FROM icepack.jobs") == []


def test_usage_errors_and_unreadable_tables(cli: Callable[..., Result], spark: Any) -> None:
    assert cli("maintain", f"{NS}.whatever", "--actions", "vacuum").exit_code == 2
    assert cli("maintain", f"{NS}.whatever", "--engine", "duckdb").exit_code == 2
    assert cli("recommend", "no_namespace").exit_code == 2
    missing = cli("recommend", f"{NS}.does_not_exist")
    assert missing.exit_code == 1
    assert "INSPECTION_FAILED" in missing.output and "Traceback" not in missing.output


def _demo_env(data_dir: Path, base_port: int, jars: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICEPACK_")}
    return env | {
        "ICEPACK_DATA_DIR": str(data_dir),
        "ICEPACK_UP_BASE_PORT": str(base_port),
        "ICEPACK_SPARK_JARS_DIR": str(jars),
    }


@pytest.mark.timeout(DEMO_DEADLINE_S + 60)
def test_demo_until_healthy_heals_every_demo_table(spark_jars: Path) -> None:
    # Not under pytest's tmp dir: that is private to root, and Postgres runs as postgres.
    data_dir = Path(tempfile.mkdtemp(prefix="icepack-demo-"))
    data_dir.chmod(0o755)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "icepack_core.cli.app",
                "demo",
                "--until-healthy",
                "--deadline",
                str(DEMO_DEADLINE_S),
            ],
            env=_demo_env(data_dir, free_port_block(5), spark_jars),
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=DEMO_DEADLINE_S + 45,
            check=False,
        )
        elapsed = time.monotonic() - started
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, output[-6000:]
        assert "all demo tables healthy after" in output, output[-6000:]
        final = output[output.rindex("demo lake (demo.*) at") :]
        for table in ("clicks", "customers", "events", "orders"):
            assert re.search(rf"^ *{table} +healthy ", final, re.MULTILINE), final
        # Invariants only: how many jobs the planner runs depends on timing (expiry on clicks
        # may come due again after compaction), so no job count is asserted.
        assert "failed 0" in final, final
        jobs = re.findall(r"^ *(\d+) (clicks|customers|events|orders) +(\w+)", final, re.MULTILINE)
        assert {name for _, name, _ in jobs} >= {"events", "orders"}, final
        assert all(state == "succeeded" for _, _, state in jobs), final
        assert re.search(r"^ *\d+ events +succeeded .* \d\d+->1 ", final, re.MULTILINE), final
        assert re.search(r"^ *\d+ orders +succeeded .* [1-9]\d*->0 *$", final, re.MULTILINE), final
        # One measured outcome (a compaction) and one quarantine (customers' stray files).
        outcome = re.search(
            r"^outcome of job \d+ \((events|orders|clicks)\): benefit predicted ([\d.]+), "
            r"measured ([\d.]+)",
            final,
            re.MULTILINE,
        )
        assert outcome is not None and float(outcome.group(3)) > 0, final
        assert re.search(
            r"^quarantined by job (\d+) \(customers\): 2 files, \d+ B\n"
            r" *until .*; undo: icepack restore \1$",
            final,
            re.MULTILINE,
        ), final
        assert not (data_dir / "pg" / "data" / "postmaster.pid").exists()  # Postgres stopped
        print(f"icepack demo --until-healthy took {elapsed:.0f} s")
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
