"""Compute a ``TableStatus`` from a table's metadata, incrementally through ``manifest_stats``.

The metadata is PyIceberg's (a table loaded from a catalog) or read directly
(``metadata.read_metadata``: what PyIceberg's model rejects); both become a ``MetadataView``.
Blocking reads (manifest list, manifests) cross into threads here and only here.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypedDict

from pyiceberg.io import FileIO, load_file_io
from pyiceberg.table import Table

from icepack_core.errors import InspectionFailed
from icepack_core.inspection.manifest_cache import (
    CachedManifest,
    CachedTotals,
    ManifestCache,
    MemoryManifestCache,
    SessionCache,
    TotalsCache,
)
from icepack_core.inspection.manifest_list import ManifestRef, inline_refs, read_list
from icepack_core.inspection.manifests import (
    ManifestAggregate,
    Totals,
    read_manifest,
)
from icepack_core.inspection.metadata import MetadataView, read_metadata
from icepack_core.inspection.statistics import freshness
from icepack_core.inspection.status import (
    StatisticsFreshness,
    TableStatus,
    describe_error,
    format_ts,
    small_file_threshold,
)

__all__ = [
    "CachedManifest",
    "CachedTotals",
    "HistoryMetrics",
    "ManifestCache",
    "MemoryManifestCache",
    "SessionCache",
    "TotalsCache",
    "history_metrics",
    "identity_from_location",
    "inspect_metadata_location",
    "inspect_table",
    "inspect_view",
    "load_metadata",
    "refresh_history",
]

READ_CONCURRENCY = 4  # manifest reads in flight per inspection (threads)
PUT_BATCH = 1000  # manifest_stats rows per put_many
SPECULATE = 8  # new manifests read while their cache rows are looked up (re-inspection)


def identity_from_location(location: str) -> tuple[str, str]:
    """``(namespace, table)`` guessed from ``.../<namespace>/<table>/metadata/<file>``.

    The same rule as go-inspector, so both report the same identity for a bare metadata file.
    """
    if "://" in location:
        location = location.split("://", 1)[1]
    parts = location.rstrip("/").split("/")
    if len(parts) < 3 or parts[-2] != "metadata":
        return "", ""
    return (parts[-4] if len(parts) >= 4 else ""), parts[-3]


class HistoryMetrics(TypedDict):
    """The ``TableStatus`` fields read from the metadata JSON alone."""

    snapshot_count: int
    oldest_snapshot_at: str | None
    current_snapshot_at: str | None
    metadata_log_count: int
    ref_count: int
    table_statistics: StatisticsFreshness
    partition_statistics: StatisticsFreshness


def history_metrics(view: MetadataView) -> HistoryMetrics:
    """The history/retention fields of the contract, from the metadata JSON alone."""
    current = view.current
    return {
        "snapshot_count": len(view.snapshot_timestamps),
        "oldest_snapshot_at": format_ts(min(view.snapshot_timestamps))
        if view.snapshot_timestamps
        else None,
        "current_snapshot_at": format_ts(current.timestamp_ms) if current else None,
        "metadata_log_count": view.metadata_log_count,
        "ref_count": view.ref_count,
        "table_statistics": freshness(
            current.snapshot_id if current else None, view.links, view.table_statistics
        ),
        "partition_statistics": freshness(
            current.snapshot_id if current else None, view.links, view.partition_statistics
        ),
    }


_describe = describe_error


async def _list_manifests(view: MetadataView, io: FileIO) -> list[ManifestRef]:
    snapshot = view.current
    if snapshot is None:
        return []
    if snapshot.manifest_list is None:  # a v1 snapshot listing its manifests inline
        return await asyncio.to_thread(inline_refs, io, list(snapshot.inline_manifests or ()))
    try:
        return await asyncio.to_thread(read_list, io, snapshot.manifest_list)
    except Exception as exc:
        raise InspectionFailed(
            f"cannot read manifest list {snapshot.manifest_list}: {_describe(exc)}"
        ) from exc


async def _read_all(
    manifests: list[ManifestRef], io: FileIO, threshold: int
) -> list[tuple[ManifestRef, ManifestAggregate]]:
    """Aggregates of ``manifests``, read by ``READ_CONCURRENCY`` workers (threads) pulling
    from one iterator (no task per manifest)."""
    out: list[tuple[ManifestRef, ManifestAggregate]] = []
    pending = iter(manifests)

    async def worker() -> None:
        for manifest in pending:
            try:
                agg = await asyncio.to_thread(read_manifest, manifest, io, threshold)
            except Exception as exc:
                raise InspectionFailed(
                    f"cannot read manifest {manifest.manifest_path}: {_describe(exc)}"
                ) from exc
            out.append((manifest, agg))

    tasks = [asyncio.ensure_future(worker()) for _ in range(min(READ_CONCURRENCY, len(manifests)))]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
    return out


async def _read_speculatively(
    manifests: list[ManifestRef], io: FileIO, threshold: int
) -> list[ManifestAggregate | BaseException]:
    """Each manifest's aggregate, or the exception reading it raised (not raised here)."""
    return await asyncio.gather(
        *(asyncio.to_thread(read_manifest, m, io, threshold) for m in manifests),
        return_exceptions=True,
    )


