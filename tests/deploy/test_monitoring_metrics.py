"""Every metric the shipped alert rules and the Grafana dashboard name is one a live gateway
exports: a real gateway process (``icepack service gateway``) on a real Postgres is scraped, and
each PromQL expression's metric names are matched against its ``/metrics``. The dashboard is
also checked for shape (every panel queries, ids are unique, the data source is a variable)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from icepack_core.local.ports import free_port
from tests.deploy.deploy_helpers import DEPLOY, KUSTOMIZE

RULES = DEPLOY / "prometheus" / "icepack-rules.yaml"
DASHBOARD = KUSTOMIZE / "components" / "monitoring" / "icepack-fleet-dashboard.json"

_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
    "and", "or", "unless", "inf", "nan",
}  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_IDENT = re.compile(r"(?<![\w.])([A-Za-z_:][A-Za-z0-9_:]*)\b(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not function calls,
    keywords, label names (inside matchers or grouping clauses) or durations."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _RANGE.sub(" ", text)
    return {
        name
        for name, call in _IDENT.findall(text)
        if not call and name.lower() not in _KEYWORDS and not re.fullmatch(r"\d+\w*", name)
    }


def rule_exprs() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r.get("alert") or r["record"]: r["expr"] for g in groups for r in g["rules"]}


def dashboard_exprs() -> dict[str, str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return {f"{p['title']} [{t['refId']}]": t["expr"] for p in panels for t in p.get("targets", [])}


def test_metric_names_are_read_from_promql() -> None:
    expr = (
        '(time() - max by (catalog) (icepack_a{state=~"q|r", x="y"}))'
        " > 3 * scalar(max(icepack_b offset 15m)) or on(catalog) rate(c_total[5m]) unless d"
    )
    assert metric_names(expr) == {"icepack_a", "icepack_b", "c_total", "d"}


@pytest.fixture
async def live_metrics(database_url: str) -> AsyncIterator[set[str]]:
    """The metric names of a real gateway process's ``/metrics`` (after a few requests, so the
    OpenTelemetry request histogram has samples too)."""
    port = free_port()
    env = {
        **os.environ,
        "ICEPACK_DATABASE_URL": database_url,
        "ICEPACK_HTTP_PORT": str(port),
        "ICEPACK_LOG_LEVEL": "warning",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "icepack_core.cli.app", "service", "gateway"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "the gateway never became ready"
                await asyncio.sleep(0.1)
            response = await client.get("/metrics")
            assert response.status_code == 200
        names: set[str] = set()
        for family in text_string_to_metric_families(response.text):
            names.add(family.name)
            names.update(s.name for s in family.samples)
        yield names
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_rules_and_dashboard_name_only_exported_metrics(live_metrics: set[str]) -> None:
    exprs = {**{f"rule {k}": v for k, v in rule_exprs().items()}, **dashboard_exprs()}
    assert len(exprs) > 20
    missing = {
        where: sorted(metric_names(expr) - live_metrics)
        for where, expr in exprs.items()
        if metric_names(expr) - live_metrics
    }
    assert not missing, f"not exported by the gateway: {missing}"
    # Not vacuous: every query names at least one metric.
    assert all(metric_names(expr) for expr in exprs.values())


def test_dashboard_shape() -> None:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "icepack-fleet"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    panels = dashboard["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel.get("description"), panel["title"]
    titles = " ".join(p["title"].lower() for p in panels)
    for topic in ("health", "queue", "claim latency", "outcome", "budget", "hold", "pass"):
        assert topic in titles, topic
