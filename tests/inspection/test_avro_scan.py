"""The fast manifest scan (``inspect.avro_scan``) against PyIceberg's own manifest reader.

The scan relies on PyIceberg 0.12.0 internals (Cython decoder, codecs, reader construction);
these tests pin that version and check, manifest by manifest, that the fast path gives exactly
the aggregate ``fetch_manifest_entry`` gives, and that it is really taken.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
from pathlib import Path

import pyarrow as pa
import pyiceberg
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.manifest import ManifestFile
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
)

from icepack_core.errors import AvroDamaged, AvroUnsupported
from icepack_core.execution.verification.metadata_diff import read_live_entries
from icepack_core.inspection.avro_scan import check_framing, compile_block_decoder, scan_entries
from icepack_core.inspection.manifest_list import read_list
from icepack_core.inspection.manifests import read_manifest, read_manifest_pyiceberg
from icepack_core.settings import CatalogConfig
from tests.inspection.test_inspect_zoo import ZOO_TABLES
from tests.plugins.catalogs import Zoo

THRESHOLD = 1 << 20


def test_pyiceberg_is_the_version_the_scan_was_written_against() -> None:
    assert pyiceberg.__version__ == "0.12.0"


def assert_fast_path_matches(table: Table) -> int:
    """Every manifest of every snapshot: scanned, and equal to PyIceberg's reading."""
    seen = 0
    for snapshot in table.metadata.snapshots:
        for manifest in snapshot.manifests(table.io):
            with table.io.new_input(manifest.manifest_path).open() as f:
                scan_entries(f.read())  # raises AvroUnsupported if the fast path were not taken
            fast = read_manifest(manifest, table.io, THRESHOLD)
            assert fast == read_manifest_pyiceberg(manifest, table.io, THRESHOLD)
            seen += 1
    return seen


@pytest.mark.parametrize("name", ZOO_TABLES)
def test_zoo_manifests_scan_like_pyiceberg(zoo: Zoo, name: str) -> None:
    table = zoo.table(name)
    assert assert_fast_path_matches(table) >= (1 if table.metadata.snapshots else 0)


@pytest.mark.parametrize("format_version", [1, 2])
def test_typed_partitions_and_deleted_entries_scan_like_pyiceberg(
    scratch_catalog: tuple[CatalogConfig, SqlCatalog], format_version: int
) -> None:
    _, catalog = scratch_catalog
    catalog.create_namespace("scan")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "d", DateType(), required=False),
        NestedField(3, "ts", TimestampType(), required=False),
        NestedField(4, "dec", DecimalType(9, 2), required=False),
        NestedField(5, "b", BooleanType(), required=False),
        NestedField(6, "s", StringType(), required=False),
    )
    spec = PartitionSpec(
        *(
            PartitionField(source, 1000 + source, IdentityTransform(), f"p{source}")
            for source in range(2, 7)
        )
    )
    table = catalog.create_table(
        "scan.t", schema, partition_spec=spec, properties={"format-version": str(format_version)}
    )
    data = pa.Table.from_pylist(
        [
            {
                "id": i,
                "d": datetime.date(2024, 1, 1 + i % 3),
                "ts": datetime.datetime(2024, 1, 1, i),
                "dec": decimal.Decimal(i % 2) + decimal.Decimal("0.25"),
                "b": i % 2 == 0,
                "s": None if i % 5 == 0 else f"v{i % 4}",
            }
            for i in range(20)
        ],
        schema=table.schema().as_arrow(),
    )
    table.append(data)
    table.append(data)
    table.delete(EqualTo(term="b", value=True))  # rewrites manifests with DELETED entries
    assert assert_fast_path_matches(table) >= 3
    snapshot = table.current_snapshot()
    assert snapshot is not None
    aggs = [read_manifest(m, table.io, THRESHOLD) for m in snapshot.manifests(table.io)]
    assert sum(a.data_files for a in aggs) == 20
    assert len({k for a in aggs for k in a.partitions}) == 10  # b=false rows, two appends


def broken_copy(manifest: ManifestFile, path: Path, length: int) -> ManifestFile:
    return ManifestFile.from_args(
        manifest_path=str(path),
        manifest_length=length,
        partition_spec_id=manifest.partition_spec_id,
        content=manifest.content,
        sequence_number=manifest.sequence_number,
        min_sequence_number=manifest.min_sequence_number,
        added_snapshot_id=manifest.added_snapshot_id,
    )


