"""POST /policies/simulate/fleet with proposed Polaris policies (``polaris_policies``): they
are mapped as discovery maps Polaris' own and compete under the one precedence.

The Polaris policy stored beforehand is read over HTTP from ``tests.support.polaris.standin``,
which stands in for Apache Polaris 1.4.1 because Polaris cannot run here (its Maven artifacts
are not served to these machines and it needs Java 21+).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx

from icepack_core.discovery.catalogs import gate_for
from icepack_core.polaris.client import PolarisClient
from icepack_core.polaris.refresh import refresh_policies
from icepack_core.settings import CatalogConfig
from tests.gateway.test_simulate_fleet import add_table
from tests.polaris.conftest import PolarisAdmin
from tests.support.polaris.standin import run_standin

SE = "system.snapshot-expiry"


def expiry(days: int, keep: int) -> str:
    return json.dumps(
        {
            "version": "2025-02-03",
            "enable": True,
            "config": {"max_snapshot_age_days": days, "min_snapshot_to_keep": keep},
        }
    )


async def store_polaris_expiry(db: asyncpg.Pool) -> None:
    """A catalog-level Polaris expiry policy keeping everything for 10 years, as discovery
    would have read it from Polaris."""
    with run_standin("sim_cat") as polaris:
        polaris.state.register(("db",))
        admin = PolarisClient(
            CatalogConfig(
                name="sim",
                type="rest",
                uri=polaris.uri,
                warehouse="sim_cat",
                credential=polaris.credential,
                polaris=True,
            ),
            gate_for(CatalogConfig(name="sim", type="rest", uri=polaris.uri)),
        )
        operator = PolarisAdmin(polaris)
        operator.base = f"{polaris.uri}/polaris/v1/sim_cat"
        answer = operator.create("db", "keep_all", SE, expiry(3650, 1))
        assert answer.status_code == 200, answer.text
        operator.attach("db", "keep_all", "catalog", [])
        operator.http.close()
        result = await refresh_policies(db, admin.cfg, admin, datetime.now(UTC))
        admin.close()
        assert result.error is None


async def test_a_proposed_polaris_policy_replaces_the_stored_one(
    client: httpx.AsyncClient, db: asyncpg.Pool, auth: dict[str, str]
) -> None:
    await add_table(db, "ancient", "2020-01-01T00:00:00.000Z")
    await store_polaris_expiry(db)
    body = {
        "catalog": "sim",
        "polaris_policies": [
            {
                "name": "keep_all",
                "type": SE,
                "content": expiry(1, 10),
                "target": {"type": "catalog"},
            }
        ],
    }
    response = await client.post("/policies/simulate/fleet", json=body, headers=auth)
    assert response.status_code == 200, response.text
    report = response.json()
    (change,) = report["changes"]
    assert change["current_actions"] == [] and change["proposed_actions"] == ["expire_snapshots"]
    assert report["totals"] == {"snapshots_expired_at_most": 20}  # 30 snapshots, keep 10
    assert await db.fetchval("SELECT count(*) FROM icepack.policies") == 0
    kept = await db.fetchval("SELECT config FROM icepack.polaris_policies")
    assert kept["max_snapshot_age_hours"] == 3650 * 24  # the stored one is untouched


async def test_an_icepack_attachment_at_the_same_scope_still_wins(
    client: httpx.AsyncClient, db: asyncpg.Pool, auth: dict[str, str]
) -> None:
    await add_table(db, "ancient", "2020-01-01T00:00:00.000Z")
    body = {
        "catalog": "sim",
        "policies": [
            {
                "policy_type": SE,
                "scope": "namespace",
                "namespace": "db",
                "config": {"max_snapshot_age_hours": 87600},
            }
        ],
        "polaris_policies": [
            {
                "name": "short",
                "type": SE,
                "content": expiry(1, 10),
                "target": {"type": "namespace", "path": ["db"]},
            }
        ],
    }
    response = await client.post("/policies/simulate/fleet", json=body, headers=auth)
    assert response.status_code == 200, response.text
    # Today the defaults expire the 2020 snapshots; Icepack's 10-year namespace policy wins
    # over Polaris' 1-day one at the same scope, so the proposal expires nothing.
    (change,) = response.json()["changes"]
    assert change["current_actions"] == ["expire_snapshots"]
    assert change["proposed_actions"] == []


async def test_a_proposed_polaris_policy_icepack_cannot_use_is_refused_naming_the_key(
    client: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    body = {
        "catalog": "sim",
        "polaris_policies": [
            {
                "name": "bad",
                "type": SE,
                "content": expiry(1, 0),
                "target": {"type": "table-like", "path": ["db", "t"]},
            }
        ],
    }
    response = await client.post("/policies/simulate/fleet", json=body, headers=auth)
    assert response.status_code == 422
    assert "min_snapshot_to_keep" in response.text


async def test_the_polaris_policies_kept_are_listed_with_their_source_state(
    client: httpx.AsyncClient, db: asyncpg.Pool, auth: dict[str, str]
) -> None:
    empty = await client.get("/policies/polaris", params={"catalog": "sim"}, headers=auth)
    assert empty.status_code == 200
    assert empty.json() == {"sources": [], "items": [], "truncated": False}
    await store_polaris_expiry(db)
    response = await client.get("/policies/polaris", params={"catalog": "sim"}, headers=auth)
    assert response.status_code == 200, response.text
    body = response.json()
    (source,) = body["sources"]
    assert source["catalog"] == "sim" and source["is_polaris"] and source["last_error"] is None
    (item,) = body["items"]
    assert (item["scope"], item["name"], item["policy_type"]) == ("catalog", "keep_all", SE)
    assert item["config"] == {"max_snapshot_age_hours": 3650 * 24, "retain_last": 1}
    assert item["invalid"] is None and item["unknown"] == {}


async def test_one_table_s_simulation_sees_polaris_policies_and_a_proposal_overrides_them(
    client: httpx.AsyncClient, db: asyncpg.Pool, auth: dict[str, str]
) -> None:
    await add_table(db, "ancient", "2020-01-01T00:00:00.000Z")
    await store_polaris_expiry(db)
    body: dict[str, Any] = {"catalog": "sim", "namespace": "db", "table": "ancient"}
    response = await client.post("/policies/simulate", json=body, headers=auth)
    assert response.status_code == 200, response.text
    effective = response.json()["effective_policy"]
    assert effective["policies"][SE]["max_snapshot_age_hours"] == 3650 * 24, effective
    assert "polaris" in effective["sources"][SE] and "keep_all" in effective["sources"][SE]

    # Icepack's own attachment at the same scope wins over Polaris' (the one precedence).
    body["policies"] = [
        {"policy_type": SE, "scope": "catalog", "config": {"max_snapshot_age_hours": 48}}
    ]
    response = await client.post("/policies/simulate", json=body, headers=auth)
    assert response.status_code == 200, response.text
    effective = response.json()["effective_policy"]
    assert effective["policies"][SE]["max_snapshot_age_hours"] == 48, effective
    assert "keep_all" not in effective["sources"][SE].split("(passed over")[0], effective