async def _fold(
    manifests: list[ManifestRef],
    io: FileIO,
    threshold: int,
    cache: ManifestCache | None,
    totals: Totals,
    speculate: bool = False,
) -> tuple[int, list[CachedManifest]]:
    """Add every manifest's aggregate to ``totals``: from the cache, else read (and stored).

    Returns how many were read (the others came from the cache) and the rows of the last batch
    still to store: the caller writes them with the totals, in one transaction. Works in
    batches of ``PUT_BATCH`` manifests (one ``get_many``, the reads, one ``put_many``) and folds
    each aggregate in as it comes, so memory holds one batch of aggregates, not the snapshot's.

    With ``speculate`` (manifests a re-inspection has not seen before, so rarely cached), up to
    ``SPECULATE`` manifests are read while their cache rows are looked up rather than after:
    a cached aggregate still wins, and a read error only counts for a manifest not cached.
    """
    read = 0
    pending: list[CachedManifest] = []
    for start in range(0, len(manifests), PUT_BATCH):
        if cache is not None and pending:
            await cache.put_many(pending)
        chunk = manifests[start : start + PUT_BATCH]
        fresh = await _fold_batch(chunk, io, threshold, cache, totals, speculate)
        pending = (
            [
                CachedManifest(m.manifest_path, m.manifest_length, m.content, agg.to_json())
                for m, agg in fresh
            ]
            if cache is not None
            else []
        )
        read += len(fresh)
    return read, pending


async def _fold_batch(
    chunk: list[ManifestRef],
    io: FileIO,
    threshold: int,
    cache: ManifestCache | None,
    totals: Totals,
    speculate: bool,
) -> list[tuple[ManifestRef, ManifestAggregate]]:
    """One batch of ``_fold``: add each manifest's aggregate to ``totals`` (cached, else
    read); returns those that were read, for the caller to store."""
    paths = list(dict.fromkeys(m.manifest_path for m in chunk))
    attempts: list[ManifestAggregate | BaseException] | None = None
    if cache is not None and chunk and speculate and len(chunk) <= SPECULATE:
        rows, attempts = await asyncio.gather(
            cache.get_many(paths), _read_speculatively(chunk, io, threshold)
        )
    else:
        rows = await cache.get_many(paths) if cache is not None and chunk else {}
    to_read: list[ManifestRef] = []
    fresh: list[tuple[ManifestRef, ManifestAggregate]] = []
    for i, m in enumerate(chunk):
        row = rows.get(m.manifest_path)
        agg = ManifestAggregate.from_json(row, threshold) if row is not None else None
        if agg is not None:
            totals.add(agg)
        elif attempts is None:
            to_read.append(m)
        else:
            attempt = attempts[i]
            if isinstance(attempt, BaseException):
                raise InspectionFailed(
                    f"cannot read manifest {m.manifest_path}: {_describe(attempt)}"
                ) from attempt
            fresh.append((m, attempt))
    del rows, attempts
    fresh += await _read_all(to_read, io, threshold)
    for _, agg in fresh:
        totals.add(agg)
    return fresh


