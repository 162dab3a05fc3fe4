"""Open partitions, the per-run cap and partition spec evolution in the scoped compaction.

Real Spark and real Iceberg tables, compacted by ``TableMaintenance`` with the executor's
metadata loader. The wall clock of the maintenance is pinned (``clock``) between two commits,
so that which partition counts as open depends on the commits' own times, not on how fast
the test runs. Every run checks the contents (rows and checksum), that no referenced file is
missing, and which data files are still live.
"""

from __future__ import annotations

from typing import Any

import pytest

from icepack_core.execution.maintenance import TableMaintenance
from icepack_core.intents import parse_intent
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.spark.sql import qualified_name
from icepack_core.types import TableRef
from tests.execution.spark_tables import (
    CATALOG,
    fingerprint,
    metadata_loader,
    missing_referenced_files,
    unique_name,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "open_partitions"
QUIET = 600.0


@pytest.fixture(scope="module")
def engine(spark: Any, spark_catalog_settings: Settings) -> LocalEngine:
    return LocalEngine(spark_catalog_settings, session=spark)


def create(spark: Any, partitioned_by: str, version: int = 2) -> tuple[str, str]:
    name = unique_name("t")
    table = qualified_name(CATALOG, [NS], name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], NS)}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, p STRING, ts TIMESTAMP) USING iceberg "
        f"PARTITIONED BY ({partitioned_by}) "
        f"TBLPROPERTIES ('format-version'='{version}', 'write.distribution-mode'='none')"
    )
    return name, table


def append(spark: Any, table: str, p: str, files: int, ts: str = "2026-01-01 10:00:00") -> None:
    for i in range(files):
        spark.sql(f"INSERT INTO {table} VALUES ({i}, '{p}', TIMESTAMP '{ts}+00:00')")


def live_files(spark: Any, table: str, where: str = "true") -> set[str]:
    rows = spark.sql(f"SELECT file_path FROM {table}.files WHERE content = 0 AND {where}").collect()
    return {r["file_path"] for r in rows}


def last_commit_ms(spark: Any, table: str) -> int:
    row = spark.sql(f"SELECT unix_millis(max(committed_at)) AS ms FROM {table}.snapshots").first()
    return int(row["ms"])


async def compact(
    spark: Any, engine: Any, settings: Any, name: str, table: str, now_ms: int, **params: Any
) -> Any:
    before = fingerprint(spark, table)
    outcome = await TableMaintenance(
        engine,
        TableRef(CATALOG, NS, name),
        metadata=metadata_loader(settings, NS, name),
        clock=lambda: now_ms / 1000,
    ).run(
        parse_intent(
            {
                "action": "rewrite_data_files",
                "params": {
                    "scope": "partitions",
                    "options": {"min-input-files": "2"},
                    "open_quiet_seconds": QUIET,
                    **params,
                },
            }
        )
    )
    spark.sql(f"REFRESH TABLE {table}")
    assert fingerprint(spark, table) == before
    assert missing_referenced_files(spark, table) == []
    return outcome


async def test_the_open_partition_is_skipped_and_the_closed_one_compacted_once(
    spark: Any, engine: LocalEngine, spark_catalog_settings: Settings
) -> None:
    name, table = create(spark, "p")
    append(spark, table, "closed", 3)
    closed_at = last_commit_ms(spark, table)
    append(spark, table, "open", 3)
    open_at = last_commit_ms(spark, table)
    assert open_at > closed_at
    # "closed" was last written more than QUIET ago, "open" less.
    now_ms = (closed_at + open_at) // 2 + int(QUIET * 1000)
    open_files = live_files(spark, table, "partition.p = 'open'")
    outcome = await compact(spark, engine, spark_catalog_settings, name, table, now_ms)
    assert outcome.output["partitions_selected"] == 1, outcome.output
    assert outcome.output["open_partitions_skipped"] == ['spec 0 {"p": "open"}']
    assert outcome.output["open_partitions_skipped_count"] == 1
    assert "where => '(`p` = \\'closed\\')'" in outcome.sql[-1]
    assert outcome.output["rewritten_data_files_count"] == 3
    assert live_files(spark, table, "partition.p = 'open'") == open_files
    (compacted,) = live_files(spark, table, "partition.p = 'closed'")
    # Unchanged and closed: the next run (the open partition still open) rewrites nothing.
    # A moment later (1 ms: the open partition's file must stay within the quiet period,
    # which ends half the gap between the two appends after now_ms).
    again = await compact(spark, engine, spark_catalog_settings, name, table, now_ms + 1)
    assert again.output["partitions_selected"] == 0 and "where => 'false'" in again.sql[-1]
    assert live_files(spark, table, "partition.p = 'closed'") == {compacted}
    assert live_files(spark, table, "partition.p = 'open'") == open_files
    # Once quiet, the formerly open partition is compacted; the closed one still is not.
    later = await compact(spark, engine, spark_catalog_settings, name, table, open_at + 10**7)
    assert later.output["partitions_selected"] == 1
    assert "where => '(`p` = \\'open\\')'" in later.sql[-1]
    assert live_files(spark, table, "partition.p = 'closed'") == {compacted}
    assert len(live_files(spark, table, "partition.p = 'open'")) == 1


