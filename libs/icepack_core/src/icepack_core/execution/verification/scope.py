"""What a rewrite touched, proven from metadata, and a fingerprint of only that.

A verification compares the live contents of two snapshots ``before`` and ``after`` (a
``replace`` snapshot's parent and the snapshot itself, or the first parent and the last child
of a chain of replaces). Iceberg files are immutable, and the rows a file contributes at a
snapshot depend only on

- the file itself (its path; size, record count and delete-file offsets are compared too),
- its data sequence number (which delete files apply to it), and
- the delete files of the same spec id and partition tuple (the spec: position deletes and
  equality deletes apply within one partition of one spec), plus deletion vectors and
  file-scoped position deletes, which name their data file (``referenced_data_file``), and
  equality deletes of an unpartitioned spec, which apply to every partition.

So ``diff_files`` reads the live manifest entries of both snapshots (metadata table ``entries``
at ``VERSION AS OF``, ``status`` EXISTING or ADDED) in one query and compares them as
multisets (``metadata_diff`` computes the same from the manifests in the executor's process;
this query is its fallback and oracle). A *partition* is a key (spec id, partition tuple). A
partition none of whose live entries differ is proven unchanged. Every other partition is
*touched*, and so is the partition of any data file that a changed delete file names. A
changed delete file whose partition tuple is empty (an unpartitioned spec, or an all-NULL
tuple, which cannot be told apart from one) makes the diff ask for a whole-table comparison.

``partition_fingerprints`` then fingerprints only the touched partitions of both snapshots in
one Spark job (``UNION ALL`` of the two snapshot reads, each a temporary view with Iceberg's
``snapshot-id`` and ``split-size`` read options, see ``snapshot_view``). The filter is built
from the identity partition columns (``partition_filter.partitions_where``). It is used only after
``EXPLAIN`` shows that Spark evaluates it on partition values alone. Iceberg then leaves no
post-scan ``Filter`` (``SparkScanBuilder`` does that only when, for *every* partition spec of the
table, the filter's strict and inclusive projections agree, i.e. it selects whole partitions).
So each side reads every row of every file whose partition matches, with deletes applied:
whole touched partitions (a superset when another spec's files share the values). No row is
dropped by value, so a row written into the wrong partition is still counted. Otherwise
``ScopeUnsound`` says why, and the caller compares the whole table.

Residual assumption, stated because it is the one place where this is weaker than a whole-table
scan: Iceberg also skips files by their column bounds, so a file whose own bounds exclude its
partition value (never written by Iceberg's writers, which derive both from the rows) would be
skipped on the side that holds it.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from icepack_core.errors import ScopeFallback
from icepack_core.execution.scoping.partition_filter import (
    PartitionColumn,
    partitions_where,
    value_types,
)
from icepack_core.execution.verification.file_fingerprint import TouchedFiles
from icepack_core.execution.verification.fingerprint import (
    Fingerprint,
    SparkType,
    as_int,
    checksum_expression,
)
from icepack_core.spark.engine import Rows, SparkEngine
from icepack_core.spark.literals import SparkType as LiteralType
from icepack_core.spark.literals import canonical_text_expr
from icepack_core.spark.sql import quote_identifier, sql_string_literal

# Split size of the verification scans (Iceberg's default ``read.split.target-size``).
VERIFY_SPLIT_SIZE = 128 * 1024 * 1024
# More touched partitions than this are compared table-wide: the filter would be long to plan.
MAX_FINGERPRINTED_PARTITIONS = 1000
# A physical-plan line that is a Filter operator (``+- Filter (...)``), not Iceberg's pushed
# ``[filters=...]`` inside the BatchScan line.
# Why a changed delete file with an empty partition tuple asks for a whole-table comparison.
UNSOUND_GLOBAL_DELETES = (
    "delete files changed in a partition with an empty tuple (an unpartitioned "
    "spec's deletes apply to every partition)"
)
_FILTER_NODE = re.compile(r"^[\s:|+\-*]*(?:\(\d+\)\s*)?Filter\b", re.MULTILINE)


class ScopeUnsound(ScopeFallback):
    """A partition-scoped comparison would not be sound or cheap; ``reason`` says why."""


@dataclass(frozen=True)
class Partition:
    """One (spec id, partition tuple) key: ``label`` is the tuple as JSON (for evidence),
    ``texts`` the canonical text of each identity column's value (None for NULL)."""

    spec_id: int
    label: str
    texts: tuple[str | None, ...]


