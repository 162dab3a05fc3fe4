"""Request metrics keep bounded labels whatever anonymous clients send.

The gateway's own ``RequestMetrics`` wraps the real app and records into an OpenTelemetry SDK
meter provider with an in-memory reader (the one stand-in: the process exports through
Prometheus, which these assertions would have to parse back).
"""

from __future__ import annotations

import asyncpg
import httpx
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from icepack_core.settings import load_settings
from icepack_gateway.app import api_routes, create_app
from icepack_gateway.metrics import OTHER_METHOD, RequestMetrics, route_methods
from tests.gateway.seed import Fleet


def recorded(reader: InMemoryMetricReader) -> list[dict[str, object]]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        dict(point.attributes or {})
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == "http.server.request.duration"
        for point in metric.data.data_points
    ]


async def test_methods_no_route_answers_share_one_label(
    db: asyncpg.Pool, database_url: str, fleet: Fleet
) -> None:
    reader = InMemoryMetricReader()
    app = create_app(db, settings=load_settings(database_url=database_url))
    methods = route_methods(api_routes())
    assert {"GET", "HEAD", "POST", "PUT", "DELETE"} <= methods
    measured = RequestMetrics(
        app, methods=methods, meter_provider=MeterProvider(metric_readers=[reader])
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=measured), base_url="http://gateway"
    ) as client:
        for i in range(50):  # no token: what any anonymous client can send
            r = await client.request(f"FOO{i}", "/tables")
            assert r.status_code in (401, 405)
        assert (await client.get("/tables")).status_code == 200
        assert (await client.post("/jobs", json={})).status_code == 401
    labels = recorded(reader)
    assert {str(a["http.request.method"]) for a in labels} == {"GET", "POST", OTHER_METHOD}
    other = [a for a in labels if a["http.request.method"] == OTHER_METHOD]
    # Refused by the auth middleware before routing: no route template either.
    assert {(a["http.route"], a["http.response.status_code"]) for a in other} == {
        ("unmatched", 401)
    }
    assert len(labels) <= 4  # 50 odd methods made at most two series
