"""Where manifest aggregates and a table's merged totals are kept between inspections: the
cache interfaces ``pyiceberg_inspector`` reads and writes through (``store`` implements them on
Postgres), and a process-local one for the standalone CLI and tests."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from icepack_core.inspection.manifests import AggregateDoc, TotalsDoc


@dataclass(frozen=True, slots=True)
class CachedManifest:
    """A manifest aggregate to store: what ``manifest_stats`` keys and holds."""

    path: str
    length: int
    content: int
    stats: AggregateDoc


class ManifestCache(Protocol):
    """Where aggregates of immutable manifests are kept between inspections."""

    async def get_many(self, paths: list[str]) -> dict[str, AggregateDoc]: ...

    async def put_many(self, rows: list[CachedManifest]) -> None: ...


@dataclass(frozen=True, slots=True)
class CachedTotals:
    """A table's merged aggregates as of its last inspection (``inspection_totals``)."""

    small_threshold: int
    manifest_paths: list[str]
    totals: TotalsDoc
    touch_due: bool = False  # the manifests' last_used_at wants refreshing


@runtime_checkable
class TotalsCache(Protocol):
    """A ``ManifestCache`` that also keeps each table's merged totals (optional)."""

    async def get_totals(self, key: str) -> CachedTotals | None: ...

    async def put_totals(
        self, key: str, row: CachedTotals, touched: bool, rows: list[CachedManifest] | None = None
    ) -> None:
        """Store ``row`` as the table's totals and ``rows`` with it (as ``put_many`` would)."""

    async def touch(self, paths: list[str]) -> None: ...


@runtime_checkable
class SessionCache(Protocol):
    """A cache that can bind itself to one connection for an inspection (``store``)."""

    def session(self) -> AbstractAsyncContextManager[ManifestCache]: ...


class MemoryManifestCache:
    """A process-local cache (the standalone CLI, tests); the services use ``store``."""

    def __init__(self) -> None:
        self.rows: dict[str, AggregateDoc] = {}
        self.totals: dict[str, CachedTotals] = {}

    async def get_many(self, paths: list[str]) -> dict[str, AggregateDoc]:
        return {p: self.rows[p] for p in paths if p in self.rows}

    async def put_many(self, rows: list[CachedManifest]) -> None:
        for row in rows:
            self.rows[row.path] = row.stats

    async def get_totals(self, key: str) -> CachedTotals | None:
        return self.totals.get(key)

    async def put_totals(
        self, key: str, row: CachedTotals, touched: bool, rows: list[CachedManifest] | None = None
    ) -> None:
        await self.put_many(rows or [])
        self.totals[key] = row

    async def touch(self, paths: list[str]) -> None:
        pass