@dataclass(frozen=True)
class FileDiff:
    """The live entries of two snapshots compared per partition."""

    partitions: int  # distinct keys live at either snapshot
    touched: tuple[Partition, ...]
    unsound: str | None  # why only a whole-table comparison is sound, else None
    # The touched partitions' live files, when the diff read them (``metadata_diff``).
    files: TouchedFiles | None = None

    @property
    def proven(self) -> int:
        return self.partitions - len(self.touched)


@dataclass(frozen=True)
class TableLayout:
    """What ``DESCRIBE TABLE EXTENDED`` says about partitioning: ``columns`` the identity
    partition columns (None: a non-identity transform; ``[]``: unpartitioned), or every field
    of the current spec with its transform when the verifier read the spec from the table's
    metadata (``RewriteVerifier.layout``) or parsed from ``DESCRIBE``'s ``# Partitioning``
    (``transform_columns``), ``partitioned`` whether the ``partition`` tuple has any field in
    any spec (``_partition`` is not ``struct<>``), ``shared`` (metadata only) the fields every
    spec shares when the table has several specs."""

    columns: list[PartitionColumn] | None
    partitioned: bool
    # With more than one partition spec (read from the metadata): the names of the columns'
    # fields that every spec of the table has (same field id, source and transform). Only
    # they can select whole partitions of every spec; the scoped scan filters on them alone.
    shared: tuple[str, ...] | None = None


def layout_from_describe(
    rows: Sequence[Mapping[str, Any]], columns: list[PartitionColumn] | None
) -> TableLayout:
    """``columns`` as parsed by ``partition_filter.identity_columns`` from the same rows."""
    partition_type = next(
        (
            str(r.get("data_type") or "").strip()
            for r in rows
            if str(r.get("col_name") or "").strip() == "_partition"
        ),
        None,
    )
    # Without the metadata column listed, assume a tuple exists; the query says otherwise.
    partitioned = partition_type is None or partition_type.replace(" ", "") != "struct<>"
    return TableLayout(columns, partitioned)


def _live_entries(
    entries_table: str,
    snapshot_id: int,
    side: int,
    layout: TableLayout,
    types: Sequence[LiteralType],
) -> str:
    """One snapshot's live entries, one row each, with everything that makes a file's rows."""
    partition = f"data_file.{quote_identifier('partition')}"
    texts = [
        f"{canonical_text_expr(t, f'{partition}.{quote_identifier(c.field_name)}')} AS c{i}"
        for i, (c, t) in enumerate(zip(layout.columns or [], types, strict=True))
    ]
    key = f"to_json({partition})" if layout.partitioned else "'{}'"
    return (
        f"SELECT {side} AS v, data_file.content AS content, data_file.file_path AS path, "
        f"data_file.spec_id AS spec, {key} AS pkey, "
        + "".join(f"{t}, " for t in texts)
        + "data_file.record_count AS records, data_file.file_size_in_bytes AS bytes, "
        "sequence_number AS seq, data_file.referenced_data_file AS ref, "
        "data_file.content_offset AS off, data_file.content_size_in_bytes AS len, "
        "to_json(data_file.equality_ids) AS eq "
        f"FROM {entries_table} VERSION AS OF {int(snapshot_id)} WHERE status < 2"
    )


def _types(columns: Sequence[PartitionColumn]) -> list[LiteralType]:
    """Each partition field's value type (its source type for identity fields)."""
    try:
        return value_types(columns)
    except ScopeFallback as exc:
        raise ScopeUnsound(f"partition column type: {exc.reason}") from exc


