"""Orphan removal end to end on a real Iceberg table (Spark, JDBC catalog, local warehouse),
through the executor's code path (``JobRunner``): orphans are recorded in the deletion ledger and
quarantined, never deleted; restore puts the same bytes back; purge deletes quarantined files
only after their window and never on a held table. Table contents and every other file of the
table are untouched throughout."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from icepack_core.db.queries import load_query
from icepack_core.execution.job_runner import JobRunner
from icepack_core.execution.ledger.actions import LedgerActions
from icepack_core.execution.ledger.quarantine import QUARANTINE_DIR, QUARANTINE_PREFIX
from icepack_core.intents import Intent, RemoveOrphanFiles, RemoveOrphanFilesParams, parse_intents
from icepack_core.queue.jobs import Backoff, Job, JobQueue
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.types import JobState, JobTrigger
from tests.execution.spark_tables import (
    fingerprint,
    local_path,
    make_small_files_table,
    missing_referenced_files,
    unique_name,
)
from tests.support.settings import service_settings

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "ledger"
WEEK_AGO = time.time() - 7 * 86400


@pytest.fixture
def runner_settings(
    database_url: str, spark_catalog_settings: Settings, tmp_path: Path
) -> Settings:
    return service_settings(database_url, spark_catalog_settings, tmp_path)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(root: Path) -> dict[str, str]:
    """Every file under the table root but the quarantine, with its checksum."""
    return {
        str(p.relative_to(root)): sha(p)
        for p in root.rglob("*")
        if p.is_file() and QUARANTINE_DIR not in p.parts
    }


async def run_one(
    db: asyncpg.Pool,
    settings: Settings,
    spark: Any,
    table_id: int,
    actions: Sequence[Intent],
    clock: datetime | None = None,
) -> Job:
    queue = JobQueue(db)
    enqueued = await queue.enqueue(table_id, actions, trigger=JobTrigger.MANUAL)
    job = await queue.claim("executor@test", 60)
    assert job is not None and job.id == enqueued.job.id
    runner = JobRunner(db, settings, queue, LocalEngine(settings, session=spark), "executor@test")
    if clock is not None:
        runner.execution.ledger.clock = lambda: clock
    done = (await runner.run(job)).job
    assert done is not None
    return done


async def output_of(db: asyncpg.Pool, job_id: int, action: str) -> dict[str, Any]:
    out: dict[str, Any] = await db.fetchval(
        "SELECT output FROM icepack.job_actions WHERE job_id = $1 AND action = $2",
        job_id,
        action,
    )
    return out


async def ledger(db: asyncpg.Pool, job_id: int) -> list[dict[str, Any]]:
    return [
        dict(r)
        for r in await db.fetch(
            "SELECT * FROM icepack.deletions WHERE job_id = $1 ORDER BY id", job_id
        )
    ]


async def test_orphans_are_quarantined_restored_and_purged_without_touching_the_table(
    db: asyncpg.Pool, spark: Any, runner_settings: Settings
) -> None:
    name = unique_name("quarantine")
    table = make_small_files_table(spark, NS, name, batches=3)
    metadata = spark.sql(
        f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1"
    ).first()["file"]
    table_id: int = await db.fetchval(load_query("table_insert"), "icepack", NS, name, metadata, {})
    await db.execute(
        "INSERT INTO icepack.policies (policy_type, scope, catalog, namespace, table_name, config)"
        " VALUES ('system.orphan-file-removal', 'table', 'icepack', $1, $2, $3::jsonb)",
        NS,
        name,
        {"quarantine_days": 3},
    )
    root = local_path(metadata).parent.parent
    orphans = [
        root / "data" / "00000-9-orphan-a.parquet",
        root / "data" / "nested" / "orphan-b.parquet",
        root / "orphan-c.bin",
    ]
    for i, path in enumerate(orphans):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(500 + i))
        os.utime(path, (WEEK_AGO, WEEK_AGO))
    digests = {p: sha(p) for p in orphans}
    young = root / "data" / "00000-9-written-by-an-uncommitted-writer.parquet"
    young.write_bytes(b"in flight")
    before, files_before = fingerprint(spark, table), tree(root)
    older_than = (datetime.now(UTC) - timedelta(hours=72)).isoformat()
    remove = parse_intents(
        [{"action": "remove_orphan_files", "params": {"older_than": older_than}}]
    )

    # 1. Quarantine: recorded, then moved under the quarantine prefix; nothing deleted.
    job = await run_one(db, runner_settings, spark, table_id, remove)
    assert job.state == JobState.SUCCEEDED, job.error
    rows = await ledger(db, job.id)
    assert {local_path(r["path"]) for r in rows} == set(orphans)
    for row in rows:
        original = local_path(row["path"])
        held = local_path(row["quarantine_path"])
        assert row["state"] == "quarantined" and row["kind"] == "orphan"
        assert row["action"] == "remove_orphan_files" and row["table_id"] == table_id
        assert row["reason"].startswith("not referenced by any snapshot; older than 20")
        assert row["size_bytes"] == len(held.read_bytes())
        assert held.is_relative_to(root / QUARANTINE_PREFIX / f"job-{job.id}")
        assert not original.exists() and sha(held) == digests[original]
        lag = row["purge_after"] - row["changed_at"]
        assert timedelta(days=3) - timedelta(minutes=1) < lag <= timedelta(days=3, minutes=1)
    output = await output_of(db, job.id, "remove_orphan_files")
    assert output["dry_run_orphans"] == 3 and output["files_quarantined"] == 3
    assert young.exists()
    after_quarantine = tree(root)
    assert after_quarantine == {
        k: v for k, v in files_before.items() if root / k not in set(orphans)
    }  # every other file (data, manifests, metadata) untouched
    assert fingerprint(spark, table) == before and missing_referenced_files(spark, table) == []

    # 2. A second run lists nothing new: the quarantine is hidden from the listing.
    again = await run_one(db, runner_settings, spark, table_id, remove)
    assert again.state == JobState.SUCCEEDED, again.error
    assert (await output_of(db, again.id, "remove_orphan_files"))["dry_run_orphans"] == 0
    assert await ledger(db, again.id) == []

    # 3. Restore: a destination that exists again is refused for that file, with the reason.
    blocker = orphans[2]
    blocker.write_bytes(b"a new file at the old path")
    restore = parse_intents([{"action": "restore_quarantine", "params": {"job_id": job.id}}])
    first = await run_one(db, runner_settings, spark, table_id, restore)
    assert first.state == JobState.SUCCEEDED, first.error
    out = await output_of(db, first.id, "restore_quarantine")
    assert out["files_restored"] == 2
    ((refused,),) = [out["refused"]]
    assert local_path(refused["path"]) == blocker and "exists at" in refused["reason"]
    assert blocker.read_bytes() == b"a new file at the old path"  # not overwritten
    blocker.unlink()
    second = await run_one(db, runner_settings, spark, table_id, restore)
    assert (await output_of(db, second.id, "restore_quarantine"))["files_restored"] == 1
    assert {r["state"] for r in await ledger(db, job.id)} == {"restored"}
    for path, digest in digests.items():
        assert sha(path) == digest  # the same bytes at the original paths
    assert fingerprint(spark, table) == before and tree(root) == files_before

    # 4. Purge: not before the window; never on a held table; then the copies go.
    for path in orphans:
        os.utime(path, (WEEK_AGO, WEEK_AGO))
    quarantined = await run_one(db, runner_settings, spark, table_id, remove)
    assert quarantined.state == JobState.SUCCEEDED, quarantined.error
    held_copies = [local_path(r["quarantine_path"]) for r in await ledger(db, quarantined.id)]
    assert len(held_copies) == 3 and all(p.exists() for p in held_copies)
    purge = parse_intents([{"action": "purge_quarantine"}])
    early = await run_one(db, runner_settings, spark, table_id, purge)
    assert (await output_of(db, early.id, "purge_quarantine"))["files_purged"] == 0
    assert all(p.exists() for p in held_copies)

    later = datetime.now(UTC) + timedelta(days=4)
    await db.execute(
        load_query("table_hold_set"), table_id, {"reason": "operator looks", "action": "x"}
    )
    refused_job = await run_one(db, runner_settings, spark, table_id, purge, clock=later)
    assert refused_job.state == JobState.FAILED and "is on hold" in (refused_job.error or "")
    assert all(p.exists() for p in held_copies)
    await db.execute("UPDATE icepack.tables SET maintenance_hold = NULL WHERE id = $1", table_id)

    purged = await run_one(db, runner_settings, spark, table_id, purge, clock=later)
    assert purged.state == JobState.SUCCEEDED, purged.error
    assert (await output_of(db, purged.id, "purge_quarantine"))["files_purged"] == 3
    assert not any(p.exists() for p in held_copies)
    assert {r["state"] for r in await ledger(db, quarantined.id)} == {"purged"}
    # Restoring a purged job reports what is gone instead of skipping it silently.
    late = await run_one(
        db,
        runner_settings,
        spark,
        table_id,
        parse_intents([{"action": "restore_quarantine", "params": {"job_id": quarantined.id}}]),
    )
    late_out = await output_of(db, late.id, "restore_quarantine")
    assert late_out["files_restored"] == 0 and len(late_out["already_purged"]) == 3
    assert fingerprint(spark, table) == before and missing_referenced_files(spark, table) == []


async def orphan_removal_allowed(db: Any, spark: Any, name: str) -> tuple[str, int, Path]:
    """A two-append table, registered, with a table policy allowing orphan removal:
    (qualified name, table id, table root)."""
    table = make_small_files_table(spark, NS, name, batches=2)
    metadata = spark.sql(
        f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1"
    ).first()["file"]
    table_id: int = await db.fetchval(load_query("table_insert"), "icepack", NS, name, metadata, {})
    await db.execute(
        "INSERT INTO icepack.policies (policy_type, scope, catalog, namespace, table_name)"
        " VALUES ('system.orphan-file-removal', 'table', 'icepack', $1, $2)",
        NS,
        name,
    )
    return table, table_id, local_path(metadata).parent.parent


async def test_a_job_that_died_mid_quarantine_is_retried_from_the_ledger(
    db: asyncpg.Pool, spark: Any, runner_settings: Settings
) -> None:
    name = unique_name("retried")
    table, table_id, root = await orphan_removal_allowed(db, spark, name)
    orphans = [root / "data" / f"orphan-{i:02}.parquet" for i in range(20)]
    for path in orphans:
        path.write_bytes(os.urandom(200))
        os.utime(path, (WEEK_AGO, WEEK_AGO))
    digests = {p: sha(p) for p in orphans}
    before = fingerprint(spark, table)
    older_than = datetime.now(UTC) - timedelta(hours=72)
    queue = JobQueue(db, Backoff(base_seconds=0, cap_seconds=0))
    await queue.enqueue(
        table_id,
        [RemoveOrphanFiles(params=RemoveOrphanFilesParams(older_than=older_than))],
        trigger=JobTrigger.MANUAL,
    )
    engine = LocalEngine(runner_settings, session=spark)

    class Died(Exception):
        """The first attempt's process dying after its 7th move, before marking it."""

    moves = 0

    async def die_after_seven(_path: str) -> None:
        nonlocal moves
        moves += 1
        if moves == 7:
            raise Died("killed")

    first = await queue.claim("executor@test", 60)
    assert first is not None
    runner = JobRunner(db, runner_settings, queue, engine, "executor@test")
    runner.execution.ledger.after_move = die_after_seven
    requeued = (await runner.run(first)).job
    assert requeued is not None and requeued.state == JobState.QUEUED  # retried
    rows = await ledger(db, first.id)
    assert len(rows) == 20 and sum(r["state"] == "quarantined" for r in rows) == 6

    second = await queue.claim("executor@test", 60)
    assert second is not None and second.id == first.id and second.fence == first.fence + 1
    runner.execution.ledger.after_move = None
    done = (await runner.run(second)).job
    assert done is not None and done.state == JobState.SUCCEEDED, done and done.error
    out = await db.fetchval(
        "SELECT output FROM icepack.job_actions WHERE job_id = $1 AND fence = $2"
        " AND action = 'remove_orphan_files'",
        first.id,
        second.fence,
    )
    # The retry listed the 13 files still in place; the 7th was found moved and only marked.
    assert out["dry_run_orphans"] == 13 and out["recorded"] == 0
    assert out["files_quarantined"] == 14 and out["resumed"] == 1
    rows = await ledger(db, first.id)
    assert len(rows) == 20 and {r["state"] for r in rows} == {"quarantined"}
    for row in rows:
        original, held = local_path(row["path"]), local_path(row["quarantine_path"])
        assert not original.exists() and sha(held) == digests[original]
    assert fingerprint(spark, table) == before and missing_referenced_files(spark, table) == []


