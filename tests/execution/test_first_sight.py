"""Small data files fingerprinted when the inspector first sees them, and a compaction's
verification that reads only what the rewrite wrote: real Spark, real Iceberg tables, real
Postgres, the inspector's ``TableInspections`` and the executor's ``JobRunner``.

The proof that a stored fingerprint is used and its file not read: the prefetch's reads are
recorded (nothing must be asked for), and the rewrite's inputs are moved away right after the
CALL, so a verification that read them would fail. The proof that a stored fingerprint never
decides a verdict: a stored value that is wrong sends the verification to the Spark scan, and
one of another schema is not used.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from icepack_core.execution.maintenance import TableMaintenance
from icepack_core.execution.verification import replaced_files, stored_fingerprints
from icepack_core.execution.verification.first_sight import PASS_INTERVAL_SECONDS, FirstSight
from icepack_core.inspection.process import TableInspections
from icepack_core.intents import parse_intent
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.types import TableRef
from tests.execution.spark_tables import (
    CATALOG,
    metadata_loader,
    missing_referenced_files,
    unique_name,
)
from tests.execution.test_equality_deletes import register, run_planned_job
from tests.execution.verify_scope_support import HOT, HiddenFiles, make_partitioned_table
from tests.execution.verify_support import content
from tests.support.settings import service_settings

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "eqdel"  # the namespace ``register`` records tables under
COMPACT = {"action": "rewrite_data_files", "params": {"options": {"min-input-files": "2"}}}
SMALL_FILES = 10  # make_partitioned_table: 4 + 4 in the HOT partitions, 1 + 1 in the COLD


@pytest.fixture
def runner_settings(
    database_url: str, spark_catalog_settings: Settings, tmp_path: Path
) -> Settings:
    return service_settings(database_url, spark_catalog_settings, tmp_path)


async def stored_paths(db: asyncpg.Pool, table_id: int) -> set[str]:
    rows = await db.fetch(
        "SELECT path FROM icepack.data_file_fingerprints WHERE table_id = $1", table_id
    )
    return {r["path"] for r in rows}


async def inspected(db: asyncpg.Pool, settings: Settings, spark: Any, name: str) -> int:
    """A new partitioned table, registered and inspected as the inspector service does."""
    table = make_partitioned_table(spark, NS, name)
    table_id = await register(db, spark, table, name)
    inspections = TableInspections(settings, db, first_sight=FirstSight(db))
    outcome = await inspections.inspect_and_record(table_id)
    assert outcome.status is not None
    return table_id


def recording_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths the prefetch asks the reader for, from now on."""
    asked: list[str] = []
    real = replaced_files.read_chunks

    def recorded(schema: Any, files: Any, checksum: bool, **kwargs: Any) -> Any:
        skip = kwargs.get("skip", ())
        asked.extend(
            f.path for p in files.partitions for f in p.before if (p.constant, f.path) not in skip
        )
        return real(schema, files, checksum, **kwargs)

    monkeypatch.setattr(replaced_files, "read_chunks", recorded)
    return asked


def job_maintenance(
    settings: Settings, engine: LocalEngine, db: asyncpg.Pool, table_id: int, name: str, **kw: Any
) -> TableMaintenance:
    """``TableMaintenance`` with the stored fingerprints' loader a job gives it."""

    async def stored(schema: Any, checksum: bool) -> Any:
        return await stored_fingerprints.load(db, table_id, schema, checksum)

    loader = metadata_loader(settings, NS, name)
    return TableMaintenance(
        engine, TableRef(CATALOG, NS, name), metadata=loader, stored_fingerprints=stored, **kw
    )


