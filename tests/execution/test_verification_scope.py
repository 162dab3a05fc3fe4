"""Verification at the cost of what changed: untouched partitions are proven from metadata,
touched ones fingerprinted, and anything that cannot be scoped soundly is checked table-wide.

Real Spark + Iceberg tables. Faulty "rewrites" are committed through Iceberg's Java API
(``verify_scope_support``) from the ``after_call`` hook, i.e. after the real procedure. The
verifier computes the file diff from the metadata in Python (``metadata_diff``, as the executor
does); ``test_verification.py`` keeps the Spark ``entries`` query path covered.
"""

from __future__ import annotations

import json

import pytest

from icepack_core.execution.maintenance import TableMaintenance, VerificationFailed
from icepack_core.spark.engine import LocalEngine
from icepack_core.spark.sql import procedure_call
from icepack_core.types import TableRef
from tests.execution.spark_tables import CATALOG, fingerprint, metadata_loader, unique_name
from tests.execution.verify_scope_support import (
    COLD,
    HOT,
    HiddenFiles,
    commit_replacing_partitions,
    commit_rewriting_deletes,
    make_partitioned_table,
    partition_fingerprint,
    position_delete_for_another_partition,
)
from tests.execution.verify_support import (
    commit_dropping_a_file,
    commit_swapping_a_file,
    content,
    current_snapshot,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "verify_scope"
COMPACT = {"action": "rewrite_data_files", "params": {"options": {"min-input-files": "2"}}}
NO_OP_REWRITE = {"action": "rewrite_data_files", "params": {"options": {"min-input-files": "500"}}}


SETTINGS = []  # the catalog the metadata loader reads (set by the engine fixture)


@pytest.fixture(scope="module")
def engine(spark, spark_catalog_settings):
    SETTINGS[:] = [spark_catalog_settings]
    return LocalEngine(spark_catalog_settings, session=spark)


def maintenance(engine, name, **kwargs):
    loader = metadata_loader(SETTINGS[0], NS, name)
    return TableMaintenance(engine, TableRef(CATALOG, NS, name), metadata=loader, **kwargs)


def labels(record):
    return {json.loads(p["partition"])["part"] for p in record["fingerprinted"]}


async def test_compaction_fingerprints_only_the_rewritten_partitions(spark, engine, tmp_path):
    name = unique_name("scoped")
    table = make_partitioned_table(spark, NS, name)
    before, start = content(spark, table), current_snapshot(spark, table)
    rows, checksum = partition_fingerprint(spark, table, start, HOT)
    # The untouched partitions' files are moved away after the compaction: any read of them
    # by the verification (either snapshot) would fail.
    hidden = HiddenFiles(spark, NS, name, COLD, tmp_path / "aside")

    async def hide(_action):
        hidden.hide()

    try:
        outcome = await maintenance(engine, name, after_call=hide).run(COMPACT)
    finally:
        hidden.restore()
    assert outcome.output["rewritten_data_files_count"] == 8
    evidence = outcome.verification["verification"]
    (record,) = evidence["snapshots"]
    assert evidence["status"] == "verified" and record["ok"]
    assert record["scope"] == "partitions"
    assert (
        record["partitions_total"],
        record["partitions_proven"],
        record["partitions_fingerprinted"],
    ) == (4, 2, 2)
    assert labels(record) == set(HOT)
    # The contents of the rewritten partitions were really compared, at both snapshots.
    assert record["rows_before"] == record["rows_after"] == rows == 24
    assert record["checksum_before"] == record["checksum_after"] == str(checksum)
    assert content(spark, table) == before


@pytest.mark.parametrize(
    "fault", ["drop a row", "duplicate a row", "change a value", "add a row of another partition"]
)
async def test_corrupted_rewritten_partition_is_caught_and_rolled_back(spark, engine, fault):
    name = unique_name("corrupt")
    table = make_partitioned_table(spark, NS, name)
    before, original = content(spark, table), current_snapshot(spark, table)
    p0 = f"SELECT * FROM {table} WHERE part = 'p0'"
    replacement = {
        "drop a row": f"{p0} AND id <> 3",
        "duplicate a row": f"{p0} UNION ALL SELECT * FROM {table} WHERE id = 3",
        "change a value": f"SELECT id, part, CASE WHEN id = 3 THEN 'changed' ELSE payload END "
        f"AS payload, ts FROM {table} WHERE part = 'p0'",
        # Labelled p0, but one row says p2: a filter applied row by row would not count it.
        "add a row of another partition": f"{p0} UNION ALL SELECT * FROM {table} WHERE id = 2000",
    }[fault]
    bad: list[int] = []

    async def corrupt(_action):
        bad.append(commit_replacing_partitions(spark, NS, name, {"p0": replacement}))

    with pytest.raises(VerificationFailed) as exc:
        await maintenance(engine, name, after_call=corrupt).run(NO_OP_REWRITE)
    evidence = exc.value.evidence
    violation = evidence["violation"]
    assert evidence["status"] == "violation" and violation["snapshot_id"] == bad[0]
    assert violation["scope"] == "partitions" and labels(violation) == {"p0"}
    assert violation["partitions_proven"] == 3 and violation["files_diff"] == "metadata"
    if fault == "change a value":
        assert violation["rows_before"] == violation["rows_after"] == 12
        assert violation["checksum_before"] != violation["checksum_after"]
    else:
        assert violation["rows_before"] != violation["rows_after"]
    assert evidence["rollback"]["status"] == "rolled_back"
    assert content(spark, table) == before and current_snapshot(spark, table) == original


async def test_commit_that_also_changes_an_untouched_partition_is_caught(spark, engine):
    name = unique_name("alsob")
    table = make_partitioned_table(spark, NS, name)
    before, original = content(spark, table), current_snapshot(spark, table)
    bad: list[int] = []

    async def legit_p0_and_a_row_lost_in_p2(_action):
        bad.append(
            commit_replacing_partitions(
                spark,
                NS,
                name,
                {
                    "p0": f"SELECT * FROM {table} WHERE part = 'p0'",  # faithful rewrite of p0
                    "p2": f"SELECT * FROM {table} WHERE part = 'p2' AND id <> 2005",
                },
            )
        )  # ... and not

    with pytest.raises(VerificationFailed) as exc:
        await maintenance(engine, name, after_call=legit_p0_and_a_row_lost_in_p2).run(NO_OP_REWRITE)
    violation = exc.value.evidence["violation"]
    assert violation["snapshot_id"] == bad[0] and violation["scope"] == "partitions"
    assert labels(violation) == {"p0", "p2"} and violation["partitions_proven"] == 2
    assert violation["files_diff"] == "metadata"
    assert (violation["rows_before"], violation["rows_after"]) == (24, 23)
    assert exc.value.evidence["rollback"]["status"] == "rolled_back"
    assert content(spark, table) == before and current_snapshot(spark, table) == original


async def test_delete_file_naming_another_partitions_file_touches_that_partition(
    spark, engine, tmp_path
):
    name = unique_name("named")
    table = make_partitioned_table(spark, NS, name, merge_on_read=True)
    # A position delete file in p3 (1 of 12 rows, under the rewrite's delete-ratio threshold).
    spark.sql(f"DELETE FROM {table} WHERE id = 3005")
    before, original = content(spark, table), current_snapshot(spark, table)
    at_bad: list[object] = []

    async def rewrite_p3_deletes_adding_one_for_p2(_action):
        delete = position_delete_for_another_partition(spark, NS, name, 2000, "p3")
        commit_rewriting_deletes(spark, NS, name, tmp_path / "copies", delete)
        at_bad.append(content(spark, table))  # what readers see at the new snapshot

    # p2's own files are unchanged; whether the delete reaches p2's row is the reader's
    # business, and the verification must agree with the oracle either way.
    try:
        outcome = await maintenance(
            engine, name, after_call=rewrite_p3_deletes_adding_one_for_p2
        ).run(NO_OP_REWRITE)
        record, failed = outcome.verification["verification"]["snapshots"][-1], False
    except VerificationFailed as exc:  # measured with Iceberg 1.10: the delete applies by path
        record, failed = exc.evidence["violation"], True
        assert exc.evidence["rollback"]["status"] == "rolled_back"
        assert current_snapshot(spark, table) == original
    assert record["scope"] == "partitions" and labels(record) == {"p2", "p3"}
    assert record["files_diff"] == "metadata"
    assert failed == (at_bad[0] != before)
    assert content(spark, table) == before


async def test_rewrite_that_changes_no_file_is_proven_from_metadata(spark, engine):
    name = unique_name("manifests")
    table = make_partitioned_table(spark, NS, name)
    before, original = content(spark, table), current_snapshot(spark, table)

    async def rewrite_manifests(_action):  # a replace snapshot with the very same files
        spark.sql(
            procedure_call(CATALOG, "rewrite_manifests", {"table": TableRef(CATALOG, NS, name)})
        ).collect()

    outcome = await maintenance(engine, name, after_call=rewrite_manifests).run(NO_OP_REWRITE)
    (record,) = outcome.verification["verification"]["snapshots"]
    assert record["parent_id"] == original and record["snapshot_id"] != original
    assert record["ok"] and record["scope"] == "none"
    assert (
        record["partitions_total"],
        record["partitions_proven"],
        record["partitions_fingerprinted"],
    ) == (4, 4, 0)
    assert content(spark, table) == before


async def test_position_delete_rewrite_is_scoped_to_its_partition(spark, engine):
    name = unique_name("posdel")
    table = make_partitioned_table(spark, NS, name, merge_on_read=True)
    spark.sql(f"DELETE FROM {table} WHERE id = 1")
    spark.sql(f"DELETE FROM {table} WHERE id = 4")  # two position delete files in p0
    before = content(spark, table)
    outcome = await maintenance(engine, name).run(
        {"action": "rewrite_position_delete_files", "params": {"options": {"rewrite-all": "true"}}}
    )
    assert outcome.output["rewritten_delete_files_count"] == 2
    (record,) = outcome.verification["verification"]["snapshots"]
    assert record["ok"] and record["scope"] == "partitions" and labels(record) == {"p0"}
    assert record["rows_before"] == record["rows_after"] == 10
    assert content(spark, table) == before


async def test_unpartitioned_table_is_checked_whole(spark, engine):
    name = unique_name("flat")
    table = make_partitioned_table(spark, NS, name, partitioned_by="")
    before, original = content(spark, table), current_snapshot(spark, table)
    fp = fingerprint(spark, table)

    async def swap(_action):  # same row count, other contents: only the checksum sees it
        commit_swapping_a_file(spark, NS, name)

    with pytest.raises(VerificationFailed) as exc:
        await maintenance(engine, name, after_call=swap).run(NO_OP_REWRITE)
    violation = exc.value.evidence["violation"]
    assert violation["scope"] == "table" and "unpartitioned" in violation["scope_reason"]
    assert violation["rows_before"] == violation["rows_after"] == 48
    assert violation["checksum_before"] != violation["checksum_after"]
    assert exc.value.evidence["rollback"]["status"] == "rolled_back"
    assert fingerprint(spark, table) == fp and current_snapshot(spark, table) == original

    outcome = await maintenance(engine, name).run(COMPACT)
    (record,) = outcome.verification["verification"]["snapshots"]
    assert record["ok"] and record["scope"] == "table"
    assert "unpartitioned" in record["scope_reason"]
    assert record["rows_before"] == record["rows_after"] == 48
    assert content(spark, table) == before and fingerprint(spark, table) == fp


@pytest.mark.parametrize("transform", ["days(ts)", "bucket(4, id)"])
async def test_transform_partitioned_table_is_checked_whole(spark, engine, transform):
    name = unique_name("transform")
    table = make_partitioned_table(spark, NS, name, partitioned_by=transform)
    before = content(spark, table)
    outcome = await maintenance(engine, name).run(COMPACT)
    (record,) = outcome.verification["verification"]["snapshots"]
    assert record["ok"] and record["scope"] == "table"
    assert "non-identity transform" in record["scope_reason"]
    assert record["partitions_proven"] < record["partitions_total"]
    assert record["rows_before"] == record["rows_after"] == 48
    assert content(spark, table) == before
    compacted = current_snapshot(spark, table)

    async def drop(_action):
        commit_dropping_a_file(spark, NS, name)

    with pytest.raises(VerificationFailed) as exc:
        await maintenance(engine, name, after_call=drop).run(NO_OP_REWRITE)
    violation = exc.value.evidence["violation"]
    assert violation["scope"] == "table" and violation["rows_after"] < 48
    assert exc.value.evidence["rollback"]["status"] == "rolled_back"
    assert content(spark, table) == before and current_snapshot(spark, table) == compacted
