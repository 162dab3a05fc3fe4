"""Request bodies are capped before parsing; malformed cursors are a 400, never a 5xx."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icepack_core.local.ports import free_port
from icepack_core.runtime.probes import make_server
from icepack_core.settings import load_settings
from icepack_gateway.app import create_app
from tests.gateway.seed import Fleet

LIMIT = 4096
LISTINGS = [
    "/tables",
    "/tables?sort=name",
    "/tables?sort=-score",
    "/jobs",
    "/events",
    "/tables/demo/sales/orders/jobs",
    "/tables/demo/sales/orders/history",
    "/tables/demo/sales/orders/status/history",
]


@pytest.fixture
async def small_client(db: asyncpg.Pool, database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """The gateway with a 4 KiB body limit, through ``ICEPACK_GATEWAY_MAX_BODY_BYTES``."""
    app = create_app(
        db, settings=load_settings(database_url=database_url, gateway_max_body_bytes=LIMIT)
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gateway"
    ) as c:
        yield c


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_the_body_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ICEPACK_GATEWAY_MAX_BODY_BYTES", "1234")
    assert load_settings().gateway_max_body_bytes == 1234
    monkeypatch.delenv("ICEPACK_GATEWAY_MAX_BODY_BYTES")
    assert load_settings().gateway_max_body_bytes == 1024 * 1024


async def test_a_body_over_the_limit_is_413_naming_it(
    small_client: httpx.AsyncClient, fleet: Fleet, auth: dict[str, str]
) -> None:
    body = json.dumps(
        {"catalog": "demo", "namespace": "sales", "table": "orders", "x": "y" * LIMIT}
    )
    r = await small_client.post(
        "/jobs", content=body, headers={**auth, "content-type": "application/json"}
    )
    assert r.status_code == 413, r.text
    assert r.json()["code"] == "BODY_TOO_LARGE"
    assert str(LIMIT) in r.json()["message"]
    assert "ICEPACK_GATEWAY_MAX_BODY_BYTES" in r.json()["message"]
    # Refused before auth or parsing: no token needed to learn the body is too big.
    r = await small_client.post("/policies", content=b"{" * (LIMIT + 1))
    assert r.status_code == 413


async def test_a_chunked_body_without_length_is_counted(
    small_client: httpx.AsyncClient, fleet: Fleet, auth: dict[str, str]
) -> None:
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(64):
            sent += 1024
            yield b" " * 1024

    r = await small_client.post("/jobs", content=chunks(), headers=auth)
    assert r.status_code == 413, r.text
    assert sent < 64 * 1024  # it stopped reading once past the limit


async def test_a_body_within_the_limit_still_works(
    small_client: httpx.AsyncClient, fleet: Fleet, auth: dict[str, str]
) -> None:
    r = await small_client.post(
        "/jobs",
        json={
            "catalog": "demo",
            "namespace": "sales",
            "table": "orders",
            "actions": [{"action": "rewrite_manifests"}],
        },
        headers=auth,
    )
    assert r.status_code in (200, 201), r.text


async def test_chunked_upload_to_the_real_server_gets_413(
    db: asyncpg.Pool, database_url: str, fleet: Fleet
) -> None:
    """Over a real socket (uvicorn's parser), ``Transfer-Encoding: chunked``, no length."""
    port = free_port()
    app = create_app(
        db, settings=load_settings(database_url=database_url, gateway_max_body_bytes=LIMIT)
    )
    server = make_server(app, "127.0.0.1", port)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.02)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: application/json\r\n\r\n"
        )
        chunk = b"a" * 1000
        for _ in range(8):
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 413"), head
        writer.close()
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def test_the_default_limit_is_one_mebibyte(
    client: httpx.AsyncClient, fleet: Fleet, auth: dict[str, str]
) -> None:
    r = await client.post("/jobs", content=b" " * (1024 * 1024 + 1), headers=auth)
    assert r.status_code == 413 and "1048576" in r.json()["message"]


async def test_deeply_nested_bodies_are_refused_not_crashed(
    client: httpx.AsyncClient, fleet: Fleet, auth: dict[str, str]
) -> None:
    for depth in (40, 900, 5000, 100_000):
        body = "[" * depth + "]" * depth
        r = await client.post("/jobs", content=body, headers=auth)
        assert r.status_code == 422, (depth, r.text)
        assert "nests deeper" in r.json()["message"]


@pytest.mark.parametrize(
    "cursor",
    [
        "xyz",
        "!!!",
        "é",
        "%%",
        _b64(b"[" * 1400 + b"]" * 1400),
        _b64(b"[" * 20_000 + b"]" * 20_000),
        _b64(b'{"k":"jobs","v":' + b"[" * 1300 + b"]" * 1300 + b"}"),
        _b64(b'{"k":"jobs","v":[1e999]}'),
        _b64(b'{"k":"jobs","v":[' + b"9" * 5000 + b"]}"),
        _b64(b'{"k":"jobs","v":[99999999999999999999]}'),
        _b64(b'{"k":"jobs","v":["a"]}'),
        _b64(b'{"k":"nothing","v":[1]}'),
        _b64(b"\xff\xfe"),
        _b64(b"null"),
        "A" * 10_000,
    ],
)
async def test_malformed_cursors_are_400(
    client: httpx.AsyncClient, fleet: Fleet, cursor: str
) -> None:
    for listing in LISTINGS:
        r = await client.get(listing, params={"cursor": cursor})
        assert r.status_code == 400, (listing, cursor[:40], r.status_code, r.text)
        assert r.json()["code"] == "INVALID_CURSOR" and "'cursor'" in r.json()["message"]


HYPOTHESIS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=20,
)


@HYPOTHESIS
@given(
    listing=st.sampled_from(LISTINGS),
    cursor=st.one_of(
        st.text(max_size=200),
        st.binary(max_size=200).map(_b64),
        JSONISH.map(lambda v: _b64(json.dumps(v).encode())),
        st.builds(
            lambda k, v: _b64(json.dumps({"k": k, "v": v}).encode()),
            st.sampled_from(["jobs", "events", "status", "tables:name", "tables:score", "x"]),
            st.lists(JSONISH, max_size=4),
        ),
    ),
)
async def test_no_cursor_string_gives_a_5xx(
    client: httpx.AsyncClient, fleet: Fleet, listing: str, cursor: str
) -> None:
    r = await client.get(listing, params={"limit": 2, "cursor": cursor})
    assert r.status_code in (200, 400), (listing, cursor, r.status_code, r.text)


@HYPOTHESIS
@given(
    target=st.sampled_from(
        [
            ("POST", "/jobs"),
            ("POST", "/policies/simulate"),
            ("POST", "/policies/simulate/fleet"),
            ("PUT", "/policies/catalog/demo/system.snapshot-expiry"),
        ]
    ),
    body=st.one_of(
        st.binary(max_size=300),
        JSONISH.map(lambda v: json.dumps(v).encode()),
        st.integers(1, 3000).map(lambda d: b"[" * d + b"]" * d),
        st.integers(1, 3000).map(lambda d: b'{"a":' * d + b"1" + b"}" * d),
    ),
)
async def test_no_body_gives_a_5xx(
    client: httpx.AsyncClient,
    fleet: Fleet,
    auth: dict[str, str],
    target: tuple[str, str],
    body: bytes,
) -> None:
    method, path = target
    r = await client.request(
        method, path, content=body, headers={**auth, "content-type": "application/json"}
    )
    assert r.status_code < 500, (path, body[:80], r.status_code, r.text)