def test_a_truncated_manifest_fails_without_a_fallback(zoo: Zoo, tmp_path: Path) -> None:
    """PyIceberg's Cython decoder does not check lengths against its buffer (it copies whatever
    memory follows), so a damaged file must fail on its framing before any decoder sees it:
    the fast scan, the inspection's read (no fallback to PyIceberg's reader) and the
    verification's metadata read all raise ``AvroDamaged``."""
    table = zoo.table("healthy")
    manifest = table.current_snapshot().manifests(table.io)[0]  # type: ignore[union-attr]
    with table.io.new_input(manifest.manifest_path).open() as f:
        data = f.read()
    truncated = tmp_path / "truncated.avro"
    truncated.write_bytes(data[: len(data) - 40])
    broken = broken_copy(manifest, truncated, len(data) - 40)
    with pytest.raises(AvroDamaged, match="runs past the end"):
        scan_entries(truncated.read_bytes())
    with pytest.raises(AvroDamaged):
        read_manifest(broken, table.io, THRESHOLD)
    with pytest.raises(AvroDamaged):
        read_live_entries(table.io, broken, partitioned=True)


def test_every_truncation_of_a_manifest_and_its_list_is_caught(zoo: Zoo, tmp_path: Path) -> None:
    """Cut at every byte: the framing check refuses the prefix, or the prefix ends exactly
    after a block (a valid, shorter container) and reads as a prefix of the entries."""
    table = zoo.table("healthy")
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.manifest_list
    manifest = snapshot.manifests(table.io)[0]
    whole = read_manifest(manifest, table.io, THRESHOLD)
    files = {"manifest": manifest.manifest_path, "list": snapshot.manifest_list}
    for kind, location in files.items():
        with table.io.new_input(location).open() as f:
            data = f.read()
        check_framing(data)
        accepted = 0
        for cut in range(len(data)):
            try:
                check_framing(data[:cut])
            except AvroDamaged:
                continue
            accepted += 1
            if kind == "manifest":
                prefix = tmp_path / f"prefix-{cut}.avro"
                prefix.write_bytes(data[:cut])
                part = read_manifest(broken_copy(manifest, prefix, cut), table.io, THRESHOLD)
                assert part.data_files <= whole.data_files
        assert accepted < len(data) // 10, f"{kind}: {accepted} of {len(data)} prefixes accepted"
    list_path = tmp_path / "list.avro"
    with table.io.new_input(snapshot.manifest_list).open() as f:
        list_path.write_bytes(f.read()[:-1])
    with pytest.raises(AvroDamaged):
        read_list(table.io, str(list_path))


def test_schemas_the_scan_does_not_handle_are_refused() -> None:
    entry = {
        "type": "record",
        "name": "manifest_entry",
        "fields": [
            {"name": "status", "field-id": 0, "type": "long"},  # PyIceberg reads an int
            {
                "name": "data_file",
                "field-id": 2,
                "type": {"type": "record", "name": "r2", "fields": []},
            },
        ],
    }
    with pytest.raises(AvroUnsupported):
        compile_block_decoder(entry)
    with pytest.raises(AvroUnsupported):
        compile_block_decoder(json.loads('{"type": "record", "fields": []}'))
    with pytest.raises(AvroUnsupported):
        scan_entries(b"not avro at all")


def test_double_partition_values_are_read_exactly(
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    """PyIceberg's decoder reads doubles as float32: 0.1 and its next double collapse into one
    partition, 1e300 and 1e301 into inf. The scan must keep all four apart."""
    _, catalog = scratch_catalog
    catalog.create_namespace("dbl")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "x", DoubleType(), required=False),
    )
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "x"))
    table = catalog.create_table("dbl.t", schema, partition_spec=spec)
    values = [0.1, math.nextafter(0.1, 1.0), 1e300, 1e301]
    table.append(
        pa.Table.from_pylist(
            [{"id": i, "x": x} for i, x in enumerate(values)], schema=table.schema().as_arrow()
        )
    )
    (manifest,) = table.current_snapshot().manifests(table.io)  # type: ignore[union-attr]
    aggregate = read_manifest(manifest, table.io, THRESHOLD)
    assert aggregate.data_files == 4
    assert len(aggregate.partitions) == 4