async def _put(cache: ManifestCache | None, rows: list[CachedManifest]) -> None:
    if cache is not None and rows:
        await cache.put_many(rows)


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """What ``_aggregate`` needs of the inspected snapshot."""

    key: str  # the totals cache key: the table's base location ("" = no totals cache)
    manifest_list: str | None
    manifests: list[ManifestRef]

    @property
    def manifest_bytes(self) -> int:
        return sum(m.manifest_length for m in self.manifests)


async def _aggregate(
    snap: _Snapshot,
    io: FileIO,
    threshold: int,
    cache: ManifestCache | None,
    previous: CachedTotals | None,
) -> tuple[Totals, int, int]:
    """The snapshot's merged totals, how many manifests were read and how many were cached.

    With a ``TotalsCache``, the totals of the table's previous inspection (``previous``) are
    the starting point: the manifests it did not have are added and those it had that are gone
    are subtracted. Anything unexpected (another threshold or format, a removed manifest
    without a cached aggregate, a negative count) falls back to merging every manifest's
    aggregate.
    """
    manifests = snap.manifests
    paths = [m.manifest_path for m in manifests]
    unique = len(set(paths)) == len(paths)
    keep = isinstance(cache, TotalsCache) and unique and bool(paths) and bool(snap.key)
    if keep and previous is not None and previous.small_threshold == threshold:
        found = await _from_previous(snap, io, threshold, cache, previous)
        if found is not None:
            return found
    totals = Totals()
    read, pending = await _fold(manifests, io, threshold, cache, totals)
    if keep:
        await _store_totals(cache, snap, threshold, totals, touched=True, rows=pending)
    else:
        await _put(cache, pending)
    return totals, read, len(manifests) - read


async def _from_previous(
    snap: _Snapshot,
    io: FileIO,
    threshold: int,
    cache: ManifestCache | None,
    previous: CachedTotals,
) -> tuple[Totals, int, int] | None:
    """``_aggregate``'s incremental path: ``previous``'s totals with the added manifests
    folded in and the removed ones subtracted; None when they cannot be trusted (then every
    manifest is merged again). ``previous`` has this ``threshold``."""
    manifests = snap.manifests
    totals = Totals.from_json(previous.totals)
    before = set(previous.manifest_paths)
    now = {m.manifest_path for m in manifests}
    added = [m for m in manifests if m.manifest_path not in before]
    removed = [p for p in previous.manifest_paths if p not in now]
    if totals is None or len(before) != len(previous.manifest_paths):
        return None
    removed_rows = await cache.get_many(removed) if removed and cache else {}
    gone = [
        agg
        for p in removed
        if p in removed_rows and (agg := ManifestAggregate.from_json(removed_rows[p], threshold))
    ]
    if len(gone) != len(removed):
        return None
    for agg in gone:
        totals.add(agg, -1)
    read, pending = await _fold(added, io, threshold, cache, totals, speculate=True)
    if not totals.consistent():
        await _put(cache, pending)
        return None
    if (
        added
        or removed
        or previous.touch_due
        or previous.totals.get("manifest_list") != snap.manifest_list
    ):
        await _store_totals(cache, snap, threshold, totals, previous.touch_due, rows=pending)
    else:
        await _put(cache, pending)
    return totals, read, len(manifests) - read


async def _store_totals(
    cache: ManifestCache | None,
    snap: _Snapshot,
    threshold: int,
    totals: Totals,
    touch_due: bool = False,
    touched: bool = False,
    rows: list[CachedManifest] | None = None,
) -> None:
    """Keep the totals with the manifest list they are the sum of, and that list's manifest
    count and bytes: an inspection of the same list then needs no read at all."""
    assert isinstance(cache, TotalsCache)
    paths = [m.manifest_path for m in snap.manifests]
    if touch_due:
        await cache.touch(paths)
    doc = totals.to_json()
    doc["manifest_list"] = snap.manifest_list
    doc["manifest_bytes"] = snap.manifest_bytes
    await cache.put_totals(
        snap.key, CachedTotals(threshold, paths, doc), touched=touched or touch_due, rows=rows
    )


