"""Verification at the cost of what changed: untouched partitions are proven from metadata,
touched ones fingerprinted, and anything that cannot be scoped soundly is checked table-wide.

Real Spark + Iceberg tables. Faulty "rewrites" are committed through Iceberg's Java API
(``verify_scope_support``) from the ``after_call`` hook, i.e. after the real procedure. The
verifier computes the file diff from the metadata in Python (``metadata_diff``, as the executor
does); ``test_verification.py`` keeps the Spark ``entries`` query path covered. The touched
partitions are compared by each reader: ``in_process`` (the files read by DuckDB in this
process, ``file_fingerprint``, the executor's default) and ``engine`` (the pruned Spark scan,
``partition_fingerprints``, the fallback).
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


SETTINGS: list[Settings] = []  # the catalog the metadata loader reads (set by the engine fixture)


@pytest.fixture(scope="module")
def engine(spark: Any, spark_catalog_settings: Settings) -> LocalEngine:
    SETTINGS[:] = [spark_catalog_settings]
    return LocalEngine(spark_catalog_settings, session=spark)


@pytest.fixture(params=["in_process", "engine"])
def reader(request: pytest.FixtureRequest) -> str:
    param: str = request.param
    return param


def maintenance(
    engine: LocalEngine, name: str, reader: str = "in_process", **kwargs: Any
) -> TableMaintenance:
    loader = metadata_loader(SETTINGS[0], NS, name)
    return TableMaintenance(
        engine,
        TableRef(CATALOG, NS, name),
        metadata=loader,
        in_process_reader=reader == "in_process",
        **kwargs,
    )


def labels(record: dict[str, Any]) -> set[str]:
    return {json.loads(p["partition"])["part"] for p in record["fingerprinted"]}


async def test_compaction_fingerprints_only_the_rewritten_partitions(
    spark: Any, engine: LocalEngine, reader: str, tmp_path: Path
) -> None:
    name = unique_name("scoped")
    table = make_partitioned_table(spark, NS, name)
    before, start = content(spark, table), current_snapshot(spark, table)
    rows, checksum = partition_fingerprint(spark, table, start, HOT)
    # The untouched partitions' files are moved away after the compaction: any read of them
    # by the verification (either snapshot) would fail.
    hidden = HiddenFiles(spark, NS, name, COLD, tmp_path / "aside")

    async def hide(_action: str) -> None:
        hidden.hide()

    try:
        outcome = await maintenance(engine, name, reader, after_call=hide).run(
            parse_intent(COMPACT)
        )
    finally:
        hidden.restore()
    assert outcome.output["rewritten_data_files_count"] == 8
    assert outcome.verification is not None
    evidence = outcome.verification.to_json()
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
    assert record["reader"] == reader
    if reader == "engine":
        assert record["checksum_before"] == record["checksum_after"] == str(checksum)
    else:  # DuckDB's row hash, not Spark's: equal on both sides, and not the empty sum
        assert record["checksum_before"] == record["checksum_after"] != "0"
    assert content(spark, table) == before


@pytest.mark.parametrize(
    "fault",
    [
        "drop a row",
        "duplicate a row",
        "duplicate a row in place of another",
        "change a value",
        "add a row of another partition",
    ],
)
async def test_corrupted_rewritten_partition_is_caught_and_rolled_back(
    spark: Any, engine: LocalEngine, reader: str, fault: str
) -> None:
    name = unique_name("corrupt")
    table = make_partitioned_table(spark, NS, name)
    before, original = content(spark, table), current_snapshot(spark, table)
    p0 = f"SELECT * FROM {table} WHERE part = 'p0'"
    replacement = {
        "drop a row": f"{p0} AND id <> 3",
        "duplicate a row": f"{p0} UNION ALL SELECT * FROM {table} WHERE id = 3",
        # Same row count (no miscount needed): only the checksum tells.
        "duplicate a row in place of another": f"{p0} AND id <> 4 UNION ALL "
        f"SELECT * FROM {table} WHERE id = 3",
        "change a value": f"SELECT id, part, CASE WHEN id = 3 THEN 'changed' ELSE payload END "
        f"AS payload, ts FROM {table} WHERE part = 'p0'",
        # Labelled p0, but one row says p2: a filter applied row by row would not count it.
        "add a row of another partition": f"{p0} UNION ALL SELECT * FROM {table} WHERE id = 2000",
    }[fault]
    bad: list[int] = []

    async def corrupt(_action: str) -> None:
        bad.append(commit_replacing_partitions(spark, NS, name, {"p0": replacement}))

    with pytest.raises(VerificationFailed) as exc:
        await maintenance(engine, name, reader, after_call=corrupt).run(parse_intent(NO_OP_REWRITE))
    evidence = exc.value.evidence.to_json()
    violation = evidence["violation"]
    assert evidence["status"] == "violation" and violation["snapshot_id"] == bad[0]
    # The in-process reader only proves equality: what it finds different, Spark's scan judges.
    assert violation["reader"] == "engine"
    if reader == "in_process" and fault in ("duplicate a row", "add a row of another partition"):
        # The replacement file holds more rows than its manifest entry declares (the support
        # helper's miscount): a count the metadata contradicts is not read as a difference.
        assert "whose manifest lists 12" in violation["reader_fallback"]
    elif reader == "in_process":
        assert violation["reader_fallback"].startswith(
            'the in-process read differs (partition spec 0 {"part":"p0"}: 12 rows ->'
        )
    assert violation["scope"] == "partitions" and labels(violation) == {"p0"}
    assert violation["partitions_proven"] == 3 and violation["files_diff"] == "metadata"
    if fault in ("change a value", "duplicate a row in place of another"):
        assert violation["rows_before"] == violation["rows_after"] == 12
        assert violation["checksum_before"] != violation["checksum_after"]
    else:
        assert violation["rows_before"] != violation["rows_after"]
    assert evidence["rollback"]["status"] == "rolled_back"
    assert content(spark, table) == before and current_snapshot(spark, table) == original


async def test_commit_that_also_changes_an_untouched_partition_is_caught(
    spark: Any, engine: LocalEngine, reader: str
) -> None:
    name = unique_name("alsob")
    table = make_partitioned_table(spark, NS, name)
    before, original = content(spark, table), current_snapshot(spark, table)
    bad: list[int] = []

    async def legit_p0_and_a_row_lost_in_p2(_action: str) -> None:
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
        await maintenance(engine, name, reader, after_call=legit_p0_and_a_row_lost_in_p2).run(
            parse_intent(NO_OP_REWRITE)
        )
    violation = exc.value.evidence.to_json()["violation"]
    assert violation["reader"] == "engine"
    if reader == "in_process":
        assert violation["reader_fallback"].startswith("the in-process read differs (partition")
    assert violation["snapshot_id"] == bad[0] and violation["scope"] == "partitions"
    assert labels(violation) == {"p0", "p2"} and violation["partitions_proven"] == 2
    assert violation["files_diff"] == "metadata"
    assert (violation["rows_before"], violation["rows_after"]) == (24, 23)
    assert exc.value.evidence.to_json()["rollback"]["status"] == "rolled_back"
    assert content(spark, table) == before and current_snapshot(spark, table) == original


async def test_delete_file_naming_another_partitions_file_touches_that_partition(
    spark: Any, engine: LocalEngine, tmp_path: Path
) -> None:
    name = unique_name("named")
    table = make_partitioned_table(spark, NS, name, merge_on_read=True)
    # A position delete file in p3 (1 of 12 rows, under the rewrite's delete-ratio threshold).
    spark.sql(f"DELETE FROM {table} WHERE id = 3005")
    before, original = content(spark, table), current_snapshot(spark, table)
    at_bad: list[object] = []

    async def rewrite_p3_deletes_adding_one_for_p2(_action: str) -> None:
        delete = position_delete_for_another_partition(spark, NS, name, 2000, "p3")
        commit_rewriting_deletes(spark, NS, name, tmp_path / "copies", delete)
        at_bad.append(content(spark, table))  # what readers see at the new snapshot

    # p2's own files are unchanged; whether the delete reaches p2's row is the reader's
    # business, and the verification must agree with the oracle either way.
    try:
        outcome = await maintenance(
            engine, name, after_call=rewrite_p3_deletes_adding_one_for_p2
        ).run(parse_intent(NO_OP_REWRITE))
        assert outcome.verification is not None
        record, failed = outcome.verification.to_json()["snapshots"][-1], False
    except VerificationFailed as exc:  # measured with Iceberg 1.10: the delete applies by path
        record, failed = exc.evidence.to_json()["violation"], True
        assert exc.evidence.to_json()["rollback"]["status"] == "rolled_back"
        assert current_snapshot(spark, table) == original
    assert record["scope"] == "partitions" and labels(record) == {"p2", "p3"}
    assert record["files_diff"] == "metadata"
    # Delete files apply there: the files' rows are not the table's, so Spark reads them.
    assert record["reader"] == "engine"
    assert record["reader_fallback"] == "delete files in a touched partition"
    assert failed == (at_bad[0] != before)
    assert content(spark, table) == before


async def test_rewrite_that_changes_no_file_is_proven_from_metadata(
    spark: Any, engine: LocalEngine
) -> None:
    name = unique_name("manifests")
    table = make_partitioned_table(spark, NS, name)
    before, original = content(spark, table), current_snapshot(spark, table)

    async def rewrite_manifests(
        _action: str,
    ) -> None:  # a replace snapshot with the very same files
        spark.sql(
            procedure_call(CATALOG, "rewrite_manifests", {"table": TableRef(CATALOG, NS, name)})
        ).collect()

    outcome = await maintenance(engine, name, after_call=rewrite_manifests).run(
        parse_intent(NO_OP_REWRITE)
    )
    assert outcome.verification is not None
    (record,) = outcome.verification.to_json()["snapshots"]
    assert record["parent_id"] == original and record["snapshot_id"] != original
    assert record["ok"] and record["scope"] == "none"
    assert (
        record["partitions_total"],
        record["partitions_proven"],
        record["partitions_fingerprinted"],
    ) == (4, 4, 0)
    assert content(spark, table) == before


async def test_position_delete_rewrite_is_scoped_to_its_partition(
    spark: Any, engine: LocalEngine
) -> None:
    name = unique_name("posdel")
    table = make_partitioned_table(spark, NS, name, merge_on_read=True)
    spark.sql(f"DELETE FROM {table} WHERE id = 1")
    spark.sql(f"DELETE FROM {table} WHERE id = 4")  # two position delete files in p0
    before = content(spark, table)
    outcome = await maintenance(engine, name).run(
        parse_intent(
            {
                "action": "rewrite_position_delete_files",
                "params": {"options": {"rewrite-all": "true"}},
            }
        )
    )
    assert outcome.output["rewritten_delete_files_count"] == 2
    assert outcome.verification is not None
    (record,) = outcome.verification.to_json()["snapshots"]
    assert record["ok"] and record["scope"] == "partitions" and labels(record) == {"p0"}
    assert record["reader"] == "engine" and "delete files" in record["reader_fallback"]
    assert record["rows_before"] == record["rows_after"] == 10
    assert content(spark, table) == before


def assert_whole_or_read_in_process(record: dict[str, Any], reader: str, why: str) -> None:
    """Without identity partitions Spark's scan cannot be pruned: the engine compares the whole
    table; the in-process reader proves the touched partitions equal from their files (their
    keys come from the manifests, no filter is needed). A difference it finds goes to the whole
    table comparison."""
    if reader == "engine" or not record["ok"]:
        assert record["scope"] == "table" and why in record["scope_reason"]
    else:
        assert record["scope"] == "partitions" and record["reader"] == "in_process"
    if reader == "in_process" and not record["ok"]:
        assert record["reader_fallback"].startswith("the in-process read differs (partition")


async def test_unpartitioned_table(spark: Any, engine: LocalEngine, reader: str) -> None:
    name = unique_name("flat")
    table = make_partitioned_table(spark, NS, name, partitioned_by="")
    before, original = content(spark, table), current_snapshot(spark, table)
    fp = fingerprint(spark, table)

    async def swap(
        _action: str,
    ) -> None:  # same row count, other contents: only the checksum sees it
        commit_swapping_a_file(spark, NS, name)

    with pytest.raises(VerificationFailed) as exc:
        await maintenance(engine, name, reader, after_call=swap).run(parse_intent(NO_OP_REWRITE))
    violation = exc.value.evidence.to_json()["violation"]
    assert_whole_or_read_in_process(violation, reader, "unpartitioned")
    assert violation["rows_before"] == violation["rows_after"] == 48
    assert violation["checksum_before"] != violation["checksum_after"]
    assert exc.value.evidence.to_json()["rollback"]["status"] == "rolled_back"
    assert fingerprint(spark, table) == fp and current_snapshot(spark, table) == original

    outcome = await maintenance(engine, name, reader).run(parse_intent(COMPACT))
    assert outcome.verification is not None
    (record,) = outcome.verification.to_json()["snapshots"]
    assert record["ok"]
    assert_whole_or_read_in_process(record, reader, "unpartitioned")
    assert record["rows_before"] == record["rows_after"] == 48
    assert content(spark, table) == before and fingerprint(spark, table) == fp


@pytest.mark.parametrize("transform", ["days(ts)", "bucket(4, id)"])
async def test_transform_partitioned_table(
    spark: Any, engine: LocalEngine, reader: str, transform: str
) -> None:
    name = unique_name("transform")
    table = make_partitioned_table(spark, NS, name, partitioned_by=transform)
    before = content(spark, table)
    outcome = await maintenance(engine, name, reader).run(parse_intent(COMPACT))
    assert outcome.verification is not None
    (record,) = outcome.verification.to_json()["snapshots"]
    # Both readers compare only the touched partitions: the engine filters them by Iceberg's
    # transform functions (the fields from the loaded spec), the in-process reader by files.
    assert record["ok"] and record["scope"] == "partitions", record
    assert record["reader"] == reader
    assert record["partitions_proven"] < record["partitions_total"]
    assert 0 < record["rows_before"] == record["rows_after"] <= 48
    assert content(spark, table) == before
    compacted = current_snapshot(spark, table)

    async def drop(_action: str) -> None:
        commit_dropping_a_file(spark, NS, name)

    with pytest.raises(VerificationFailed) as exc:
        await maintenance(engine, name, reader, after_call=drop).run(parse_intent(NO_OP_REWRITE))
    violation = exc.value.evidence.to_json()["violation"]
    assert violation["scope"] == "partitions" and violation["reader"] == "engine", violation
    if reader == "in_process":
        assert violation["reader_fallback"].startswith("the in-process read differs (partition")
    assert violation["rows_after"] < violation["rows_before"]
    assert exc.value.evidence.to_json()["rollback"]["status"] == "rolled_back"
    assert content(spark, table) == before and current_snapshot(spark, table) == compacted


async def test_every_primitive_type_spark_writes_is_proven_in_process(
    spark: Any, engine: LocalEngine
) -> None:
    """Files Spark wrote with every primitive type it has (NULLs, NaN and -0.0 among the values,
    an ``int`` column widened to ``bigint`` so that the older files hold int32) are read by field
    id and proven equal after a real compaction, with no Spark scan."""
    from icepack_core.spark.sql import qualified_name

    name = unique_name("prims")
    table = qualified_name(CATALOG, [NS], name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], NS)}")
    spark.sql(
        f"CREATE TABLE {table} (i INT, b BOOLEAN, f FLOAT, d DOUBLE, dec DECIMAL(20,3), "
        "day DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ, s STRING, bin BINARY, p STRING) "
        "USING iceberg PARTITIONED BY (p) TBLPROPERTIES ('format-version'='2')"
    )
    for batch in range(3):
        spark.sql(
            f"INSERT INTO {table} SELECT CAST(id AS INT), id % 2 = 0, "
            "CASE id % 4 WHEN 0 THEN CAST('NaN' AS FLOAT) WHEN 1 THEN CAST(-0.0 AS FLOAT) "
            "ELSE CAST(id / 3 AS FLOAT) END, IF(id % 3 = 0, NULL, id / 7), "
            "CAST(id * 1.001 AS DECIMAL(20,3)), DATE'2024-02-29' + CAST(id AS INT), "
            "TIMESTAMP'2024-01-01 00:00:00.000001' + make_interval(0, 0, 0, 0, 0, 0, id), "
            "TIMESTAMP_NTZ'2024-01-01 00:00:00' + make_interval(0, 0, 0, id, 0, 0, 0), "
            "IF(id % 5 = 0, NULL, concat('é', id)), CAST(concat('b', id) AS BINARY), "
            f"IF(id % 2 = 0, 'x', 'y') FROM range({batch * 10}, {(batch + 1) * 10})"
        )
    spark.sql(f"ALTER TABLE {table} ALTER COLUMN i TYPE BIGINT")
    before = content(spark, table)

    outcome = await maintenance(engine, name).run(parse_intent(COMPACT))

    assert outcome.verification is not None
    (record,) = outcome.verification.to_json()["snapshots"]
    assert record["ok"] and record["scope"] == "partitions", record
    assert record["reader"] == "in_process", record.get("reader_fallback")
    assert record["rows_before"] == record["rows_after"] == 30
    assert content(spark, table) == before
