"""The shipped alert rules (deploy/prometheus/icepack-rules.yaml and the PrometheusRule of
deploy/kustomize/components/monitoring): ``promtool check rules``, the ``promtool test rules``
unit tests (one per alert, and each one fails when its alert never fires), and the component
rendered into an overlay. promtool is Debian's ``prometheus`` package (``make setup``); without
it these tests skip, under ``CI=true`` they fail."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.deploy_helpers import DEPLOY, KUSTOMIZE, need

RULES = DEPLOY / "prometheus" / "icepack-rules.yaml"
RULE_TESTS = DEPLOY / "prometheus" / "tests" / "icepack-rules.test.yaml"
COMPONENT = KUSTOMIZE / "components" / "monitoring"


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    need(tool is not None, "promtool is not on PATH (Debian's prometheus package; make setup)")
    assert tool is not None
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def alerts(groups: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in groups["groups"] for r in g["rules"] if "alert" in r}


def test_promtool_checks_the_rules_file() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts(yaml.safe_load(RULES.read_text())))} rules found" in (
        result.stdout
    )


def test_promtool_unit_tests_pass() -> None:
    result = promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_a_unit_test_that_sees_it_fire_resolve_and_stay_silent() -> None:
    spec = yaml.safe_load(RULE_TESTS.read_text())
    by_alert: dict[str, list[dict[str, Any]]] = {}
    for test in spec["tests"]:
        for check in test["alert_rule_test"]:
            by_alert.setdefault(check["alertname"], []).append(check)
    assert set(by_alert) == set(alerts(yaml.safe_load(RULES.read_text())))
    for alert, checks in by_alert.items():
        firing = [c for c in checks if c.get("exp_alerts")]
        silent = [c for c in checks if not c.get("exp_alerts")]
        assert firing, f"{alert}: no check where it fires"
        last_firing = max(int(c["eval_time"].rstrip("m")) for c in firing)
        assert any(int(c["eval_time"].rstrip("m")) > last_firing for c in silent), (
            f"{alert}: no check that it resolves"
        )


@pytest.mark.parametrize("alert", sorted(alerts(yaml.safe_load(RULES.read_text()))))
def test_the_unit_tests_fail_when_an_alert_never_fires(tmp_path: Path, alert: str) -> None:
    """The promtool tests can fail: with one alert's expression replaced by one that never
    fires, ``promtool test rules`` reports that alert."""
    groups = yaml.safe_load(RULES.read_text())
    alerts(groups)[alert]["expr"] = "vector(1) > 2"
    (tmp_path / "prometheus" / "tests").mkdir(parents=True)
    (tmp_path / "prometheus" / RULES.name).write_text(yaml.safe_dump(groups))
    copy = tmp_path / "prometheus" / "tests" / RULE_TESTS.name
    copy.write_text(RULE_TESTS.read_text())
    result = promtool("test", "rules", str(copy))
    assert result.returncode != 0
    assert f"alertname: {alert}," in result.stdout + result.stderr


def test_every_alert_says_what_to_run() -> None:
    for name, rule in alerts(yaml.safe_load(RULES.read_text())).items():
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert rule["annotations"]["summary"], name
        # An operator reads a command or a page to see why.
        description = rule["annotations"]["description"]
        assert "`" in description, f"{name}: the description names no command"


def test_the_prometheusrule_holds_the_rules_file(tmp_path: Path) -> None:
    """An overlay including the component renders the PrometheusRule (with the rules file's
    groups, in the overlay's namespace), a ServiceMonitor for the gateway's Service and the
    dashboard's ConfigMap for Grafana's sidecar."""
    kubectl = shutil.which("kubectl")
    need(kubectl is not None, "kubectl is not on PATH")
    assert kubectl is not None
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = os.path.relpath(KUSTOMIZE, overlay)
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": "icepack-prod",
                "resources": [f"{base}/overlays/prod"],
                "components": [f"{base}/components/monitoring"],
            }
        )
    )
    out = subprocess.run(
        [kubectl, "kustomize", str(overlay)], check=True, capture_output=True, text=True
    ).stdout
    objects = [o for o in yaml.safe_load_all(out) if o]
    [rule] = [o for o in objects if o["kind"] == "PrometheusRule"]
    assert rule["metadata"]["namespace"] == "icepack-prod"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    [monitor] = [o for o in objects if o["kind"] == "ServiceMonitor"]
    [service] = [
        o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == "icepack-gateway"
    ]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
    [dashboard] = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "icepack-grafana-dashboard"
    ]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = (COMPONENT / "icepack-fleet-dashboard.json").read_text()
    assert dashboard["data"] == {"icepack-fleet.json": shipped}
    # The PrometheusRule's groups also pass promtool.
    extracted = tmp_path / "from-component.yaml"
    extracted.write_text(yaml.safe_dump(rule["spec"]))
    result = promtool("check", "rules", str(extracted))
    assert result.returncode == 0, result.stdout + result.stderr
