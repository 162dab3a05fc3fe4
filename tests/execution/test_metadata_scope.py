"""The compaction's partition filter read from manifests equals the Spark ``files`` queries.

``partition_filter.scope_partitions`` (``DESCRIBE`` plus two queries over the ``files``
metadata table) is the oracle of ``metadata_scope.scope_from_metadata``. The property test
appends hypothesis-generated rows of every identity-partitionable type to one real table and
requires both to give the same filter text, selection and partition count; the threshold test
walks ``min-input-files`` and the undersized limit across a table's real file sizes. The
maintenance tests run ``TableMaintenance`` with the executor's metadata loader and check where
the scope came from, and that contents are unchanged. The snapshot walk of the verification
(``verification.snapshots_after``) is checked against the Spark ``snapshots``/``history`` query.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings

from icepack_core.errors import ScopeFallback
from icepack_core.execution.maintenance import TableMaintenance
from icepack_core.execution.scoping.metadata_scope import scope_from_metadata
from icepack_core.execution.scoping.partition_filter import PartitionScope, scope_partitions
from icepack_core.execution.verification.snapshots import snapshots_after
from icepack_core.execution.verification.verifier import RewriteVerifier
from icepack_core.intents import parse_intent
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.spark.literals import SparkType, typed_literal
from icepack_core.spark.sql import qualified_name
from icepack_core.types import TableRef
from tests.execution.spark_tables import (
    CATALOG,
    data_file_count,
    fingerprint,
    metadata_loader,
    missing_referenced_files,
    unique_name,
)
from tests.execution.test_metadata_diff import COLUMNS, ROW, SPECIAL

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "metadata_scope"
SCOPED = {
    "action": "rewrite_data_files",
    "params": {"strategy": "binpack", "scope": "partitions", "options": {"min-input-files": "2"}},
}


@pytest.fixture(scope="module")
def engine(spark: Any, spark_catalog_settings: Settings) -> LocalEngine:
    return LocalEngine(spark_catalog_settings, session=spark)


def create(spark: Any, name: str, ddl: str, partitioned_by: str) -> str:
    table = qualified_name(CATALOG, [NS], name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], NS)}")
    spark.sql(
        f"CREATE TABLE {table} ({ddl}) USING iceberg PARTITIONED BY ({partitioned_by}) "
        "TBLPROPERTIES ('format-version'='2', 'write.distribution-mode'='none')"
    )
    return table


async def both_scopes(
    maintenance: TableMaintenance, loader: Any, undersized: int, min_files: int, limit: int = 1000
) -> tuple[PartitionScope | str, PartitionScope | str]:
    """(from the manifests, from the Spark queries); a fallback as its reason."""

    async def outcome(make: Callable[[], Awaitable[PartitionScope]]) -> PartitionScope | str:
        try:
            return await make()
        except ScopeFallback as exc:
            return f"fallback: {exc.reason}"

    columns = await maintenance.scoping.identity_partition_columns()
    assert columns
    table = await loader()
    metadata = await outcome(
        lambda: scope_from_metadata(
            table,
            maintenance.engine,
            undersized_bytes=undersized,
            min_files=min_files,
            max_partitions=limit,
        )
    )
    spark = await outcome(
        lambda: scope_partitions(
            maintenance.engine,
            maintenance.metadata_table("files"),
            columns,
            undersized_bytes=undersized,
            min_files=min_files,
            max_partitions=limit,
        )
    )
    return metadata, spark


@pytest.fixture(scope="module")
def every_type_table(spark: Any) -> tuple[str, str]:
    name = unique_name("every_type")
    ddl = "id BIGINT, " + ", ".join(f"{c} {t}" for c, t in COLUMNS)
    table = create(spark, name, ddl, ", ".join(c for c, _ in COLUMNS))
    spark.sql(f"INSERT INTO {table} SELECT 0{', NULL' * len(COLUMNS)}")
    return name, table


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    derandomize=True,
)
@given(rows=ROW.map(lambda r: [r, r]) | ROW.map(lambda r: [r]))
@example(rows=[SPECIAL, SPECIAL])
async def test_every_type_scopes_the_same_from_manifests_and_from_spark(
    rows: list[tuple[Any, ...]],
    engine: LocalEngine,
    spark: Any,
    spark_catalog_settings: Settings,
    every_type_table: tuple[str, str],
) -> None:
    """Each example appends its rows as one file per row (a repeated row: two files in one
    partition); with ``min_files`` 2 only those partitions qualify, with 1 every one does."""
    name, table = every_type_table
    for row in rows:
        values = ", ".join(
            typed_literal(SparkType.parse(t), v) for (_, t), v in zip(COLUMNS, row, strict=True)
        )
        spark.sql(f"INSERT INTO {table} VALUES (0, {values})")
    maintenance = TableMaintenance(engine, TableRef(CATALOG, NS, name))
    loader = metadata_loader(spark_catalog_settings, NS, name)
    for min_files in (1, 2):
        metadata, oracle = await both_scopes(maintenance, loader, 1 << 40, min_files)
        assert metadata == oracle, f"min_files {min_files}\nmetadata {metadata}\nspark    {oracle}"
    assert isinstance(metadata, PartitionScope) and metadata.selected >= 1


async def test_thresholds_select_the_same_partitions(
    spark: Any, engine: LocalEngine, spark_catalog_settings: Settings
) -> None:
    """Partitions with 1, 2 and 3 small files and large ones, at every boundary of
    ``min_files`` and of the undersized limit (a file exactly at the limit is not under it)."""
    name = unique_name("thresholds")
    table = create(spark, name, "id BIGINT, p STRING, payload STRING", "p")
    for part, files, rows in [
        ("a", 1, 1),
        ("b", 2, 1),
        ("c", 3, 1),
        ("c", 1, 3000),
        ("d", 2, 3000),
    ]:
        for _ in range(files):
            spark.sql(
                f"INSERT INTO {table} SELECT id, '{part}', sha2(cast(id AS STRING), 256) "
                f"FROM range({rows})"
            )
    sizes = sorted(
        {
            int(r["s"])
            for r in spark.sql(f"SELECT file_size_in_bytes AS s FROM {table}.files").collect()
        }
    )
    small, large = sizes[0], sizes[-1]
    assert large > 10 * small
    maintenance = TableMaintenance(engine, TableRef(CATALOG, NS, name))
    loader = metadata_loader(spark_catalog_settings, NS, name)
    middle = (small + large) // 2
    for undersized in (small, small + 1, large + 1):
        for min_files in (1, 2, 4):
            metadata, oracle = await both_scopes(maintenance, loader, undersized, min_files)
            assert metadata == oracle, (undersized, min_files, metadata, oracle)
    # Independently of the oracle: the small files only, two or more per partition.
    metadata, _ = await both_scopes(maintenance, loader, middle, 2)
    assert metadata == PartitionScope("(`p` = 'b') OR (`p` = 'c')", 2, 4)
    # Too many partitions: the Spark path rewrites the whole table; the manifests cap the run
    # at the partitions with the most small files (c: 4, b: 2, then d over a, by key).
    metadata, oracle = await both_scopes(maintenance, loader, large + 1, 1, limit=3)
    assert oracle == "fallback: 4 partitions qualify (at most 3 scoped)"
    assert metadata == PartitionScope("(`p` = 'b') OR (`p` = 'c') OR (`p` = 'd')", 3, 4, deferred=1)


async def scoped_run(spark: Any, engine: Any, settings: Any, name: str, table: str) -> Any:
    before = fingerprint(spark, table)
    outcome = await TableMaintenance(
        engine, TableRef(CATALOG, NS, name), metadata=metadata_loader(settings, NS, name)
    ).run(parse_intent(SCOPED))
    spark.sql(f"REFRESH TABLE {table}")
    assert fingerprint(spark, table) == before
    assert missing_referenced_files(spark, table) == []
    return outcome


async def test_a_renamed_partition_field_is_scoped_from_the_manifests(
    spark: Any, engine: LocalEngine, spark_catalog_settings: Settings
) -> None:
    """The ``files`` table cannot find a field renamed away from its column (the Spark path
    widens to the whole table); the manifests key it by field id."""
    name = unique_name("renamed")
    table = qualified_name(CATALOG, [NS], name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], NS)}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, p DATE, payload STRING) USING iceberg "
        "TBLPROPERTIES ('format-version'='2', 'write.distribution-mode'='none')"
    )
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD p AS day_value")
    for value in ["DATE '2026-01-01'"] * 3 + ["DATE '2000-01-01'"]:
        spark.sql(f"INSERT INTO {table} VALUES (1, {value}, 'x')")
    outcome = await scoped_run(spark, engine, spark_catalog_settings, name, table)
    assert outcome.output["scope"] == "partitions", outcome.output
    assert outcome.output["scope_source"] == "metadata"
    call = outcome.sql[-1]
    assert "where => '(`p` = DATE \\'2026-01-01\\')'" in call, call
    assert data_file_count(spark, table) == 2


async def test_files_of_an_older_spec_are_scoped_from_the_manifests(
    spark: Any, engine: LocalEngine, spark_catalog_settings: Settings
) -> None:
    """Partitions of both specs qualify; each is written with its own spec's fields, and the
    older spec's filter (``p`` only) also covers the newer spec's files of that ``p``."""
    name = unique_name("evolved")
    table = create(spark, name, "id BIGINT, p STRING, q STRING", "p")
    for _ in range(2):
        spark.sql(f"INSERT INTO {table} VALUES (1, 'a', 'x')")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'z', 'x')")
    spark.sql(f"ALTER TABLE {table} ADD PARTITION FIELD q")
    for _ in range(2):
        spark.sql(f"INSERT INTO {table} VALUES (2, 'b', 'y')")
    untouched = {
        r["file_path"]
        for r in spark.sql(f"SELECT file_path FROM {table}.files WHERE partition.p = 'z'").collect()
    }
    outcome = await scoped_run(spark, engine, spark_catalog_settings, name, table)
    assert outcome.output["scope_source"] == "metadata", outcome.output
    assert outcome.output["partitions_selected"] == 2
    assert outcome.output["older_specs_scoped"] == 1
    assert "where => '(`p` = \\'a\\') OR (`p` = \\'b\\' AND `q` = \\'y\\')'" in outcome.sql[-1]
    assert outcome.output["rewritten_data_files_count"] == 4
    assert untouched <= {
        r["file_path"] for r in spark.sql(f"SELECT file_path FROM {table}.files").collect()
    }


async def test_a_rewrite_without_a_loader_scopes_on_the_engine(
    spark: Any, engine: LocalEngine
) -> None:
    name = unique_name("no_loader")
    table = create(spark, name, "id BIGINT, p STRING", "p")
    for _ in range(2):
        spark.sql(f"INSERT INTO {table} VALUES (1, 'a')")
    before = fingerprint(spark, table)
    outcome = await TableMaintenance(engine, TableRef(CATALOG, NS, name)).run(parse_intent(SCOPED))
    assert outcome.output["scope"] == "partitions" and outcome.output["scope_source"] == "engine"
    assert "scope_source_fallback" not in outcome.output
    spark.sql(f"REFRESH TABLE {table}")
    assert fingerprint(spark, table) == before and data_file_count(spark, table) == 1


async def test_the_snapshot_walk_equals_the_spark_query(
    spark: Any, engine: LocalEngine, spark_catalog_settings: Settings
) -> None:
    """Appends, a rollback (its snapshot leaves the branch), a replace and more appends: for
    every start (none, each snapshot, one no longer an ancestor) both give the same chain."""
    name = unique_name("walk")
    table = create(spark, name, "id BIGINT, p STRING", "p")
    ids = []
    for i in range(3):
        spark.sql(f"INSERT INTO {table} VALUES ({i}, 'a')")
        ids.append(int(spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect()[-1][0]))
    spark.sql(f"CALL {CATALOG}.system.rollback_to_snapshot('{NS}.{name}', {ids[1]})")
    spark.sql(
        f"CALL {CATALOG}.system.rewrite_data_files(table => '{NS}.{name}', "
        "options => map('min-input-files', '2'))"
    )
    spark.sql(f"INSERT INTO {table} VALUES (9, 'b')")
    verifier = RewriteVerifier(engine, CATALOG, TableRef(CATALOG, NS, name))
    loaded = await metadata_loader(spark_catalog_settings, NS, name)()
    every = [int(r[0]) for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect()]
    assert ids[2] in every  # rolled back, still in the metadata
    operations = set()
    for start in [None, *every]:
        walked = snapshots_after(loaded, start)
        oracle = [
            {k: row[k] for k in ("snapshot_id", "parent_id", "operation")}
            for row in await verifier.snapshots_since(start)
        ]
        assert walked == oracle, start
        operations |= {row["operation"] for row in walked}
    assert operations == {"append", "replace"}
    assert snapshots_after(loaded, ids[2])[0]["snapshot_id"] == ids[0]
