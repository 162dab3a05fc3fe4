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
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pyarrow.compute as pc
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


@dataclass(frozen=True)
class TableSample:
    table: str
    partitions: int
    files_p50: float
    files_max: int
    open_files: int
    closed_max: int
    snapshots: int
    metadata_bytes: int


def sample_table(catalog: Catalog, ident: str, seen: Bytes) -> TableSample:
    table = catalog.load_table(ident)
    for snapshot in table.metadata.snapshots:
        seen.add(snapshot)
    files = table.inspect.files().select(["partition", "content"])
    files = files.filter(pc.equal(files.column("content"), 0))
    per: dict[str, int] = {}
    for part in files.column("partition").to_pylist():
        key = repr(sorted((part or {}).items()))
        per[key] = per.get(key, 0) + 1
    counts = sorted(per.values()) or [0]
    # The open partition: hour(ts) grows the newest hour; elsewhere every partition is "open".
    open_key = max(per, default="") if ident.endswith("hourly") else ""
    open_files = per.get(open_key, max(counts))
    closed = [n for k, n in per.items() if k != open_key] if open_key else []
    location = urlsplit(table.metadata_location)
    path = location.path if location.scheme in ("file", "") else ""
    return TableSample(
        ident,
        len(per),
        float(statistics.median(counts)),
        max(counts),
        open_files,
        max(closed, default=0),
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
        jobs, int(retried), float(spark_ms) / 1000, int(held), int(rollbacks), actions, decisions
    )
