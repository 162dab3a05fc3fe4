"""``referenced_paths`` against two oracles: Spark's own metadata tables (every file a snapshot
references: data, delete files, manifests, manifest lists, metadata files, after appends,
merge-on-read deletes, a compaction and an expiry), and PyIceberg's model on the in-repo tables
of every kind (tests/data/tables-icepack), including the v1 table whose snapshots list their
manifests inline, which PyIceberg's model does not read."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.io import InputFile, InputStream
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import StaticTable

from icepack_core.discovery.catalogs import load_catalog
from icepack_core.execution.ledger.referenced_files import referenced_paths, split_referenced
from icepack_core.execution.verification.metadata_diff import checked_manifests, read_live_entries
from icepack_core.safety.locations import location_key
from icepack_core.settings import Settings
from tests.execution.spark_tables import make_small_files_table, unique_name

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "referenced"


def spark_references(spark: Any, table: str) -> set[str]:
    paths = [r[0] for r in spark.sql(f"SELECT file_path FROM {table}.all_files").collect()]
    paths += [r[0] for r in spark.sql(f"SELECT path FROM {table}.all_manifests").collect()]
    paths += [r[0] for r in spark.sql(f"SELECT manifest_list FROM {table}.snapshots").collect()]
    paths += [r[0] for r in spark.sql(f"SELECT file FROM {table}.metadata_log_entries").collect()]
    return {location_key(p) for p in paths}


def test_every_file_spark_says_is_referenced_is_in_the_set(
    spark: Any, spark_catalog_settings: Settings
) -> None:
    name = unique_name("refs")
    table = make_small_files_table(spark, NS, name, batches=3, merge_on_read=True)
    spark.sql(f"DELETE FROM {table} WHERE id % 5 = 0")  # position delete files
    spark.sql(f"CALL icepack.system.rewrite_data_files(table => '{NS}.{name}')")
    spark.sql(f"INSERT INTO {table} VALUES (999, 'a', 'late')")
    spark.sql(
        f"CALL icepack.system.expire_snapshots(table => '{NS}.{name}', "
        "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 2)"
    )
    (catalog_cfg,) = spark_catalog_settings.effective_catalogs()
    loaded = load_catalog(catalog_cfg).load_table((NS, name))

    referenced = referenced_paths(loaded.io, loaded.metadata_location)

    oracle = spark_references(spark, table)
    assert len(oracle) > 10
    assert oracle <= referenced, sorted(oracle - referenced)[:5]
    assert location_key(loaded.metadata_location) in referenced
    data_dir = loaded.location() + "/data"
    stray = [f"{data_dir}/never-committed.parquet", f"file:{data_dir[7:]}/also-not.parquet"]
    live = sorted(p for p in oracle if p.endswith(".parquet"))[0]
    free, kept = split_referenced(
        [stray[0], live.replace("file:///", "file:/"), stray[1]], referenced
    )
    assert free == stray and kept == [live.replace("file:///", "file:/")]


TABLES = Path(__file__).resolve().parents[1] / "data" / "tables-icepack"
CASES = {c["name"]: c for c in json.loads((TABLES / "tables.json").read_text())}


def pyiceberg_references(metadata: str) -> set[str]:
    """Every file PyIceberg's model of the table references (its own readers)."""
    table = StaticTable.from_metadata(metadata)
    paths = {metadata, *(e.metadata_file for e in table.metadata.metadata_log)}
    for snapshot in table.metadata.snapshots:
        paths.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            paths.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                paths.add(entry.data_file.file_path)
    return {location_key(p) for p in paths}


@pytest.mark.parametrize("name", ["spark_v1", "spark_v2", "spark_v3", "pyiceberg_v2"])
def test_the_references_of_every_kind_of_table_equal_pyiceberg_s(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(TABLES)  # the tables' locations are relative to it
    metadata = CASES[name]["metadata"]
    assert referenced_paths(PyArrowFileIO(), metadata) == pyiceberg_references(metadata)


def test_a_v1_table_listing_its_manifests_inline_references_its_twin_s_files(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """spark_v1_inline is spark_v1 with each snapshot's manifests inline and the manifest
    lists removed (paths renamed): every manifest and content file of the twin is referenced."""
    monkeypatch.chdir(TABLES)
    inline = referenced_paths(PyArrowFileIO(), CASES["spark_v1_inline"]["metadata"])
    twin = pyiceberg_references(CASES["spark_v1"]["metadata"])
    renamed = {p.replace("/spark_v1/", "/spark_v1_inline/") for p in twin}
    content_and_manifests = {p for p in renamed if p.endswith(".avro") or p.endswith(".parquet")}
    lists = {p for p in content_and_manifests if "/snap-" in p}  # removed from the copy
    assert len(content_and_manifests - lists) > 3
    assert content_and_manifests - lists <= inline


class CountingIO(PyArrowFileIO):
    """The local FileIO, counting how often each file is opened for reading."""

    def __init__(self) -> None:
        super().__init__()
        self.opened: Counter[str] = Counter()

    def new_input(self, location: str) -> InputFile:  # type: ignore[override]  # a counting wrapper
        inner = super().new_input(location)
        opened = self.opened

        class Counted(InputFile):
            def __len__(self) -> int:
                return len(inner)

            def exists(self) -> bool:
                return inner.exists()

            def open(self, seekable: bool = True) -> InputStream:
                opened[location] += 1
                return inner.open(seekable)

        return Counted(location)


@pytest.mark.parametrize("name", ["spark_v2", "spark_v3", "pyiceberg_v2"])
def test_every_manifest_and_manifest_list_is_read_once(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The framing check and the decoder share one read: against object storage each read is
    a request, and the reference check and the verification's file diff read every manifest."""
    monkeypatch.chdir(TABLES)
    metadata = CASES[name]["metadata"]
    io = CountingIO()
    referenced = referenced_paths(io, metadata)
    avro = {p: n for p, n in io.opened.items() if p.endswith(".avro")}
    assert len(avro) >= 2
    assert set(avro.values()) == {1}, avro
    assert {location_key(p) for p in avro} <= referenced

    table = StaticTable.from_metadata(metadata)
    for snapshot in table.metadata.snapshots:  # the verification's file diff, one snapshot
        io = CountingIO()
        for manifest in checked_manifests(snapshot, io):
            read_live_entries(io, manifest, partitioned=bool(table.spec().fields))
        assert len(io.opened) >= 2 and set(io.opened.values()) == {1}, io.opened
