"""Compute a ``TableStatus`` from PyIceberg metadata, incrementally through ``manifest_stats``.

Blocking PyIceberg calls (manifest list, manifest reads) cross into threads here and only here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile
from pyiceberg.table import StaticTable, Table
from pyiceberg.table.metadata import TableMetadata

from icepack_core.errors import InspectionFailed
from icepack_core.inspection.manifests import (
    ManifestAggregate,
    Totals,
    manifest_content,
    read_manifest,
)
from icepack_core.inspection.status import (
    TableStatus,
    describe_error,
    format_ts,
    small_file_threshold,
)

READ_CONCURRENCY = 4  # manifest reads in flight per inspection (threads)


@dataclass(frozen=True, slots=True)
class CachedManifest:
    """A manifest aggregate to store: what ``manifest_stats`` keys and holds."""

    path: str
    length: int
    content: int
    stats: dict[str, Any]


class ManifestCache(Protocol):
    """Where aggregates of immutable manifests are kept between inspections."""

    async def get_many(self, paths: list[str]) -> dict[str, dict[str, Any]]: ...

    async def put_many(self, rows: list[CachedManifest]) -> None: ...


@dataclass(frozen=True, slots=True)
class CachedTotals:
    """A table's merged aggregates as of its last inspection (``inspection_totals``)."""

    small_threshold: int
    manifest_paths: list[str]
    totals: dict[str, Any]
    touch_due: bool = False  # the manifests' last_used_at wants refreshing


@runtime_checkable
class TotalsCache(Protocol):
    """A ``ManifestCache`` that also keeps each table's merged totals (optional)."""

    async def get_totals(self, key: str) -> CachedTotals | None: ...

    async def put_totals(self, key: str, row: CachedTotals, touched: bool) -> None: ...

    async def touch(self, paths: list[str]) -> None: ...


