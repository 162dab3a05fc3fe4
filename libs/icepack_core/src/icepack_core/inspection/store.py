"""Persistence of inspections: the ``manifest_stats`` cache, status snapshots, assessments.

``record_inspection`` writes a status snapshot, its assessment (and the table's
``table_health_latest`` row) and the ``status.updated`` event in the caller's transaction, so
the planner never sees one without the others.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import cast

import asyncpg

from icepack_core.db.queries import load_query
from icepack_core.inspection.health import Assessment
from icepack_core.inspection.manifest_cache import CachedManifest, CachedTotals
from icepack_core.inspection.manifests import AggregateDoc
from icepack_core.inspection.status import TableStatus, parse_ts
from icepack_core.queue.events import publish
from icepack_core.telemetry.tracing import current_traceparent
from icepack_core.types import Topic


def _bigint_or_none(value: int | None) -> int | None:
    """Some writers produce snapshot ids beyond int64 (the spec says long); the jsonb status
    keeps the exact value, the bigint column gets NULL rather than failing the insert."""
    if value is None or not -(2**63) <= value < 2**63:
        return None
    return value


class ManifestStatsStore:
    """The ``manifest_stats`` table as a ``ManifestCache``, ``inspection_totals`` as its
    ``TotalsCache``.

    Both tables are caches, so their writes commit with ``synchronous_commit`` off (for that
    transaction only): a re-inspection does not wait for the WAL flush of a 100 KB path list.
    A crash may lose the last such commits, in WAL order, which costs reads at the next
    inspection and never correctness (a totals row is the sum of its own manifest list's
    aggregates; a lost ``manifest_stats`` row is read again).
    """

    def __init__(self, pool: asyncpg.Pool, conn: asyncpg.Connection | None = None) -> None:
        self.pool = pool
        self._conn = conn

    @asynccontextmanager
    async def session(self) -> AsyncIterator[ManifestStatsStore]:
        """This store on one pooled connection held for the block (one inspection), so its
        calls cost no pool acquire and reset round trips. Calls must not overlap."""
        if self._conn is not None:
            yield self
            return
        async with self.pool.acquire() as raw:
            yield ManifestStatsStore(self.pool, cast(asyncpg.Connection, raw))

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[asyncpg.Connection]:
        if self._conn is not None:
            yield self._conn
            return
        async with self.pool.acquire() as raw:
            yield cast(asyncpg.Connection, raw)

    @asynccontextmanager
    async def _cache_write(self) -> AsyncIterator[asyncpg.Connection]:
        """A transaction that commits without waiting for the WAL flush."""
        async with self._connection() as conn:
            # One round trip for both (asyncpg's transaction() would send BEGIN on its own).
            await conn.execute("BEGIN; SET LOCAL synchronous_commit TO off")
            try:
                yield conn
            except BaseException:
                await conn.execute("ROLLBACK")
                raise
            await conn.execute("COMMIT")

    async def get_many(self, paths: list[str]) -> dict[str, AggregateDoc]:
        async with self._cache_write() as conn:  # it marks the rows used (an UPDATE)
            rows = await conn.fetch(load_query("manifest_stats_get_many"), paths)
        return {r["manifest_path"]: r["stats"] for r in rows}

    async def put_many(self, rows: list[CachedManifest]) -> None:
        async with self._cache_write() as conn:
            await conn.executemany(
                load_query("manifest_stats_put"),
                [(r.path, r.length, r.content, r.stats) for r in rows],
            )

    async def get_totals(self, key: str) -> CachedTotals | None:
        async with self._connection() as conn:
            row = await conn.fetchrow(load_query("inspection_totals_get"), key)
        if row is None:
            return None
        return CachedTotals(
            row["small_threshold"],
            list(row["manifest_paths"]),
            row["totals"],
            bool(row["touch_due"]),
        )

    async def put_totals(
        self, key: str, row: CachedTotals, touched: bool, rows: list[CachedManifest] | None = None
    ) -> None:
        """Store the totals, and ``rows`` (manifest aggregates) in the same transaction."""
        async with self._cache_write() as conn:
            if rows:
                await conn.executemany(
                    load_query("manifest_stats_put"),
                    [(r.path, r.length, r.content, r.stats) for r in rows],
                )
            await conn.execute(
                load_query("inspection_totals_put"),
                key,
                row.small_threshold,
                row.manifest_paths,
                row.totals,
                touched,
            )

    async def touch(self, paths: list[str]) -> None:
        async with self._cache_write() as conn:
            await conn.execute(load_query("manifest_stats_touch"), paths)


@dataclass(frozen=True, slots=True)
class Recorded:
    """Ids written by one ``record_inspection``."""

    status_snapshot_id: int | None
    health_assessment_id: int
    event_id: int


async def record_inspection(
    conn: asyncpg.Connection,
    table_id: int,
    status: TableStatus | None,
    assessment: Assessment,
) -> Recorded:
    """Insert the status (if any), its assessment and ``status.updated`` and bring the table's
    ``table_health_latest`` row up to date, in the caller's transaction. ``status`` is None
    when the inspection failed."""
    snapshot_id: int | None = None
    if status is not None:
        inspected_at = parse_ts(status.inspected_at)
        snapshot_id = await conn.fetchval(
            load_query("status_snapshot_insert"),
            table_id,
            inspected_at,
            status.inspector,
            status.metadata_location,
            _bigint_or_none(status.current_snapshot_id),
            status.model_dump(mode="json"),
            current_traceparent(),
        )
    assessment_id: int = await conn.fetchval(
        load_query("health_assessment_insert"),
        table_id,
        snapshot_id,
        assessment.health.value,
        assessment.score,
        [i.model_dump(mode="json") for i in assessment.issues],
    )
    # The read model the gateway ranks the fleet by, current in this same transaction.
    await conn.execute(load_query("health_latest_upsert"), [assessment_id])
    event_id = await publish(
        conn,
        Topic.STATUS_UPDATED,
        table_id=table_id,
        payload={
            "status_snapshot_id": snapshot_id,
            "health": assessment.health.value,
            "score": assessment.score,
        },
    )
    return Recorded(snapshot_id, assessment_id, event_id)


async def latest_status(
    conn: asyncpg.Connection | asyncpg.Pool, table_id: int
) -> TableStatus | None:
    """The newest stored status of a table, if any."""
    row = await conn.fetchrow(load_query("status_latest"), table_id)
    if row is None:
        return None
    return TableStatus.model_validate(row["status"])
