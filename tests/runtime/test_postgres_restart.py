"""Every service rides out a restart of its Postgres: the real service processes keep running,
reconnect with backoff, and the flow goes on (events planned, jobs run) once it is back."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from icepack_core.db import pool as dbmod
from icepack_core.db.migrate import migrate
from icepack_core.db.pool import _init_connection
from icepack_core.local.postgres import LocalPostgres
from icepack_core.queue import events
from icepack_core.queue.events import Listener
from icepack_core.queue.jobs import JobQueue
from icepack_core.runtime.service import ServiceContext
from icepack_core.settings import load_settings
from icepack_core.types import SERVICE_NAMES, Topic
from icepack_discovery.service import DiscoveryService
from tests.e2e.test_local_stack import free_port_block
from tests.support import statuses
from tests.support.waiting import eventually

pytestmark = [pytest.mark.slow, pytest.mark.postgres]  # starts its own server
WORKERS = ("planner", "inspector", "executor")  # the loops that claim work from the database
STATUS = statuses.status(
    data_file_count=4,
    data_file_bytes=4096,
    manifest_count=1,
    manifest_bytes=100,
    snapshot_count=1,
    oldest_snapshot_at=None,
    current_snapshot_at=None,
).model_dump(mode="json")


@pytest.fixture
def server() -> Iterator[LocalPostgres]:
    """A Postgres of this test alone, so it can be restarted (not under pytest's tmp dir: the
    server runs as ``postgres``)."""
    root = Path(tempfile.mkdtemp(prefix="icepack-restart-pg-"))
    pg = LocalPostgres(root, durable=False)
    try:
        pg.start()
    except (FileNotFoundError, RuntimeError) as exc:
        pytest.skip(f"no local PostgreSQL binaries: {exc}")
    try:
        yield pg
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def pool(server: LocalPostgres) -> AsyncIterator[asyncpg.Pool]:
    conn = await asyncpg.connect(server.dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    p = await asyncpg.create_pool(server.dsn, min_size=0, max_size=4, init=_init_connection)
    try:
        yield p
    finally:
        p.terminate()


async def add_table(pool: asyncpg.Pool, name: str) -> int:
    """A known table with a status, and the event the planner plans it on."""
    async with pool.acquire() as conn, conn.transaction():
        table_id: int = await conn.fetchval(
            "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('c', 'n', $1) "
            "RETURNING id",
            name,
        )
        await conn.execute(
            "INSERT INTO icepack.status_snapshots (table_id, inspected_at, inspector, status) "
            "VALUES ($1, now(), 'pyiceberg', $2::jsonb)",
            table_id,
            STATUS,
        )
        await events.publish(conn, Topic.STATUS_UPDATED, table_id=table_id)
    return table_id


async def planned(pool: asyncpg.Pool, table_id: int) -> bool:
    return bool(
        await pool.fetchval(
            "SELECT count(*) FROM icepack.recommendations WHERE table_id = $1", table_id
        )
    )


async def job_succeeded(queue: JobQueue, job_id: int) -> bool:
    return (await queue.get(job_id)).state.value == "succeeded"


async def test_services_survive_a_postgres_restart(
    server: LocalPostgres, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    base = free_port_block(5)
    env = {
        **os.environ,
        "ICEPACK_DATABASE_URL": server.dsn,
        "ICEPACK_DATA_DIR": str(tmp_path),
        "ICEPACK_POLL_INTERVAL_SECONDS": "0.3",
        "ICEPACK_DISCOVERY_INTERVAL_SECONDS": "1",
        "ICEPACK_JOB_LEASE_SECONDS": "20",
    }
    logs = {name: tmp_path / f"{name}.log" for name in SERVICE_NAMES}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for offset, name in enumerate(sorted(SERVICE_NAMES)):
        with logs[name].open("wb") as out:
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "icepack_core.cli.app", "service", name],
                env={**env, "ICEPACK_HTTP_PORT": str(base + offset)},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
    queue = JobQueue(pool)

    def dead() -> dict[str, int | None]:
        return {n: p.returncode for n, p in procs.items() if p.poll() is not None}

    def log_has(name: str, text: str) -> bool:
        return text in logs[name].read_text(errors="replace")

    try:

        async def all_started() -> bool:
            return all(log_has(n, '"service.started"') for n in SERVICE_NAMES)

        await eventually(all_started, timeout=120, interval=0.5, what="5 services started")
        # The flow works before the restart.
        before = await add_table(pool, "before")
        job = (await queue.enqueue(before, [])).job
        await eventually(lambda: planned(pool, before), timeout=90, what="planned before")
        await eventually(lambda: job_succeeded(queue, job.id), timeout=90, what="job before")

        # Work in flight when Postgres goes away.
        in_flight = await add_table(pool, "in_flight")
        in_flight_job = (await queue.enqueue(in_flight, [])).job
        pool.terminate()
        await asyncio.to_thread(server.stop)

        async def outage_seen() -> bool:
            # Each claim loop met the outage (or died of it, without the fix).
            return all(log_has(n, "db_unavailable") or procs[n].poll() is not None for n in WORKERS)

        await eventually(outage_seen, timeout=60, interval=0.2, what="the workers to see it")
        await asyncio.to_thread(server.start)
        assert dead() == {}, {n: logs[n].read_text()[-3000:] for n in dead()}

        fresh = await asyncpg.create_pool(server.dsn, min_size=0, max_size=4, init=_init_connection)
        try:
            queue = JobQueue(fresh)
            after = await add_table(fresh, "after")
            after_job = (await queue.enqueue(after, [])).job
            for table_id in (in_flight, after):
                await eventually(
                    functools.partial(planned, fresh, table_id),
                    timeout=90,
                    what=f"table {table_id} planned after the restart",
                )
            for job_id in (in_flight_job.id, after_job.id):
                await eventually(
                    functools.partial(job_succeeded, queue, job_id),
                    timeout=90,
                    what=f"job {job_id} run after the restart",
                )
        finally:
            await fresh.close()
        assert dead() == {}, {n: logs[n].read_text()[-3000:] for n in dead()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=45)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    codes = {n: p.returncode for n, p in procs.items()}
    assert codes == dict.fromkeys(SERVICE_NAMES, 0), {
        n: logs[n].read_text()[-3000:] for n, c in codes.items() if c != 0
    }


class RecordingLog:
    """A service context's logger that keeps the name of every event it is given."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def _record(self, event: str, *_args: object, **_fields: object) -> None:
        self.events.append(event)

    debug = info = warning = error = exception = _record


