"""OpenTelemetry set-up and W3C ``traceparent`` propagation through events.

Producers store ``current_traceparent()`` on each event they write; consumers start their span
with ``parent_context(event.traceparent)`` as parent, so one trace follows a table across
services even though they only meet in Postgres.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()
TRACER_NAME = "icepack"


def current_traceparent() -> str | None:
    """The W3C traceparent of the active span, or None outside a recorded span."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def parent_context(traceparent: str | None) -> Context | None:
    """A context whose parent is the span named by ``traceparent`` (None when absent/invalid)."""
    if not traceparent:
        return None
    ctx = _PROPAGATOR.extract({"traceparent": traceparent})
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        return None
    return ctx


def span_link(traceparent: str | None) -> trace.Link | None:
    """A link to the span named by ``traceparent`` (for fan-in: many events, one unit of work)."""
    ctx = parent_context(traceparent)
    if ctx is None:
        return None
    return trace.Link(trace.get_current_span(ctx).get_span_context())


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


@dataclass
class Telemetry:
    """The providers one process installed; ``shutdown()`` flushes them."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def setup_telemetry(service: str, extra_readers: list[MetricReader] | None = None) -> Telemetry:
    """Install global tracer and meter providers for ``service``.

    Spans and metrics go to OTLP/HTTP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set; metrics are
    also exposed in Prometheus text format through ``prometheus_client``'s default registry.
    """
    resource = Resource.create(
        {"service.name": os.environ.get("OTEL_SERVICE_NAME", f"icepack-{service}")}
    )
    tracer_provider = TracerProvider(resource=resource)
    readers: list[MetricReader] = list(extra_readers or [])
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    from opentelemetry.exporter.prometheus import PrometheusMetricReader

    readers.append(PrometheusMetricReader())
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    return Telemetry(tracer_provider, meter_provider)
