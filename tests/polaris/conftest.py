"""Fixtures for the Polaris tests: the stand-in server and an operator's HTTP client.

The stand-in (``tests.support.polaris.standin``) stands in for Apache Polaris 1.4.1 because
Polaris cannot run here (its Maven artifacts are not served to these machines and it needs
Java 21+); it follows the exchanges a real 1.4.1 server answered.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from icepack_core.settings import CatalogConfig
from tests.support.polaris.standin import RunningStandIn, run_standin

PREFIX = "probe_cat"
UNIT = "\x1f"


class PolarisAdmin:
    """An operator managing policies over the stand-in's HTTP API (as one would in Polaris)."""

    def __init__(self, server: RunningStandIn) -> None:
        self.server = server
        self.http = httpx.Client(timeout=10)
        token = self.http.post(
            f"{server.uri}/v1/oauth/tokens",
            data={
                "grant_type": "client_credentials",
                "client_id": server.state.client_id,
                "client_secret": server.state.client_secret,
                "scope": "PRINCIPAL_ROLE:ALL",
            },
        ).json()["access_token"]
        self.headers = {"Authorization": f"Bearer {token}"}
        self.base = f"{server.uri}/polaris/v1/{PREFIX}"

    def create(self, namespace: str, name: str, policy_type: str, content: Any) -> httpx.Response:
        body = {"name": name, "type": policy_type, "content": content}
        ns = quote(namespace.replace(".", UNIT), safe="")
        return self.http.post(
            f"{self.base}/namespaces/{ns}/policies", json=body, headers=self.headers
        )

    def create_ok(self, namespace: str, name: str, policy_type: str, **content: Any) -> None:
        answer = self.create(namespace, name, policy_type, json.dumps(content))
        assert answer.status_code == 200, answer.text

    def _mapping(self, method: str, namespace: str, name: str, kind: str, path: list[str]) -> int:
        ns = quote(namespace.replace(".", UNIT), safe="")
        answer = self.http.request(
            method,
            f"{self.base}/namespaces/{ns}/policies/{name}/mappings",
            json={"target": {"type": kind, "path": path}},
            headers=self.headers,
        )
        return answer.status_code

    def attach(self, namespace: str, name: str, kind: str, path: list[str]) -> None:
        assert self._mapping("PUT", namespace, name, kind, path) == 204

    def detach(self, namespace: str, name: str, kind: str, path: list[str]) -> None:
        assert self._mapping("POST", namespace, name, kind, path) == 204

    def update(self, namespace: str, name: str, version: int, **content: Any) -> None:
        ns = quote(namespace.replace(".", UNIT), safe="")
        answer = self.http.put(
            f"{self.base}/namespaces/{ns}/policies/{name}",
            json={"content": json.dumps(content), "current-policy-version": version},
            headers=self.headers,
        )
        assert answer.status_code == 200, answer.text


@pytest.fixture
def polaris() -> Iterator[RunningStandIn]:
    """A stand-in for Polaris (Polaris cannot run here), standalone: namespaces and tables
    are those ``state.register`` adds."""
    with run_standin(PREFIX) as server:
        yield server


@pytest.fixture
def admin(polaris: RunningStandIn) -> Iterator[PolarisAdmin]:
    client = PolarisAdmin(polaris)
    yield client
    client.http.close()


def polaris_config(server: RunningStandIn, **extra: Any) -> CatalogConfig:
    """Icepack's catalog config for the stand-in (client credentials, Polaris detected)."""
    return CatalogConfig(
        name="polaris_cat",
        type="rest",
        uri=server.uri,
        warehouse=PREFIX,
        credential=server.credential,
        **extra,
    )