async def test_discovery_starting_while_postgres_is_down_waits_for_it(
    server: LocalPostgres, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    """Discovery's first statement (marking every catalog's listing as started) met the outage
    in a clean CI run: the service exited 1 instead of waiting for the database like its loops."""
    settings = load_settings(database_url=server.dsn, data_dir=tmp_path, poll_interval_seconds=0.3)
    service_pool = await dbmod.create_pool(settings, "discovery")
    stop = asyncio.Event()
    log = RecordingLog()
    listener = Listener(lambda: dbmod.connect(settings, "discovery-listen"))
    ctx = ServiceContext("discovery", settings, service_pool, listener, stop, "d@test", log)
    pool.terminate()
    await asyncio.to_thread(server.stop)
    run = asyncio.create_task(DiscoveryService().run(ctx))
    try:

        async def waiting() -> bool:
            assert not run.done(), run.exception()
            return "discovery.start.db_unavailable" in log.events

        await eventually(waiting, timeout=60, interval=0.1, what="discovery to wait for Postgres")
        await asyncio.to_thread(server.start)
        fresh = await asyncpg.create_pool(server.dsn, min_size=0, max_size=2)
        try:

            async def listing_started() -> bool:
                assert not run.done(), run.exception()
                return bool(
                    await fresh.fetchval(
                        "SELECT count(*) FROM icepack.catalog_status "
                        "WHERE catalog = 'icepack' AND listing_since IS NOT NULL"
                    )
                )

            await eventually(listing_started, timeout=60, what="the listing marked as started")
        finally:
            await fresh.close()
        stop.set()
        assert await asyncio.wait_for(run, timeout=60) == 0
    finally:
        stop.set()
        if not run.done():
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run
        service_pool.terminate()
