"""Scoped verification by Spark's scan on every transform and across partition specs.

Real Spark + Iceberg tables (``verify_scope_support``'s table: 12 rows in each of ``p0``..``p3``,
the HOT partitions in four small files each). The verifier compares the touched partitions
with Spark's pruned scan (``in_process_reader`` off, as when the in-process reader cannot
decide, e.g. with equality deletes): ``EXPLAIN`` must show that Iceberg answers the filter from
partition values in every spec, else the comparison is table-wide with the reason. Faulty
"rewrites" are committed through Iceberg's Java API from the ``after_call`` hook.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from icepack_core.execution.maintenance import TableMaintenance, VerificationFailed
from icepack_core.intents import parse_intent
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.types import TableRef
from tests.execution.spark_tables import CATALOG, metadata_loader, unique_name
from tests.execution.verify_scope_support import COLD, HOT, HiddenFiles, make_partitioned_table
from tests.execution.verify_support import commit_dropping_a_file, content, current_snapshot

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "verify_specs"
COMPACT = {"action": "rewrite_data_files", "params": {"options": {"min-input-files": "2"}}}
NO_OP_REWRITE = {"action": "rewrite_data_files", "params": {"options": {"min-input-files": "500"}}}


@pytest.fixture(scope="module")
def engine(spark: Any, spark_catalog_settings: Settings) -> LocalEngine:
    return LocalEngine(spark_catalog_settings, session=spark)


def maintenance(
    engine: LocalEngine, settings: Settings, name: str, *, loader: bool, **kwargs: Any
) -> TableMaintenance:
    return TableMaintenance(
        engine,
        TableRef(CATALOG, NS, name),
        metadata=metadata_loader(settings, NS, name) if loader else None,
        in_process_reader=False,
        **kwargs,
    )


async def caught_drop(
    engine: LocalEngine, settings: Settings, spark: Any, name: str, table: str, *, loader: bool
) -> Any:
    """A planted corruption (one data file dropped by a "replace") is caught and rolled back;
    the violation's evidence."""
    before, kept = content(spark, table), current_snapshot(spark, table)

    async def drop(_action: str) -> None:
        commit_dropping_a_file(spark, NS, name)

    with pytest.raises(VerificationFailed) as exc:
        await maintenance(engine, settings, name, loader=loader, after_call=drop).run(
            parse_intent(NO_OP_REWRITE)
        )
    assert exc.value.evidence.to_json()["rollback"]["status"] == "rolled_back"
    assert content(spark, table) == before and current_snapshot(spark, table) == kept
    violation = exc.value.evidence.to_json()["violation"]
    assert violation["rows_after"] < violation["rows_before"], violation
    return violation


@pytest.mark.parametrize("transform", ["days(ts)", "hours(ts)", "bucket(4, id)"])
async def test_every_transform_is_scoped_without_a_table_loader(
    spark: Any, engine: LocalEngine, spark_catalog_settings: Settings, transform: str
) -> None:
    """No metadata loader: the fields come from ``DESCRIBE``'s ``# Partitioning`` (before,
    only identity partitions were scoped this way)."""
    name = unique_name("noloader")
    table = make_partitioned_table(spark, NS, name, partitioned_by=transform)
    before = content(spark, table)
    outcome = await maintenance(engine, spark_catalog_settings, name, loader=False).run(
        parse_intent(COMPACT)
    )
    assert outcome.verification is not None
    (record,) = outcome.verification.to_json()["snapshots"]
    assert record["ok"] and record["scope"] == "partitions", record
    assert record["reader"] == "engine" and record["files_diff"] == "engine"
    if not transform.startswith("bucket"):  # every bucket holds a small file of HOT
        assert record["partitions_proven"] > 0
    assert 0 < record["rows_before"] == record["rows_after"] <= 48
    assert content(spark, table) == before

    violation = await caught_drop(engine, spark_catalog_settings, spark, name, table, loader=False)
    assert violation["scope"] == "partitions" and violation["partitions_proven"] > 0, violation
    assert violation["reader"] == "engine"


async def test_a_rewrite_across_two_specs_is_scoped_to_the_shared_field(
    spark: Any, engine: LocalEngine, spark_catalog_settings: Settings, tmp_path: Path
) -> None:
    """identity(part), then bucket(4, id) added: files of both specs in the HOT partitions (the
    COLD ones rewritten into spec 1 first: a compaction rewrites every file of an older spec).
    The compaction's touched partitions (spec 0's, and spec 1's it wrote) are compared through
    the field both specs share (``part``): the COLD partitions' files are hidden during the
    verification and never read. A dropped file is still caught, scoped the same way."""
    name = unique_name("evolved")
    table = make_partitioned_table(spark, NS, name)
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD bucket(4, id)")
    spark.sql(
        f"CALL {CATALOG}.system.rewrite_data_files(table => '{NS}.{name}', "
        "where => \"part IN ('p2', 'p3')\", options => map('rewrite-all', 'true'))"
    )
    for part in HOT:  # spec 1 files beside spec 0's
        spark.sql(
            f"INSERT INTO {table} SELECT id, '{part}', concat('new-', id), "
            f"TIMESTAMP'2024-01-02 00:00:00' FROM range({5000 + 10 * int(part[1:])}, "
            f"{5003 + 10 * int(part[1:])})"
        )
    before = content(spark, table)
    hidden = HiddenFiles(spark, NS, name, COLD, tmp_path / "aside")

    async def hide(_action: str) -> None:
        hidden.hide()

    try:
        outcome = await maintenance(
            engine, spark_catalog_settings, name, loader=True, after_call=hide
        ).run(parse_intent(COMPACT))
    finally:
        hidden.restore()
    assert outcome.verification is not None
    (record,) = outcome.verification.to_json()["snapshots"]
    assert record["ok"] and record["scope"] == "partitions", record
    assert record["reader"] == "engine"
    specs = {p["spec_id"] for p in record["fingerprinted"]}
    assert specs == {0, 1}, record  # files of the older spec were rewritten and compared
    parts = {json.loads(p["partition"]).get("part") for p in record["fingerprinted"]}
    assert parts == set(HOT), record
    assert record["rows_before"] == record["rows_after"] == 24 + 6
    assert content(spark, table) == before

    violation = await caught_drop(engine, spark_catalog_settings, spark, name, table, loader=True)
    assert violation["scope"] == "partitions", violation


async def test_specs_sharing_no_field_fall_back_to_the_whole_table_with_the_reason(
    spark: Any, engine: LocalEngine, spark_catalog_settings: Settings
) -> None:
    """identity(part) replaced by days(ts): no filter selects whole partitions of both specs;
    the comparison is table-wide and says why, and a dropped file is caught."""
    name = unique_name("respec")
    table = make_partitioned_table(spark, NS, name)
    spark.sql(f"ALTER TABLE {table} REPLACE PARTITION FIELD part WITH days(ts)")
    spark.sql(
        f"INSERT INTO {table} SELECT id, 'p0', 'x', TIMESTAMP'2024-01-09' FROM range(9000, 9003)"
    )
    before = content(spark, table)
    outcome = await maintenance(engine, spark_catalog_settings, name, loader=True).run(
        parse_intent(COMPACT)
    )
    assert outcome.verification is not None
    (record,) = outcome.verification.to_json()["snapshots"]
    assert record["ok"] and record["scope"] == "table", record
    assert "share no partition field" in record["scope_reason"], record
    assert content(spark, table) == before
    violation = await caught_drop(engine, spark_catalog_settings, spark, name, table, loader=True)
    assert violation["scope"] == "table", violation