class MemoryManifestCache:
    """A process-local cache (the standalone CLI, tests); the services use ``store``."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.totals: dict[str, CachedTotals] = {}

    async def get_many(self, paths: list[str]) -> dict[str, dict[str, Any]]:
        return {p: self.rows[p] for p in paths if p in self.rows}

    async def put_many(self, rows: list[CachedManifest]) -> None:
        for row in rows:
            self.rows[row.path] = row.stats

    async def get_totals(self, key: str) -> CachedTotals | None:
        return self.totals.get(key)

    async def put_totals(self, key: str, row: CachedTotals, touched: bool) -> None:
        self.totals[key] = row

    async def touch(self, paths: list[str]) -> None:
        pass


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


def history_metrics(metadata: TableMetadata) -> dict[str, Any]:
    """The history/retention fields of the contract, from the metadata JSON alone."""
    snapshots = metadata.snapshots
    current = metadata.current_snapshot()
    return {
        "snapshot_count": len(snapshots),
        "oldest_snapshot_at": format_ts(min(s.timestamp_ms for s in snapshots))
        if snapshots
        else None,
        "current_snapshot_at": format_ts(current.timestamp_ms) if current else None,
        "metadata_log_count": len(metadata.metadata_log),
        "ref_count": len(metadata.refs),
    }


_describe = describe_error


async def _list_manifests(table: Table) -> list[ManifestFile]:
    snapshot = table.metadata.current_snapshot()
    if snapshot is None:
        return []
    try:
        return await asyncio.to_thread(snapshot.manifests, table.io)
    except Exception as exc:
        raise InspectionFailed(
            f"cannot read manifest list {snapshot.manifest_list}: {_describe(exc)}"
        ) from exc


async def _read_all(
    manifests: Iterable[ManifestFile], io: FileIO, threshold: int
) -> dict[str, ManifestAggregate]:
    gate = asyncio.Semaphore(READ_CONCURRENCY)

    async def one(manifest: ManifestFile) -> tuple[str, ManifestAggregate]:
        async with gate:
            try:
                agg = await asyncio.to_thread(read_manifest, manifest, io, threshold)
            except Exception as exc:
                raise InspectionFailed(
                    f"cannot read manifest {manifest.manifest_path}: {_describe(exc)}"
                ) from exc
            return manifest.manifest_path, agg

    return dict(await asyncio.gather(*(one(m) for m in manifests)))


async def _aggregates(
    manifests: list[ManifestFile], io: FileIO, threshold: int, cache: ManifestCache | None
) -> tuple[dict[str, ManifestAggregate], dict[str, ManifestAggregate]]:
    """``(cached, fresh)`` aggregates of ``manifests``: from the cache, else read (and stored)."""
    paths = [m.manifest_path for m in manifests]
    cached_rows = await cache.get_many(paths) if cache is not None and paths else {}
    cached: dict[str, ManifestAggregate] = {}
    for path, stats in cached_rows.items():
        agg = ManifestAggregate.from_json(stats, threshold)
        if agg is not None:
            cached[path] = agg
    to_read = [m for m in manifests if m.manifest_path not in cached]
    fresh = await _read_all(to_read, io, threshold)
    if cache is not None and fresh:
        await cache.put_many([
            CachedManifest(m.manifest_path, m.manifest_length, manifest_content(m),
                           fresh[m.manifest_path].to_json())
            for m in to_read
        ])
    return cached, fresh


async def _aggregate(
    manifests: list[ManifestFile], table: Table, threshold: int, cache: ManifestCache | None
) -> tuple[Totals, int, int]:
    """The snapshot's merged totals, how many manifests were read and how many were cached.

    With a ``TotalsCache``, the totals of the table's previous inspection are the starting
    point: the manifests it did not have are added and those it had that are gone are
    subtracted. Anything unexpected (another threshold or format, a removed manifest without
    a cached aggregate, a negative count) falls back to merging every manifest's aggregate.
    """
    paths = [m.manifest_path for m in manifests]
    unique = len(set(paths)) == len(paths)
    key = table.metadata.location
    previous = None
    if isinstance(cache, TotalsCache) and unique and paths:
        previous = await cache.get_totals(key)
    if previous is not None and previous.small_threshold == threshold:
        totals = Totals.from_json(previous.totals)
        before = set(previous.manifest_paths)
        now = set(paths)
        added = [m for m in manifests if m.manifest_path not in before]
        removed = [p for p in previous.manifest_paths if p not in now]
        if totals is not None and len(before) == len(previous.manifest_paths):
            removed_rows = await cache.get_many(removed) if removed and cache else {}
            gone = [ManifestAggregate.from_json(removed_rows[p], threshold)
                    if p in removed_rows else None for p in removed]
            if all(agg is not None for agg in gone):
                cached_aggs, fresh = await _aggregates(added, table.io, threshold, cache)
                for agg in gone:
                    totals.add(agg, -1)
                for m in added:
                    totals.add(cached_aggs.get(m.manifest_path) or fresh[m.manifest_path])
                if totals.consistent():
                    if added or removed or previous.touch_due:
                            await _store_totals(cache, key, threshold, paths, totals,
                                            previous.touch_due)
                    return totals, len(fresh), len(manifests) - len(fresh)
    cached_aggs, fresh = await _aggregates(manifests, table.io, threshold, cache)
    totals = Totals()
    for path in paths:
        totals.add(cached_aggs.get(path) or fresh[path])
    if isinstance(cache, TotalsCache) and unique and paths:
        await _store_totals(cache, key, threshold, paths, totals, touched=True)
    return totals, len(fresh), len(cached_aggs)


async def _store_totals(cache: ManifestCache | None, key: str, threshold: int,
                        paths: list[str], totals: Totals, touch_due: bool = False,
                        touched: bool = False) -> None:
    assert isinstance(cache, TotalsCache)
    if touch_due:
        await cache.touch(paths)
    await cache.put_totals(key, CachedTotals(threshold, paths, totals.to_json()),
                           touched=touched or touch_due)


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
    """Inspect a loaded table's current snapshot.

    Args:
        table: the table as loaded from its catalog (or a ``StaticTable``).
        catalog, namespace, name: identity reported in the status.
        cache: manifest aggregates from earlier inspections; new aggregates are added to it.
        small_file_bytes: override of the small-file threshold (default: target size / 8).
        started: ``time.monotonic()`` when the caller began (so loading counts in inspect_ms).

    Returns:
        The status; ``manifests_read + manifests_cached == manifest_count``.

    Raises:
        InspectionFailed: a manifest list or manifest cannot be read; the message names the file.
    """
    t0 = started if started is not None else time.monotonic()
    inspected_at = datetime.now(UTC)
    metadata = table.metadata
    threshold = small_file_threshold(metadata.properties, small_file_bytes)
    manifests = await _list_manifests(table)
    totals, fresh, cached = await _aggregate(manifests, table, threshold, cache)
    current = metadata.current_snapshot()
    return TableStatus(
        catalog=catalog,
        namespace=namespace,
        table=name,
        format_version=metadata.format_version,
        metadata_location=table.metadata_location,
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
        position_delete_file_count=totals.position_deletes,
        equality_delete_file_count=totals.equality_deletes,
        deletion_vector_count=totals.deletion_vectors,
        delete_record_count=totals.delete_records,
        manifest_count=len(manifests),
        manifest_bytes=sum(m.manifest_length for m in manifests),
        partition_count=len(totals.partitions),
        max_files_in_partition=max(totals.partitions.values(), default=0),
        avg_data_file_bytes=totals.data_bytes // totals.data_files if totals.data_files else 0,
        **history_metrics(metadata),
    )


def refresh_history(status: TableStatus, metadata: TableMetadata) -> TableStatus:
    """The same status with history metrics recomputed from ``metadata`` (no manifest reads).

    Used by the age-based refresh when the current snapshot has not moved.
    """
    return status.model_copy(update={
        **history_metrics(metadata),
        "inspected_at": format_ts(datetime.now(UTC)),
        "inspect_ms": 0,
        "manifests_read": 0,
        "manifests_cached": 0,
    })


def load_static_table(location: str, properties: dict[str, str] | None = None) -> StaticTable:
    """A table from its metadata file alone (blocking).

    Raises:
        InspectionFailed: the file is missing, truncated or not table metadata.
    """
    try:
        return StaticTable.from_metadata(location, properties or {})
    except Exception as exc:
        raise InspectionFailed(
            f"cannot read table metadata {location}: {_describe(exc)}"
        ) from exc


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
    table = await asyncio.to_thread(load_static_table, location, properties)
    namespace, name = identity_from_location(location)
    return await inspect_table(
        table, catalog="", namespace=namespace, name=name, cache=cache,
        small_file_bytes=small_file_bytes, started=t0,
    )
