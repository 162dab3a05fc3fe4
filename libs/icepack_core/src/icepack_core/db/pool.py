"""Connections to Icepack's Postgres: the asyncpg pool every service owns, and plain connections.

Every session gets ``statement_timeout`` and ``idle_in_transaction_session_timeout`` from the
settings, so no Icepack session can hold the xmin horizon back (which would stall event delivery,
see ``events.py``) and ``application_name`` says which service it is.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from icepack_core.settings import Settings

Pool = asyncpg.Pool
Connection = asyncpg.Connection
# What callers hand to functions that run inside "the caller's transaction".
Conn = asyncpg.Connection | PoolConnectionProxy


def server_settings(settings: Settings, service: str) -> dict[str, str]:
    """Session settings for one service's connections."""
    return {
        "application_name": f"icepack-{service}",
        "statement_timeout": str(settings.db_statement_timeout_ms),
        "idle_in_transaction_session_timeout": str(settings.db_idle_in_transaction_timeout_ms),
    }


async def _init_connection(conn: Connection) -> None:
    # jsonb in and out as Python objects: callers never hand-serialise.
    for name in ("json", "jsonb"):
        await conn.set_type_codec(name, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def _release_without_reset_query(conn: Connection) -> None:
    """Release a pooled connection with no statement of its own.

    asyncpg always rolls back an open transaction and drops listener callbacks on release; its
    default reset then also sends ``SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *;
    RESET ALL``, one round trip per release (an eighth of the planner's CPU at fleet scale).
    Pooled connections never take session advisory locks, LISTEN, SET session settings or keep
    cursors open (``connect`` gives a dedicated connection for those: LISTEN, migrations), so
    that query would have nothing to undo.
    """


async def create_pool(settings: Settings, service: str, **kwargs: Any) -> Pool:
    """Open a pool for ``service``; the caller (its lifespan) closes it.

    Pooled connections must leave no session state behind (see
    ``_release_without_reset_query``); transactions and ``SET LOCAL`` are fine.
    """
    pool = await asyncpg.create_pool(
        settings.dsn,
        min_size=settings.db_pool_min,
        max_size=settings.db_pool_max,
        server_settings=server_settings(settings, service),
        init=_init_connection,
        reset=_release_without_reset_query,
        **kwargs,
    )
    assert pool is not None
    return pool


async def connect(settings: Settings, service: str) -> Connection:
    """One dedicated connection (LISTEN, migrations); the caller closes it."""
    conn: Connection = await asyncpg.connect(
        settings.dsn, server_settings=server_settings(settings, service)
    )
    await _init_connection(conn)
    return conn
