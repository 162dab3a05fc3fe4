"""The real processes: `icepack up` runs five services with health endpoints, stops cleanly on
SIGTERM; `icepack service executor --once` behaves as KEDA expects."""

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import asyncpg
import httpx
import pytest

from icepack_core.intents import RewriteManifests
from icepack_core.queue.jobs import JobQueue
from icepack_core.types import SERVICE_NAMES
from tests.support.stored_jobs import enqueue_hand_written
from tests.support.waiting import eventually


def free_port_block(size: int) -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base: int = s.getsockname()[1]
        if base + size >= 65535:
            continue
        try:
            for port in range(base, base + size):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free block of ports")


def service_env(database_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "ICEPACK_DATABASE_URL": database_url,
        "ICEPACK_DATA_DIR": str(tmp_path),
        "ICEPACK_POLL_INTERVAL_SECONDS": "0.5",
        **extra,
    }


@pytest.mark.slow
async def test_up_serves_health_for_all_services_and_stops_on_sigterm(
    database_url: str, tmp_path: Path
) -> None:
    base = free_port_block(5)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "icepack_core.cli.app",
        "up",
        env=service_env(database_url, tmp_path, ICEPACK_UP_BASE_PORT=str(base)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with httpx.AsyncClient(timeout=2) as client:

            async def all_ready() -> list[httpx.Response] | None:
                try:
                    answers = [
                        await client.get(f"http://127.0.0.1:{base + i}/readyz") for i in range(5)
                    ]
                except httpx.TransportError:
                    return None
                return answers if all(a.status_code == 200 for a in answers) else None

            answers = await eventually(all_ready, timeout=60, interval=0.5, what="5 x /readyz")
            assert answers is not None
            assert sorted(a.json()["service"] for a in answers) == sorted(SERVICE_NAMES)
            health = await client.get(f"http://127.0.0.1:{base}/healthz")
            assert health.json() == {"status": "ok", "service": "gateway"}
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), timeout=45)
    assert proc.returncode == 0, err.decode()[-3000:]
    stopped = err.decode().count('"event": "service.stopped"')
    assert stopped == 5


async def run_once(database_url: str, tmp_path: Path) -> tuple[int | None, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "icepack_core.cli.app",
        "service",
        "executor",
        "--once",
        env=service_env(database_url, tmp_path, ICEPACK_HTTP_PORT="0"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    return proc.returncode, err.decode()


@pytest.mark.slow
async def test_executor_once_exits_zero_when_nothing_is_queued(
    database_url: str, tmp_path: Path
) -> None:
    code, err = await run_once(database_url, tmp_path)
    assert code == 0, err
    assert "executor.no_job" in err


@pytest.mark.slow
async def test_executor_once_runs_one_job_under_its_fence_and_exits(
    db: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    queue = JobQueue(db)
    table_id = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('c','n','t') RETURNING id"
    )
    bad = await enqueue_hand_written(db, table_id, [{"action": "drop_everything"}], priority=1)
    later = (await queue.enqueue(None, [RewriteManifests()], priority=2)).job

    code, err = await run_once(database_url, tmp_path)
    assert code == 0, err
    failed = await queue.get(bad.id)
    assert failed.state.value == "failed" and failed.fence == 1  # permanent: not retried
    assert "unknown action 'drop_everything'" in (failed.error or "")
    assert await db.fetchval("SELECT count(*) FROM icepack.table_locks") == 0  # released
    assert (await queue.get(later.id)).state.value == "queued"  # one job per run

    code, err = await run_once(database_url, tmp_path)
    assert code == 0, err
    assert "job names no table" in ((await queue.get(later.id)).error or "")