async def test_an_open_partition_over_its_bound_is_compacted(
    spark: Any, engine: LocalEngine, spark_catalog_settings: Settings
) -> None:
    name, table = create(spark, "p")
    append(spark, table, "hot", 4)
    append(spark, table, "warm", 2)
    now_ms = last_commit_ms(spark, table) + 1000  # both open
    outcome = await compact(
        spark, engine, spark_catalog_settings, name, table, now_ms, open_max_small_files=3
    )
    assert outcome.output["partitions_selected"] == 1
    assert outcome.output["open_partitions_skipped"] == ['spec 0 {"p": "warm"}']
    assert "where => '(`p` = \\'hot\\')'" in outcome.sql[-1]
    assert len(live_files(spark, table, "partition.p = 'hot'")) == 1
    assert len(live_files(spark, table, "partition.p = 'warm'")) == 2


async def test_the_cap_compacts_the_partitions_with_most_small_files_first(
    spark: Any, engine: LocalEngine, spark_catalog_settings: Settings
) -> None:
    name, table = create(spark, "p")
    for p, files in (("a", 2), ("b", 4), ("c", 3)):
        append(spark, table, p, files)
    a_files = live_files(spark, table, "partition.p = 'a'")
    outcome = await compact(
        spark, engine, spark_catalog_settings, name, table, 0, open_quiet_seconds=0,
        max_partitions=2,
    )  # fmt: skip
    assert outcome.output["partitions_selected"] == 2
    assert outcome.output["partitions_deferred"] == 1
    assert "where => '(`p` = \\'b\\') OR (`p` = \\'c\\')'" in outcome.sql[-1]
    assert live_files(spark, table, "partition.p = 'a'") == a_files
    # The next run takes the deferred one.
    again = await compact(
        spark, engine, spark_catalog_settings, name, table, 0, open_quiet_seconds=0,
        max_partitions=2,
    )  # fmt: skip
    assert again.output["partitions_selected"] == 1 and "partitions_deferred" not in again.output
    assert len(live_files(spark, table)) == 3


async def test_files_of_a_day_spec_and_of_an_hour_spec_are_scoped_together(
    spark: Any, engine: LocalEngine, spark_catalog_settings: Settings
) -> None:
    """Spec 0 ``days(ts)``, spec 1 ``hours(ts)``: the day partition written under spec 0 and
    an hour partition of another day under spec 1 both qualify; the range of each is written
    on ``ts``, and a single-file hour partition is left alone."""
    name, table = create(spark, "days(ts)")
    append(spark, table, "x", 3, "2026-01-01 05:00:00")
    spark.sql(f"ALTER TABLE {table} REPLACE PARTITION FIELD ts_day WITH hours(ts)")
    append(spark, table, "x", 3, "2026-01-02 07:00:00")
    append(spark, table, "x", 1, "2026-01-02 08:00:00")
    lone = live_files(spark, table, "spec_id = 1 AND partition.ts_hour % 24 = 8")
    assert len(lone) == 1
    outcome = await compact(
        spark, engine, spark_catalog_settings, name, table, 0, open_quiet_seconds=0
    )
    assert outcome.output["scope_source"] == "metadata", outcome.output
    assert outcome.output["partitions_selected"] == 2
    assert outcome.output["older_specs_scoped"] == 1
    call = outcome.sql[-1]
    assert "`ts` >= TIMESTAMP \\'2026-01-01 00:00:00.000000+00:00\\'" in call, call
    assert "`ts` < TIMESTAMP \\'2026-01-02 08:00:00.000000+00:00\\'" in call, call
    assert outcome.output["rewritten_data_files_count"] == 6
    assert lone <= live_files(spark, table)
    # The spec 0 day's rows now live in a spec 1 hour partition: per partition key they
    # differ, and no filter selects both specs' partitions exactly, so the comparison is the
    # whole table's, and says why.
    (record,) = outcome.verification.to_json()["snapshots"]
    assert record["ok"] and record["scope"] == "table", record
    assert "partition specs share no partition field" in record["scope_reason"], record
    assert record["reader_fallback"].startswith("the in-process read differs (partition spec 0")


