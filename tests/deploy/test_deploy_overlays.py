"""Overlays differ from each other in exactly the intended ways, and their config is valid."""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import pytest

from tests.deploy.deploy_helpers import ENVS, config_map, find, pod_spec

Objects = dict[str, list[dict[str, Any]]]
IMAGE = "ghcr.io/icepack-dev/icepack"
EXECUTOR_IMAGE = "ghcr.io/icepack-dev/icepack-executor"
OTLP = "http://otel-collector.observability.svc:4318"

# The intended per-environment values (deploy/README.md, "Environments"). A change to an
# overlay that is not in this table fails test_overlays_differ_only_as_intended.
EXPECTED: dict[str, dict[str, Any]] = {
    "dev": {
        "tag": "0.1.0",
        "gateway": 1,
        "workers": 1,
        "max_executors": 3,
        "discovery_s": "30",
        "cadence_h": "1",
        "log": "debug",
        "spark": {
            "ICEPACK_SPARK_ENGINE": "connect",
            "ICEPACK_SPARK_CONNECT_URL": "sc://spark-connect.data-platform-dev.svc:15002",
        },
        "role": "arn:aws:iam::111111111111:role/icepack-dev",
        "postgres": True,
    },
    "stage": {
        "tag": "0.1.0",
        "gateway": 2,
        "workers": 1,
        "max_executors": 3,
        "discovery_s": "60",
        "cadence_h": "6",
        "log": "info",
        "spark": {
            "ICEPACK_SPARK_ENGINE": "connect",
            "ICEPACK_SPARK_CONNECT_URL": "sc://spark-connect.data-platform-stage.svc:15002",
        },
        "role": "arn:aws:iam::111111111111:role/icepack-stage",
        "postgres": False,
    },
    "preprod": {
        "tag": "0.1.0",
        "gateway": 2,
        "workers": 1,
        "max_executors": 3,
        "discovery_s": "60",
        "cadence_h": "24",
        "log": "info",
        "spark": {
            "ICEPACK_SPARK_ENGINE": "thrift",
            "ICEPACK_SPARK_THRIFT_AUTH": "LDAP",
            "ICEPACK_SPARK_THRIFT_HOST": "kyuubi.data-platform-preprod.svc",
            "ICEPACK_SPARK_THRIFT_PORT": "10009",
        },
        "role": "arn:aws:iam::222222222222:role/icepack-preprod",
        "postgres": False,
    },
    "prod": {
        "tag": "0.1.0",
        "gateway": 3,
        "workers": 2,
        "max_executors": 5,
        "discovery_s": "300",
        "cadence_h": "24",
        "log": "info",
        "spark": {
            "ICEPACK_SPARK_ENGINE": "thrift",
            "ICEPACK_SPARK_THRIFT_AUTH": "LDAP",
            "ICEPACK_SPARK_THRIFT_HOST": "kyuubi.data-platform.svc",
            "ICEPACK_SPARK_THRIFT_PORT": "10009",
        },
        "role": "arn:aws:iam::222222222222:role/icepack-prod",
        "postgres": False,
    },
}
WORKERS = ("icepack-discovery", "icepack-inspector", "icepack-planner")


@pytest.mark.parametrize("env", ENVS)
def test_overlay_values(env: str, rendered: Objects) -> None:
    want, objects = EXPECTED[env], rendered[env]
    for obj in objects:
        assert obj["metadata"].get("namespace") == f"icepack-{env}", obj["metadata"]["name"]
    assert find(objects, "Deployment", "icepack-gateway")["spec"]["replicas"] == want["gateway"]
    for name in WORKERS:
        assert find(objects, "Deployment", name)["spec"]["replicas"] == want["workers"], name
    scaled = find(objects, "ScaledJob", "icepack-executor")
    assert scaled["spec"]["maxReplicaCount"] == want["max_executors"]
    images = {c["image"] for o in objects if (s := pod_spec(o)) for c in s["containers"]}
    ours = {i for i in images if i.startswith("ghcr.io/icepack-dev/")}
    assert ours == {f"{IMAGE}:{want['tag']}", f"{EXECUTOR_IMAGE}:{want['tag']}"}
    sa = find(objects, "ServiceAccount", "icepack")
    assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] == want["role"]
    data = config_map(objects)
    assert data["ICEPACK_DISCOVERY_INTERVAL_SECONDS"] == want["discovery_s"]
    assert data["ICEPACK_MAINTENANCE_CADENCE_HOURS"] == want["cadence_h"]
    assert data["ICEPACK_LOG_LEVEL"] == want["log"]
    assert data["OTEL_EXPORTER_OTLP_ENDPOINT"] == OTLP
    for key, value in want["spark"].items():
        assert data[key] == value, key
    has_postgres = any(o["kind"] == "StatefulSet" for o in objects)
    assert has_postgres is want["postgres"]


