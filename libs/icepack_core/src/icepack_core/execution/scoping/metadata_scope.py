"""The compaction's partition filter from the table's manifests, read in this process.

``scope_from_metadata`` answers which partitions hold at least ``min_files`` live data files
under ``undersized_bytes``, as a ``where`` filter, for every partition spec the live files were
written under. It reads the current snapshot's data manifests through the table's PyIceberg
``FileIO`` (``metadata_diff.read_live_entries``: each manifest with its own writer schema,
doubles read exactly), keys partitions by (spec id, partition tuple), and writes each selected
partition as one conjunction of its spec's field terms on the source columns
(``transform_predicates``: identity values, time ranges, Iceberg's ``bucket``/``truncate``
functions), every literal checked on the engine (``partition_filter.partitions_where``). For
identity partitions of the current spec this is the filter the Spark path
(``partition_filter.scope_partitions``) computes (``tests/execution/test_metadata_scope.py``).

Files of an older spec are scoped by their own spec's terms. The terms are on source columns,
so Iceberg projects them onto every spec: a partition's filter selects its own files and
possibly files of another spec whose partition overlaps it (an hour range also selects the
file of the day containing it written under an older ``day`` spec). That is a superset, never
fewer files; binpack's own thresholds then apply per file group.

Open partitions (``OpenRule``): a partition whose live data files include one added by a
writer's commit (any snapshot but a ``replace``) within the quiet period is still being
written. It is compacted only once its small files exceed the rule's bound: compacting it
every few minutes is undone by the writer's next commits. A closed partition qualifies at
``min_files``; once compacted it holds at most one small file per spec and is not selected
again until something writes to it. At most ``max_partitions`` partitions are selected per run,
those with the most small files first; the rest are counted as deferred.

Raises ``MetadataDiffUnsupported`` where this cannot be exact and the Spark path should decide
(a nested source column, a source type or a value without a canonical text here, an unreadable
manifest), and ``ScopeFallback`` where the answer is a whole-table rewrite whichever path
computes it (a qualifying partition of an unpartitioned spec, a ``void`` or unknown
transform, a value without an exact literal, a filter too long).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from pyiceberg.manifest import ManifestContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation

from icepack_core.errors import MetadataDiffUnsupported, ScopeFallback, UnsupportedLiteral
from icepack_core.execution.scoping.partition_filter import (
    PartitionColumn,
    PartitionScope,
    partitions_where,
)
from icepack_core.execution.scoping.transform_predicates import Transform, value_type
from icepack_core.execution.verification.metadata_diff import (
    MetadataColumn,
    canonical_texts,
    checked_manifests,
    read_live_entries,
)
from icepack_core.execution.verification.partition_text import spark_type_of
from icepack_core.spark.engine import SparkEngine
from icepack_core.spark.sql import MAX_STRING_LITERAL_LENGTH

DATA = 0  # a manifest entry's content: data file
MAX_LISTED = 20  # open partitions named in the scope note


@dataclass(frozen=True)
class OpenRule:
    """When a partition counts as still being written, and when it is compacted anyway.

    ``quiet_seconds``: a partition that received a writer's file within this long is open.
    ``max_small_files``: an open partition is compacted only above this many small files.
    """

    quiet_seconds: float = 600.0
    max_small_files: int = 100


@dataclass(frozen=True)
class PartitionActivity:
    """One partition (spec id, partition tuple) of the current snapshot: its values by field
    id, how many live data files it holds and how many are small, and when a writer last added
    one of them (the commit time of the newest non-``replace`` snapshot among the adders,
    None when every live file was written by a rewrite or its snapshot has expired)."""

    spec_id: int
    key: tuple[Any, ...]
    values: dict[int, Any]
    data_files: int
    small_files: int
    last_write_ms: int | None

    def is_open(self, rule: OpenRule, now_ms: int) -> bool:
        """Whether a writer added a file within the rule's quiet period (never when it is 0)."""
        return (
            rule.quiet_seconds > 0
            and self.last_write_ms is not None
            and now_ms - self.last_write_ms < rule.quiet_seconds * 1000
        )


