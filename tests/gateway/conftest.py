"""Gateway fixtures: the app on this test's database, an in-process client, seeded data."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from starlette.applications import Starlette

from icepack_core.access.tokens import TokenStore
from icepack_gateway.app import create_app
from tests.gateway.seed import Fleet, seed_fleet


@pytest.fixture
def app(db: asyncpg.Pool) -> Starlette:
    return create_app(db)


@pytest.fixture
async def client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
        yield c


@pytest.fixture
async def fleet(db: asyncpg.Pool) -> Fleet:
    return await seed_fleet(db)


@pytest.fixture
async def token(db: asyncpg.Pool) -> str:
    """A live operator token."""
    value, _ = await TokenStore(db).create("tester")
    return value


@pytest.fixture
def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
