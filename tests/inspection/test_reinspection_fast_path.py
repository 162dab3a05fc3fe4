"""Re-inspection's fast path: the projecting manifest-list read, and no reads at all when the
snapshot's manifest list is the one the cached totals were computed from."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

import asyncpg
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io import FileIO
from pyiceberg.manifest import read_manifest_list

from icepack_core.inspection.inspector import ManifestCache, MemoryManifestCache, inspect_table
from icepack_core.inspection.manifest_list import (
    ManifestRef,
    read_list,
    scan_manifest_list,
)
from icepack_core.inspection.status import TableStatus
from icepack_core.inspection.store import ManifestStatsStore
from icepack_core.settings import CatalogConfig
from tests.inspection.test_tables_icepack import BY_NAME, TABLES, raw_metadata
from tests.plugins.catalogs import Zoo, rows


def local(location: str) -> Path:
    return Path(location.removeprefix("file://").removeprefix("file:"))


def pyiceberg_refs(io: FileIO, location: str) -> list[ManifestRef]:
    return [
        ManifestRef(
            m.manifest_path,
            m.manifest_length,
            m.partition_spec_id,
            int(m.content),
            int(m.sequence_number),
        )
        for m in read_manifest_list(io.new_input(location))
    ]


def test_projecting_list_read_equals_pyiceberg_on_every_written_list(
    zoo: Zoo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every manifest list of the zoo (PyIceberg v1/v2) and of the Spark/PyIceberg test tables:
    the compiled projection decodes them (no fallback) to what PyIceberg's reader gives."""
    from pyiceberg.io import load_file_io

    checked = 0
    for name in zoo.expected:
        table = zoo.table(name)
        for snapshot in table.metadata.snapshots:
            data = local(snapshot.manifest_list).read_bytes()
            assert scan_manifest_list(data) == pyiceberg_refs(table.io, snapshot.manifest_list)
            checked += 1
    monkeypatch.chdir(TABLES)
    io = load_file_io({}, "warehouse")
    for case in BY_NAME.values():
        for snapshot in raw_metadata(case["metadata"])["snapshots"]:
            if "manifest-list" in snapshot:
                location = snapshot["manifest-list"]
                got = scan_manifest_list(local(location).read_bytes())
                assert got == pyiceberg_refs(io, location)
                assert read_list(io, location) == got
                checked += 1
    assert checked > 20


async def test_unchanged_manifest_list_reads_nothing(
    db: asyncpg.Pool, scratch_catalog: tuple[CatalogConfig, SqlCatalog]
) -> None:
    _, catalog = scratch_catalog
    catalog.create_namespace("fast")
    table = catalog.create_table("fast.t", rows(0).schema)
    for i in range(3):
        table.append(rows(2, start=i * 2))
    store = ManifestStatsStore(db)

    async def inspect() -> TableStatus:
        return await inspect_table(
            catalog.load_table("fast.t"), catalog="s", namespace="fast", name="t", cache=store
        )

    first = await inspect()
    assert (first.manifests_read, first.manifests_cached) == (3, 0)
    # A new metadata file, same snapshot: the cached totals were summed from this very list.
    table.transaction().set_properties({"owner": "someone"}).commit_transaction()
    listing = local(table.current_snapshot().manifest_list)  # type: ignore[union-attr]
    hidden = listing.with_name(listing.name + ".away")
    listing.rename(hidden)  # reading the list now would fail
    second = await inspect()
    assert second.metadata_location != first.metadata_location
    assert (second.manifests_read, second.manifests_cached) == (0, 3)
    assert second.metadata_log_count == first.metadata_log_count + 1  # history is fresh
    same = {"metadata_location": "", "metadata_log_count": 0}
    assert second.table_metrics() | same == first.table_metrics() | same
    hidden.rename(listing)

    table.append(rows(2, start=100))  # a new list: read, the one new manifest only
    third = await inspect()
    assert (third.manifests_read, third.manifests_cached) == (1, 3)
    fresh = await inspect_table(
        catalog.load_table("fast.t"), catalog="s", namespace="fast", name="t"
    )
    assert third.table_metrics() == fresh.table_metrics()


