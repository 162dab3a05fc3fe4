"""Re-inspection from the previous inspection's merged totals (``inspection_totals``)."""

from __future__ import annotations

import asyncpg
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import GreaterThanOrEqual
from pyiceberg.manifest import ManifestFile
from pyiceberg.table import Table

from icepack_core.inspection.inspector import inspect_table
from icepack_core.inspection.status import TableStatus
from icepack_core.inspection.store import ManifestStatsStore
from icepack_core.settings import CatalogConfig
from tests.inspection.oracle import assert_matches_oracle
from tests.plugins.catalogs import rows


async def test_totals_follow_appends_and_dropped_manifests(
    db: asyncpg.Pool, scratch_catalog: tuple[CatalogConfig, SqlCatalog]
) -> None:
    _, catalog = scratch_catalog
    catalog.create_namespace("tot")
    table = catalog.create_table("tot.t", rows(0).schema)
    for i in range(3):
        table.append(rows(2, start=i * 2))
    store = ManifestStatsStore(db)

    async def inspect() -> TableStatus:
        return await inspect_table(table, catalog="scratch", namespace="tot", name="t", cache=store)

    async def fresh() -> TableStatus:
        return await inspect_table(table, catalog="scratch", namespace="tot", name="t")

    first = await inspect()
    assert (first.manifests_read, first.manifests_cached) == (3, 0)
    assert await db.fetchval("SELECT count(*) FROM icepack.inspection_totals") == 1

    table.append(rows(2, start=100))
    second = await inspect()
    assert (second.manifests_read, second.manifests_cached) == (1, 3)
    assert second.table_metrics() == (await fresh()).table_metrics()

    # A delete rewrites (drops) manifests: their aggregates are subtracted from the totals.
    table.delete(GreaterThanOrEqual(term="id", value=4))
    before = {m.manifest_path for m in second_manifests(table, second.current_snapshot_id)}
    snapshot = table.current_snapshot()
    assert snapshot is not None
    now = {m.manifest_path for m in snapshot.manifests(table.io)}
    assert before - now, "the delete should drop manifests"
    third = await inspect()
    assert third.manifests_read == len(now - before)
    assert third.manifests_cached == len(now & before)
    assert third.table_metrics() == (await fresh()).table_metrics()
    assert third.data_file_count == 2
    assert_matches_oracle(third, table)

    # Unchanged snapshot: served from the totals, nothing read.
    again = await inspect()
    assert (again.manifests_read, again.manifests_cached) == (0, third.manifest_count)
    assert again.table_metrics() == third.table_metrics()


def second_manifests(table: Table, snapshot_id: int | None) -> list[ManifestFile]:
    assert snapshot_id is not None
    snapshot = table.snapshot_by_id(snapshot_id)
    assert snapshot is not None
    return snapshot.manifests(table.io)


async def test_totals_of_another_format_or_threshold_are_not_used(
    db: asyncpg.Pool, scratch_catalog: tuple[CatalogConfig, SqlCatalog]
) -> None:
    _, catalog = scratch_catalog
    catalog.create_namespace("tot")
    table = catalog.create_table("tot.u", rows(0).schema)
    table.append(rows(2))
    table.append(rows(2, start=2))
    store = ManifestStatsStore(db)
    first = await inspect_table(table, catalog="s", namespace="tot", name="u", cache=store)

    # A row whose totals are wrong but of an older format must be ignored, never misread.
    await db.execute(
        "UPDATE icepack.inspection_totals SET totals = jsonb_set("
        "jsonb_set(totals, '{v}', '\"0/1\"'), '{data_files}', '999')"
    )
    table.append(rows(2, start=4))
    second = await inspect_table(table, catalog="s", namespace="tot", name="u", cache=store)
    assert (second.manifests_read, second.manifests_cached) == (1, 2)
    assert second.data_file_count == first.data_file_count + 1

    # Another threshold: neither the totals nor the per-manifest rows serve it.
    with table.transaction() as tx:
        tx.set_properties({"write.target-file-size-bytes": "8"})
    third = await inspect_table(table, catalog="s", namespace="tot", name="u", cache=store)
    assert (third.manifests_read, third.manifests_cached) == (3, 0)
    assert third.small_file_count == 0

    # Totals whose removed manifests have no cached aggregate: merged from scratch instead.
    await db.execute("DELETE FROM icepack.manifest_stats")
    assert await db.fetchval("SELECT count(*) FROM icepack.inspection_totals") == 0
    table.delete(GreaterThanOrEqual(term="id", value=4))
    fourth = await inspect_table(table, catalog="s", namespace="tot", name="u", cache=store)
    assert fourth.manifests_read == fourth.manifest_count
    fresh = await inspect_table(
        table,
        catalog="s",
        namespace="tot",
        name="u",
        small_file_bytes=third.small_file_threshold_bytes,
    )
    assert fourth.table_metrics() == fresh.table_metrics()
