"""The gauges the shipped alert rules and dashboard stand on (``deploy/prometheus/``), added to
the gateway's ``/metrics`` and computed from Postgres at scrape time like the fleet gauges of
``icepack_gateway.metrics`` (docs/architecture.md, "Telemetry").

Cardinality is bounded: no label names a table. Labels are the catalog (configured catalogs,
plus any ``catalog_status`` still remembers), the consumer (one per service), the action (the
``Action`` vocabulary; anything else is ``other``), the error class (``jobs.error_code``, an
exception's code) and fixed state sets.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import asyncpg
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from icepack_core.db.pool import Conn
from icepack_core.db.queries import load_query
from icepack_core.types import Action
from icepack_gateway.state import AlertInputs

TERMINAL_STATES = ("succeeded", "failed", "cancelled")
ACTIONS = frozenset(a.value for a in Action)
QUANTILES = ("0.5", "0.9", "0.99")


@dataclass(frozen=True)
class CatalogReading:
    """One ``catalog_status`` row as the gauges need it."""

    catalog: str
    last_ok: float | None  # epoch seconds of the last successful pass; None: never
    failing: bool
    tables: int
    skipped: int
    pass_seconds: float | None


@dataclass
class AlertReading:
    """What one scrape read for the alerting gauges."""

    inputs: AlertInputs
    catalogs: set[str] = field(default_factory=set)
    held: dict[str, int] = field(default_factory=dict)
    backoff: dict[str, int] = field(default_factory=dict)
    finished: dict[str, int] = field(default_factory=dict)
    failures: dict[tuple[str, str], int] = field(default_factory=dict)  # (action, reason)
    oldest_claimable: float = 0.0
    claim_latency: dict[str, float] = field(default_factory=dict)
    claimed: int = 0
    lag_seconds: dict[str, float] = field(default_factory=dict)
    catalog_status: list[CatalogReading] = field(default_factory=list)
    pending_verifications: int = 0
    stale_verifications: int = 0
    oldest_stale_verification: float = 0.0
    quarantine: tuple[int, int, int, int] = (0, 0, 0, 0)  # files, bytes, due files, due bytes
    webhooks: dict[str, int] = field(default_factory=dict)  # deliveries by state
    webhook_oldest_pending: float = 0.0
    read_seconds: float = 0.0


async def _one(conn: Conn, query: str, *args: object) -> asyncpg.Record:
    """The one row an aggregate query always answers."""
    row = await conn.fetchrow(query, *args)
    assert row is not None, "an aggregate without GROUP BY answers one row"
    return row


def action_label(action: str) -> str:
    """A job's action as a label: one of ``Action``, else ``other`` (bounded cardinality)."""
    return action if action in ACTIONS else "other"


async def read_alerting(
    pool: asyncpg.Pool, inputs: AlertInputs, catalogs: frozenset[str]
) -> AlertReading:
    """Read everything the alerting gauges show, on one connection."""
    start = time.perf_counter()
    r = AlertReading(inputs=inputs, catalogs=set(catalogs))
    async with pool.acquire() as conn:
        r.held = {
            x["catalog"]: x["tables"] for x in await conn.fetch(load_query("table_held_counts"))
        }
        r.backoff = {
            x["catalog"]: x["tables"]
            for x in await conn.fetch(
                load_query("table_backoff_counts"),
                inputs.failure_backoff_base_seconds,
                inputs.failure_backoff_cap_seconds,
            )
        }
        await _read_jobs(conn, r)
        r.lag_seconds = {
            x["consumer"]: x["seconds"] for x in await conn.fetch(load_query("consumer_lag_age"))
        }
        r.catalog_status = [
            CatalogReading(
                x["catalog"],
                x["last_ok"],
                x["failing"],
                x["table_count"],
                x["skipped"],
                x["last_pass_seconds"],
            )
            for x in await conn.fetch(load_query("catalog_status_all"))
        ]
        pv = await _one(
            conn, load_query("table_pending_verification_counts"), inputs.job_lease_seconds
        )
        r.pending_verifications, r.stale_verifications = pv["pending"], pv["stale"]
        r.oldest_stale_verification = pv["oldest_stale"] or 0.0
        q = await _one(conn, load_query("deletion_quarantine_totals"))
        r.quarantine = (q["files"], q["bytes"], q["due_files"], q["due_bytes"])
        for x in await conn.fetch(load_query("webhook_delivery_counts")):
            r.webhooks[x["state"]] = x["deliveries"]
            if x["state"] == "pending":
                r.webhook_oldest_pending = x["oldest_seconds"]
    r.catalogs |= {c.catalog for c in r.catalog_status} | set(r.held) | set(r.backoff)
    r.read_seconds = time.perf_counter() - start
    return r


