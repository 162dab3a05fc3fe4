"""Every overlay renders, and every rendered object validates against its schema."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from tests.deploy.deploy_helpers import ENVS, KUSTOMIZE, SCHEMAS, render

# The oldest Kubernetes minor we support on EKS; strict mode rejects unknown fields.
K8S_VERSION = "1.32.0"
KEDA_SCHEMAS = SCHEMAS / "keda.sh"


def keda_schema(kind: str, api_version: str) -> dict[str, Any]:
    version = api_version.split("/")[1]
    path = KEDA_SCHEMAS / f"{kind.lower()}_{version}.json"
    assert path.exists(), f"no KEDA schema for {kind} {api_version} at {path}"
    schema: dict[str, Any] = json.loads(path.read_text())
    return schema


@pytest.mark.parametrize("env", ENVS)
def test_overlay_validates(env: str, rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered[env]
    assert objects, f"overlay {env} rendered nothing"
    for obj in objects:
        label = f"{env}: {obj['kind']}/{obj['metadata']['name']}"
        if obj["apiVersion"].startswith("keda.sh/"):
            schema = keda_schema(obj["kind"], obj["apiVersion"])
            validator = jsonschema.validators.validator_for(schema, jsonschema.Draft7Validator)
            errors = [e.message for e in validator(schema).iter_errors(obj)]
            assert not errors, f"{label}: {errors}"
        else:
            try:
                kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{label}: {exc.message}")


def test_base_and_component_render() -> None:
    # The base alone must stay renderable: overlays are thin patches over it.
    kinds = {o["kind"] for o in render(KUSTOMIZE / "base")}
    assert {"Deployment", "ScaledJob", "TriggerAuthentication", "Job", "NetworkPolicy"} <= kinds


def test_keda_schema_rejects_unknown_fields() -> None:
    # Guards the validator itself: a typo in a ScaledJob field must not pass silently.
    schema = keda_schema("ScaledJob", "keda.sh/v1alpha1")
    bad = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledJob",
        "metadata": {"name": "x"},
        "spec": {"jobTargetRef": {"template": {}}, "triggers": [], "maxReplicaCont": 3},
    }
    validator = jsonschema.validators.validator_for(schema, jsonschema.Draft7Validator)
    assert list(validator(schema).iter_errors(bad))