async def test_unchanged_inline_or_threshold_change_still_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The skip needs a manifest list and the same threshold; otherwise manifests are used."""
    from icepack_core.inspection.inspector import inspect_metadata_location

    shutil.copytree(TABLES / "warehouse", tmp_path / "warehouse")
    monkeypatch.chdir(tmp_path)
    cache = MemoryManifestCache()
    inline = BY_NAME["spark_v1_inline"]["metadata"]
    first = await inspect_metadata_location(inline, cache=cache)
    again = await inspect_metadata_location(inline, cache=cache)
    assert (again.manifests_read, again.manifests_cached) == (0, first.manifest_count)
    v2 = BY_NAME["spark_v2"]["metadata"]
    a = await inspect_metadata_location(v2, cache=cache)
    b = await inspect_metadata_location(v2, cache=cache, small_file_bytes=1)
    assert b.manifests_read == a.manifest_count and b.small_file_count == 0
    assert json.dumps(b.file_size_histogram) == json.dumps(a.file_size_histogram)


@pytest.mark.parametrize("name", ["spark_v2", "pyiceberg_v2"])
async def test_skip_survives_the_same_list_under_the_memory_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    shutil.copytree(TABLES / "warehouse", tmp_path / "warehouse")
    monkeypatch.chdir(tmp_path)
    from icepack_core.inspection.inspector import inspect_metadata_location

    cache = MemoryManifestCache()
    location = BY_NAME[name]["metadata"]
    first = await inspect_metadata_location(location, cache=cache)
    doc = raw_metadata(location)
    (current,) = (s for s in doc["snapshots"] if s["snapshot-id"] == doc["current-snapshot-id"])
    listing = local(current["manifest-list"])
    listing.unlink()
    second = await inspect_metadata_location(location, cache=cache)
    assert (second.manifests_read, second.manifests_cached) == (0, first.manifest_count)
    assert second.table_metrics() == first.table_metrics()


async def test_new_manifests_read_while_looked_up_cached_row_wins(
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    """Re-inspection reads new manifests while looking their rows up: a cached row still
    wins (even if the file can no longer be read), a missing uncached one is named."""
    from icepack_core.inspection.inspector import InspectionFailed

    _, catalog = scratch_catalog
    catalog.create_namespace("spec")
    table = catalog.create_table("spec.t", rows(0).schema)
    table.append(rows(2))
    table.append(rows(2, start=2))
    warm = MemoryManifestCache()

    async def inspect(cache: ManifestCache) -> TableStatus:
        return await inspect_table(
            catalog.load_table("spec.t"), catalog="s", namespace="spec", name="t", cache=cache
        )

    await inspect(warm)
    table.append(rows(2, start=4))
    other = MemoryManifestCache()
    expected = await inspect(other)  # computes the new manifest's row elsewhere
    before = set(warm.rows)
    (new,) = [p for p in other.rows if p not in before]
    Path(new.removeprefix("file://")).unlink()

    with pytest.raises(InspectionFailed) as info:  # not cached: the read error is the cause
        await inspect(warm)
    assert "cannot read manifest" in info.value.message and new in info.value.message

    warm.rows[new] = other.rows[new]
    status = await inspect(warm)
    assert (status.manifests_read, status.manifests_cached) == (0, 3)
    assert status.table_metrics() == expected.table_metrics()


async def test_cache_writes_are_atomic_and_commit_asynchronously(db: asyncpg.Pool) -> None:
    """The totals and the last manifest rows commit together, without waiting for the WAL
    flush (caches): a failure writes neither."""
    from icepack_core.inspection.pyiceberg_inspector import CachedManifest, CachedTotals

    store = ManifestStatsStore(db)
    # Placeholder documents: this test is about the write, not what the documents hold.
    rows_ = [CachedManifest("file:///m1.avro", 10, 0, {"v": 1})]  # type: ignore[typeddict-item]
    with pytest.raises(asyncpg.DataError):  # the totals document cannot be encoded
        await store.put_totals(
            "t",
            CachedTotals(1, ["file:///m1.avro"], {"bad": object()}),  # type: ignore[typeddict-item,typeddict-unknown-key]
            True,
            rows=rows_,
        )
    assert await db.fetchval("SELECT count(*) FROM icepack.manifest_stats") == 0
    assert await db.fetchval("SELECT count(*) FROM icepack.inspection_totals") == 0
    placeholder = CachedTotals(1, ["file:///m1.avro"], {"v": "x"})  # type: ignore[typeddict-item]
    await store.put_totals("t", placeholder, True, rows=rows_)
    assert await db.fetchval("SELECT count(*) FROM icepack.manifest_stats") == 1
    totals = await store.get_totals("t")
    assert totals is not None and totals.manifest_paths == ["file:///m1.avro"]
    stored: Mapping[str, object] = await store.get_many(["file:///m1.avro"])
    assert stored == {"file:///m1.avro": {"v": 1}}
    async with store._cache_write() as conn:  # cache writes do not wait for the WAL flush
        assert await conn.fetchval("SHOW synchronous_commit") == "off"
