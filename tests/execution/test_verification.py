"""Every rewrite is verified, whatever the column types and whatever happens to the job.

Real Spark + Iceberg tables, real Postgres. Faulty "rewrites" are committed through Iceberg's
Java API (``verify_support``) from the ``after_call`` hook, i.e. after the real procedure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Never

import asyncpg
import pytest

from icepack_core.errors import PermanentError, RetryableError, StaleFence
from icepack_core.execution.job_execution import JobExecution
from icepack_core.execution.job_runner import JobRunner
from icepack_core.execution.maintenance import TableMaintenance, VerificationFailed
from icepack_core.inspection.inspector import Inspector
from icepack_core.intents import Intent, RewriteDataFiles, RewriteDataFilesParams, RewriteManifests
from icepack_core.queue.jobs import Backoff, Job, JobQueue
from icepack_core.settings import Settings, load_settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.types import TableRef
from tests.execution.spark_tables import CATALOG, unique_name
from tests.execution.verify_support import (
    commit_dropping_a_file,
    commit_swapping_a_file,
    content,
    current_snapshot,
    make_all_types_table,
)

if TYPE_CHECKING:  # type-only: #29 moves the job execution's records
    from icepack_core.execution.job_execution import ActionRecord

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "verify"
COMPACT = RewriteDataFiles(params=RewriteDataFilesParams(options={"min-input-files": "2"}))
NO_OP_REWRITE = RewriteDataFiles(params=RewriteDataFilesParams(options={"min-input-files": "500"}))


@pytest.fixture(scope="module")
def engine(spark: Any, spark_catalog_settings: Settings) -> LocalEngine:
    return LocalEngine(spark_catalog_settings, session=spark)


@pytest.fixture
def job_settings(database_url: str, spark_catalog_settings: Settings, tmp_path: Path) -> Settings:
    (catalog,) = spark_catalog_settings.effective_catalogs()
    return load_settings(
        database_url=database_url,
        data_dir=tmp_path,
        catalogs=[
            catalog.model_dump(
                mode="json",
                exclude={"credential", "client_secret", "token", "s3_secret_access_key"},
            )
        ],
        spark_jars_dir=spark_catalog_settings.spark_jars_dir,
        job_lease_seconds=3,
    )


def maintenance(engine: LocalEngine, name: str, **kwargs: Any) -> TableMaintenance:
    return TableMaintenance(engine, TableRef(CATALOG, NS, name), **kwargs)


async def register(db: asyncpg.Pool, name: str) -> int:
    table_id: int = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ($1, $2, $3) RETURNING id",
        CATALOG,
        NS,
        name,
    )
    return table_id


async def claimed_job(
    db: asyncpg.Pool, table_id: int, actions: Sequence[Intent]
) -> tuple[JobQueue, Job]:
    queue = JobQueue(db, Backoff(base_seconds=0, cap_seconds=0))
    await queue.enqueue(table_id, actions, max_attempts=1)
    job = await queue.claim("test@verify", 60)
    assert job is not None and job.table_id == table_id
    return queue, job


async def stored_actions(db: asyncpg.Pool, job_id: int) -> list[dict[str, Any]]:
    return [
        dict(r)
        for r in await db.fetch(
            "SELECT action, state, fence, output FROM icepack.job_actions WHERE job_id = $1 "
            "ORDER BY id",
            job_id,
        )
    ]


async def pending_row(db: asyncpg.Pool, table_id: int) -> asyncpg.Record | None:
    return await db.fetchrow(
        "SELECT * FROM icepack.pending_verifications WHERE table_id = $1", table_id
    )


async def test_every_iceberg_type_is_fingerprinted_and_compacted_unchanged(
    spark: Any, engine: LocalEngine
) -> None:
    name = unique_name("types")
    table = make_all_types_table(spark, NS, name)
    before = content(spark, table)
    m = maintenance(engine, name)
    fp_before = await m.fingerprint()
    outcome = await m.run(COMPACT)
    assert outcome.verification is not None
    evidence = outcome.verification.to_json()
    assert evidence["status"] == "verified"
    (checked,) = evidence["snapshots"]
    assert checked["ok"] and checked["rows_before"] == checked["rows_after"] == 5
    assert checked["checksum_before"] == checked["checksum_after"] == str(fp_before.checksum)
    assert content(spark, table) == before
    assert fp_before == await m.fingerprint()

    # Map entry order is not content; a changed map value is.
    spark.sql(f"UPDATE {table} SET m = map('a', 1, 'c', NULL, 'b', 2) WHERE id = 1")
    assert await m.fingerprint() == fp_before
    spark.sql(f"UPDATE {table} SET mm = map('outer', map('y', -0.0D, 'z', 1.0D)) WHERE id = 4")
    changed = await m.fingerprint()
    assert changed.rows == fp_before.rows and changed.checksum != fp_before.checksum


async def test_corrupted_rewrite_of_a_map_table_is_detected_and_rolled_back(
    spark: Any, engine: LocalEngine
) -> None:
    name = unique_name("mapcorrupt")
    table = make_all_types_table(spark, NS, name)
    before, original = content(spark, table), current_snapshot(spark, table)
    bad: list[int] = []

    async def swap(_action: str) -> None:
        bad.append(commit_swapping_a_file(spark, NS, name))

    with pytest.raises(VerificationFailed) as exc:
        await maintenance(engine, name, after_call=swap).run(NO_OP_REWRITE)
    evidence = exc.value.evidence.to_json()
    assert evidence["status"] == "violation" and evidence["violation"]["snapshot_id"] == bad[0]
    # Same row count: only the checksum over the canonical map form can see it.
    violation = evidence["violation"]
    assert violation["rows_before"] == violation["rows_after"] == 5
    assert violation["checksum_before"] != violation["checksum_after"]
    assert evidence["rollback"]["status"] == "rolled_back" and exc.value.evidence.rolled_back
    assert content(spark, table) == before
    assert current_snapshot(spark, table) == original


async def test_writer_committing_during_the_rollback_is_named_in_the_evidence(
    spark: Any, engine: LocalEngine
) -> None:
    name = unique_name("race")
    table = make_all_types_table(spark, NS, name)
    bad: list[int] = []
    writer: list[int] = []

    async def drop(_action: str) -> None:
        bad.append(commit_dropping_a_file(spark, NS, name))

    async def guard_then_a_writer_commits() -> None:
        # Runs exactly between the "is the bad snapshot still current?" check and the
        # rollback: the worst moment for a concurrent writer.
        spark.sql(f"INSERT INTO {table} SELECT * FROM {table} WHERE id = 2")
        writer.append(current_snapshot(spark, table))

    with pytest.raises(VerificationFailed) as exc:
        await maintenance(engine, name, after_call=drop, guard=guard_then_a_writer_commits).run(
            NO_OP_REWRITE
        )
    rollback = exc.value.evidence.to_json()["rollback"]
    assert rollback["status"] == "rolled_back_reverting_writer"
    assert rollback["previous_snapshot_id"] == rollback["reverted_snapshot_id"] == writer[0]
    assert rollback["bad_snapshot_id"] == bad[0]
    assert rollback["current_snapshot_id"] == rollback["to_snapshot_id"]


async def test_failure_after_a_partial_commit_is_verified_and_held(
    spark: Any, engine: LocalEngine, db: asyncpg.Pool, spark_catalog_settings: Settings
) -> None:
    name = unique_name("partial")
    table = make_all_types_table(spark, NS, name)
    before, original = content(spark, table), current_snapshot(spark, table)
    table_id = await register(db, name)
    queue, job = await claimed_job(db, table_id, [NO_OP_REWRITE])

    async def commit_then_fail(_action: str) -> Never:
        commit_dropping_a_file(spark, NS, name)  # a partial-progress commit ...
        raise RuntimeError("executor lost its Spark driver")  # ... then the call fails

    execution = JobExecution(
        db, engine, Inspector(spark_catalog_settings), after_call=commit_then_fail
    )

    async def record(action: ActionRecord) -> None:
        await queue.record_action(job, **vars(action))

    with pytest.raises(PermanentError) as exc:
        await execution.run(table_id, [NO_OP_REWRITE], record, job=job)
    assert not isinstance(exc.value, RetryableError)
    hold = await db.fetchval("SELECT maintenance_hold FROM icepack.tables WHERE id = $1", table_id)
    assert hold["action"] == "verify_rewrites" and hold["evidence"]["status"] == "violation"
    rewrite, verify = await stored_actions(db, job.id)
    assert (rewrite["action"], rewrite["state"]) == ("rewrite_data_files", "failed")
    assert (verify["action"], verify["state"]) == ("verify_rewrites", "failed")
    evidence = verify["output"]["verification"]
    assert (
        evidence["pending"]["job_id"] == job.id and evidence["rollback"]["status"] == "rolled_back"
    )
    assert evidence["start_snapshot_id"] == original
    assert await pending_row(db, table_id) is None
    assert content(spark, table) == before and current_snapshot(spark, table) == original


async def test_verification_that_cannot_run_holds_the_table(
    spark: Any, engine: LocalEngine, db: asyncpg.Pool, spark_catalog_settings: Settings
) -> None:
    name = unique_name("noverify")
    table = make_all_types_table(spark, NS, name)
    before = content(spark, table)
    table_id = await register(db, name)
    queue, job = await claimed_job(db, table_id, [NO_OP_REWRITE])

    async def fail(_action: str) -> Never:
        raise RuntimeError("engine went away")

    # A zero timeout: the verification is stopped before its first query.
    execution = JobExecution(
        db, engine, Inspector(spark_catalog_settings), after_call=fail, verify_timeout_seconds=0
    )

    async def record(action: ActionRecord) -> None:
        await queue.record_action(job, **vars(action))

    with pytest.raises(PermanentError):
        await execution.run(table_id, [NO_OP_REWRITE], record, job=job)
    hold = await db.fetchval("SELECT maintenance_hold FROM icepack.tables WHERE id = $1", table_id)
    assert hold is not None
    assert hold["evidence"]["status"] == "error" and "TimeoutError" in hold["reason"]
    # The hold is announced with it (webhooks notify table.held).
    held = await db.fetchrow(
        "SELECT table_id, payload FROM icepack.events WHERE topic = 'table.held'"
    )
    assert held is not None
    assert held["table_id"] == table_id and held["payload"]["reason"] == hold["reason"]
    verify = (await stored_actions(db, job.id))[-1]
    assert (
        verify["action"] == "verify_rewrites"
        and verify["output"]["verification"]["status"] == "error"
    )
    assert await pending_row(db, table_id) is None
    assert content(spark, table) == before


async def test_cancelled_rewrite_is_verified_before_the_job_ends(
    spark: Any, engine: LocalEngine, db: asyncpg.Pool, job_settings: Settings
) -> None:
    name = unique_name("cancel")
    table = make_all_types_table(spark, NS, name)
    before, original = content(spark, table), current_snapshot(spark, table)
    table_id = await register(db, name)
    queue = JobQueue(db, Backoff(base_seconds=0, cap_seconds=0))
    job = (await queue.enqueue(table_id, [NO_OP_REWRITE], max_attempts=1)).job
    claimed = await queue.claim("test@verify", job_settings.job_lease_seconds)
    assert claimed is not None
    runner = JobRunner(db, job_settings, queue, engine, "test@verify")

    async def corrupt_then_get_cancelled(_action: str) -> None:
        commit_dropping_a_file(spark, NS, name)
        await queue.cancel(job.id)
        await asyncio.Event().wait()  # until the lease's heartbeat sees the cancel

    runner.execution.after_call = corrupt_then_get_cancelled
    run = await asyncio.wait_for(runner.run(claimed), timeout=120)
    assert run.job is not None and run.job.state.value == "cancelled"
    hold = await db.fetchval("SELECT maintenance_hold FROM icepack.tables WHERE id = $1", table_id)
    assert hold["evidence"]["rollback"]["status"] == "rolled_back"
    (verify,) = [a for a in await stored_actions(db, job.id) if a["action"] == "verify_rewrites"]
    assert verify["output"]["verification"]["status"] == "violation"
    assert content(spark, table) == before and current_snapshot(spark, table) == original


async def test_lost_lease_leaves_the_verification_to_the_next_holder(
    spark: Any, engine: LocalEngine, db: asyncpg.Pool, spark_catalog_settings: Settings
) -> None:
    name = unique_name("lost")
    table = make_all_types_table(spark, NS, name)
    before, original = content(spark, table), current_snapshot(spark, table)
    table_id = await register(db, name)
    queue, first = await claimed_job(db, table_id, [NO_OP_REWRITE])
    bad: list[int] = []

    async def corrupt(_action: str) -> None:
        bad.append(commit_dropping_a_file(spark, NS, name))

    async def lease_lost() -> Never:
        raise StaleFence(first.id, first.fence, "roll back")

    async def record_first(action: ActionRecord) -> None:
        await queue.record_action(first, **vars(action))

    execution = JobExecution(db, engine, Inspector(spark_catalog_settings), after_call=corrupt)
    with pytest.raises(StaleFence):
        await execution.run(table_id, [NO_OP_REWRITE], record_first, job=first, guard=lease_lost)
    # No rollback without the lock, no hold: the record stays for whoever holds the table next.
    assert current_snapshot(spark, table) == bad[0]
    assert (
        await db.fetchval("SELECT maintenance_hold FROM icepack.tables WHERE id = $1", table_id)
        is None
    )
    pending = await pending_row(db, table_id)
    assert pending is not None
    assert (pending["job_id"], pending["start_snapshot_id"]) == (first.id, original)
    await queue.fail(first, "lease lost", retryable=False)

    _, second = await claimed_job(db, table_id, [COMPACT])

    async def record_second(action: ActionRecord) -> None:
        await queue.record_action(second, **vars(action))

    async def lock_is_ours() -> None:
        return None

    execution.after_call = None
    with pytest.raises(PermanentError):
        await execution.run(table_id, [COMPACT], record_second, job=second, guard=lock_is_ours)
    (verify,) = await stored_actions(db, second.id)  # verified first; the compaction never ran
    evidence = verify["output"]["verification"]
    assert verify["action"] == "verify_rewrites" and evidence["status"] == "violation"
    assert (
        evidence["pending"]["job_id"] == first.id and evidence["violation"]["snapshot_id"] == bad[0]
    )
    assert evidence["rollback"]["status"] == "rolled_back"
    assert await pending_row(db, table_id) is None
    assert content(spark, table) == before and current_snapshot(spark, table) == original


async def test_successful_rewrite_stores_its_evidence_and_clears_the_record(
    spark: Any, engine: LocalEngine, db: asyncpg.Pool, spark_catalog_settings: Settings
) -> None:
    name = unique_name("ok")
    table = make_all_types_table(spark, NS, name)
    before = content(spark, table)
    table_id = await register(db, name)
    queue, job = await claimed_job(db, table_id, [COMPACT])

    async def record(action: ActionRecord) -> None:
        await queue.record_action(job, **vars(action))

    execution = JobExecution(db, engine, Inspector(spark_catalog_settings))
    await execution.run(table_id, [COMPACT], record, job=job)
    (stored,) = await stored_actions(db, job.id)
    output = stored["output"]
    assert output["verification"]["status"] == "verified"
    assert output["verification"]["snapshots"][0]["rows_after"] == 5
    assert output["verification"]["snapshots"][0]["ok"] is True
    assert await pending_row(db, table_id) is None
    assert content(spark, table) == before


async def test_a_writer_in_another_process_is_never_reverted_by_the_rollback(
    spark: Any, engine: LocalEngine, spark_catalog_settings: Settings
) -> None:
    """Spark's catalog caches the table: a commit made on top of the bad snapshot by another
    client (PyIceberg here) is invisible to the session until a refresh. The rollback must see
    it and leave the table alone rather than revert the writer and report a clean rollback."""
    from icepack_core.discovery.catalogs import load_catalog

    name = unique_name("otherwriter")
    table = make_all_types_table(spark, NS, name)
    (catalog_cfg,) = spark_catalog_settings.effective_catalogs()
    bad: list[int] = []
    writer: list[int] = []

    async def drop_then_another_process_commits(_action: str) -> None:
        bad.append(commit_dropping_a_file(spark, NS, name))
        other = load_catalog(catalog_cfg).load_table((NS, name))
        other.append(other.scan(row_filter="id = 2").to_arrow())
        head = load_catalog(catalog_cfg).load_table((NS, name)).metadata.current_snapshot_id
        assert head is not None
        writer.append(head)

    with pytest.raises(VerificationFailed) as exc:
        await maintenance(engine, name, after_call=drop_then_another_process_commits).run(
            NO_OP_REWRITE
        )
    rollback = exc.value.evidence.to_json()["rollback"]
    assert rollback["status"] == "not_rolled_back", rollback
    assert rollback["current_snapshot_id"] == writer[0] and rollback["bad_snapshot_id"] == bad[0]
    spark.sql(f"REFRESH TABLE {table}")
    assert current_snapshot(spark, table) == writer[0]


async def test_a_rewrite_after_a_type_was_widened_is_verified_not_rolled_back(
    spark: Any, engine: LocalEngine
) -> None:
    """Time travel reads a snapshot with its own schema: the parent of a rewrite that follows an
    ``ALTER COLUMN ... TYPE`` (no commit in between) reads the old types. Without casting both
    sides to the current types every value hashed differently: a false violation, a rollback and
    a hold, on every retry."""
    from icepack_core.spark.sql import qualified_name

    name = unique_name("widened")
    table = qualified_name(CATALOG, [NS], name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], NS)}")
    spark.sql(
        f"CREATE TABLE {table} (id INT, f FLOAT, d DECIMAL(9,2), s STRUCT<n: INT>, p STRING) "
        "USING iceberg PARTITIONED BY (p) TBLPROPERTIES ('format-version'='2')"
    )
    for b in range(4):
        spark.sql(
            f"INSERT INTO {table} SELECT CAST(id AS INT), CAST(id / 3 AS FLOAT), "
            f"CAST(id / 7 AS DECIMAL(9,2)), named_struct('n', CAST(id AS INT)), "
            f"IF(id % 2 = 0, 'x', 'y') FROM range({b * 10}, {(b + 1) * 10})"
        )
    for column, wider in (("id", "BIGINT"), ("f", "DOUBLE"), ("d", "DECIMAL(12,2)")):
        spark.sql(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE {wider}")
    spark.sql(f"ALTER TABLE {table} ALTER COLUMN s.n TYPE BIGINT")
    before = content(spark, table)

    outcome = await maintenance(engine, name).run(COMPACT)

    assert outcome.verification is not None
    evidence = outcome.verification.to_json()
    assert evidence["status"] == "verified", evidence
    assert all(s["ok"] for s in evidence["snapshots"]) and evidence["snapshots"]
    assert content(spark, table) == before


REWRITE_MANIFESTS = RewriteManifests()


async def test_a_manifest_rewrite_is_verified_from_metadata_without_a_scan(
    spark: Any, engine: LocalEngine
) -> None:
    from tests.execution.spark_tables import make_small_files_table

    name = unique_name("manifests")
    table = make_small_files_table(spark, NS, name, batches=6)
    before = content(spark, table)

    outcome = await maintenance(engine, name).run(REWRITE_MANIFESTS)

    assert outcome.verification is not None
    evidence = outcome.verification.to_json()
    assert evidence["status"] == "verified" and evidence["snapshots"], evidence
    assert all(s["ok"] and s["scope"] == "none" for s in evidence["snapshots"])
    assert content(spark, table) == before


async def test_a_manifest_rewrite_that_loses_a_file_is_caught_and_rolled_back(
    spark: Any, engine: LocalEngine
) -> None:
    from tests.execution.spark_tables import make_small_files_table

    name = unique_name("manifestsbad")
    table = make_small_files_table(spark, NS, name, batches=6)
    before = content(spark, table)

    async def drop(_action: str) -> None:
        commit_dropping_a_file(spark, NS, name)

    with pytest.raises(VerificationFailed) as exc:
        await maintenance(engine, name, after_call=drop).run(REWRITE_MANIFESTS)
    assert exc.value.evidence.to_json()["rollback"]["status"] == "rolled_back"
    assert content(spark, table) == before