def import_old_file(spark_catalog_settings: Any, name: str, path: Path, first_id: int) -> None:
    """Another writer's commit: ``add_files`` of a week-old Parquet file, as a migration does
    (the file keeps its old modification time)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from icepack_core.discovery.catalogs import load_catalog

    ids = [first_id, first_id + 1]
    pq.write_table(
        pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "part": ["a", "b"],
                "payload": [f"imported-{i}" for i in ids],
            }
        ),
        path,
    )
    os.utime(path, (WEEK_AGO, WEEK_AGO))
    (catalog_cfg,) = spark_catalog_settings.effective_catalogs()
    load_catalog(catalog_cfg).load_table((NS, name)).add_files([path.as_uri()])


def rows_of(spark_catalog_settings: Any, name: str) -> list[dict[str, Any]]:
    """The table's live rows read by PyIceberg from the catalog (not through Spark's cache)."""
    from icepack_core.discovery.catalogs import load_catalog

    (catalog_cfg,) = spark_catalog_settings.effective_catalogs()
    rows = load_catalog(catalog_cfg).load_table((NS, name)).scan().to_arrow().to_pylist()
    return sorted(rows, key=lambda r: r["id"])


async def stale_setup(db: Any, spark: Any, name: str) -> tuple[str, int, Path, Path]:
    """A two-append table Spark has cached, registered, with orphan removal allowed and one
    week-old stray file in its data directory: (table, id, root, stray)."""
    table, table_id, root = await orphan_removal_allowed(db, spark, name)
    assert spark.sql(f"SELECT count(*) AS n FROM {table}").first()["n"] == 40  # cached now
    stray = root / "data" / "orphan-stray.parquet"
    stray.write_bytes(os.urandom(300))
    os.utime(stray, (WEEK_AGO, WEEK_AGO))
    return table, table_id, root, stray


def remove_week_old() -> list[Intent]:
    older_than = (datetime.now(UTC) - timedelta(hours=72)).isoformat()
    return parse_intents([{"action": "remove_orphan_files", "params": {"older_than": older_than}}])


async def test_a_file_another_writer_committed_since_spark_cached_the_table_is_kept(
    db: asyncpg.Pool, spark: Any, runner_settings: Settings, spark_catalog_settings: Settings
) -> None:
    """Iceberg's Spark catalog caches a loaded table until 30 s after its last access, so a
    long-lived executor session can hold metadata older than the catalog's. The dry run must
    list from the catalog's metadata: a file another writer committed since is no orphan."""
    name = unique_name("stale")
    table, table_id, root, stray = await stale_setup(db, spark, name)
    imported = root / "data" / "imported-by-a-migration.parquet"
    import_old_file(spark_catalog_settings, name, imported, 1000)
    before = rows_of(spark_catalog_settings, name)
    assert len(before) == 42

    job = await run_one(db, runner_settings, spark, table_id, remove_week_old())

    assert job.state == JobState.SUCCEEDED, job.error
    output = await output_of(db, job.id, "remove_orphan_files")
    assert output["dry_run_orphans"] == 1 and "kept_referenced" not in output  # a fresh view
    assert imported.exists()
    assert {local_path(r["path"]) for r in await ledger(db, job.id)} == {stray}
    assert rows_of(spark_catalog_settings, name) == before
    spark.sql(f"REFRESH TABLE {table}")
    assert missing_referenced_files(spark, table) == []