async def diff_files(
    engine: SparkEngine, entries_table: str, before: int, after: int, layout: TableLayout
) -> FileDiff:
    """Compare the live data and delete files of ``before`` and ``after`` per partition.

    One query over the ``entries`` metadata table at both snapshots; it reads manifests only.

    Raises:
        ScopeUnsound: a partition column type has no canonical text.
        Exception: the engine's error (e.g. a metadata table without a column this needs).
    """
    types = _types(layout.columns or [])
    keys = ", ".join(["spec", "pkey", *[f"c{i}" for i in range(len(types))]])
    # One pass over the manifests of each snapshot (a CTE referenced twice would be read twice):
    # 1. per entry identity, the multiset difference (``net`` <> 0: it changed);
    # 2. per file path (a data file's own, a delete's referenced one), whether a changed delete
    #    names it: that data file's partition is touched too;
    # 3. per partition, touched or not; 4. the touched ones, plus one row for the totals.
    rows = await engine.sql(
        f"WITH e AS ({_live_entries(entries_table, before, 0, layout, types)} UNION ALL "
        f"{_live_entries(entries_table, after, 1, layout, types)}), "
        f"entries AS (SELECT content, path, ref, {keys}, "
        "sum(CASE WHEN v = 0 THEN 1 ELSE -1 END) AS net FROM e "
        f"GROUP BY content, path, {keys}, records, bytes, seq, ref, off, len, eq), "
        "linked AS (SELECT *, max(CASE WHEN content > 0 AND net <> 0 THEN 1 ELSE 0 END) OVER "
        "(PARTITION BY CASE WHEN content = 0 THEN path ELSE ref END) AS named FROM entries), "
        f"parts AS (SELECT {keys}, max(CASE WHEN net <> 0 OR (content = 0 AND named = 1) "
        "THEN 1 ELSE 0 END) AS touched, max(CASE WHEN content > 0 AND net <> 0 AND pkey = '{}' "
        f"THEN 1 ELSE 0 END) AS global_deletes FROM linked GROUP BY {keys}), "
        "ranked AS (SELECT *, count(*) OVER () AS partitions, "
        "row_number() OVER (ORDER BY touched DESC) AS rn FROM parts) "
        "SELECT * FROM ranked WHERE touched = 1 OR rn = 1"
    )
    partitions = as_int(rows[0]["partitions"]) if rows else 0
    touched = tuple(
        Partition(
            as_int(r["spec"]),
            str(r["pkey"]),
            tuple(None if r[f"c{i}"] is None else str(r[f"c{i}"]) for i in range(len(types))),
        )
        for r in rows
        if as_int(r["touched"])
    )
    unsound = None
    if any(r.get("global_deletes") and as_int(r["global_deletes"]) for r in rows):
        unsound = UNSOUND_GLOBAL_DELETES
    return FileDiff(partitions, touched, unsound)


def shared_scope(
    layout: TableLayout, touched: Sequence[Partition]
) -> tuple[list[PartitionColumn], list[tuple[str | None, ...]]]:
    """The columns the scoped scan filters on and each touched partition's values of them
    (distinct): every column of a one-spec table; with several specs only the fields all
    specs share (``TableLayout.shared``), so that a partition of any spec becomes a term every
    spec answers from partition values (a superset of it: the other fields are dropped).

    Raises:
        ScopeUnsound: several specs and no field all of them share.
    """
    columns = layout.columns or []
    if layout.shared is None:
        return columns, list(dict.fromkeys(p.texts for p in touched))
    keep = [i for i, c in enumerate(columns) if c.field_name in layout.shared]
    if not keep:
        raise ScopeUnsound(
            "the table's partition specs share no partition field (a filter on one spec's "
            "fields cannot select whole partitions of the others)"
        )
    texts = [tuple(p.texts[i] for i in keep) for p in touched]
    return [columns[i] for i in keep], list(dict.fromkeys(texts))


def snapshot_view(view: str, qualified: str, snapshot_id: int) -> str:
    """``CREATE TEMPORARY VIEW`` of the table at one snapshot, read with a fixed split size.

    Why a view and not ``VERSION AS OF``: only Iceberg read options can set the split size,
    and Spark 3.5 SQL has no per-query options. Without it Iceberg's adaptive split size packs
    a few small files per task (measured: 200 tasks for 800 files of 8 KB), and the verifier
    reads exactly the many small files a compaction replaced; 128 MiB splits (Iceberg's
    default target) make 25 tasks there and the scan 2.3x faster. The view is the same
    Iceberg scan (time travel by the ``snapshot-id`` option, same filter pushdown).
    """
    options = {
        "path": qualified,
        "snapshot-id": str(int(snapshot_id)),
        "split-size": str(VERIFY_SPLIT_SIZE),
    }
    listed = ", ".join(
        f"{sql_string_literal(k)} = {sql_string_literal(v)}" for k, v in options.items()
    )
    return (
        f"CREATE OR REPLACE TEMPORARY VIEW {quote_identifier(view)} USING iceberg "
        f"OPTIONS ({listed})"
    )


