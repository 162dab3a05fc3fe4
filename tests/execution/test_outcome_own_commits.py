"""An action's measured benefit is its own commits', not the writers' committed beside it.

A real Iceberg table (PyIceberg's SQL catalog on a SQLite file, real Parquet files): small
appends, a writer's append, then a rewrite standing in for a compaction (PyIceberg's
``overwrite`` of every row into one file: its own snapshots), then more writer appends. The
oracle is the inspector's own reading of the table (``inspect_view``: manifests read, files
counted) at the rewrite's parent and at its last snapshot, taken while each was current;
``own_effect`` must find the same benefit from the metadata afterwards, with the writers'
snapshots on top. No Spark here: the Spark race is ``test_writer_races``.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from icepack_core.execution.outcome import measured_action, own_effect
from icepack_core.inspection.metadata import MetadataView
from icepack_core.inspection.pyiceberg_inspector import inspect_view
from icepack_core.inspection.status import TableStatus
from icepack_core.planning.prediction import Shape, benefit

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def rows(start: int, n: int) -> pa.Table:
    return pa.table(
        {"id": list(range(start, start + n)), "v": [f"r{i}" for i in range(start, start + n)]},
        schema=SCHEMA,
    )


def make_table(tmp_path: Path) -> Table:
    catalog = SqlCatalog(
        "own", uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=f"file://{tmp_path / 'wh'}"
    )
    catalog.create_namespace("ns")
    return catalog.create_table("ns.t", schema=SCHEMA)


async def status(table: Table) -> TableStatus:
    table = table.refresh()
    return await inspect_view(
        MetadataView.of(table.metadata),
        table.io,
        table.metadata_location,
        catalog="own",
        namespace="ns",
        name="t",
    )


def snapshot_ids(table: Table) -> list[int]:
    return [s.snapshot_id for s in table.refresh().metadata.snapshots]


async def test_writer_snapshots_around_a_rewrite_do_not_count_against_it(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    for i in range(4):  # four small files, four manifests
        table.append(rows(10 * i, 3))
    start = await status(table)
    table.append(rows(100, 2))  # a writer commits before the rewrite does (its parent)
    parent = await status(table)
    ids_before = set(snapshot_ids(table))
    everything = table.scan().to_arrow()
    table.overwrite(everything)  # the "rewrite": every row into one new file
    own = frozenset(set(snapshot_ids(table)) - ids_before)
    rewritten = await status(table)
    for i in range(3):  # the writer goes on committing on top of it
        table.append(rows(200 + 10 * i, 2))
    after = await status(table)

    expected = benefit(Shape.of(parent), Shape.of(rewritten))
    table_level = benefit(Shape.of(start), Shape.of(after))
    assert expected >= 4  # 5 files became 1 (the oracle itself is meaningful)
    assert table_level < expected  # what the job-wide shape would have blamed on the rewrite

    effect = own_effect(table.refresh(), start.current_snapshot_id, own)
    assert effect is not None
    assert effect.error is None
    assert effect.benefit == expected
    assert set(effect.snapshots) == own
    assert effect.writer_snapshots == 4

    entry = measured_action("rewrite_data_files", start, after, float(expected), effect).to_json()
    assert entry["benefit"] == expected
    assert entry["ratio"] == pytest.approx(1.0)
    assert entry["own"]["table_benefit"] == table_level
    assert entry["before"] == Shape.of(start).to_json()
    assert table.scan().to_arrow().num_rows == everything.num_rows + 6


async def test_a_rewrite_nobody_wrote_beside_is_measured_as_before(tmp_path: Path) -> None:
    """A batch table: only the action's own snapshots after the start, so no own measurement
    and the entry is exactly the table-level one (no ``own`` key)."""
    table = make_table(tmp_path)
    for i in range(4):
        table.append(rows(10 * i, 3))
    start = await status(table)
    ids_before = set(snapshot_ids(table))
    table.overwrite(table.scan().to_arrow())
    own = frozenset(set(snapshot_ids(table)) - ids_before)
    after = await status(table)

    assert own_effect(table.refresh(), start.current_snapshot_id, own) is None
    entry = measured_action("rewrite_data_files", start, after, 3.0, None).to_json()
    table_level = benefit(Shape.of(start), Shape.of(after))
    assert "own" not in entry
    assert entry["benefit"] == table_level
