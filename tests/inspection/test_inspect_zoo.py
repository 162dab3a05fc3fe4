"""The PyIceberg inspector and health rules on the zoo: expected issues, oracle, incrementality."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from icepack_core.inspection.health import Thresholds, assess
from icepack_core.inspection.inspector import ManifestCache, MemoryManifestCache, inspect_table
from icepack_core.inspection.status import TableStatus
from icepack_core.inspection.store import ManifestStatsStore
from icepack_core.settings import CatalogConfig
from tests.inspection.oracle import assert_matches_oracle, assert_matches_summary
from tests.plugins.catalogs import ZOO_THRESHOLDS, Zoo, rows

ZOO_TABLES = [
    "small_files",
    "healthy",
    "many_snapshots",
    "many_manifests",
    "skewed",
    "metadata_log",
    "empty",
]


async def inspect_zoo(zoo: Zoo, name: str, cache: ManifestCache | None = None) -> TableStatus:
    return await inspect_table(
        zoo.table(name),
        catalog="zoo",
        namespace="zoo",
        name=name,
        cache=cache or MemoryManifestCache(),
    )


@pytest.mark.parametrize("name", ZOO_TABLES)
async def test_zoo_table_shows_exactly_its_expected_issues(zoo: Zoo, name: str) -> None:
    status = await inspect_zoo(zoo, name)
    assessment = assess(status, ZOO_THRESHOLDS)
    assert assessment.issue_codes() == zoo.expected[name], assessment.issues
    assert (assessment.health == "healthy") == (not zoo.expected[name])


@pytest.mark.parametrize("name", ZOO_TABLES)
async def test_zoo_metrics_equal_the_metadata_table_oracle(zoo: Zoo, name: str) -> None:
    table = zoo.table(name)
    status = await inspect_zoo(zoo, name)
    assert_matches_oracle(status, table)
    snapshot = table.metadata.current_snapshot()
    if snapshot is not None and snapshot.summary is not None:
        assert_matches_summary(status, snapshot.summary.additional_properties)
    assert status.snapshot_count == len(table.metadata.snapshots)
    assert status.metadata_log_count == len(table.metadata.metadata_log)
    assert status.ref_count == len(table.metadata.refs)
    assert status.manifests_read == status.manifest_count
    assert status.manifests_cached == 0


async def test_default_thresholds_find_nothing_wrong_with_tiny_tables(zoo: Zoo) -> None:
    for name in ZOO_TABLES:
        status = await inspect_zoo(zoo, name)
        codes = assess(status, Thresholds()).issue_codes()
        assert codes <= {"SMALL_FILES"}, (name, codes)


async def test_old_snapshots_appear_once_the_oldest_is_past_expiry(zoo: Zoo) -> None:
    status = await inspect_zoo(zoo, "healthy")
    now = datetime.now(UTC)
    assert assess(status, ZOO_THRESHOLDS, now).issue_codes() == set()
    later = assess(status, ZOO_THRESHOLDS, now + timedelta(days=6))
    assert later.issue_codes() == {"OLD_SNAPSHOTS"}
    (issue,) = later.issues
    assert issue.value is not None and issue.threshold == 120.0 and issue.value >= 144
    much_later = assess(status, ZOO_THRESHOLDS, now + timedelta(days=31))
    assert much_later.health == "critical"


async def test_partition_keys_and_empty_table_counts(zoo: Zoo) -> None:
    skewed = await inspect_zoo(zoo, "skewed")
    assert (skewed.partition_count, skewed.max_files_in_partition) == (4, 6)
    empty = await inspect_zoo(zoo, "empty")
    assert empty.current_snapshot_id is None and empty.current_snapshot_at is None
    assert empty.partition_count == 0 and empty.data_file_count == 0
    assert set(empty.file_size_histogram.values()) == {0}
    assert assess(empty).score == 100


async def test_reinspection_reads_only_the_new_manifests(
    db: asyncpg.Pool, scratch_catalog: tuple[CatalogConfig, SqlCatalog]
) -> None:
    _, catalog = scratch_catalog
    catalog.create_namespace("inc")
    table = catalog.create_table("inc.t", rows(0).schema)
    for i in range(3):
        table.append(rows(2, start=i * 2))
    store = ManifestStatsStore(db)
    first = await inspect_table(table, catalog="scratch", namespace="inc", name="t", cache=store)
    assert (first.manifests_read, first.manifests_cached) == (3, 0)

    table.append(rows(2, start=100))
    second = await inspect_table(table, catalog="scratch", namespace="inc", name="t", cache=store)
    assert (second.manifests_read, second.manifests_cached) == (1, 3)
    fresh = await inspect_table(table, catalog="scratch", namespace="inc", name="t")
    assert second.table_metrics() == fresh.table_metrics()
    assert_matches_oracle(second, table)
    assert await db.fetchval("SELECT count(*) FROM icepack.manifest_stats") == 4

    # A new small-file threshold cannot be served from aggregates computed with the old one.
    with table.transaction() as tx:
        tx.set_properties({"write.target-file-size-bytes": "8"})
    third = await inspect_table(table, catalog="scratch", namespace="inc", name="t", cache=store)
    assert (third.manifests_read, third.manifests_cached) == (4, 0)
    assert third.small_file_count == 0 and second.small_file_count == 4
