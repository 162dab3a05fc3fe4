"""The real gateway process (``python -m icepack_core.cli.app service gateway``): probes, metrics,
the API through the runner's mount, and /readyz while its database refuses connections."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from urllib.parse import urlsplit

import asyncpg
import httpx

from icepack_core.access.tokens import TokenStore
from icepack_core.local.ports import free_port


async def _wait_for(client: httpx.AsyncClient, path: str, status: int, deadline: float) -> None:
    last: httpx.Response | httpx.TransportError | None = None
    while time.monotonic() < deadline:
        try:
            last = await client.get(path)
            if last.status_code == status:
                return
        except httpx.TransportError as exc:
            last = exc
        await asyncio.sleep(0.1)
    raise AssertionError(f"{path} never answered {status}; last: {last!r}")


async def test_gateway_process_serves_probes_metrics_and_api(
    database_url: str, pg_admin_url: str, db: asyncpg.Pool
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "ICEPACK_DATABASE_URL": database_url,
        "ICEPACK_HTTP_PORT": str(port),
        "ICEPACK_LOG_LEVEL": "warning",
        "ICEPACK_POLL_INTERVAL_SECONDS": "0.5",
    }
    token, _ = await TokenStore(db).create("process-test")
    proc = subprocess.Popen(
        [sys.executable, "-m", "icepack_core.cli.app", "service", "gateway"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    database = urlsplit(database_url).path.lstrip("/")
    admin = await asyncpg.connect(pg_admin_url)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            await _wait_for(client, "/readyz", 200, time.monotonic() + 30)
            assert (await client.get("/healthz")).json()["status"] == "ok"
            metrics = (await client.get("/metrics")).text
            for line in (
                'icepack_queue_jobs{state="queued"} 0.0',
                'icepack_tables{health="critical"} 0.0',
                "icepack_queue_claimable_jobs 0.0",
            ):
                assert line in metrics, line
            assert (await client.get("/tables")).json() == {"items": [], "next_cursor": None}
            r = await client.post("/jobs", json={"catalog": "x", "namespace": "y", "table": "z"})
            assert r.status_code == 401
            r = await client.post(
                "/jobs",
                json={"catalog": "x", "namespace": "y", "table": "z"},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert r.status_code == 404 and r.json()["code"] == "TABLE_NOT_FOUND"
            assert (await client.get("/ui/")).status_code == 200
            # Request metrics from OpenTelemetry appear after a few requests.
            assert "http_server_request_duration" in (await client.get("/metrics")).text

            # The database refuses connections: /readyz says so, then recovers.
            await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = $1 AND pid <> pg_backend_pid()",
                database,
            )
            await _wait_for(client, "/readyz", 503, time.monotonic() + 15)
            assert "unavailable" in (await client.get("/readyz")).json()["status"]
            await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
            await _wait_for(client, "/readyz", 200, time.monotonic() + 30)
    finally:
        await admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
        await admin.close()
        proc.send_signal(signal.SIGTERM)
        try:
            _, stderr = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate()
        if proc.stderr:
            proc.stderr.close()
    assert proc.returncode == 0, stderr.decode()[-2000:]
