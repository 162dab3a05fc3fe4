"""Shared helpers for tests/deploy: paths, rendering, and lookups in rendered objects."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUSTOMIZE = DEPLOY / "kustomize"
TERRAFORM = REPO / "terraform"
# Vendored CRD schemas (README.md beside them says where they come from).
SCHEMAS = Path(__file__).resolve().parent / "schemas"
ENVS = ("dev", "stage", "preprod", "prod")
IN_CI = os.environ.get("CI", "").lower() == "true"


def need(condition: bool, reason: str) -> None:
    """Skip when a tool or input is missing locally; fail under CI, where it must exist."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"{reason} (required when CI=true)")
    pytest.skip(reason)


def render(path: Path) -> list[dict[str, Any]]:
    """Render a kustomization with `kubectl kustomize` and return its objects."""
    kubectl = shutil.which("kubectl")
    need(kubectl is not None, "kubectl is not on PATH")
    assert kubectl is not None
    out = subprocess.run(
        [kubectl, "kustomize", str(path)], check=True, capture_output=True, text=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The pod spec inside a workload (Deployment, StatefulSet, Job or KEDA ScaledJob)."""
    spec = obj.get("spec", {})
    pod: dict[str, Any] | None = None
    if obj["kind"] == "ScaledJob":
        pod = spec["jobTargetRef"]["template"]["spec"]
    elif obj["kind"] in {"Deployment", "StatefulSet", "Job", "DaemonSet"}:
        pod = spec["template"]["spec"]
    return pod


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def config_map(objects: list[dict[str, Any]]) -> dict[str, str]:
    """Data of the generated icepack-config ConfigMap (its name carries a hash suffix)."""
    maps = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("icepack-config-")
    ]
    assert len(maps) == 1
    data: dict[str, str] = maps[0]["data"]
    return data
