"""Maintenance on an object store, end to end: SeaweedFS's S3 behind its own Iceberg REST
catalog, Spark (a Connect server started from the confs Icepack generates: ``S3FileIO``,
path-style endpoint, region, keys) running every action through the executor's path
(``JobRunner``), tables registered by discovery.

Each action must succeed and be verified on S3 with the table's rows and content checksum
unchanged (read by PyIceberg, not Spark), and no object a snapshot still references may be
gone. The verification's Spark scan is the judge there (the in-process reader reads local
files only) and its share of the job's time is measured: ``test-artifacts/objectstore.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from typer.testing import CliRunner

from icepack_core.cli.app import app as cli_app
from icepack_core.discovery.refresh import Discovery
from icepack_core.execution.ledger.quarantine import QUARANTINE_PREFIX
from icepack_core.intents import (
    ExpireSnapshots,
    ExpireSnapshotsParams,
    PurgeQuarantine,
    RemoveOrphanFiles,
    RemoveOrphanFilesParams,
    RewriteDataFiles,
    RewriteDataFilesParams,
    RewriteManifests,
    RewritePositionDeleteFiles,
    RewritePositionDeleteFilesParams,
)
from icepack_core.safety.locations import location_key
from icepack_core.settings import Settings
from icepack_core.spark.engine import ConnectEngine
from icepack_core.spark.sql import qualified_name
from icepack_core.types import JobState
from tests.objectstore.lake import (
    CATALOG,
    Lake,
    actions_of,
    age,
    content,
    ledger,
    missing_objects,
    object_bytes,
    object_exists,
    referenced_objects,
    run_job,
    split_s3,
)

pytestmark = [pytest.mark.spark, pytest.mark.catalog_server, pytest.mark.slow]
ARTIFACT = Path(__file__).resolve().parents[2] / "test-artifacts" / "objectstore.json"
# Partition values that become awkward object keys (Iceberg escapes them in the path:
# ``part=a+b``, ``part=x%25y``, ``part=%C3%BC...``).
PARTS = ["a b", "x%y", "ünï 🧊"]


def record_figures(section: str, figures: dict[str, Any]) -> None:
    """Merge ``figures`` into the artifact under ``section`` and print them."""
    ARTIFACT.parent.mkdir(exist_ok=True)
    current = json.loads(ARTIFACT.read_text()) if ARTIFACT.exists() else {}
    current[section] = figures
    ARTIFACT.write_text(json.dumps(current, indent=2, default=str))
    print(section, json.dumps(figures, indent=2, default=str))


async def build_table(engine: ConnectEngine, namespace: str, name: str, batches: int = 6) -> str:
    """A partitioned merge-on-read table of small appends, then position deletes."""
    table = qualified_name(CATALOG, [namespace], name)
    await engine.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], namespace)}")
    await engine.sql(
        f"CREATE TABLE {table} (id BIGINT, part STRING, payload STRING) USING iceberg "
        "PARTITIONED BY (part) TBLPROPERTIES ('format-version'='2', "
        "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
        "'write.target-file-size-bytes'='1048576')"
    )
    parts = ", ".join(f"'{p}'" for p in PARTS)
    for b in range(batches):
        await engine.sql(
            f"INSERT INTO {table} SELECT id, element_at(array({parts}), "
            f"CAST(id % {len(PARTS)} AS INT) + 1), concat('row-', id) "
            f"FROM range({b * 20}, {(b + 1) * 20})"
        )
    await engine.sql(f"DELETE FROM {table} WHERE id % 7 = 0")
    return table


async def register(db: Any, settings: Settings, namespace: str, name: str) -> int:
    """Discovery's pass over the catalog (the real path that creates the table's row)."""
    result = await Discovery(settings, db).run_once()
    assert result.errors == {}, result.errors
    table_id: int = await db.fetchval(
        "SELECT id FROM icepack.tables WHERE catalog = $1 AND namespace = $2 AND name = $3",
        CATALOG,
        namespace,
        name,
    )
    assert table_id is not None
    return table_id


def action_seconds(row: dict[str, Any]) -> float:
    return float((row["finished_at"] - row["started_at"]).total_seconds())


def assert_verified_on_s3(done: dict[str, dict[str, Any]]) -> None:
    """Every rewrite verified; the compaction's touched partitions judged by the Spark scan,
    with the reason the in-process reader was not used; the manifest rewrite scanned nothing."""
    for action, row in done.items():
        evidence = row["output"]["verification"]
        assert evidence["status"] == "verified", (action, evidence)
        assert evidence["snapshots"] and all(s["ok"] for s in evidence["snapshots"]), action
    compaction = done["rewrite_data_files"]["output"]["verification"]
    scanned = [s for s in compaction["snapshots"] if s.get("scope") == "partitions"]
    assert scanned, compaction
    for record in scanned:
        # The Spark scan decides on S3, and says why the in-process reader did not.
        assert record["reader"] == "engine", record
        assert "object store (s3)" in record["reader_fallback"], record
        assert record["rows_before"] == record["rows_after"]
        assert record["checksum_before"] == record["checksum_after"]
    manifests = done["rewrite_manifests"]["output"]["verification"]
    assert all(s["scope"] == "none" for s in manifests["snapshots"]), manifests


def record_action_figures(done: dict[str, dict[str, Any]], jobs_seconds: float) -> None:
    """The rewrites' time on S3 and the verification's share of it (the artifact)."""
    verification = sum(r["output"]["verification"]["seconds"] for r in done.values())
    actions_time = sum(action_seconds(r) for r in done.values())
    record_figures(
        "actions",
        {
            "jobs_seconds": round(jobs_seconds, 2),
            "actions_seconds": round(actions_time, 2),
            "verification_seconds": round(verification, 2),
            "verification_share_of_actions": round(verification / actions_time, 3),
            "per_action": {
                a: {
                    "seconds": round(action_seconds(r), 2),
                    "procedure_ms": r["output"].get("procedure_ms"),
                    "verification_seconds": r["output"]["verification"]["seconds"],
                }
                for a, r in done.items()
            },
        },
    )


async def assert_ledger_matches_the_procedure(db: Any, lake: Lake, job_id: int) -> None:
    """The expiry's ledger: every file recorded and deleted, per kind what the procedure
    reports, none of them left in the bucket."""
    output = (await actions_of(db, job_id))["expire_snapshots"]["output"]
    rows = await db.fetch(
        "SELECT path, kind, state, size_bytes FROM icepack.deletions WHERE job_id = $1",
        job_id,
    )
    assert rows and all(r["state"] == "deleted" for r in rows)
    per_kind = {k: sum(1 for r in rows if r["kind"] == k) for k in {r["kind"] for r in rows}}
    assert int(output["deleted_data_files_count"]) == per_kind.get("data", 0) > 0
    assert int(output["deleted_position_delete_files_count"]) == per_kind.get("position_delete", 0)
    assert int(output["deleted_manifest_files_count"]) == per_kind.get("manifest", 0) > 0
    assert int(output["deleted_manifest_lists_count"]) == per_kind.get("manifest_list", 0)
    assert output["ledger"]["ledger_counts"] == output["ledger"]["procedure_counts"]
    s3 = lake.s3()
    assert [r["path"] for r in rows if object_exists(s3, r["path"])] == []
    assert all(r["size_bytes"] and r["size_bytes"] > 0 for r in rows)


async def test_every_action_runs_and_is_verified_on_s3(
    lake: Lake, db: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    namespace, name = "s3_actions", "events"
    settings = lake.settings(database_url, tmp_path, namespace)
    engine = ConnectEngine(lake.connect_url)
    try:
        await build_table(engine, namespace, name)
        table = lake.table(namespace, name)
        assert table.location().startswith("s3://warehouse/")
        before = content(table)
        table_id = await register(db, settings, namespace, name)

        # A job runs its actions in one order (compaction, delete files, manifests): each of
        # the three is given work by running the compaction in a job of its own, after them.
        started = time.perf_counter()
        first = await run_job(
            db,
            settings,
            engine,
            table_id,
            [
                RewritePositionDeleteFiles(
                    params=RewritePositionDeleteFilesParams(options={"rewrite-all": "true"})
                ),
                RewriteManifests(),
            ],
        )
        assert first.state == JobState.SUCCEEDED, first.error
        job = await run_job(
            db,
            settings,
            engine,
            table_id,
            [RewriteDataFiles(params=RewriteDataFilesParams(options={"min-input-files": "2"}))],
        )
        assert job.state == JobState.SUCCEEDED, job.error
        done = await actions_of(db, first.id) | await actions_of(db, job.id)
        assert {a: r["state"] for a, r in done.items()} == {
            "rewrite_manifests": "succeeded",
            "rewrite_position_delete_files": "succeeded",
            "rewrite_data_files": "succeeded",
        }
        assert int(done["rewrite_position_delete_files"]["output"]["rewritten_delete_files_count"])
        assert int(done["rewrite_data_files"]["output"]["rewritten_data_files_count"]) > 0
        assert int(done["rewrite_manifests"]["output"]["rewritten_manifests_count"]) > 0
        assert_verified_on_s3(done)

        after = lake.table(namespace, name)
        assert content(after) == before
        assert missing_objects(lake, after) == []

        record_action_figures(done, time.perf_counter() - started)

        # Expiry through the deletion ledger: every file recorded first, then deleted.
        older = datetime.now(UTC) + timedelta(milliseconds=1)
        expire = ExpireSnapshots(params=ExpireSnapshotsParams(older_than=older, retain_last=1))
        expiry = await run_job(db, settings, engine, table_id, [expire])
        assert expiry.state == JobState.SUCCEEDED, expiry.error
        await assert_ledger_matches_the_procedure(db, lake, expiry.id)
        expired = lake.table(namespace, name)
        assert len(expired.metadata.snapshots) == 1
        assert content(expired) == before
        assert missing_objects(lake, expired) == []
    finally:
        await engine.close()


# Orphan objects with the adversarial suite's awkward names: a space, a literal ``%41`` (an
# escape S3FileIO must not decode), ``+``, and non-BMP Unicode, under data/ and a partition dir.
ORPHAN_NAMES = [
    "data/orphan with space.parquet",
    "data/pct%41literal+plus.parquet",
    "data/part=x%25y/ünï 🧊 orphan.parquet",
]
WEEK = 7 * 86400


def restore_cli(lake: Lake, database_url: str, namespace: str, monkeypatch: Any) -> Any:
    """``icepack restore`` as an operator runs it: catalog JSON without secrets, the
    secrets in their own environment variables."""
    cfg = lake.catalog([namespace])
    monkeypatch.setenv("ICEPACK_DATABASE_URL", database_url)
    monkeypatch.setenv("ICEPACK_CATALOGS", json.dumps([cfg.model_dump(mode="json")]))
    assert cfg.credential is not None and cfg.s3_secret_access_key is not None
    monkeypatch.setenv("ICEPACK_CATALOG_LAKE_CREDENTIAL", cfg.credential.get_secret_value())
    monkeypatch.setenv(
        "ICEPACK_CATALOG_LAKE_S3_SECRET_ACCESS_KEY", cfg.s3_secret_access_key.get_secret_value()
    )
    monkeypatch.setenv("COLUMNS", "200")
    runner = CliRunner()
    return lambda *args: asyncio.to_thread(runner.invoke, cli_app, list(args))


async def test_an_orphan_on_s3_is_quarantined_restored_and_purged(
    lake: Lake, db: asyncpg.Pool, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace, name = "s3_orphans", "events"
    settings = lake.settings(database_url, tmp_path, namespace)
    engine = ConnectEngine(lake.connect_url)
    try:
        await build_table(engine, namespace, name, batches=2)
        table = lake.table(namespace, name)
        location = table.location()
        before, referenced = content(table), referenced_objects(table)
        table_id = await register(db, settings, namespace, name)
        # An operator allows orphan removal for this table.
        await db.execute(
            "INSERT INTO icepack.policies (policy_type, scope, catalog, namespace, table_name,"
            " config) VALUES ('system.orphan-file-removal', 'table', $1, $2, $3, $4::jsonb)",
            CATALOG,
            namespace,
            name,
            {"quarantine_days": 3},
        )
        s3 = lake.s3()
        bucket = split_s3(location)[0]
        orphans = {f"{location}/{key}": os.urandom(300 + i) for i, key in enumerate(ORPHAN_NAMES)}
        young = f"{location}/data/written-by-an-uncommitted-writer.parquet"
        for path, data in [*orphans.items(), (young, b"in flight")]:
            s3.put_object(Bucket=bucket, Key=split_s3(path)[1], Body=data)
        age(lake, location, ORPHAN_NAMES, WEEK)
        older_than = datetime.now(UTC) - timedelta(hours=72)
        remove = [RemoveOrphanFiles(params=RemoveOrphanFilesParams(older_than=older_than))]

        # 1. Listed through S3FileIO (prefix listing), recorded, moved to the quarantine.
        job = await run_job(db, settings, engine, table_id, remove)
        assert job.state == JobState.SUCCEEDED, job.error
        output = (await actions_of(db, job.id))["remove_orphan_files"]["output"]
        assert output["dry_run_orphans"] == len(orphans), output
        assert output["files_quarantined"] == len(orphans), output
        rows = await ledger(db, job.id)
        assert {location_key(r["path"]) for r in rows} == {location_key(p) for p in orphans}
        for row in rows:
            assert row["state"] == "quarantined" and row["kind"] == "orphan", row
            held = row["quarantine_path"]
            assert held.startswith(f"{location}/{QUARANTINE_PREFIX}/job-{job.id}/"), held
            assert not object_exists(s3, row["path"])
            assert object_bytes(s3, held) == orphans[row["path"]]
            assert row["size_bytes"] == len(orphans[row["path"]])
        assert object_exists(s3, young)  # younger than older_than: not an orphan yet
        fresh = lake.table(namespace, name)
        assert content(fresh) == before and missing_objects(lake, fresh) == []
        assert referenced <= referenced_objects(fresh)

        # 2. `icepack restore JOB`: the same bytes back at the same keys.
        cli = restore_cli(lake, database_url, namespace, monkeypatch)
        restored = await cli("restore", str(job.id))
        assert restored.exit_code == 0, restored.output
        assert f"{len(orphans)} file(s) restored" in restored.output
        assert {r["state"] for r in await ledger(db, job.id)} == {"restored"}
        for path, data in orphans.items():
            assert object_bytes(s3, path) == data
        assert not any(object_exists(s3, r["quarantine_path"]) for r in rows)

        # 3. Quarantined again, then purged once the window has passed.
        age(lake, location, ORPHAN_NAMES, WEEK)
        again = await run_job(db, settings, engine, table_id, remove)
        assert again.state == JobState.SUCCEEDED, again.error
        held = [r["quarantine_path"] for r in await ledger(db, again.id)]
        assert len(held) == len(orphans) and all(object_exists(s3, p) for p in held)
        later = datetime.now(UTC) + timedelta(days=4)
        purge = await run_job(db, settings, engine, table_id, [PurgeQuarantine()], clock=later)
        assert purge.state == JobState.SUCCEEDED, purge.error
        purged = (await actions_of(db, purge.id))["purge_quarantine"]["output"]
        assert purged["files_purged"] == len(orphans), purged
        assert not any(object_exists(s3, p) for p in held)
        assert {r["state"] for r in await ledger(db, again.id)} == {"purged"}
        final = lake.table(namespace, name)
        assert content(final) == before and missing_objects(lake, final) == []
    finally:
        await engine.close()
