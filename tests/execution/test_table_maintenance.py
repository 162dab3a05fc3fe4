"""Iceberg procedures on real Spark through ``TableMaintenance``: nothing lost, ever."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from icepack_core.errors import OrphanLimitExceeded, PermanentError
from icepack_core.execution.maintenance import OrphanLimits, TableMaintenance, VerificationFailed
from icepack_core.intents import parse_intent
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.spark.sql import qualified_name
from icepack_core.types import TableRef
from tests.execution.spark_tables import (
    CATALOG,
    data_file_count,
    fingerprint,
    local_path,
    make_small_files_table,
    missing_referenced_files,
    snapshot_count,
    unique_name,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "maint"


@pytest.fixture(scope="module")
def engine(spark: Any, spark_catalog_settings: Settings) -> LocalEngine:
    return LocalEngine(spark_catalog_settings, session=spark)


def maintenance(engine: LocalEngine, name: str, **kwargs: Any) -> TableMaintenance:
    return TableMaintenance(engine, TableRef(CATALOG, NS, name), **kwargs)


async def test_rewrite_data_files_compacts_without_losing_a_row(
    spark: Any, engine: LocalEngine
) -> None:
    name = unique_name("small")
    table = make_small_files_table(spark, NS, name, batches=12)
    before, files_before = fingerprint(spark, table), data_file_count(spark, table)
    outcome = await maintenance(engine, name).run(
        parse_intent(
            {
                "action": "rewrite_data_files",
                "params": {"strategy": "binpack", "options": {"min-input-files": "5"}},
            }
        )
    )
    assert fingerprint(spark, table) == before
    assert data_file_count(spark, table) < files_before
    assert outcome.output["rewritten_data_files_count"] == files_before
    assert outcome.verification is not None
    (verified,) = outcome.verification.to_json()["snapshots"]
    assert verified["rows_before"] == verified["rows_after"] == before[0]
    assert (
        "CALL `icepack`.`system`.`rewrite_data_files`(table => '`icepack`.`maint`."
        in outcome.sql[-1]
    )
    assert missing_referenced_files(spark, table) == []


async def test_partition_scoped_rewrite_leaves_other_partitions_alone(
    spark: Any, engine: LocalEngine
) -> None:
    name = unique_name("parts")
    table = make_small_files_table(spark, NS, name, batches=8, partitioned=True)
    files_b_before = spark.sql(
        f"SELECT count(*) AS n FROM {table}.files WHERE partition.part = 'b'"
    ).first()["n"]
    before = fingerprint(spark, table)
    await maintenance(engine, name).run(
        parse_intent(
            {
                "action": "rewrite_data_files",
                "params": {"options": {"min-input-files": "2"}, "where": "part = 'a'"},
            }
        )
    )
    counts = {
        r["p"]: r["n"]
        for r in spark.sql(
            f"SELECT partition.part AS p, count(*) AS n FROM {table}.files GROUP BY 1"
        ).collect()
    }
    assert counts["a"] == 1 and counts["b"] == files_b_before
    assert fingerprint(spark, table) == before


async def test_expire_snapshots_keeps_every_file_the_survivors_need(
    spark: Any, engine: LocalEngine
) -> None:
    name = unique_name("snaps")
    table = make_small_files_table(spark, NS, name, batches=6)
    before, files_before = fingerprint(spark, table), data_file_count(spark, table)
    await maintenance(engine, name).run(
        parse_intent(
            {"action": "rewrite_data_files", "params": {"options": {"min-input-files": "2"}}}
        )
    )
    assert snapshot_count(spark, table) == 7
    future = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    outcome = await maintenance(engine, name).run(
        parse_intent(
            {"action": "expire_snapshots", "params": {"older_than": future, "retain_last": 1}}
        )
    )
    assert snapshot_count(spark, table) == 1
    # exactly the pre-compaction files went; the compacted ones the survivor needs stay
    assert int(outcome.output["deleted_data_files_count"]) == files_before
    assert fingerprint(spark, table) == before
    assert missing_referenced_files(spark, table) == []


async def test_rewrite_manifests_and_position_deletes_on_merge_on_read(
    spark: Any, engine: LocalEngine
) -> None:
    name = unique_name("mor")
    table = make_small_files_table(spark, NS, name, batches=6, merge_on_read=True)
    spark.sql(f"DELETE FROM {table} WHERE id % 7 = 0")
    spark.sql(f"DELETE FROM {table} WHERE id % 11 = 0")
    before = fingerprint(spark, table)
    m = maintenance(engine, name)
    deletes = await m.run(
        parse_intent(
            {
                "action": "rewrite_position_delete_files",
                "params": {"options": {"rewrite-all": "true"}},
            }
        )
    )
    manifests = await m.run(parse_intent({"action": "rewrite_manifests"}))
    assert fingerprint(spark, table) == before
    assert int(deletes.output["rewritten_delete_files_count"]) >= 2
    assert int(manifests.output["rewritten_manifests_count"]) >= 2
    assert missing_referenced_files(spark, table) == []


async def test_broken_rewrite_is_detected_and_rolled_back(spark: Any, engine: LocalEngine) -> None:
    name = unique_name("broken")
    table = make_small_files_table(spark, NS, name, batches=6)
    before = fingerprint(spark, table)
    original_snapshot = spark.sql(
        f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).first()["snapshot_id"]

    async def drop_a_file_in_a_rewrite(_action: str) -> None:
        # Test-only fault: commit a "replace" that deletes one data file and adds nothing,
        # through Iceberg's Java API, as a buggy rewrite would.
        jvm = spark._jvm
        iceberg = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            spark._jsparkSession, f"{CATALOG}.{NS}.{name}"
        )
        data_file = iceberg.currentSnapshot().addedDataFiles(iceberg.io()).iterator().next()
        rewrite = iceberg.newRewrite()
        rewrite.deleteFile(data_file)
        rewrite.commit()

    with pytest.raises(VerificationFailed) as exc:
        await maintenance(engine, name, after_call=drop_a_file_in_a_rewrite).run(
            parse_intent(
                {"action": "rewrite_data_files", "params": {"options": {"min-input-files": "50"}}}
            )
        )
    violation = exc.value.evidence.to_json()["violation"]
    assert violation["rows_before"] == before[0] and violation["rows_after"] < before[0]
    assert exc.value.evidence.rolled_back is True
    assert fingerprint(spark, table) == before
    current = spark.sql(
        f"SELECT snapshot_id FROM {table}.history WHERE is_current_ancestor "
        "ORDER BY made_current_at DESC LIMIT 1"
    ).first()["snapshot_id"]
    assert current == original_snapshot


async def test_orphan_removal_spares_young_and_referenced_files(
    spark: Any, engine: LocalEngine
) -> None:
    name = unique_name("orphans")
    table = make_small_files_table(spark, NS, name, batches=3)
    before = fingerprint(spark, table)
    some_file = local_path(spark.sql(f"SELECT file_path FROM {table}.files").first()["file_path"])
    data_dir = some_file.parent
    old_orphan = data_dir / "00000-0-orphan-from-a-crashed-job.parquet"
    old_orphan.write_bytes(b"PAR1 not really")
    week_ago = time.time() - 7 * 86400
    os.utime(old_orphan, (week_ago, week_ago))
    in_flight = data_dir / "00000-0-written-by-an-uncommitted-writer.parquet"
    in_flight.write_bytes(b"PAR1 in flight")
    # Every file a snapshot references is at least as old as the orphan: age alone spares none.
    for referenced in data_dir.iterdir():
        if referenced not in (old_orphan, in_flight):
            os.utime(referenced, (week_ago, week_ago))

    older_than = (datetime.now(UTC) - timedelta(hours=72)).isoformat()
    intent = {"action": "remove_orphan_files", "params": {"older_than": older_than}}
    # Not admitted by the choke point (no location), or admitted for another location:
    # refused before any listing or deletion.
    with pytest.raises(PermanentError, match="not admitted with a location"):
        await maintenance(engine, name).run(parse_intent(intent))
    with pytest.raises(PermanentError, match="not the admitted"):
        await maintenance(engine, name, orphan_location=str(data_dir.parent.parent)).run(
            parse_intent(intent)
        )
    # A dry run over the limits stops the job before anything is deleted.
    with pytest.raises(OrphanLimitExceeded) as over:
        await maintenance(
            engine,
            name,
            orphan_location=table_location(spark, table),
            orphan_limits=OrphanLimits(max_files=0),
        ).run(parse_intent(intent))
    assert over.value.evidence["dry_run_orphans"] == 1
    orphans = over.value.evidence["orphans"]
    assert isinstance(orphans, list) and "orphan-from-a-crashed-job" in orphans[0]
    assert old_orphan.exists()

    # Without the deletion ledger nothing is removed: the procedure never deletes
    # (tests/execution/test_orphan_quarantine.py runs the quarantine end to end).
    with pytest.raises(PermanentError, match="only removed through the deletion ledger"):
        await maintenance(engine, name, orphan_location=table_location(spark, table)).run(
            parse_intent(intent)
        )
    seen = []

    async def sink(paths: list[str], location: str, older_than: datetime) -> dict[str, Any]:
        seen.append((paths, location, older_than))
        return {"files_quarantined": len(paths)}

    outcome = await maintenance(
        engine, name, orphan_location=table_location(spark, table), orphan_sink=sink
    ).run(parse_intent(intent))
    assert outcome.output["dry_run_orphans"] == 1  # reported before anything was touched
    ((paths, location, _),) = seen
    assert len(paths) == 1 and "orphan-from-a-crashed-job" in paths[0]
    assert location == table_location(spark, table)
    assert "prefix_mismatch_mode => 'ERROR'" in outcome.sql[-1]
    assert "dry_run => true" in outcome.sql[-1]
    assert f"location => '{table_location(spark, table)}'" in outcome.sql[-1]
    assert old_orphan.exists() and in_flight.exists()
    assert missing_referenced_files(spark, table) == []
    assert fingerprint(spark, table) == before


def table_location(spark: Any, table: str) -> str:
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect()
    location: str = next(r["data_type"] for r in rows if r["col_name"] == "Location")
    return location


async def test_hostile_table_name_is_quoted_not_executed(spark: Any, engine: LocalEngine) -> None:
    name = "we'ird`; DROP TABLE x --ünï"
    table = qualified_name(CATALOG, [NS], name)
    spark.sql(f"CREATE TABLE {table} (id BIGINT) USING iceberg")
    for i in range(5):
        spark.sql(f"INSERT INTO {table} VALUES ({i})")
    before = fingerprint(spark, table)
    outcome = await maintenance(engine, name).run(
        parse_intent(
            {"action": "rewrite_data_files", "params": {"options": {"min-input-files": "2"}}}
        )
    )
    assert fingerprint(spark, table) == before and data_file_count(spark, table) == 1
    assert (
        "we''ird``; DROP TABLE x --ünï" in outcome.sql[-1]
        or "we\\'ird``; DROP TABLE x --ünï" in outcome.sql[-1]
    )


async def test_partition_scope_is_decided_from_fresh_file_stats(
    spark: Any, engine: LocalEngine
) -> None:
    name = unique_name("scope")
    table = make_small_files_table(spark, NS, name, batches=3, partitioned=True)
    for i in range(5):  # partition a: 8 small files; partition b: 3 (below min-input-files)
        spark.sql(f"INSERT INTO {table} VALUES ({1000 + i}, 'a', 'extra')")
    before = fingerprint(spark, table)
    outcome = await maintenance(engine, name).run(
        parse_intent(
            {
                "action": "rewrite_data_files",
                "params": {"scope": "partitions", "options": {"min-input-files": "5"}},
            }
        )
    )
    assert (
        "where => '(`part` = ''a'')'" in outcome.sql[-1]
        or "where => '(`part` = \\'a\\')'" in outcome.sql[-1]
    )
    assert outcome.output["partitions_selected"] == 1
    assert outcome.output["partitions_total"] == 2
    counts = {
        r["p"]: r["n"]
        for r in spark.sql(
            f"SELECT partition.part AS p, count(*) AS n FROM {table}.files GROUP BY 1"
        ).collect()
    }
    assert counts == {"a": 1, "b": 3}
    assert fingerprint(spark, table) == before
