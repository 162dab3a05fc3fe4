"""OpenTelemetry set-up and W3C ``traceparent`` propagation through events.

Producers store ``current_traceparent()`` on each event they write; consumers start their span
with ``parent_context(event.traceparent)`` as parent, so one trace follows a table across
services even though they only meet in Postgres.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Status
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from icepack_core.telemetry.logs import redact, redact_text

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


def _redact_attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: redact(v, k) for k, v in (attributes or {}).items()}


class RedactingSpanProcessor(SpanProcessor):
    """Hands ``inner`` a copy of each finished span with secrets masked (``logs.redact``) in
    its attributes, its events' attributes (recorded exceptions carry messages that may quote
    a URL with a token) and its status description. Spans are read-only once ended, hence the
    copy; nothing reaches an exporter unredacted."""

    def __init__(self, inner: SpanProcessor) -> None:
        self.inner = inner

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.inner.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        status = span.status
        if status.description:
            status = Status(status.status_code, redact_text(status.description))
        self.inner.on_end(
            ReadableSpan(
                name=span.name,
                context=span.context,
                parent=span.parent,
                resource=span.resource,
                attributes=_redact_attributes(span.attributes),
                events=[
                    Event(e.name, _redact_attributes(e.attributes), e.timestamp)
                    for e in span.events
                ],
                links=span.links,
                kind=span.kind,
                status=status,
                start_time=span.start_time,
                end_time=span.end_time,
                instrumentation_scope=span.instrumentation_scope,
            )
        )

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def export_spans(provider: TracerProvider, exporter: SpanExporter, *, batch: bool = True) -> None:
    """Send ``provider``'s finished spans to ``exporter``, redacted (the only way spans leave a
    process; tests use it with an in-memory exporter and ``batch=False``)."""
    inner = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
    provider.add_span_processor(RedactingSpanProcessor(inner))


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

        export_spans(tracer_provider, OTLPSpanExporter())
        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    from opentelemetry.exporter.prometheus import PrometheusMetricReader

    readers.append(PrometheusMetricReader())
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    return Telemetry(tracer_provider, meter_provider)