def _unchanged(
    previous: CachedTotals | None, manifest_list: str | None, threshold: int
) -> tuple[Totals, int, int] | None:
    """``(totals, manifest count, manifest bytes)`` when ``previous`` was computed from this
    very manifest list (an immutable file) with this threshold, else None."""
    if previous is None or manifest_list is None or previous.small_threshold != threshold:
        return None
    doc = previous.totals
    if not isinstance(doc, dict) or doc.get("manifest_list") != manifest_list:
        return None
    manifest_bytes = doc.get("manifest_bytes")
    totals = Totals.from_json(doc)
    if totals is None or not isinstance(manifest_bytes, int):
        return None
    return totals, len(previous.manifest_paths), manifest_bytes


async def inspect_table(
    table: Table,
    *,
    catalog: str,
    namespace: str,
    name: str,
    cache: ManifestCache | None = None,
    small_file_bytes: int | None = None,
    started: float | None = None,
) -> TableStatus:
    """Inspect a loaded table's current snapshot (``inspect_view`` of its metadata)."""
    return await inspect_view(
        MetadataView.of(table.metadata),
        table.io,
        table.metadata_location,
        catalog=catalog,
        namespace=namespace,
        name=name,
        cache=cache,
        small_file_bytes=small_file_bytes,
        started=started,
    )


async def inspect_view(
    view: MetadataView,
    io: FileIO,
    metadata_location: str,
    *,
    catalog: str,
    namespace: str,
    name: str,
    cache: ManifestCache | None = None,
    small_file_bytes: int | None = None,
    started: float | None = None,
) -> TableStatus:
    """Inspect the current snapshot of a table's metadata.

    Args:
        view: the metadata (``MetadataView.of`` a loaded table, or ``read_metadata``).
        io: the FileIO that reads the table's manifest list and manifests.
        metadata_location: the metadata file, reported in the status.
        catalog, namespace, name: identity reported in the status.
        cache: manifest aggregates from earlier inspections; new aggregates are added to it.
            With a ``TotalsCache`` whose totals were computed from the snapshot's manifest
            list, nothing is read at all (``manifests_read`` 0).
        small_file_bytes: override of the small-file threshold (default: target size / 8).
        started: ``time.monotonic()`` when the caller began (so loading counts in inspect_ms).

    Returns:
        The status; ``manifests_read + manifests_cached == manifest_count``.

    Raises:
        InspectionFailed: a manifest list or manifest cannot be read; the message names the file.
    """
    t0 = started if started is not None else time.monotonic()
    if isinstance(cache, SessionCache):
        async with cache.session() as bound:
            return await _inspect_view(
                view, io, metadata_location, catalog, namespace, name, bound, small_file_bytes, t0
            )
    return await _inspect_view(
        view, io, metadata_location, catalog, namespace, name, cache, small_file_bytes, t0
    )


async def _inspect_view(
    view: MetadataView,
    io: FileIO,
    metadata_location: str,
    catalog: str,
    namespace: str,
    name: str,
    cache: ManifestCache | None,
    small_file_bytes: int | None,
    t0: float,
) -> TableStatus:
    inspected_at = datetime.now(UTC)
    threshold = small_file_threshold(view.properties, small_file_bytes)
    current = view.current
    totals, fresh, cached, manifest_count, manifest_bytes = await _count(view, io, cache, threshold)
    live = totals.applicable()
    return TableStatus(
        catalog=catalog,
        namespace=namespace,
        table=name,
        format_version=view.format_version,
        metadata_location=metadata_location,
        current_snapshot_id=current.snapshot_id if current else None,
        inspected_at=format_ts(inspected_at) or "",
        inspector="pyiceberg",
        inspect_ms=int((time.monotonic() - t0) * 1000),
        manifests_read=fresh,
        manifests_cached=cached,
        small_file_threshold_bytes=threshold,
        data_file_count=totals.data_files,
        data_file_bytes=totals.data_bytes,
        record_count=totals.records,
        small_file_count=totals.small_files,
        small_file_bytes=totals.small_bytes,
        file_size_histogram=totals.histogram,
        # Delete files that can still apply (``delete_applicability``): one that outlived the
        # rows it deleted is not delete debt.
        position_delete_file_count=live.position,
        equality_delete_file_count=live.equality,
        deletion_vector_count=live.vectors,
        delete_record_count=live.records,
        manifest_count=manifest_count,
        manifest_bytes=manifest_bytes,
        partition_count=len(totals.partitions),
        max_files_in_partition=max(totals.partitions.values(), default=0),
        avg_data_file_bytes=totals.data_bytes // totals.data_files if totals.data_files else 0,
        **history_metrics(view),
    )


