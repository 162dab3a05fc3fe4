"""The inspector service's unit of work: inspect one table, assess it, record both.

Kept here (not in the service package) so the CLI and tests share it; the service only wires it
to ``run_event_service`` and the age-based refresh timer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, cast

import asyncpg
import structlog
from pyiceberg.table import Table

from icepack_core.db.queries import load_query
from icepack_core.db.text import storable, unstorable_properties
from icepack_core.errors import InspectionFailed, PolicyError, brief
from icepack_core.inspection.clustering import Clustering
from icepack_core.inspection.health import (
    Assessment,
    Thresholds,
    assess,
    inspection_failed,
    with_statistics_policy,
)
from icepack_core.inspection.inspector import Inspector, LoadedTable
from icepack_core.inspection.layout_key import layout_key, measure_key
from icepack_core.inspection.status import TableStatus
from icepack_core.inspection.store import (
    ManifestStatsStore,
    Recorded,
    latest_status,
    record_inspection,
)
from icepack_core.polaris.store import attachments_of
from icepack_core.policy import EffectivePolicy, resolve
from icepack_core.queue.work_items import DeadHolder, WorkItem, WorkQueue
from icepack_core.settings import Settings
from icepack_core.telemetry.logs import redact_text
from icepack_core.telemetry.metrics import INSPECTION_DURATION, MANIFESTS_CACHED, MANIFESTS_READ
from icepack_core.types import TableRef

REFRESH_REASON = "refresh"  # work item reason of the age-based refresh
REFRESH_BATCH = 500
log = structlog.get_logger("icepack.inspector")


class Sighting(Protocol):
    """What a first-sight pass did (``execution.verification.first_sight.Sighting``)."""

    @property
    def taken(self) -> int: ...


class SmallFileSight(Protocol):
    """Fingerprints a table's small data files after its inspection
    (``execution.verification.first_sight.FirstSight``; the inspector service wires it in:
    inspection sits below execution)."""

    async def take(self, table_id: int, table: Table) -> Sighting: ...

    async def forget(self, table_id: int, reason: str) -> object: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one ``inspect_and_record`` did; ``recorded`` is None for a skipped table."""

    table_id: int
    status: TableStatus | None
    assessment: Assessment | None
    recorded: Recorded | None


