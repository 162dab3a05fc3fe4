"""Telemetry: structured logs, tracing and the service metrics."""
