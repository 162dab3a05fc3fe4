"""What every handler reaches through ``request.app.state.gateway``, and shared look-ups."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
from starlette.requests import Request

from icepack_core.access.tokens import TokenStore
from icepack_core.db.queries import load_query
from icepack_core.db.tables import TableRow
from icepack_core.queue.jobs import JobQueue
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
) -> TableRow:
    """The ``tables`` row, or ``TableNotFound``."""
    row = await pool.fetchrow(load_query("table_find"), catalog, namespace, name)
    if row is None or (row["dropped_at"] is not None and not allow_dropped):
        raise TableNotFound(catalog, namespace, name, dropped=row is not None)
    return TableRow.from_record(row)


def stored_id(table: TableRow) -> int:
    """The id of a table read from ``icepack.tables`` (only a table never recorded has none)."""
    if table.id is None:
        raise TableNotFound(table.catalog, table.namespace, table.name)
    return table.id
