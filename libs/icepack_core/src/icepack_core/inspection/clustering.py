"""How well a table's data files are clustered on a key: the overlap depth, from column bounds.

A data file's range on the key is the box of its manifest column bounds, one closed interval
``[lower, upper]`` per key column. Two files of one partition (spec id + partition tuple)
overlap when their boxes intersect in every key column. A file's **overlap depth** is the
number of files of its partition whose box intersects its own, itself included: 1 means no
other file of the partition can hold a row in its range, so a query filtering on the key opens
one file per partition; files written in random order have a depth close to the partition's
file count. The table's figure is the mean over its live data files; a partition's is the mean
over its files. A sort rewrite is predicted to leave depth 1 in every partition it rewrites, a
z-order of ``d`` columns into ``k`` files about ``k^(1-1/d)`` (``reachable_depth``: the boxes
of consecutive Z-curve ranges overlap); a partition is worth rewriting when its depth is above
the policy's ``max_overlap_ratio`` times that.

A missing bound (metrics mode ``none``, a file whose values are all NULL, a type Iceberg keeps
no bounds for) is unbounded on that side: a query cannot skip the file on that column either.
Iceberg truncates long string bounds, and a truncated bound is still a bound.

**Bounded memory.** The files are streamed one manifest at a time; at most ``capacity`` boxes
are kept (a seeded reservoir sample, Algorithm R, so the same manifests give the same figure)
plus one counter per partition. With at most ``capacity`` files the figure is exact. Beyond
it, a sampled file ``f`` of a partition with ``n`` files of which ``k >= 2`` were sampled
counts ``1 + c * (n - 1) / (k - 1)`` (``c``: the other sampled files it overlaps; unbiased for
a uniform sample); a partition with fewer than two sampled files takes the pooled share of
overlapping pairs over every sampled partition (0 when no pair was sampled).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFileContent, ManifestContent
from pyiceberg.table import Table
from pyiceberg.types import NestedField, PrimitiveType

from icepack_core.errors import ClusteringKeyInvalid

DEFAULT_CAPACITY = 4096  # boxes kept in memory (the exact figure up to this many files)
SEED = 30  # the reservoir's seed: a figure is reproducible for the same manifests

PartitionKey = tuple[int, tuple[Any, ...]]  # spec id, normalised partition tuple
# A bound made totally ordered with None: (0,) below everything, (2,) above, (1, v) between.
Bound = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class FileBox:
    """One live data file: its partition, its bounds per key column (None: unbounded) and
    its size."""

    partition: PartitionKey
    lower: tuple[Any, ...]
    upper: tuple[Any, ...]
    size: int = 0
    values: dict[int, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, slots=True)
class PartitionDepth:
    """One partition's files, bytes, small files and mean overlap depth; ``values`` are its
    partition values by partition field id (what the executor's scope filter is built from)."""

    spec_id: int
    key: tuple[Any, ...]
    values: dict[int, Any]
    files: int
    bytes: int
    small_files: int
    depth: float


class Clustering(BaseModel):
    """A table's clustering on a key, as inspection records it in ``TableStatus.clustering``.

    ``overlap_depth`` is None when the key could not be measured (``error`` says why: a column
    the table does not have, ``sort`` without a sort order). A partition is *unclustered* when
    its depth is above ``max_overlap_ratio`` times the depth a rewrite would leave it
    (``reachable_depth`` for its files after the rewrite at ``target_file_size_bytes``). The
    ``unclustered_*`` figures sum those partitions: files, bytes and file-weighted mean depth
    now; ``unclustered_files_after`` and ``unclustered_depth_after`` what the rewrite leaves;
    ``lookup_gain`` the files one lookup per partition on the key no longer opens.
    """

    model_config = ConfigDict(extra="forbid")

    strategy: Literal["sort", "zorder"]
    columns: list[str]
    max_overlap_ratio: float
    target_file_size_bytes: int = 0
    overlap_depth: float | None = None
    files: int = 0
    partitions: int = 0
    sampled_files: int = 0
    unclustered_partitions: int = 0
    unclustered_files: int = 0
    unclustered_bytes: int = 0
    unclustered_depth: float = 0.0
    unclustered_files_after: int = 0
    unclustered_depth_after: float = 0.0
    lookup_gain: int = 0
    error: str | None = None


def reachable_depth(strategy: str, dims: int, files: int) -> float:
    """The overlap depth a rewrite leaves a partition written as ``files`` files: a sort
    separates the files on its leading column (1); a z-order of ``dims`` columns cuts the
    Z-curve into ``files`` ranges whose boxes overlap about ``files^(1 - 1/dims)`` of each
    other (1 for one column; measured ~5.5 for 28 files on two columns, against 5.3)."""
    if strategy != "zorder" or dims <= 1 or files <= 1:
        return 1.0
    reach: float = math.pow(files, 1.0 - 1.0 / dims)
    return max(1.0, reach)


def files_after(size: int, target: int) -> int:
    """How many files a rewrite writes ``size`` bytes into (at least one)."""
    return max(1, math.ceil(max(0, size) / max(1, target)))


def _low(value: Any) -> Bound:
    return (0,) if value is None else (1, value)


def _high(value: Any) -> Bound:
    return (2,) if value is None else (1, value)


def _overlaps(a: FileBox, b: FileBox) -> bool:
    return all(
        _low(a.lower[d]) <= _high(b.upper[d]) and _low(b.lower[d]) <= _high(a.upper[d])
        for d in range(len(a.lower))
    )


def overlap_counts(boxes: Sequence[FileBox]) -> list[int]:
    """For each box, how many *other* boxes of the sequence it overlaps (all in one partition).

    A sweep on the first key column: after sorting by its lower bound, a box can only overlap
    the following boxes whose lower bound is at most its upper bound; the other columns are
    checked for those pairs only.
    """
    if not boxes:
        return []
    if not boxes[0].lower:  # an empty key: every file overlaps every other
        return [len(boxes) - 1] * len(boxes)
    order = sorted(range(len(boxes)), key=lambda i: _low(boxes[i].lower[0]))
    counts = [0] * len(boxes)
    for pos, i in enumerate(order):
        top = _high(boxes[i].upper[0])
        for j in order[pos + 1 :]:
            if _low(boxes[j].lower[0]) > top:
                break
            if _overlaps(boxes[i], boxes[j]):
                counts[i] += 1
                counts[j] += 1
    return counts


@dataclass
class _Partition:
    files: int = 0
    bytes: int = 0
    small: int = 0
    values: dict[int, Any] = field(default_factory=dict)


def partition_depths(
    files: Iterable[FileBox], *, capacity: int = DEFAULT_CAPACITY, small_bytes: int = 0
) -> tuple[list[PartitionDepth], int]:
    """Every partition's mean overlap depth, in bounded memory (module doc), and how many
    files were sampled. ``small_bytes``: files under this size count as small."""
    capacity = max(1, capacity)
    rng = random.Random(SEED)
    sample: list[FileBox] = []
    parts: dict[PartitionKey, _Partition] = {}
    for seen, box in enumerate(files, start=1):
        part = parts.get(box.partition)
        if part is None:
            part = parts[box.partition] = _Partition(values=dict(box.values))
        part.files += 1
        part.bytes += box.size
        part.small += 1 if box.size < small_bytes else 0
        if len(sample) < capacity:
            sample.append(box)
        else:
            slot = rng.randrange(seen)
            if slot < capacity:
                sample[slot] = box
    groups: dict[PartitionKey, list[FileBox]] = {}
    for box in sample:
        groups.setdefault(box.partition, []).append(box)
    counted = {key: overlap_counts(group) for key, group in groups.items()}
    pairs = sum(len(c) * (len(c) - 1) // 2 for c in counted.values())
    overlapping = sum(sum(c) // 2 for c in counted.values())
    pooled = overlapping / pairs if pairs else 0.0
    result = []
    for key, part in parts.items():
        counts = counted.get(key, [])
        result.append(
            PartitionDepth(
                key[0],
                key[1],
                part.values,
                part.files,
                part.bytes,
                part.small,
                _depth(part.files, counts, pooled),
            )
        )
    return result, len(sample)


def _depth(files: int, counts: Sequence[int], pooled: float) -> float:
    """A partition's mean depth from its sampled files' overlap counts (module doc)."""
    k = len(counts)
    if files <= 1:
        return 1.0
    if k == files:
        return 1.0 + sum(counts) / k
    if k >= 2:
        return 1.0 + (sum(counts) / k) * (files - 1) / (k - 1)
    return 1.0 + (files - 1) * pooled


def unclustered(
    p: PartitionDepth, strategy: str, dims: int, ratio: float, target: int
) -> tuple[bool, int, float]:
    """Whether partition ``p`` is unclustered (its depth above ``ratio`` times what a rewrite
    reaches), with the files and the depth that rewrite is predicted to leave it.

    The bound also allows what the partition's *current* file count reaches: Iceberg's sort
    may write more files than bytes / target (bench.clustering: 4.4 measured where 3 files
    would reach 1.7), and a partition it z-ordered into ``k`` files must not look unclustered
    because the guess of ``k`` was lower (that would rewrite it again: churn)."""
    written = min(p.files, files_after(p.bytes, target)) if p.files else 0
    reach = reachable_depth(strategy, dims, written)
    bound = ratio * max(reach, reachable_depth(strategy, dims, p.files))
    return p.depth > bound, written, reach


def summarise(
    strategy: Literal["sort", "zorder"],
    columns: Sequence[str],
    depths: Sequence[PartitionDepth],
    sampled: int,
    ratio: float,
    target: int,
) -> Clustering:
    """The table's ``Clustering`` from its partitions' depths."""
    files = sum(p.files for p in depths)
    loose = []
    for p in depths:
        found, written, reach = unclustered(p, strategy, len(columns), ratio, target)
        if found:
            loose.append((p, written, reach))
    loose_files = sum(p.files for p, _, _ in loose)
    written_files = sum(w for _, w, _ in loose)
    return Clustering(
        strategy=strategy,
        columns=list(columns),
        max_overlap_ratio=ratio,
        target_file_size_bytes=target,
        overlap_depth=round(sum(p.depth * p.files for p in depths) / files, 4) if files else 1.0,
        files=files,
        partitions=len(depths),
        sampled_files=sampled,
        unclustered_partitions=len(loose),
        unclustered_files=loose_files,
        unclustered_bytes=sum(p.bytes for p, _, _ in loose),
        unclustered_depth=round(sum(p.depth * p.files for p, _, _ in loose) / loose_files, 4)
        if loose_files
        else 0.0,
        unclustered_files_after=written_files,
        unclustered_depth_after=round(sum(w * r for _, w, r in loose) / written_files, 4)
        if written_files
        else 0.0,
        lookup_gain=max(0, round(sum(p.depth - r for p, _, r in loose))),
    )


def _norm(value: Any) -> Any:
    """A hashable partition key part (a float by its bits, so -0.0 and 0.0 stay apart)."""
    if isinstance(value, float):
        return ("nan",) if math.isnan(value) else ("float", value.hex())
    return value


def key_fields(table: Table, columns: Sequence[str], what: str) -> list[NestedField]:
    """The schema fields of ``columns`` (a top-level or dotted nested name, a primitive).

    Raises:
        ClusteringKeyInvalid: a name that is not a primitive column of the table; names it.
    """
    schema = table.schema()
    found = []
    for name in columns:
        column = schema.find_field(name) if _known(schema, name) else None
        if column is None or not isinstance(column.field_type, PrimitiveType):
            known = ", ".join(f.name for f in schema.fields[:50])
            raise ClusteringKeyInvalid(
                f"{what} column {name!r} is not a primitive column of the table "
                f"(its columns: {known})"
            )
        found.append(column)
    return found


def _known(schema: Any, name: str) -> bool:
    try:
        schema.find_field(name)
    except ValueError:
        return False
    return True


def sort_order_columns(table: Table) -> list[str]:
    """The source columns of the table's default sort order, in order.

    Raises:
        ClusteringKeyInvalid: the table has no sort order.
    """
    order = table.sort_order()
    if not order.fields:
        raise ClusteringKeyInvalid(
            "strategy sort: the table has no sort order (set one with ALTER TABLE ... WRITE "
            "ORDERED BY, or use strategy zorder with zorder_columns)"
        )
    schema = table.schema()
    return [schema.find_column_name(f.source_id) or str(f.source_id) for f in order.fields]


def file_boxes(table: Table, columns: Sequence[str], what: str = "key") -> Iterator[FileBox]:
    """The live data files of ``table``'s current snapshot as boxes on ``columns``, one data
    manifest in memory at a time. Blocking (reads the manifests).

    Raises:
        ClusteringKeyInvalid: see ``key_fields``.
        Exception: a manifest read's error.
    """
    fields = key_fields(table, columns, what)
    snapshot = table.current_snapshot()
    if snapshot is None:
        return
    specs = table.specs()
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        spec_fields = [f.field_id for f in specs[manifest.partition_spec_id].fields]
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            data = entry.data_file
            if data.content != DataFileContent.DATA:
                continue
            raw = [data.partition[i] for i in range(len(spec_fields))]
            lower, upper = data.lower_bounds or {}, data.upper_bounds or {}
            yield FileBox(
                (manifest.partition_spec_id, tuple(_norm(v) for v in raw)),
                tuple(_decode(f, lower.get(f.field_id)) for f in fields),
                tuple(_decode(f, upper.get(f.field_id)) for f in fields),
                int(data.file_size_in_bytes),
                dict(zip(spec_fields, raw, strict=True)),
            )


def _decode(column: NestedField, raw: bytes | None) -> Any:
    if raw is None or not isinstance(column.field_type, PrimitiveType):
        return None
    try:
        value = from_bytes(column.field_type, raw)
    except Exception:  # an undecodable bound bounds nothing
        return None
    return None if isinstance(value, float) and math.isnan(value) else value


def measure(
    table: Table,
    strategy: Literal["sort", "zorder"],
    zorder_columns: Sequence[str],
    ratio: float,
    target: int,
    *,
    capacity: int = DEFAULT_CAPACITY,
) -> Clustering:
    """The table's clustering on its key: ``zorder_columns`` for ``zorder``, the table's sort
    order for ``sort``; ``target``: the rewrite's target file size. Blocking. A key that cannot
    be used is recorded as ``error`` (naming the column), never raised.

    Raises:
        Exception: a manifest read's error.
    """
    try:
        columns = list(zorder_columns) if strategy == "zorder" else sort_order_columns(table)
        depths, sampled = partition_depths(file_boxes(table, columns, strategy), capacity=capacity)
    except ClusteringKeyInvalid as exc:
        named = list(zorder_columns) if strategy == "zorder" else []
        return Clustering(
            strategy=strategy,
            columns=named,
            max_overlap_ratio=ratio,
            target_file_size_bytes=target,
            error=str(exc),
        )
    return summarise(strategy, columns, depths, sampled, ratio, target)