_TUNED_KEYS = {
    "ICEPACK_DISCOVERY_INTERVAL_SECONDS",
    "ICEPACK_MAINTENANCE_CADENCE_HOURS",
    "ICEPACK_LOG_LEVEL",
}


def _without_intended_differences(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Objects with every field the table above controls blanked out."""
    out = []
    for obj in copy.deepcopy(objects):
        if obj["metadata"]["name"].startswith("icepack-postgres"):
            continue  # the dev-only component
        obj["metadata"].pop("namespace", None)
        if obj["kind"] == "ConfigMap":
            _blank_config_map(obj)
        if obj["kind"] in {"Deployment", "StatefulSet"}:
            obj["spec"].pop("replicas", None)
        if obj["kind"] == "ScaledJob":
            obj["spec"].pop("maxReplicaCount")
        if obj["kind"] == "ServiceAccount":
            obj["metadata"]["annotations"].pop("eks.amazonaws.com/role-arn")
        if (spec := pod_spec(obj)) is not None:
            _blank_containers(spec)
        out.append(obj)
    return sorted(out, key=lambda o: (o["kind"], o["metadata"]["name"]))


def _blank_config_map(obj: dict[str, Any]) -> None:
    """The ConfigMap's name and the keys each overlay tunes removed (catalogs checked)."""
    obj["metadata"]["name"] = "icepack-config"
    catalogs = json.loads(obj["data"].pop("ICEPACK_CATALOGS"))
    assert [c["name"] for c in catalogs] == ["polaris"]
    for key in list(obj["data"]):
        if key.startswith("ICEPACK_SPARK_") or key in _TUNED_KEYS:
            del obj["data"][key]


def _blank_containers(spec: dict[str, Any]) -> None:
    """Image tags dropped and the ConfigMap references renamed, in every container."""
    for c in spec["containers"]:
        c["image"] = c["image"].rpartition(":")[0]
        for source in c.get("envFrom", []):
            if "configMapRef" in source:
                source["configMapRef"]["name"] = "icepack-config"


def test_overlays_differ_only_as_intended(rendered: Objects) -> None:
    reference = _without_intended_differences(rendered["prod"])
    for env in ENVS:
        assert _without_intended_differences(rendered[env]) == reference, env


@pytest.mark.parametrize("env", ENVS)
def test_overlay_config_is_valid_settings(
    env: str, rendered: Objects, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ConfigMap plus the Secret's keys must pass the services' own settings validation."""
    settings = pytest.importorskip("icepack_core.settings")
    for key in [k for k in os.environ if k.startswith("ICEPACK_")]:
        monkeypatch.delenv(key)
    for key, value in config_map(rendered[env]).items():
        monkeypatch.setenv(key, value)
    # Stand-ins for what the Secret icepack-secrets supplies (see executor.yaml).
    monkeypatch.setenv("ICEPACK_DATABASE_URL", "postgresql://icepack:pw@db:5432/icepack")
    monkeypatch.setenv("ICEPACK_CATALOG_POLARIS_CREDENTIAL", "client:secret")
    monkeypatch.setenv("ICEPACK_SPARK_THRIFT_PASSWORD", "pw")
    loaded = settings.load_settings()
    assert loaded.http_host == "0.0.0.0" and loaded.http_port == 8080
    assert [c.name for c in loaded.catalogs] == ["polaris"]
    assert loaded.spark_engine == EXPECTED[env]["spark"]["ICEPACK_SPARK_ENGINE"]