async def _read_jobs(conn: Conn, r: AlertReading) -> None:
    r.finished = dict.fromkeys(TERMINAL_STATES, 0)
    for x in await conn.fetch(load_query("job_finished_recent")):
        r.finished[x["state"]] = x["jobs"]
    for x in await conn.fetch(load_query("job_failures_recent")):
        key = (action_label(x["action"]) if x["action"] else "none", x["reason"])
        r.failures[key] = r.failures.get(key, 0) + x["jobs"]
    times = await _one(conn, load_query("job_claim_times"))
    r.oldest_claimable = times["oldest_claimable_seconds"] or 0.0
    r.claimed = times["claimed"]
    if times["claim_latency"] is not None:
        r.claim_latency = dict(zip(QUANTILES, times["claim_latency"], strict=True))


def gauge(
    name: str, doc: str, value: float | None = None, labels: list[str] | None = None
) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value, labels=labels)


class AlertCollector(Collector):
    """Turns one ``AlertReading`` into the alerting metric families."""

    def __init__(self, reading: AlertReading) -> None:
        self.reading = reading

    def collect(self) -> Iterator[Metric]:
        yield from self._tables()
        yield from self._jobs()
        yield from self._catalogs()
        yield from self._safety()
        yield from self._webhooks()
        yield gauge(
            "icepack_gateway_alerting_read_seconds",
            "Time this scrape spent reading Postgres for the alerting gauges.",
            self.reading.read_seconds,
        )

    def _tables(self) -> Iterator[Metric]:
        r = self.reading
        held = gauge(
            "icepack_tables_held",
            "Tables whose automatic maintenance is stopped (maintenance_hold), per catalog.",
            labels=["catalog"],
        )
        backoff = gauge(
            "icepack_tables_failure_backoff",
            "Tables with an action resting after permanent failures (failure backoff), per "
            "catalog.",
            labels=["catalog"],
        )
        for catalog in sorted(r.catalogs):
            held.add_metric([catalog], r.held.get(catalog, 0))
            backoff.add_metric([catalog], r.backoff.get(catalog, 0))
        yield held
        yield backoff

    def _jobs(self) -> Iterator[Metric]:
        r = self.reading
        finished = gauge(
            "icepack_jobs_finished_last_hour",
            "Jobs that reached a terminal state in the last hour, by state.",
            labels=["state"],
        )
        for state, count in r.finished.items():
            finished.add_metric([state], count)
        yield finished
        failures = gauge(
            "icepack_job_failures_last_hour",
            "Jobs failed for good in the last hour, by action and error class (jobs.error_code).",
            labels=["action", "reason"],
        )
        for (action, reason), count in sorted(r.failures.items()):
            failures.add_metric([action, reason], count)
        yield failures
        yield gauge(
            "icepack_queue_oldest_claimable_job_age_seconds",
            "How long the oldest claimable job (due, within every budget) has waited since it "
            "became due; 0 when none is.",
            r.oldest_claimable,
        )
        latency = gauge(
            "icepack_job_claim_latency_seconds",
            "Wait from due to claim of the jobs claimed in the last hour, by quantile.",
            labels=["quantile"],
        )
        for quantile, seconds in r.claim_latency.items():
            latency.add_metric([quantile], seconds)
        yield latency
        yield gauge(
            "icepack_jobs_claimed_last_hour", "Claims in the last hour (retries too).", r.claimed
        )
        lag = gauge(
            "icepack_consumer_lag_seconds",
            "How long each consumer's oldest unread event has waited (0: caught up).",
            labels=["consumer"],
        )
        for consumer, seconds in sorted(r.lag_seconds.items()):
            lag.add_metric([consumer], seconds)
        yield lag

    def _catalogs(self) -> Iterator[Metric]:
        r = self.reading
        labels = ["catalog"]
        last_ok = gauge(
            "icepack_catalog_last_success_timestamp_seconds",
            "When discovery last listed the catalog successfully (Unix time; 0: never).",
            labels=labels,
        )
        failing = gauge(
            "icepack_catalog_failing",
            "1 when discovery's last pass over the catalog failed (catalog_status.last_error).",
            labels=labels,
        )
        tables = gauge("icepack_catalog_tables", "Tables the last pass listed.", labels=labels)
        skipped = gauge(
            "icepack_catalog_skipped_tables",
            "Tables the last pass could not store (catalog_status.skipped_tables).",
            labels=labels,
        )
        duration = gauge(
            "icepack_catalog_pass_seconds",
            "Wall time of the last successful pass (listing and applying it).",
            labels=labels,
        )
        for c in r.catalog_status:
            last_ok.add_metric([c.catalog], c.last_ok or 0.0)
            failing.add_metric([c.catalog], 1 if c.failing else 0)
            tables.add_metric([c.catalog], c.tables)
            skipped.add_metric([c.catalog], c.skipped)
            if c.pass_seconds is not None:
                duration.add_metric([c.catalog], c.pass_seconds)
        yield from (last_ok, failing, tables, skipped, duration)
        yield gauge(
            "icepack_discovery_interval_seconds",
            "ICEPACK_DISCOVERY_INTERVAL_SECONDS as the gateway reads it (the alert on a stale "
            "catalog counts in these intervals).",
            r.inputs.discovery_interval_seconds,
        )

    def _safety(self) -> Iterator[Metric]:
        r = self.reading
        yield gauge(
            "icepack_pending_verifications",
            "Rewrites started and not yet verified (pending_verifications rows).",
            r.pending_verifications,
        )
        yield gauge(
            "icepack_pending_verifications_stale",
            "Pending verifications older than a job lease whose job no longer runs under their "
            "fence (left by a crash or a lost lease; the next job on the table verifies them).",
            r.stale_verifications,
        )
        yield gauge(
            "icepack_pending_verification_stale_age_seconds",
            "Age of the oldest stale pending verification (0: none).",
            r.oldest_stale_verification,
        )
        files, size, due_files, due_bytes = r.quarantine
        yield gauge("icepack_quarantined_files", "Files in quarantine awaiting purge.", files)
        yield gauge("icepack_quarantined_bytes", "Bytes in quarantine awaiting purge.", size)
        yield gauge(
            "icepack_quarantine_purge_due_files",
            "Quarantined files whose purge_after has passed (the planner queues their purge).",
            due_files,
        )
        yield gauge(
            "icepack_quarantine_purge_due_bytes",
            "Bytes of the quarantined files whose purge is due.",
            due_bytes,
        )

    def _webhooks(self) -> Iterator[Metric]:
        r = self.reading
        deliveries = gauge(
            "icepack_webhook_deliveries",
            "Webhook notifications by state (pending, delivered, failed; finished ones are "
            "kept for ICEPACK_EVENT_RETENTION_HOURS).",
            labels=["state"],
        )
        for state, count in sorted(r.webhooks.items()):
            deliveries.add_metric([state], count)
        yield deliveries
        yield gauge(
            "icepack_webhook_oldest_pending_seconds",
            "Age of the oldest webhook notification not delivered yet (0: none).",
            r.webhook_oldest_pending,
        )
