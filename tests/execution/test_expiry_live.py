"""Expiry's "still live" check (``execution.ledger.expiry_live``), without Spark: which recorded
files a kept snapshot still references, read with Icepack's streaming manifest reader, each distinct
manifest once, in memory that does not grow with snapshots x files.

The many-snapshot tables are written by ``tests.support.snapshot_table`` (PyIceberg's writers,
one metadata file registered in a real SQL catalog; its docstring says why not 5,000 commits).
The check reads and deletes nothing but metadata; every test still checks that no file was
touched.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table

from icepack_core.execution.ledger.expiry_files import plan_expiry
from icepack_core.execution.ledger.expiry_live import live_conflicts, path_key
from icepack_core.safety.locations import location_key
from icepack_core.settings import CatalogConfig
from tests.plugins.catalogs import rows
from tests.support.snapshot_table import BuiltTable, build_streaming_table

SEGMENT = st.text(alphabet="aZ09._=-%?# /:", min_size=0, max_size=6)


@given(
    st.sampled_from(["file:", "file://", "s3://B", "s3a://b", "hdfs://nn:8020", "", "gs://x"]),
    st.lists(SEGMENT, min_size=0, max_size=4),
)
def test_the_fast_path_key_is_the_normalisation(prefix: str, segments: list[str]) -> None:
    path = prefix + "/" + "/".join(segments)
    assert path_key(path) == location_key(path)


def files_under(root: Path) -> dict[Path, int]:
    return {p: p.stat().st_size for p in root.rglob("*") if p.is_file()}


def streaming(
    catalog: SqlCatalog, tmp_path: Path, name: str, snapshots: int, files: int
) -> tuple[Any, ...]:
    """A registered table of ``snapshots`` appends of ``files`` data files each."""
    location = f"file://{tmp_path / name}"
    built: BuiltTable = build_streaming_table(PyArrowFileIO(), location, snapshots, files)
    table = catalog.register_table(("ns", name), built.metadata_location)
    return table, built, location


def test_a_file_still_live_in_a_kept_snapshot_is_found_however_it_is_spelled(
    scratch_catalog: tuple[CatalogConfig, SqlCatalog], tmp_path: Path
) -> None:
    _cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    table, built, location = streaming(catalog, tmp_path, "events", 250, 10)
    before = files_under(tmp_path / "events")
    ids = built.snapshot_ids
    expiring = frozenset(ids[:50])
    lists = {s.snapshot_id: s.manifest_list for s in table.metadata.snapshots}
    live_file = built.data_path(location, 3, 1)
    respelled = built.data_path(location, 7, 2).replace("file:///", "file:/")
    small_manifest = f"{location}/metadata/m-00003.avro"  # kept snapshots 51..99 name it
    recorded = [
        *(lists[sid] for sid in sorted(expiring)),  # E's own lists: not live
        live_file,
        respelled,
        small_manifest,
        f"{location}/data/never-written.parquet",
    ]

    check = live_conflicts(table.io, table.metadata_location, expiring, recorded)

    found = {c.path: c.live_in for c in check.conflicts}
    assert set(found) == {live_file, respelled, small_manifest}
    assert check.conflict_count == 3
    assert found[live_file].startswith("file of snapshot ")
    assert found[small_manifest] == f"manifest of snapshot {ids[50]}"
    assert check.snapshot_ids == set(ids)
    # Every distinct manifest read once (as PyIceberg lists them), however many of the 200
    # kept lists name it.
    references = [
        m.manifest_path for sid in ids[50:] for m in table.snapshot_by_id(sid).manifests(table.io)
    ]
    assert check.manifests_read == len(set(references)) == 250
    assert check.manifests_read + check.manifests_shared == len(references) > 8000
    assert check.lists_read == 200
    assert files_under(tmp_path / "events") == before


def test_a_file_deleted_in_every_kept_snapshot_is_not_live(
    scratch_catalog: tuple[CatalogConfig, SqlCatalog], tmp_path: Path
) -> None:
    """A DELETED entry does not keep a file live; the check and the plan (PyIceberg's reader)
    agree on which files the expiry may delete."""
    _cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.real", rows(0).schema)
    table.append(rows(4))
    table.append(rows(3, start=100))
    first, second = (s.snapshot_id for s in table.metadata.snapshots)
    data = {t.file.file_path for t in table.scan().plan_files()}
    table.delete(
        EqualTo(term="id", value=0)
    )  # rewrites the first file: a DELETED entry in the head
    table = catalog.load_table("ns.real")
    content = table.scan().to_arrow().sort_by("id")
    before = files_under(Path(table.location().removeprefix("file://")))
    expiring = frozenset({first, second})

    plan = plan_expiry(table.metadata, table.io, older_than_ms=2**62, retain_last=1, now_ms=2**62)
    assert plan.expiring == expiring
    planned = {f.path for f in plan.files if f.kind == "data"}
    assert len(planned) == 1 and planned < data
    check = live_conflicts(table.io, table.metadata_location, expiring, sorted(data))
    assert {c.path for c in check.conflicts} == data - planned
    assert table.scan().to_arrow().sort_by("id") == content
    assert content.num_rows == 6 and pa.compute.min(content["id"]).as_py() == 1
    assert files_under(Path(table.location().removeprefix("file://"))) == before


def peak_of_check(table: Table, built: BuiltTable, location: str) -> tuple[int, int]:
    """Peak traced memory (bytes) of one check over every snapshot but the first, and the
    conflicts found (a data file of the last snapshot is recorded)."""
    recorded = [built.data_path(location, len(built.snapshot_ids), 0)]
    tracemalloc.start()
    try:
        check = live_conflicts(
            table.io, table.metadata_location, frozenset(built.snapshot_ids[:1]), recorded
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, check.conflict_count


def test_memory_grows_with_one_manifest_not_with_snapshots_times_files(
    scratch_catalog: tuple[CatalogConfig, SqlCatalog], tmp_path: Path
) -> None:
    """400 snapshots of 25 files: Spark's ``files VERSION AS OF`` of every kept snapshot came to
    2 million rows (25 snapshots, up to 250,000 rows, held at once as dicts: over 50 MB). The
    check's peak stays under 4 MB, and a table with 4x the snapshots costs it next to nothing
    more (the set of manifest paths read)."""
    _cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    small, small_built, small_loc = streaming(catalog, tmp_path, "small", 100, 25)
    big, big_built, big_loc = streaming(catalog, tmp_path, "big", 400, 25)
    assert big_built.snapshot_files == 25 * 400 * 401 // 2  # 2,005,000 (snapshot, file) pairs

    small_peak, small_found = peak_of_check(small, small_built, small_loc)
    big_peak, big_found = peak_of_check(big, big_built, big_loc)

    assert small_found == big_found == 1
    assert big_peak < 4 * 2**20, big_peak
    assert big_peak < small_peak + 512 * 1024, (small_peak, big_peak)
