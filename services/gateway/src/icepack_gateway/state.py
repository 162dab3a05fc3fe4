"""What every handler reaches through ``request.app.state.gateway``, and shared look-ups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg
from starlette.requests import Request

from icepack_core.access.tokens import TokenStore
from icepack_core.db.queries import load_query
from icepack_core.queue.jobs import JobQueue
from icepack_gateway import models
from icepack_gateway.errors import TableNotFound


@dataclass(frozen=True)
class AlertInputs:
    """The settings ``/metrics`` needs to compute alerting gauges (``alert_metrics``)."""

    failure_backoff_base_seconds: float = 900.0
    failure_backoff_cap_seconds: float = 86_400.0
    job_lease_seconds: float = 120.0
    discovery_interval_seconds: float = 60.0


@dataclass(frozen=True)
class GatewayState:
    """The resources the gateway was handed; it owns none of them (the runner closes the pool)."""

    pool: asyncpg.Pool
    jobs: JobQueue
    tokens: TokenStore
    # Safety-floor settings the choke point needs at enqueue (icepack_core.safety.admission.admit).
    expiry_min_age_hours: float = 1.0
    cadence_hours: float = 24.0
    # The catalog event hook: its own token (None: disabled) and the catalogs it may name.
    hook_token: str | None = None
    catalogs: frozenset[str] = frozenset()
    alerting: AlertInputs = AlertInputs()


def gateway(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.gateway
    return state


async def find_table(
    pool: asyncpg.Pool, catalog: str, namespace: str, name: str, *, allow_dropped: bool = True
) -> asyncpg.Record:
    """The ``tables`` row, or ``TableNotFound``."""
    row = await pool.fetchrow(load_query("table_find"), catalog, namespace, name)
    if row is None or (row["dropped_at"] is not None and not allow_dropped):
        raise TableNotFound(catalog, namespace, name, dropped=row is not None)
    return row


TABLE_KEYS = tuple(models.Table.model_fields)


def table_json(row: asyncpg.Record) -> dict[str, Any]:
    return {k: row[k] for k in TABLE_KEYS}
