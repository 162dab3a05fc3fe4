"""What ``bench.stream`` measures on the tables and in Icepack's database, over time.

Per table, from its current metadata (PyIceberg through the catalog): data files per partition
(p50, max, and the open partition's, the one with the newest file), snapshots retained and the
metadata file's size; from every snapshot's summary seen so far (kept across samples, since
expiry may drop snapshots): bytes the writers added and bytes Icepack's rewrites added. From
Icepack's database: jobs by outcome, Spark busy time (the actions' run time), holds, rollbacks.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import asyncpg
from pyiceberg.catalog import Catalog

from bench.stream.writers import checksum

REWRITE_OPERATIONS = {"replace"}  # rewrite_data_files / rewrite_manifests commit these


@dataclass
class Bytes:
    """Bytes added by the writers and by Icepack's rewrites, per snapshot seen (by id)."""

    seen: set[int] = field(default_factory=set)
    written: int = 0
    rewritten: int = 0

    def add(self, snapshot: Any) -> None:
        if snapshot.snapshot_id in self.seen:
            return
        self.seen.add(snapshot.snapshot_id)
        summary = snapshot.summary
        added = int(summary.get("added-files-size", 0) or 0) if summary is not None else 0
        operation = str(summary.operation.value) if summary is not None else ""
        if operation in REWRITE_OPERATIONS:
            self.rewritten += added
        else:
            self.written += added


# Icepack's default open-partition quiet period (policy ``open_partition_quiet_minutes``): a
# partition without a writer's file for this long is closed. A closed partition is compacted
# by the next run after it closes, so the goal (<= 2 files) is checked on partitions closed
# for longer than the quiet period plus ``SETTLE`` (one pressure interval and a run).
QUIET_SECONDS = 600.0
SETTLE_SECONDS = 180.0


@dataclass(frozen=True)
class TableSample:
    """One table at one sample: data files per partition (p50, max; every file here is
    small), the open partitions' max (a writer's file within the quiet period), the settled
    closed partitions' max and count, and those closed too recently to have been compacted."""

    table: str
    partitions: int
    files_p50: float
    files_max: int
    open_files: int
    closed_max: int
    closed: int
    closing_max: int
    snapshots: int
    metadata_bytes: int


def _last_writes(table: Any) -> dict[str, tuple[int, int | None]]:
    """Per partition: live data files and the newest writer's (non-``replace``) commit time
    among the snapshots that added them (None: every one was added by a rewrite)."""
    ops = {
        s.snapshot_id: None
        if s.summary is not None and str(s.summary.operation.value) in REWRITE_OPERATIONS
        else s.timestamp_ms
        for s in table.metadata.snapshots
    }
    entries = table.inspect.entries().select(["status", "snapshot_id", "data_file"])
    per: dict[str, tuple[int, int | None]] = {}
    statuses = entries.column("status").to_pylist()
    snapshots = entries.column("snapshot_id").to_pylist()
    files = entries.column("data_file").to_pylist()
    for status, snapshot, data_file in zip(statuses, snapshots, files, strict=True):
        if status == 2 or data_file["content"] != 0:  # deleted entry, delete file
            continue
        key = repr(sorted((data_file["partition"] or {}).items()))
        count, last = per.get(key, (0, None))
        written = ops.get(snapshot)
        if written is not None and (last is None or written > last):
            last = written
        per[key] = (count + 1, last)
    return per


def sample_table(catalog: Catalog, ident: str, seen: Bytes) -> TableSample:
    table = catalog.load_table(ident)
    for snapshot in table.metadata.snapshots:
        seen.add(snapshot)
    per = _last_writes(table) if table.metadata.current_snapshot() else {}
    counts = sorted(n for n, _ in per.values()) or [0]
    now_ms = time.time() * 1000
    open_files: list[int] = []
    closed: list[int] = []
    closing: list[int] = []
    for n, last in per.values():
        quiet = (now_ms - last) / 1000 if last is not None else float("inf")
        if quiet < QUIET_SECONDS:
            open_files.append(n)
        elif quiet < QUIET_SECONDS + SETTLE_SECONDS:
            closing.append(n)
        else:
            closed.append(n)
    location = urlsplit(table.metadata_location)
    path = location.path if location.scheme in ("file", "") else ""
    return TableSample(
        ident,
        len(per),
        float(statistics.median(counts)),
        max(counts),
        max(open_files, default=0),
        max(closed, default=0),
        len(closed),
        max(closing, default=0),
        len(table.metadata.snapshots),
        os.path.getsize(path) if path else 0,
    )


def contents(catalog: Catalog, ident: str) -> tuple[int, int]:
    """Row count and checksum of the table's current snapshot (``writers.checksum``)."""
    rows = catalog.load_table(ident).scan(selected_fields=("id", "v")).to_arrow()
    return checksum(rows)


