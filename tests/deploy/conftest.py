"""Fixtures for the deployment checks (helpers live in deploy_helpers.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.deploy_helpers import ENVS, KUSTOMIZE, render


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict[str, Any]]]:
    """Every overlay, rendered once per session: env name -> objects."""
    return {env: render(KUSTOMIZE / "overlays" / env) for env in ENVS}