class TableInspections:
    """Inspect tables by id and persist status + health + ``status.updated``."""

    def __init__(
        self,
        settings: Settings,
        pool: asyncpg.Pool,
        thresholds: Thresholds | None = None,
        *,
        first_sight: SmallFileSight | None = None,
    ) -> None:
        self.pool = pool
        self.thresholds = thresholds or Thresholds()
        self.inspector = Inspector(settings, cache=ManifestStatsStore(pool))
        self.first_sight = first_sight  # after each full inspection; None: no pass

    async def inspect_and_record(
        self, table_id: int, reason: str = "", now: datetime | None = None
    ) -> Outcome:
        """Inspect one table; a dropped or unknown table is skipped, a failure is recorded as
        an ``INSPECTION_FAILED`` assessment (the caller carries on with other tables)."""
        row = await self.pool.fetchrow(load_query("table_get"), table_id)
        if row is None or row["dropped_at"] is not None:
            return Outcome(table_id, None, None, None)
        ref = TableRef(row["catalog"], row["namespace"], row["name"])
        status: TableStatus | None = None
        policy: EffectivePolicy | None = None
        loaded: LoadedTable | None = None
        try:
            if reason == REFRESH_REASON:
                status, policy = await self._refresh(ref, row)
            else:
                status, policy, loaded = await self._inspect(ref, row)
        except InspectionFailed as exc:
            # The cause's text (a REST catalog's error body, go-inspector's stderr, a driver's
            # message) may carry a secret, and the health API is open by default: redacted as
            # every other sink is; it may also hold a NUL byte.
            message = redact_text(exc.message)
            log.warning("inspector.failed", table=str(ref), table_id=table_id, error=message)
            assessment = inspection_failed(storable(message))
            INSPECTION_DURATION.record(0, {"outcome": "failed"})
        else:
            assessment = assess(status, self._thresholds(policy), now)
            labels = {"inspector": status.inspector, "outcome": "ok"}
            INSPECTION_DURATION.record(status.inspect_ms, labels)
            MANIFESTS_READ.add(status.manifests_read, labels)
            MANIFESTS_CACHED.add(status.manifests_cached, labels)
        async with self.pool.acquire() as raw, raw.transaction():
            conn = cast(asyncpg.Connection, raw)
            recorded = await record_inspection(conn, table_id, status, assessment)
        log.info(
            "inspector.recorded",
            table=str(ref),
            table_id=table_id,
            health=assessment.health.value,
            score=assessment.score,
            manifests_read=status.manifests_read if status else None,
            manifests_cached=status.manifests_cached if status else None,
        )
        if loaded is not None and loaded.table is not None and status is not None:
            await self.sight(table_id, ref, loaded.table, status)
        return Outcome(table_id, status, assessment, recorded)

    async def sight(self, table_id: int, ref: TableRef, table: Table, status: TableStatus) -> None:
        """Fingerprint the table's small data files not seen yet (``first_sight``), after its
        status is recorded; a table without small files is not listed (nothing there to
        compact). An error is logged, never the inspection's."""
        if self.first_sight is None:
            return
        try:
            if status.small_file_count == 0:
                await self.first_sight.forget(table_id, "the table has no small files")
                return
            sighting = await self.first_sight.take(table_id, table)
        except Exception as exc:  # the job reads the files itself
            error = redact_text(brief(exc))  # a driver's error text may hold a secret
            log.warning("inspector.first_sight_failed", table=str(ref), error=error)
            return
        if sighting.taken:
            log.info("inspector.first_sight", table=str(ref), taken=sighting.taken)

    async def _refresh(
        self, ref: TableRef, row: asyncpg.Record
    ) -> tuple[TableStatus, EffectivePolicy | None]:
        """The stored status brought up to date from the metadata JSON alone (a refresh)."""
        previous = await latest_status(self.pool, row["id"])
        status = await self.inspector.refresh(ref, previous, row["metadata_location"])
        policy = await self._policy(ref, row["properties"] or {})
        status = await self.clustered(ref, status, None, policy, row["properties"] or {})
        return status, policy

    async def _inspect(
        self, ref: TableRef, row: asyncpg.Record
    ) -> tuple[TableStatus, EffectivePolicy | None, LoadedTable]:
        """A full inspection of the loaded table; the row's properties and location follow
        what the metadata says.

        Raises:
            InspectionFailed: the table could not be inspected, or its properties recorded.
        """
        started = time.monotonic()
        table = await self.inspector.load(ref, row["metadata_location"])
        properties = dict(table.properties)
        unfit = unstorable_properties(properties)
        if unfit is not None:  # Postgres refuses it: a reason, not a retry for ever
            raise InspectionFailed(f"the table's properties cannot be recorded: {unfit}")
        status = await self.inspector.inspect_loaded(ref, table, started)
        policy = await self._policy(ref, properties)
        status = await self.clustered(ref, status, table, policy, properties)
        if properties != (row["properties"] or {}):
            # Catalog listings (SQL, Glue) carry no properties; the metadata does, and the
            # planner and executor read icepack.* overrides from this row.
            await self.pool.execute(load_query("table_set_properties"), row["id"], properties)
        # Orphan removal refuses overlapping table locations (safety.admission).
        if table.location() != row["location"]:
            await self.pool.execute(load_query("table_set_location"), row["id"], table.location())
        return status, policy, table

    async def _policy(self, ref: TableRef, properties: dict[str, str]) -> EffectivePolicy | None:
        """The table's effective policy (Icepack's attachments and Polaris', then its
        ``icepack.*`` properties), read once per inspection; None when it is invalid (the
        planner reports that, health is not the place)."""
        attachments = await attachments_of(self.pool, ref.catalog)
        try:
            return resolve(attachments, ref.namespace, ref.name, properties)
        except PolicyError:
            return None

    def _thresholds(self, policy: EffectivePolicy | None) -> Thresholds:
        """The health thresholds of one table: its ``icepack.table-statistics`` policy, when
        enabled, sets the statistics rules (``health.with_statistics_policy``); without a
        valid policy, the defaults."""
        if policy is None:
            return self.thresholds
        return with_statistics_policy(self.thresholds, policy.table_statistics)

    async def clustered(
        self,
        ref: TableRef,
        status: TableStatus,
        loaded: LoadedTable | None,
        policy: EffectivePolicy | None,
        properties: dict[str, str],
    ) -> TableStatus:
        """``status`` with its clustering on the policy's key (``inspection.layout_key``):
        measured on a fresh inspection (``loaded``), kept on a refresh unless the key changed.
        A measurement that fails is recorded as the figure's ``error``, never as a failed
        inspection."""
        key = None if policy is None else layout_key(policy, properties)
        if key is None:
            return status.model_copy(update={"clustering": None})
        if loaded is None and key.measured_by(status.clustering):
            return status
        try:
            if loaded is None:
                loaded = await self.inspector.load(ref)
            if loaded.table is None:
                raise InspectionFailed("PyIceberg's model rejected the metadata")
            clustering = await measure_key(loaded.table, key)
        except Exception as exc:  # the figure is evidence: the status still stands
            clustering = Clustering(
                strategy=key.strategy,
                columns=list(key.zorder_columns),
                max_overlap_ratio=key.max_overlap_ratio,
                target_file_size_bytes=key.target_file_size_bytes,
                error=storable(redact_text(brief(exc))),
            )
        return status.model_copy(update={"clustering": clustering})

    async def process(self, item: WorkItem) -> None:
        """``run_event_service``'s callback."""
        await self.inspect_and_record(item.table_id, item.reason)

    async def parked(self, dead: DeadHolder) -> None:
        """``run_workers``' ``on_parked``: the table's inspection killed (or hung) its worker
        ``dead.deaths`` times in a row; record that as an ``INSPECTION_FAILED`` assessment,
        where an operator looks (``GET /tables/.../health``), instead of trying for ever."""
        message = (
            f"the inspector process stopped {dead.deaths} times while inspecting this table "
            f"(its lease expired: killed, out of memory or hung; {dead.reason}); no more "
            "attempts until the table changes or an inspection is requested"
        )
        assessment = inspection_failed(storable(redact_text(message)))
        async with self.pool.acquire() as raw, raw.transaction():
            await record_inspection(cast(asyncpg.Connection, raw), dead.table_id, None, assessment)
        log.error("inspector.parked", table_id=dead.table_id, deaths=dead.deaths)

    async def request_refresh(
        self, queue: WorkQueue, max_age_seconds: float, now: datetime | None = None
    ) -> int:
        """Queue an age-based refresh for every table assessed longer ago than
        ``max_age_seconds`` (or never) that has no work item of ``queue``'s service yet (that
        item assesses it anyway); returns how many were queued."""
        rows = await self.pool.fetch(
            load_query("health_stale_tables"), max_age_seconds, now, REFRESH_BATCH, queue.service
        )
        if not rows:
            return 0
        async with self.pool.acquire() as raw, raw.transaction():
            conn = cast(asyncpg.Connection, raw)
            for r in rows:
                await queue.request(conn, r["id"], REFRESH_REASON)
        return len(rows)
