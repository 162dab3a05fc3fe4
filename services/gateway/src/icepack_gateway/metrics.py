"""``/metrics``: fleet gauges computed from Postgres at scrape time, plus the process's own
OpenTelemetry metrics (exported through prometheus_client's default registry by the
``PrometheusMetricReader`` that ``icepack_core.telemetry.tracing`` installs).

prometheus_client collectors are synchronous, so the scrape handler first reads the database
(async), then hands the readings to a ``FleetCollector`` in a per-scrape registry. Nothing is
cached: every replica answers from the database, which is the whole state.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import asyncpg
from opentelemetry import metrics
from opentelemetry.metrics import MeterProvider
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from icepack_core.db.queries import load_query
from icepack_core.queue.budgets import BudgetUse
from icepack_core.types import Health
from icepack_gateway.alert_metrics import AlertCollector, read_alerting
from icepack_gateway.endpoint import AnyEndpoint, AnyParams, Call, Endpoint, NoBody, NoParams, Reply
from icepack_gateway.state import gateway


@dataclass
class FleetReading:
    """What one scrape read from Postgres."""

    queue: list[tuple[str, int, int, float | None]] = field(default_factory=list)
    health: dict[str, int] = field(default_factory=dict)
    lag: dict[str, int] = field(default_factory=dict)
    budgets: list[BudgetUse] = field(default_factory=list)
    read_seconds: float = 0.0


async def read_fleet(pool: asyncpg.Pool) -> FleetReading:
    start = time.perf_counter()
    reading = FleetReading()
    async with pool.acquire() as conn:
        for row in await conn.fetch(load_query("job_queue_depth")):
            reading.queue.append(
                (row["state"], row["jobs"], row["claimable"], row["oldest_age_seconds"])
            )
        reading.health = {h.value: 0 for h in Health}
        for row in await conn.fetch(load_query("health_fleet_counts")):
            reading.health[row["health"]] = row["tables"]
        lag = await conn.fetch(load_query("consumer_lag"))
        reading.lag = {r["consumer"]: r["lag"] for r in lag}
        budgets = await conn.fetch(load_query("budget_use_all"))
        reading.budgets = [BudgetUse.from_record(b) for b in budgets]
    reading.read_seconds = time.perf_counter() - start
    return reading


class FleetCollector(Collector):
    """Turns one ``FleetReading`` into Prometheus metric families."""

    def __init__(self, reading: FleetReading) -> None:
        self.reading = reading

    def collect(self) -> Iterator[Metric]:
        r = self.reading
        jobs = GaugeMetricFamily("icepack_queue_jobs", "Jobs by state (v_queue).", labels=["state"])
        oldest = GaugeMetricFamily(
            "icepack_queue_oldest_job_age_seconds",
            "Age of the oldest job in each state.",
            labels=["state"],
        )
        claimable = 0
        for state, count, due, age in r.queue:
            jobs.add_metric([state], count)
            claimable += due
            if age is not None:
                oldest.add_metric([state], age)
        yield jobs
        yield oldest
        yield GaugeMetricFamily(
            "icepack_queue_claimable_jobs",
            "Jobs claims in a row would take now: queued, due, within every budget (what KEDA "
            "scales executors on).",
            value=claimable,
        )
        tables = GaugeMetricFamily(
            "icepack_tables",
            "Tables still in their catalog, by the health of their latest assessment.",
            labels=["health"],
        )
        for health, count in sorted(r.health.items()):
            tables.add_metric([health], count)
        yield tables
        lag = GaugeMetricFamily(
            "icepack_consumer_lag_events",
            "Outbox events each consumer has not read yet.",
            labels=["consumer"],
        )
        for consumer, count in sorted(r.lag.items()):
            lag.add_metric([consumer], count)
        yield lag
        yield from budget_metrics(r.budgets)
        yield GaugeMetricFamily(
            "icepack_gateway_scrape_read_seconds",
            "Time this scrape spent reading Postgres.",
            value=r.read_seconds,
        )


def budget_metrics(budgets: list[BudgetUse]) -> Iterator[Metric]:
    """Per budget scope (labels catalog, namespace; namespace "" = the whole catalog): its use
    now and its limits (a limit that is unset has no sample)."""
    labels = ["catalog", "namespace"]
    families = {
        "running": GaugeMetricFamily(
            "icepack_budget_running_jobs", "Jobs running in the budget's scope.", labels=labels
        ),
        "max_running": GaugeMetricFamily(
            "icepack_budget_max_running_jobs", "The budget's cap on running jobs.", labels=labels
        ),
        "charged": GaugeMetricFamily(
            "icepack_budget_charged_bytes",
            "Rewrite bytes charged in the scope over the last hour (one charge per claim).",
            labels=labels,
        ),
        "per_hour": GaugeMetricFamily(
            "icepack_budget_rewrite_bytes_per_hour",
            "The budget's rewrite bytes per sliding hour.",
            labels=labels,
        ),
        "oversized": GaugeMetricFamily(
            "icepack_budget_oversized_jobs",
            "Queued jobs in scope bigger than the hourly budget (they can never run).",
            labels=labels,
        ),
    }
    for b in budgets:
        scope = [b.catalog, b.namespace or ""]
        families["running"].add_metric(scope, b.running)
        families["charged"].add_metric(scope, b.charged_bytes)
        families["oversized"].add_metric(scope, len(b.oversized_jobs))
        if b.max_running is not None:
            families["max_running"].add_metric(scope, b.max_running)
        if b.rewrite_bytes_per_hour is not None:
            families["per_hour"].add_metric(scope, b.rewrite_bytes_per_hour)
    yield from families.values()


async def metrics_endpoint(call: Call[NoParams, AnyParams, NoBody]) -> Response:
    state = gateway(call.request)
    reading = await read_fleet(state.pool)
    alerting = await read_alerting(state.pool, state.alerting, state.catalogs)
    fleet = CollectorRegistry(auto_describe=False)
    fleet.register(FleetCollector(reading))
    fleet.register(AlertCollector(alerting))
    body = generate_latest(fleet) + generate_latest(REGISTRY)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


OTHER_METHOD = "_OTHER"  # OpenTelemetry's semantic-convention value for any other method
STANDARD_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}
)


def route_methods(routes: Iterable[BaseRoute]) -> frozenset[str]:
    """The HTTP methods some route answers (``HEAD`` with every ``GET``)."""
    return frozenset(m for r in routes for m in (getattr(r, "methods", None) or ()))


class RequestMetrics:
    """Pure ASGI middleware recording ``http.server.request.duration`` per route template and
    method. Labels stay bounded whatever clients send: templates, never raw paths, and a method
    no route answers (anyone may send ``FOO1``, ``FOO2``, ... without a token) is recorded as
    ``_OTHER``, so it cannot fill the SDK's label cap and push real routes into overflow.
    ``meter_provider`` is for tests (default: the global one)."""

    def __init__(
        self,
        app: ASGIApp,
        methods: frozenset[str] = STANDARD_METHODS,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self.app = app
        self.methods = methods
        meter = metrics.get_meter("icepack.gateway", meter_provider=meter_provider)
        self.duration = meter.create_histogram(
            "http.server.request.duration", unit="s", description="Gateway request duration."
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.duration.record(
                time.perf_counter() - start,
                {
                    "http.request.method": (
                        scope["method"] if scope["method"] in self.methods else OTHER_METHOD
                    ),
                    "http.route": template,
                    "http.response.status_code": status,
                },
            )


endpoints: list[AnyEndpoint] = [
    Endpoint(
        "GET",
        "/metrics",
        metrics_endpoint,
        summary="Prometheus metrics (fleet gauges read at scrape time)",
        query=AnyParams,
        responses={200: Reply("Prometheus text format", media_type="text/plain")},
    ),
]
