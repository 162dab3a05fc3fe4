"""The compaction's partition filter from the table's manifests, read in this process.

``scope_from_metadata`` answers what ``partition_filter.scope_partitions`` answers with two
Spark queries over the ``files`` metadata table (and a ``DESCRIBE`` for the columns): which
identity partitions hold at least ``min_files`` live data files under ``undersized_bytes``,
as a ``where`` filter. It reads the current snapshot's data manifests through the table's
PyIceberg ``FileIO`` (``metadata_diff.read_live_entries``: each manifest with its own writer
schema, doubles read exactly) and renders the values through the same canonical texts and
literal round trip on the engine as the Spark path (``partition_filter.partitions_where``), so
both give the same filter (``tests/execution/test_metadata_scope.py`` checks it against the
Spark path on every identity-partitionable type).

Partitions are keyed by the partition field ids of the current spec, so a partition field
renamed away from its source column is scoped here (the Spark path cannot find it in the
``files`` table's struct and widens to the whole table).

Raises ``MetadataDiffUnsupported`` where this cannot be exact and the Spark path should decide
(a live data file written under another partition spec, a nested source column, a source type
or a value without a canonical text here, an unreadable manifest), and ``ScopeFallback``
where the answer is a whole-table rewrite whichever path computes it (unpartitioned, a
non-identity transform, too many partitions, a value without an exact literal).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from pyiceberg.manifest import ManifestContent
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from icepack_core.errors import MetadataDiffUnsupported, ScopeFallback, UnsupportedLiteral
from icepack_core.execution.metadata_diff import (
    MetadataColumn,
    canonical_texts,
    checked_manifests,
    read_live_entries,
)
from icepack_core.execution.partition_filter import (
    PartitionColumn,
    PartitionScope,
    partitions_where,
)
from icepack_core.execution.partition_text import spark_type_of
from icepack_core.spark.engine import SparkEngine
from icepack_core.spark.sql import MAX_STRING_LITERAL_LENGTH

DATA = 0  # a manifest entry's content: data file


def scope_columns(table: Table) -> tuple[list[PartitionColumn], list[MetadataColumn]]:
    """The current spec's identity partition columns, as the filter names them and as the
    manifests key them (same order).

    Raises:
        ScopeFallback: unpartitioned, or a partition field is not an identity transform.
        MetadataDiffUnsupported: a nested source column, or a type without a canonical text.
    """
    spec = table.metadata.spec()
    schema = table.metadata.schema()
    if not spec.fields:
        raise ScopeFallback("not identity-partitioned (unpartitioned)")
    if any(not isinstance(f.transform, IdentityTransform) for f in spec.fields):
        raise ScopeFallback("not identity-partitioned (a non-identity transform)")
    top_level = {f.field_id: f for f in schema.fields}
    named: list[PartitionColumn] = []
    keyed: list[MetadataColumn] = []
    for field in spec.fields:
        source = top_level.get(field.source_id)
        if source is None:
            raise MetadataDiffUnsupported(
                f"partition field {field.name}: its source column is nested or missing"
            )
        try:
            spark_type = spark_type_of(source.field_type)
        except UnsupportedLiteral as exc:
            raise MetadataDiffUnsupported(f"partition column {source.name}: {exc}") from exc
        named.append(PartitionColumn((source.name,), str(spark_type)))
        keyed.append(MetadataColumn(field.field_id, field.name, spark_type))
    return named, keyed


def _count_files(
    table: Table, undersized_bytes: int
) -> tuple[Counter[tuple[Any, ...]], dict[tuple[Any, ...], dict[int, Any]]]:
    """Per partition key of the current snapshot: how many live data files are under
    ``undersized_bytes`` (keys with none count 0), and each key's values by field id."""
    undersized: Counter[tuple[Any, ...]] = Counter()
    values: dict[tuple[Any, ...], dict[int, Any]] = {}
    snapshot = table.metadata.current_snapshot()
    if snapshot is None:
        return undersized, values
    spec_id = table.metadata.default_spec_id
    for manifest in checked_manifests(snapshot, table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        if manifest.partition_spec_id != spec_id:
            raise MetadataDiffUnsupported(
                f"manifest {manifest.manifest_path} was written under partition spec "
                f"{manifest.partition_spec_id}, not the current {spec_id}"
            )
        live = read_live_entries(table.io, manifest, partitioned=True)
        for (_, key), found in live.values.items():
            values.setdefault(key, found)
        for identity in live.identities:
            content, key, size = identity[0], identity[3], identity[5]
            if content == DATA:
                undersized[key] += 1 if size < undersized_bytes else 0
    return undersized, values


async def scope_from_metadata(
    table: Table,
    engine: SparkEngine,
    *,
    undersized_bytes: int,
    min_files: int,
    max_partitions: int,
) -> PartitionScope:
    """The filter selecting the partitions with ``>= min_files`` live data files under
    ``undersized_bytes`` at ``table``'s current snapshot. ``total`` counts the partitions
    that hold data files.

    Raises:
        ScopeFallback | MetadataDiffUnsupported: see the module docstring.
        Exception: a manifest read's or the engine's error.
    """
    named, keyed = scope_columns(table)
    # A snapshot's manifests are immutable: read them off the event loop.
    undersized, values = await asyncio.to_thread(_count_files, table, int(undersized_bytes))
    selected = sorted((k for k, n in undersized.items() if n >= min_files), key=repr)
    if len(selected) > max_partitions:
        raise ScopeFallback(f"{len(selected)} partitions qualify (at most {max_partitions} scoped)")
    if not selected:
        return PartitionScope("false", 0, len(undersized))
    rows = [[values[key].get(c.field_id) for c in keyed] for key in selected]
    # A value without a canonical text here raises MetadataDiffUnsupported: the Spark path,
    # which reads the value another way, decides whether it can be written.
    texts = await canonical_texts(engine, keyed, rows)
    where = await partitions_where(engine, named, texts)
    if len(where) > MAX_STRING_LITERAL_LENGTH // 2:  # escaping can double it as an argument
        raise ScopeFallback(f"the partition filter is {len(where)} characters long")
    return PartitionScope(where, len(selected), len(undersized))