async def test_the_inspection_fingerprints_small_files_and_the_job_reads_only_its_outputs(
    db: asyncpg.Pool,
    runner_settings: Settings,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = unique_name("sighted")
    table_id = await inspected(db, runner_settings, spark, name)
    assert len(await stored_paths(db, table_id)) == SMALL_FILES
    table = f"{CATALOG}.{NS}.{name}"
    before = content(spark, table)
    asked = recording_reads(monkeypatch)
    inputs = HiddenFiles(spark, NS, name, HOT, tmp_path / "aside")

    async def move_inputs(_action: str) -> None:
        inputs.hide()  # any read of the compaction's inputs now fails

    engine = LocalEngine(runner_settings, session=spark)
    run = job_maintenance(runner_settings, engine, db, table_id, name, after_call=move_inputs)
    try:
        outcome = await run.run(parse_intent(COMPACT))
    finally:
        inputs.restore()
    assert outcome.output["rewritten_data_files_count"] == 8
    assert asked == []  # every input came from the store
    assert outcome.verification is not None
    (record,) = outcome.verification.to_json()["snapshots"]
    assert record["ok"] and record["reader"] == "in_process", record.get("reader_fallback")
    assert (record["reader_files_prefetched"], record["reader_files_read"]) == (8, 2)
    assert content(spark, table) == before
    assert missing_referenced_files(spark, table) == []


async def test_a_planned_job_after_the_inspection_reads_no_input_and_keeps_every_row(
    db: asyncpg.Pool, runner_settings: Settings, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique_name("planned")
    table_id = await inspected(db, runner_settings, spark, name)
    table = f"{CATALOG}.{NS}.{name}"
    before = content(spark, table)
    asked = recording_reads(monkeypatch)
    _, actions = await run_planned_job(db, runner_settings, spark, table_id)
    (compaction,) = [a for a in actions if a["action"] == "rewrite_data_files"]
    assert compaction["state"] == "succeeded"
    assert asked == []
    assert content(spark, table) == before
    assert missing_referenced_files(spark, table) == []
    # The next inspection's full pass drops the fingerprints of the files that left.
    sight = FirstSight(db, full_pass_seconds=0, pass_interval_seconds=0)
    loaded = await metadata_loader(runner_settings, NS, name)()
    await sight.take(table_id, loaded)
    live = {r[0] for r in spark.sql(f"SELECT file_path FROM {table}.data_files").collect()}
    assert (await stored_paths(db, table_id)) <= live


async def test_a_wrong_stored_fingerprint_sends_the_verification_to_spark(
    db: asyncpg.Pool, runner_settings: Settings, spark: Any
) -> None:
    name = unique_name("tampered")
    table_id = await inspected(db, runner_settings, spark, name)
    await db.execute(
        "UPDATE icepack.data_file_fingerprints SET checksum = checksum + $2 WHERE table_id = $1",
        table_id,
        Decimal(1),
    )
    table = f"{CATALOG}.{NS}.{name}"
    before = content(spark, table)
    engine = LocalEngine(runner_settings, session=spark)
    outcome = await job_maintenance(runner_settings, engine, db, table_id, name).run(
        parse_intent(COMPACT)
    )
    assert outcome.verification is not None
    (record,) = outcome.verification.to_json()["snapshots"]
    assert record["ok"] and record["reader"] == "engine"  # the Spark scan decided, and proved it
    assert "differs" in record["reader_fallback"], record
    assert content(spark, table) == before
    assert missing_referenced_files(spark, table) == []


async def test_fingerprints_of_another_schema_are_not_used(
    db: asyncpg.Pool, runner_settings: Settings, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique_name("evolved")
    table_id = await inspected(db, runner_settings, spark, name)
    table = f"{CATALOG}.{NS}.{name}"
    spark.sql(f"ALTER TABLE {table} ADD COLUMN extra INT")
    before = content(spark, table)
    asked = recording_reads(monkeypatch)
    engine = LocalEngine(runner_settings, session=spark)
    outcome = await job_maintenance(runner_settings, engine, db, table_id, name).run(
        parse_intent(COMPACT)
    )
    assert len(asked) == 8  # the HOT partitions' inputs, read again with the new schema
    assert outcome.verification is not None
    (record,) = outcome.verification.to_json()["snapshots"]
    assert record["ok"]
    assert content(spark, table) == before
    assert missing_referenced_files(spark, table) == []


async def test_a_pass_reads_only_files_added_since_the_last_and_forgets_unreadable_tables(
    db: asyncpg.Pool, runner_settings: Settings, spark: Any
) -> None:
    name = unique_name("incremental")
    table = make_partitioned_table(spark, NS, name)
    table_id = await register(db, spark, table, name)
    clock = [0.0]
    sight = FirstSight(db, clock=lambda: clock[0])
    load = metadata_loader(runner_settings, NS, name)
    first = await sight.take(table_id, await load())
    assert (first.taken, first.known, first.full) == (SMALL_FILES, 0, True)
    spark.sql(f"INSERT INTO {table} VALUES (9000, 'p0', 'w', TIMESTAMP'2024-01-01 00:00:00')")
    soon = await sight.take(table_id, await load())  # within the interval: batched later
    assert soon.taken == 0 and soon.skipped == "the table's last pass was moments ago"
    clock[0] += PASS_INTERVAL_SECONDS
    batched = await sight.take(table_id, await load())
    assert (batched.taken, batched.full) == (1, False)
    clock[0] += PASS_INTERVAL_SECONDS
    again = await sight.take(table_id, await load())
    assert again.taken == 0 and again.skipped == "no snapshot since the last pass"
    spark.sql(f"INSERT INTO {table} VALUES (9001, 'p0', 'x', TIMESTAMP'2024-01-01 00:00:00')")
    spark.sql(f"INSERT INTO {table} VALUES (9002, 'p4', 'y', TIMESTAMP'2024-01-05 00:00:00')")
    clock[0] += PASS_INTERVAL_SECONDS
    second = await sight.take(table_id, await load())
    assert (second.taken, second.known, second.full) == (2, 0, False)
    assert len(await stored_paths(db, table_id)) == SMALL_FILES + 3
    # A delete file makes the rows more than the files': nothing of this table is kept.
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.delete.mode'='merge-on-read')")
    spark.sql(f"DELETE FROM {table} WHERE id = 0")  # one of a file's three rows
    clock[0] += PASS_INTERVAL_SECONDS
    gone = await sight.take(table_id, await load())
    assert gone.skipped == "the table holds live delete files"
    assert await stored_paths(db, table_id) == set()


async def test_a_table_keeps_at_most_its_bound_of_fingerprints(
    db: asyncpg.Pool, runner_settings: Settings, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique_name("bounded")
    table = make_partitioned_table(spark, NS, name)
    table_id = await register(db, spark, table, name)
    monkeypatch.setattr(stored_fingerprints, "MAX_PER_TABLE", 4)
    loaded = await metadata_loader(runner_settings, NS, name)()
    taken = await FirstSight(db).take(table_id, loaded)
    assert taken.taken == SMALL_FILES
    assert len(await stored_paths(db, table_id)) == 4
    kept = await stored_fingerprints.load(db, table_id, loaded.metadata.schema(), True)
    assert len(kept) == 4
    assert await stored_fingerprints.load(db, table_id, loaded.metadata.schema(), False) == {}
