"""A sort or z-order rewrite's partition filter, and its overlap depth before and after.

A clustering rewrite (``rewrite_data_files`` with strategy ``sort`` or ``zorder`` and the
planner's ``max_overlap_ratio``) is scoped like bin-packing, from the table's current manifests
read in this process: a partition qualifies when its files' mean overlap depth on the key
exceeds ``max_overlap_ratio`` (``inspection.clustering``) or, as for binpack, it holds at least
``min-input-files`` files under 75 % of the target size. At most ``max_partitions`` partitions
per run, the deepest first (the rest are ``partitions_deferred``). Each selected partition
becomes the same conjunction of its spec's terms as binpack's scope
(``transform_predicates`` through ``partition_filter.partitions_where``, literals checked on
the engine). When a partition is selected for its depth the call also gets ``rewrite-all``:
Iceberg's sort strategy otherwise picks files by size only, and well-sized files whose ranges
overlap would stay as they are. An unpartitioned table is one partition (no filter).

The key is checked against the table's schema before anything runs: a column the table does
not have (or ``sort`` on a table without a sort order) fails the action with
``ClusteringKeyInvalid`` naming it. A scope that cannot be computed exactly (a float partition
value, which PyIceberg's manifest reader rounds; a void transform; a filter too long) falls back
to the whole table without ``rewrite-all`` (``scope_reason`` says why), never failing the job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypedDict

from pyiceberg.table import Table

from icepack_core.errors import (
    ClusteringKeyInvalid,
    MetadataDiffUnsupported,
    ScopeFallback,
    brief,
)
from icepack_core.execution.scoping.metadata_scope import spec_columns
from icepack_core.execution.scoping.partition_filter import partitions_where
from icepack_core.execution.verification.metadata_diff import canonical_texts
from icepack_core.inspection.clustering import (
    Clustering,
    PartitionDepth,
    file_boxes,
    key_fields,
    partition_depths,
    sort_order_columns,
    summarise,
    unclustered,
)
from icepack_core.intents import RewriteDataFilesParams
from icepack_core.spark.engine import SparkEngine
from icepack_core.spark.sql import MAX_STRING_LITERAL_LENGTH, ProcedureValue, quote_identifier


class ScopeNote(TypedDict, total=False):
    """How a rewrite was scoped, as its output records it (a clustering run here, a binpack
    over partitions in ``binpack_scope``): ``scope`` ``partitions`` or
    ``table`` (with ``scope_reason`` when it fell back), where the counts came from
    (``scope_source``, ``scope_source_fallback`` when metadata could not decide), and the
    partition counts."""

    scope: str
    scope_source: str
    scope_source_fallback: str
    scope_reason: str
    partitions_selected: int
    partitions_total: int
    partitions_unclustered: int
    partitions_deferred: int
    open_partitions_skipped: list[str]
    open_partitions_skipped_count: int
    older_specs_scoped: int


class ClusteringEvidence(TypedDict, total=False):
    """A sort or z-order rewrite's ``output["clustering"]``: the overlap depth before and after
    (``after`` None and ``error`` set when the table could not be measured after)."""

    strategy: str
    max_overlap_ratio: float | None
    before: float | None
    after: float | None
    error: str
    columns: list[str]
    files_after: int
    partitions_unclustered_after: int


@dataclass(frozen=True)
class ClusteringScope:
    """What one clustering run rewrites: ``where`` (None: the whole table), whether it needs
    ``rewrite-all``, the scope note for the action's output, and the table's clustering
    before the call (None when the scope fell back)."""

    where: str | None
    rewrite_all: bool
    note: ScopeNote = field(default_factory=lambda: ScopeNote())
    before: Clustering | None = None


def strategy_args(params: RewriteDataFilesParams) -> dict[str, ProcedureValue]:
    """``strategy`` (and for z-order ``sort_order``) of a ``rewrite_data_files`` call: zorder
    is Iceberg's sort strategy with ``sort_order => 'zorder(`a`,`b`)'``, each column quoted by
    the one quoting function (the whole text then travels as an escaped string literal)."""
    if params.strategy != "zorder":
        return {"strategy": params.strategy}
    columns = ",".join(quote_identifier(c) for c in params.zorder_columns)
    return {"strategy": "sort", "sort_order": f"zorder({columns})"}


def key_columns(table: Table, params: RewriteDataFilesParams) -> list[str]:
    """The rewrite's key, checked against ``table``'s schema.

    Raises:
        ClusteringKeyInvalid: a column the table does not have, or ``sort`` without a sort
            order; the message names it.
    """
    if params.strategy == "zorder":
        key_fields(table, params.zorder_columns, "zorder")
        return list(params.zorder_columns)
    columns = sort_order_columns(table)
    key_fields(table, columns, "sort order")
    return columns


def _strategy(params: RewriteDataFilesParams) -> Literal["sort", "zorder"]:
    return "zorder" if params.strategy == "zorder" else "sort"


def measure_now(table: Table, params: RewriteDataFilesParams, target: int) -> Clustering:
    """The table's clustering on the rewrite's key (blocking; raises like ``key_columns``)."""
    columns = key_columns(table, params)
    depths, sampled = partition_depths(file_boxes(table, columns))
    ratio = params.max_overlap_ratio or 1.0
    return summarise(_strategy(params), columns, depths, sampled, ratio, target)


def _choose(
    depths: Sequence[PartitionDepth],
    loose: Callable[[PartitionDepth], bool],
    min_files: int,
    max_partitions: int,
) -> tuple[list[PartitionDepth], int]:
    qualifying = [p for p in depths if loose(p) or p.small_files >= min_files]
    qualifying.sort(key=lambda p: (-p.depth, -p.small_files, p.spec_id, repr(p.key)))
    return qualifying[:max_partitions], max(0, len(qualifying) - max_partitions)


async def clustering_scope(
    table: Table,
    engine: SparkEngine,
    params: RewriteDataFilesParams,
    *,
    target_bytes: int,
    min_files: int,
    catalog: str,
) -> ClusteringScope:
    """The filter and note of one clustering run (module doc).

    Raises:
        ClusteringKeyInvalid: the key does not fit the table (nothing has run).
        Exception: a manifest read's error (the caller widens to the whole table).
    """
    columns = key_columns(table, params)
    undersized = int(target_bytes * 0.75)
    depths, sampled = await asyncio.to_thread(
        lambda: partition_depths(file_boxes(table, columns), small_bytes=undersized)
    )
    ratio = params.max_overlap_ratio or 1.0
    strategy = _strategy(params)
    before = summarise(strategy, columns, depths, sampled, ratio, target_bytes)

    def loose(p: PartitionDepth) -> bool:
        return unclustered(p, strategy, len(columns), ratio, target_bytes)[0]

    chosen, deferred = _choose(depths, loose, min_files, params.max_partitions)
    rewrite_all = any(loose(p) for p in chosen)
    note: ScopeNote = {
        "scope": "partitions",
        "scope_source": "metadata",
        "partitions_selected": len(chosen),
        "partitions_total": len(depths),
        "partitions_unclustered": sum(1 for p in chosen if loose(p)),
    }
    if deferred:
        note["partitions_deferred"] = deferred
    return await _scoped(
        table, engine, chosen, catalog, ClusteringScope(None, rewrite_all, note, before)
    )


async def _scoped(
    table: Table,
    engine: SparkEngine,
    chosen: Sequence[PartitionDepth],
    catalog: str,
    planned: ClusteringScope,
) -> ClusteringScope:
    """``planned`` with the filter of the ``chosen`` partitions (``false`` for none, the whole
    table for an unpartitioned one); the whole table, without ``rewrite-all``, when the filter
    cannot be built (the note says why)."""
    note, before = planned.note, planned.before
    partitioned = any(s.fields for s in table.metadata.specs().values())
    try:
        if not chosen:
            where: str | None = "false"
        elif not partitioned:
            where = None
        else:
            where = await _where(table, engine, chosen, catalog)
    except (ScopeFallback, MetadataDiffUnsupported) as exc:
        reason = exc.reason if isinstance(exc, ScopeFallback) else str(exc)
        note = {"scope": "table", "scope_reason": reason, "scope_source": "metadata"}
        return ClusteringScope(None, False, note, before)
    except Exception as exc:  # scoping widens, it never fails the job
        note = {"scope": "table", "scope_reason": f"partition scoping failed: {brief(exc)}"}
        return ClusteringScope(None, False, note, before)
    if where is None:
        note["scope"] = "table"
    return ClusteringScope(where, planned.rewrite_all, note, before)


async def _where(
    table: Table, engine: SparkEngine, chosen: Sequence[PartitionDepth], catalog: str
) -> str:
    wheres = []
    for spec_id in sorted({p.spec_id for p in chosen}):
        named, keyed = spec_columns(table, spec_id, catalog)
        rows = [[p.values.get(c.field_id) for c in keyed] for p in chosen if p.spec_id == spec_id]
        if any(isinstance(v, float) for row in rows for v in row):
            # PyIceberg's manifest reader rounds doubles to float32 (inspection.exact_doubles).
            raise ScopeFallback("a float partition value cannot be read exactly here")
        texts = await canonical_texts(engine, keyed, rows)
        wheres.append(await partitions_where(engine, named, texts))
    where = " OR ".join(wheres)
    if len(where) > MAX_STRING_LITERAL_LENGTH // 2:  # escaping can double it as an argument
        raise ScopeFallback(f"the partition filter is {len(where)} characters long")
    return where


async def clustering_run(
    table: Table | None,
    engine: SparkEngine,
    params: RewriteDataFilesParams,
    args: dict[str, ProcedureValue],
    *,
    catalog: str,
    target_bytes: int,
) -> ClusteringScope | None:
    """A sort or z-order rewrite's scope (``clustering_scope``), put into the procedure's
    ``args`` (``where``, ``rewrite-all``); None when the rewrite is binpack, the table could not
    be loaded (the Spark path decides), ``args`` already has a filter, or the planner gave no
    ``max_overlap_ratio``. The key is checked whenever the table is loaded.

    Raises:
        ClusteringKeyInvalid: the key does not fit the table (nothing has run).
    """
    if params.strategy == "binpack" or table is None:
        return None
    key_columns(table, params)
    if params.max_overlap_ratio is None or "where" in args:
        return None
    try:
        found = await clustering_scope(
            table,
            engine,
            params,
            target_bytes=target_bytes,
            min_files=int(params.options.get("min-input-files", "5")),
            catalog=catalog,
        )
    except ClusteringKeyInvalid:
        raise
    except Exception as exc:  # a manifest read failed: the whole table, by size only
        failed: ScopeNote = {
            "scope": "table",
            "scope_reason": f"partition scoping failed: {brief(exc)}",
        }
        return ClusteringScope(None, False, failed)
    if found.where is not None:
        args["where"] = found.where
    if found.rewrite_all:
        args["options"] = {**params.options, "rewrite-all": "true"}
    return found


async def clustering_after(
    load: Callable[[], Awaitable[Table | None]],
    params: RewriteDataFilesParams,
    before: Clustering | None,
    target: int,
) -> ClusteringEvidence:
    """The overlap depth before and after the rewrite, for its output (``clustering``):
    ``{"strategy", "columns", "before", "after", "max_overlap_ratio", ...}``, or with
    ``error``. Never raises (except cancellation): it is evidence."""
    found: ClusteringEvidence = {
        "strategy": params.strategy,
        "max_overlap_ratio": params.max_overlap_ratio,
        "before": None if before is None else before.overlap_depth,
    }
    try:
        table = await load()
        if table is None:
            raise ValueError("the table could not be loaded")
        after = await asyncio.to_thread(measure_now, table, params, target)
    except Exception as exc:
        return {**found, "after": None, "error": brief(exc)}
    return {
        **found,
        "columns": after.columns,
        "after": after.overlap_depth,
        "files_after": after.files,
        "partitions_unclustered_after": after.unclustered_partitions,
    }