async def test_a_file_committed_between_the_listing_and_the_quarantine_is_kept(
    db: asyncpg.Pool, spark: Any, runner_settings: Settings, spark_catalog_settings: Settings
) -> None:
    """The listing is checked against the catalog's metadata read after it: a file another
    writer commits once the dry run has named it is kept, and the output says so."""
    name = unique_name("race")
    table, table_id, root, stray = await stale_setup(db, spark, name)
    imported = root / "data" / "imported-after-the-listing.parquet"
    imported.write_bytes(b"placeholder")  # listed as an orphan by the dry run
    os.utime(imported, (WEEK_AGO, WEEK_AGO))
    ledger_actions = LedgerActions.orphan_sink

    def commit_first(self: Any, *args: Any) -> Any:
        sink = ledger_actions(self, *args)

        async def after_listing(paths: list[str], location: str, older_than: datetime) -> Any:
            assert {local_path(p) for p in paths} == {stray, imported}
            import_old_file(spark_catalog_settings, name, imported, 2000)
            return await sink(paths, location, older_than)

        return after_listing

    before_import = rows_of(spark_catalog_settings, name)
    LedgerActions.orphan_sink = commit_first  # type: ignore[method-assign,assignment]
    try:
        job = await run_one(db, runner_settings, spark, table_id, remove_week_old())
    finally:
        LedgerActions.orphan_sink = ledger_actions  # type: ignore[method-assign]

    assert job.state == JobState.SUCCEEDED, job.error
    output = await output_of(db, job.id, "remove_orphan_files")
    assert output["dry_run_orphans"] == 2 and output["kept_referenced"] == 1
    assert [local_path(p) for p in output["kept_referenced_sample"]] == [imported]
    assert output["files_quarantined"] == 1 and imported.exists()
    assert {local_path(r["path"]) for r in await ledger(db, job.id)} == {stray}
    after = rows_of(spark_catalog_settings, name)
    assert len(after) == len(before_import) + 2
    spark.sql(f"REFRESH TABLE {table}")
    assert missing_referenced_files(spark, table) == []