def has_post_scan_filter(plan: str) -> bool:
    """Whether a physical plan (``EXPLAIN`` text) evaluates a filter row by row."""
    return _FILTER_NODE.search(plan) is not None


@dataclass(frozen=True)
class ScopedComparison:
    before: Fingerprint
    after: Fingerprint
    where: str


async def partition_fingerprints(
    engine: SparkEngine,
    qualified: str,
    before: int,
    after: int,
    layout: TableLayout,
    touched: Sequence[Partition],
    columns: list[tuple[str, SparkType]] | None,
) -> ScopedComparison:
    """Row count and checksum of the touched partitions at ``before`` and at ``after``, in one
    Spark job. ``columns`` None counts rows only (checksum 0), as ``fingerprint.fingerprint``.

    Raises:
        ScopeUnsound: not identity-partitioned, too many partitions, a value without an exact
            literal, or a filter Spark would evaluate row by row (see the module docstring).
        Exception: the engine's error.
    """
    columns_used, texts = _scopable(layout, touched)
    # Time values as Iceberg's functions: a timestamp range keeps a row-level Filter.
    where = await partitions_where(engine, columns_used, texts, time_function=True)
    checksum = checksum_expression(columns) if columns is not None else "0"
    rows = await _fingerprint_rows(engine, qualified, (before, after), where, checksum)
    by_side = {as_int(r["v"]): Fingerprint(as_int(r["n"]), as_int(r["h"])) for r in rows}
    if set(by_side) != {0, 1}:
        raise RuntimeError(f"the scoped fingerprint returned {len(rows)} rows, expected 2")
    return ScopedComparison(by_side[0], by_side[1], where)


def _scopable(
    layout: TableLayout, touched: Sequence[Partition]
) -> tuple[list[PartitionColumn], list[tuple[str | None, ...]]]:
    """``shared_scope`` of the touched partitions, or ScopeUnsound when the table is not
    identity-partitioned or more partitions were touched than are fingerprinted."""
    if not layout.columns:
        raise ScopeUnsound(
            "not identity-partitioned (unpartitioned)"
            if layout.columns == []
            else "not identity-partitioned (a non-identity transform)"
        )
    columns_used, texts = shared_scope(layout, touched)
    if len(touched) > MAX_FINGERPRINTED_PARTITIONS:
        raise ScopeUnsound(
            f"{len(touched)} partitions touched (at most "
            f"{MAX_FINGERPRINTED_PARTITIONS} fingerprinted)"
        )
    return columns_used, texts


async def _fingerprint_rows(
    engine: SparkEngine, qualified: str, snapshots: tuple[int, int], where: str, checksum: str
) -> Rows:
    """One row ``(v, n, h)`` per side (0: the first snapshot, 1: the second) of the rows
    ``where`` selects, read through a temporary view per snapshot (dropped after). Raises
    ScopeUnsound when Spark's plan would evaluate ``where`` row by row."""
    views = [f"icepack_verify_{secrets.token_hex(8)}_{side}" for side in (0, 1)]
    try:
        for view, snapshot_id in zip(views, snapshots, strict=True):
            await engine.sql(snapshot_view(view, qualified, snapshot_id))
        query = " UNION ALL ".join(
            f"SELECT {side} AS v, count(*) AS n, {checksum} AS h FROM {quote_identifier(view)} "
            f"WHERE {where}"
            for side, view in enumerate(views)
        )
        plan = await engine.sql(f"EXPLAIN {query}")
        text = "\n".join(str(v) for row in plan for v in row.values())
        if has_post_scan_filter(text):
            raise ScopeUnsound(
                "Spark would evaluate the partition filter row by row (a "
                "partition spec of the table cannot answer it from partition "
                "values)"
            )
        return await engine.sql(query)
    finally:
        for view in views:
            await engine.sql(f"DROP VIEW IF EXISTS {quote_identifier(view)}")