async def _count(
    view: MetadataView, io: FileIO, cache: ManifestCache | None, threshold: int
) -> tuple[Totals, int, int, int, int]:
    """The current snapshot's merged totals, how many manifests were read and how many came
    from the cache, and the snapshot's manifest count and bytes. Reads nothing when the cached
    totals were computed from this very manifest list (``_unchanged``)."""
    current = view.current
    key = view.location
    previous = None
    if isinstance(cache, TotalsCache) and current is not None and key:
        previous = await cache.get_totals(key)
    same = _unchanged(previous, current.manifest_list if current else None, threshold)
    if same is None:
        manifests = await _list_manifests(view, io)
        snap = _Snapshot(key, current.manifest_list if current else None, manifests)
        totals, fresh, cached = await _aggregate(snap, io, threshold, cache, previous)
        return totals, fresh, cached, len(manifests), snap.manifest_bytes
    assert previous is not None
    totals, manifest_count, manifest_bytes = same
    if previous.touch_due:  # refresh last_used_at of the manifests (daily), same row
        assert isinstance(cache, TotalsCache)
        await cache.touch(previous.manifest_paths)
        await cache.put_totals(
            key, CachedTotals(threshold, previous.manifest_paths, previous.totals), touched=True
        )
    return totals, 0, manifest_count, manifest_count, manifest_bytes


def refresh_history(status: TableStatus, view: MetadataView) -> TableStatus:
    """The same status with history metrics recomputed from ``view`` (no manifest reads).

    Used by the age-based refresh when the current snapshot has not moved.
    """
    return status.model_copy(
        update={
            **history_metrics(view),
            "inspected_at": format_ts(datetime.now(UTC)),
            "inspect_ms": 0,
            "manifests_read": 0,
            "manifests_cached": 0,
        }
    )


def load_metadata(
    location: str, properties: dict[str, str] | None = None
) -> tuple[MetadataView, FileIO]:
    """A table's metadata view and a FileIO for it, from its metadata file alone (blocking).

    Read by ``metadata.read_metadata``, not PyIceberg's model, so every readable table is
    read (v1 inline manifests, gzip under either name).

    Raises:
        InspectionFailed: the file is missing, truncated or not table metadata.
    """
    try:
        io = load_file_io(properties or {}, location)
    except Exception as exc:
        raise InspectionFailed(f"cannot read table metadata {location}: {_describe(exc)}") from exc
    return read_metadata(io, location), io


async def inspect_metadata_location(
    location: str,
    *,
    properties: dict[str, str] | None = None,
    cache: ManifestCache | None = None,
    small_file_bytes: int | None = None,
) -> TableStatus:
    """Inspect a table from its metadata file, with no catalog (like go-inspector).

    Raises:
        InspectionFailed: naming the file and what was wrong.
    """
    t0 = time.monotonic()
    view, io = await asyncio.to_thread(load_metadata, location, properties)
    namespace, name = identity_from_location(location)
    return await inspect_view(
        view,
        io,
        location,
        catalog="",
        namespace=namespace,
        name=name,
        cache=cache,
        small_file_bytes=small_file_bytes,
        started=t0,
    )