@dataclass(frozen=True)
class Selection:
    """What one run compacts: ``selected`` (capped), open partitions skipped (below their
    bound), and how many qualifying partitions the cap deferred to a later run."""

    selected: list[PartitionActivity]
    open_skipped: list[PartitionActivity] = field(default_factory=list)
    deferred: int = 0


def _writes(table: Table) -> dict[int, int | None]:
    """Per snapshot id: its commit time when a writer's commit (not a ``replace``), else None."""
    return {
        s.snapshot_id: None
        if s.summary is not None and s.summary.operation == Operation.REPLACE
        else s.timestamp_ms
        for s in table.metadata.snapshots
    }


def partition_activity(table: Table, undersized_bytes: int) -> list[PartitionActivity]:
    """Every partition holding live data files at ``table``'s current snapshot, of any spec.
    Blocking (reads the manifests).

    Raises:
        MetadataDiffUnsupported | Exception: a manifest read's error.
    """
    counts: dict[tuple[int, tuple[Any, ...]], list[int]] = {}
    values: dict[tuple[int, tuple[Any, ...]], dict[int, Any]] = {}
    last: dict[tuple[int, tuple[Any, ...]], int | None] = {}
    snapshot = table.metadata.current_snapshot()
    if snapshot is None:
        return []
    writes = _writes(table)
    for manifest in checked_manifests(snapshot, table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        live = read_live_entries(table.io, manifest, partitioned=True)
        for key, found in live.values.items():
            values.setdefault(key, found)
        for identity in live.identities:
            content, path, key, size = identity[0], identity[1], identity[2:4], identity[5]
            if content != DATA:
                continue
            part = (int(key[0]), key[1])
            count = counts.setdefault(part, [0, 0])
            count[0] += 1
            count[1] += 1 if size < undersized_bytes else 0
            written = writes.get(live.added_by.get(path) or -1)
            previous = last.get(part)
            if written is not None and (previous is None or written > previous):
                last[part] = written
            else:
                last.setdefault(part, None)
    return [
        PartitionActivity(k[0], k[1], values.get(k, {}), n, small, last.get(k))
        for k, (n, small) in counts.items()
    ]


def choose(
    partitions: Sequence[PartitionActivity],
    *,
    min_files: int,
    max_partitions: int,
    rule: OpenRule | None,
    now_ms: int,
) -> Selection:
    """The partitions one run compacts (see the module docstring), most small files first;
    ``rule`` None (or a quiet period of 0): no partition is open."""
    qualifying: list[PartitionActivity] = []
    skipped: list[PartitionActivity] = []
    for p in partitions:
        if p.small_files < min_files:
            continue
        if rule is not None and p.is_open(rule, now_ms) and p.small_files <= rule.max_small_files:
            skipped.append(p)
        else:
            qualifying.append(p)
    qualifying.sort(key=lambda p: (-p.small_files, p.spec_id, repr(p.key)))
    return Selection(qualifying[:max_partitions], skipped, max(0, len(qualifying) - max_partitions))


def spec_columns(
    table: Table, spec_id: int, catalog: str | None
) -> tuple[list[PartitionColumn], list[MetadataColumn]]:
    """One spec's partition fields as the filter names them (source column, transform) and as
    the manifests key them (field id, value type), in the same order.

    Raises:
        ScopeFallback: the spec is unpartitioned, or has a void or unknown transform.
        MetadataDiffUnsupported: a nested source column, or a type without a canonical text.
    """
    spec = table.metadata.specs().get(spec_id)
    if spec is None or not spec.fields:
        raise ScopeFallback(f"files of partition spec {spec_id} qualify, which is unpartitioned")
    top_level = {f.field_id: f for f in table.metadata.schema().fields}
    named: list[PartitionColumn] = []
    keyed: list[MetadataColumn] = []
    for part in spec.fields:
        try:
            transform = Transform.parse(str(part.transform))
        except UnsupportedLiteral as exc:
            raise ScopeFallback(f"partition field {part.name}: {exc}") from exc
        source = top_level.get(part.source_id)
        if source is None:
            raise MetadataDiffUnsupported(
                f"partition field {part.name}: its source column is nested or missing"
            )
        try:
            source_type = spark_type_of(source.field_type)
            kind = value_type(transform, source_type)
        except UnsupportedLiteral as exc:
            raise MetadataDiffUnsupported(f"partition field {part.name}: {exc}") from exc
        named.append(
            PartitionColumn(
                (source.name,), str(source_type), str(part.transform), catalog, part.name
            )
        )
        keyed.append(MetadataColumn(part.field_id, part.name, kind))
    return named, keyed


def shared_fields(table: Table) -> tuple[str, ...]:
    """Names of the current spec's fields that every partition spec of ``table`` has: the same
    field id, source column and transform (Iceberg keeps a field's id when a spec evolves)."""
    specs = list(table.metadata.specs().values())
    current = table.metadata.spec()
    return tuple(
        f.name
        for f in current.fields
        if all(
            any(
                (g.field_id, g.source_id, str(g.transform))
                == (f.field_id, f.source_id, str(f.transform))
                for g in spec.fields
            )
            for spec in specs
        )
    )


def label(table: Table, partition: PartitionActivity) -> str:
    """``spec 1 {"ts_hour":493000}``: a partition as the scope note names it."""
    names = {f.field_id: f.name for f in table.metadata.specs()[partition.spec_id].fields}
    shown = {
        names.get(i, str(i)): v if isinstance(v, bool | int | str) or v is None else str(v)
        for i, v in partition.values.items()
    }
    return f"spec {partition.spec_id} {json.dumps(shown, ensure_ascii=False)}"


async def scope_from_metadata(
    table: Table,
    engine: SparkEngine,
    *,
    undersized_bytes: int,
    min_files: int,
    max_partitions: int,
    catalog: str | None = None,
    rule: OpenRule | None = None,
    now_ms: int | None = None,
) -> PartitionScope:
    """The filter selecting the partitions ``choose`` picks at ``table``'s current snapshot
    (``rule`` None: no partition is open). ``total`` counts the partitions that hold data
    files. ``catalog`` qualifies Iceberg's ``system`` functions.

    Raises:
        ScopeFallback | MetadataDiffUnsupported: see the module docstring.
        Exception: a manifest read's or the engine's error.
    """
    # A snapshot's manifests are immutable: read them off the event loop.
    partitions = await asyncio.to_thread(partition_activity, table, int(undersized_bytes))
    picked = choose(
        partitions,
        min_files=min_files,
        max_partitions=max_partitions,
        rule=rule,
        now_ms=now_ms or 0,
    )
    note = _note(table, picked)
    if not picked.selected:
        return PartitionScope("false", 0, len(partitions), **note)
    wheres = []
    for spec_id in sorted({p.spec_id for p in picked.selected}):
        named, keyed = spec_columns(table, spec_id, catalog)
        rows = [
            [p.values.get(c.field_id) for c in keyed]
            for p in picked.selected
            if p.spec_id == spec_id
        ]
        # A value without a canonical text here raises MetadataDiffUnsupported: the Spark
        # path, which reads the value another way, decides whether it can be written.
        texts = await canonical_texts(engine, keyed, rows)
        wheres.append(await partitions_where(engine, named, texts))
    where = " OR ".join(wheres)
    if len(where) > MAX_STRING_LITERAL_LENGTH // 2:  # escaping can double it as an argument
        raise ScopeFallback(f"the partition filter is {len(where)} characters long")
    keys = tuple((p.spec_id, p.key) for p in picked.selected)
    return PartitionScope(where, len(picked.selected), len(partitions), **note, keys=keys)


class _Extras(TypedDict):
    """``PartitionScope``'s counts beyond the selection (its keyword fields)."""

    deferred: int
    open_skipped: tuple[str, ...]
    open_skipped_count: int
    older_specs: int


def _note(table: Table, picked: Selection) -> _Extras:
    specs = {p.spec_id for p in picked.selected}
    current = table.metadata.default_spec_id
    return {
        "deferred": picked.deferred,
        "open_skipped": tuple(label(table, p) for p in picked.open_skipped[:MAX_LISTED]),
        "open_skipped_count": len(picked.open_skipped),
        "older_specs": len(specs - {current}),
    }
