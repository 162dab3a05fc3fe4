"""The OpenTelemetry instruments services record into (docs/architecture.md, "Telemetry").

Instruments are created on the global meter at import; OpenTelemetry's proxy meter binds them
to the provider ``telemetry.setup_telemetry`` installs later. Every service exposes its own
metrics at ``/metrics`` (Prometheus text); the gateway adds fleet gauges read from Postgres
(queue depth by state, tables by health, consumer lag, budget use per scope).
"""

from __future__ import annotations

from opentelemetry import metrics

_meter = metrics.get_meter("icepack")

JOB_ACTION_DURATION = _meter.create_histogram(
    "icepack.job.action.duration",
    unit="s",
    description="Wall time of one maintenance action, by action and state",
)
JOBS_FINISHED = _meter.create_counter(
    "icepack.jobs.finished", description="Jobs an executor finished, by outcome"
)
COMMIT_CONFLICTS = _meter.create_counter(
    "icepack.jobs.commit_conflicts",
    description="Maintenance actions that lost an Iceberg commit conflict to a writer, by action "
    "and outcome (retried: the job waits its backoff; deferred: the action waits on the table)",
)
INSPECTION_DURATION = _meter.create_histogram(
    "icepack.inspection.duration",
    unit="ms",
    description="Wall time of one table inspection, by inspector and outcome",
)
CATALOG_CALLS = _meter.create_counter(
    "icepack.discovery.catalog.calls",
    description=(
        "Requests discovery sent a catalog, by catalog and kind (list, load, conditional, "
        "not_modified, query; a conditional load also counts its answer: load or not_modified)"
    ),
)
MANIFESTS_READ = _meter.create_counter(
    "icepack.inspection.manifests.read", description="Manifests decoded by inspections"
)
MANIFESTS_CACHED = _meter.create_counter(
    "icepack.inspection.manifests.cached",
    description="Manifests whose aggregates came from the manifest_stats cache",
)