@dataclass(frozen=True)
class Icepack:
    """Icepack's side: jobs by state (and how many needed more than one attempt), Spark busy
    seconds, tables held, rollbacks."""

    jobs: dict[str, int]
    retried: int
    # Jobs given back after a commit conflict at least once (``jobs.conflicts``), and the
    # (table, action) pairs deferred after conflicts in a row (``maintenance_deferrals``).
    conflict_retried: int
    deferred: int
    spark_seconds: float
    held: int
    rollbacks: int
    actions: dict[str, int]
    # Per table, the newest plan's word on rewrite_data_files (due, or why not).
    decisions: dict[str, str]


async def icepack_side(pool: asyncpg.Pool) -> Icepack:
    jobs = {
        r["state"]: r["n"]
        for r in await pool.fetch("SELECT state, count(*) AS n FROM icepack.jobs GROUP BY 1")
    }
    retried = await pool.fetchval("SELECT count(*) FROM icepack.jobs WHERE attempts > 1")
    conflict_retried = await pool.fetchval("SELECT count(*) FROM icepack.jobs WHERE conflicts > 0")
    deferred = await pool.fetchval(
        "SELECT count(*) FROM icepack.maintenance_deferrals WHERE deferred_until IS NOT NULL"
    )
    spark_ms = await pool.fetchval(
        "SELECT coalesce(sum(duration_ms), 0) FROM icepack.job_actions WHERE procedure IS NOT NULL"
    )
    held = await pool.fetchval(
        "SELECT count(*) FROM icepack.tables WHERE maintenance_hold IS NOT NULL"
    )
    rollbacks = await pool.fetchval(
        "SELECT count(*) FROM icepack.job_actions WHERE output::text LIKE '%\"rolled_back\": true%'"
    )
    actions = {
        r["action"]: r["n"]
        for r in await pool.fetch(
            "SELECT action, count(*) AS n FROM icepack.job_actions "
            "WHERE state = 'succeeded' GROUP BY 1"
        )
    }
    decisions = {
        f"{r['namespace']}.{r['name']}": r["reason"] or ""
        for r in await pool.fetch(
            "SELECT t.namespace, t.name, (SELECT coalesce("
            "  (SELECT a->>'reason' FROM jsonb_array_elements(r.actions->'actions') a"
            "    WHERE a->>'action' = 'rewrite_data_files'),"
            "  (SELECT s->>'reason' FROM jsonb_array_elements(r.actions->'skipped') s"
            "    WHERE s->>'action' = 'rewrite_data_files'))"
            " FROM icepack.recommendations r WHERE r.table_id = t.id"
            " ORDER BY r.id DESC LIMIT 1) AS reason FROM icepack.tables t"
        )
    }
    return Icepack(
        jobs,
        int(retried),
        int(conflict_retried),
        int(deferred),
        float(spark_ms) / 1000,
        int(held),
        int(rollbacks),
        actions,
        decisions,
    )


async def timeline(pool: asyncpg.Pool) -> dict[str, list[dict[str, Any]]]:
    """Per table, its plans' word on ``rewrite_data_files`` (with the status each read) and
    its compaction runs, oldest first: what ``--timeline`` writes for a post-mortem."""
    plans = await pool.fetch(
        "SELECT t.namespace || '.' || t.name AS tbl, r.created_at AS at, s.inspected_at,"
        " s.current_snapshot_id::text AS snapshot, s.status->>'small_file_count' AS small,"
        " s.status->>'max_files_in_partition' AS fullest, coalesce("
        "  (SELECT 'DUE ' || (a->>'reason') FROM jsonb_array_elements(r.actions->'actions') a"
        "    WHERE a->>'action' = 'rewrite_data_files'),"
        "  (SELECT s2->>'reason' FROM jsonb_array_elements(r.actions->'skipped') s2"
        "    WHERE s2->>'action' = 'rewrite_data_files')) AS verdict"
        " FROM icepack.recommendations r JOIN icepack.tables t ON t.id = r.table_id"
        " LEFT JOIN icepack.status_snapshots s ON s.id = r.status_snapshot_id ORDER BY r.id"
    )
    runs = await pool.fetch(
        "SELECT t.namespace || '.' || t.name AS tbl, a.action, a.state, a.started_at,"
        " a.finished_at AS at, a.error, a.impact->>'snapshot_after' AS snapshot_after,"
        " a.output - 'verification' AS output, j.conflicts, j.attempts"
        " FROM icepack.job_actions a JOIN icepack.jobs j ON j.id = a.job_id"
        " JOIN icepack.tables t ON t.id = j.table_id ORDER BY a.finished_at"
    )
    found: dict[str, list[dict[str, Any]]] = {}
    for row in [*plans, *runs]:
        entry = {k: v if isinstance(v, int | float | None) else str(v) for k, v in row.items()}
        found.setdefault(str(row["tbl"]), []).append(entry)
    for entries in found.values():
        entries.sort(key=lambda e: str(e["at"]))
    return found