async def test_a_void_transform_falls_back_to_the_whole_table_with_the_reason(
    spark: Any, engine: LocalEngine, spark_catalog_settings: Settings
) -> None:
    """A v1 table keeps a dropped partition field as ``void``: its partitions cannot be
    written as a filter, so the rewrite runs table-wide (binpack's thresholds apply)."""
    name, table = create(spark, "p, bucket(4, id)", version=1)
    spark.sql(f"ALTER TABLE {table} DROP PARTITION FIELD id_bucket")
    append(spark, table, "a", 3)
    outcome = await compact(
        spark, engine, spark_catalog_settings, name, table, 0, open_quiet_seconds=0
    )
    assert outcome.output["scope"] == "table", outcome.output
    assert "void transform cannot be scoped exactly" in outcome.output["scope_reason"]
    assert outcome.output["rewritten_data_files_count"] == 3


async def test_a_bucket_table_every_commit_touches_is_compacted_above_its_bound(
    spark: Any, engine: LocalEngine, spark_catalog_settings: Settings
) -> None:
    """``bucket(4, id)``: each commit adds a file to every bucket, so every partition is open
    (a streaming sink's shape). Open never means never compacted: at or below the bound the
    buckets are skipped (named), above it every one is compacted, scoped by Iceberg's bucket
    function. (A check of the rule for bucket tables, which held already.)"""
    name, table = create(spark, "bucket(4, id)")
    for commit in range(4):
        ids = ", ".join(f"({commit * 1000 + i}, 'x', TIMESTAMP '2026-01-01 10:00:00+00:00')"
                        for i in range(40))  # fmt: skip
        spark.sql(f"INSERT INTO {table} VALUES {ids}")
    per_bucket = [
        r["n"]
        for r in spark.sql(
            f"SELECT partition.id_bucket AS b, count(*) AS n FROM {table}.files GROUP BY 1"
        ).collect()
    ]
    # Every commit wrote into every bucket (one file per bucket and write task).
    assert len(per_bucket) == 4 and min(per_bucket) >= 4, per_bucket
    now_ms = last_commit_ms(spark, table) + 1000  # every bucket written a second ago: open
    before = live_files(spark, table)
    held = await compact(
        spark, engine, spark_catalog_settings, name, table, now_ms,
        open_max_small_files=max(per_bucket),
    )  # fmt: skip
    assert held.output["partitions_selected"] == 0, held.output
    assert held.output["open_partitions_skipped_count"] == 4
    assert live_files(spark, table) == before
    over = await compact(
        spark, engine, spark_catalog_settings, name, table, now_ms + 1,
        open_max_small_files=min(per_bucket) - 1,
    )  # fmt: skip
    assert over.output["partitions_selected"] == 4, over.output
    assert over.output.get("open_partitions_skipped_count", 0) == 0
    assert "`system`.`bucket`(4, `id`)" in over.sql[-1], over.sql[-1]
    assert over.output["rewritten_data_files_count"] == sum(per_bucket)
    assert "partitions_lost" not in over.output  # every bucket's group committed
    assert len(live_files(spark, table)) == 4 and not live_files(spark, table) & before
