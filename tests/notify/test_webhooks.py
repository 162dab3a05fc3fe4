"""Webhook notifications (icepack_core.notify.webhooks) end to end: a real Postgres, the real
producers (``place_hold``, the executor's way to hold a table; ``JobQueue``), the notifying
consumer and the sender as the planner runs them, and a real HTTP receiver on a local port
(``http.server`` in a thread) that can be down (nothing listening), failing (500) or hanging."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import asyncpg
import pytest

from icepack_core.db import pool as icedb
from icepack_core.errors import ConfigError
from icepack_core.intents import RewriteManifests
from icepack_core.local.ports import free_port
from icepack_core.notify.webhooks import CONSUMER, WebhookConfig, run_webhooks
from icepack_core.queue.events import Listener, publish
from icepack_core.queue.jobs import JobQueue
from icepack_core.safety.holds import place_hold
from icepack_core.settings import Settings, load_settings
from icepack_core.telemetry.logs import register_secrets
from tests.support.waiting import eventually

PLANTED = "planted-secret-7f3a9c"  # a configured secret that ends up in a hold's reason
URL_TOKEN = "url-token-55e1b0d2"
BEARER = "bearer-token-0c9d8e7f"


@dataclass
class Receiver:
    """A real HTTP server on ``port``: records every request, answers ``status`` (or, when
    ``hang`` is set, holds the request open until the server stops)."""

    port: int
    status: int = 202
    answer: bytes = b""
    hang: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests.append((dict(self.headers.items()), body))
                if receiver.hang.is_set():
                    receiver.released.wait(30)
                    return
                self.send_response(receiver.status)
                self.send_header("Content-Length", str(len(receiver.answer)))
                self.end_headers()
                # The sender stops reading a long answer (what is tested): a broken pipe.
                with contextlib.suppress(OSError):
                    self.wfile.write(receiver.answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.released.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.requests]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(free_port())  # not started: down until a test starts it
    yield r
    r.stop()


def webhook_settings(settings: Settings, port: int, **extra: Any) -> Settings:
    configured = load_settings(
        database_url=settings.database_url.get_secret_value(),
        data_dir=settings.data_dir,
        poll_interval_seconds=0.2,
        webhook_url=f"http://127.0.0.1:{port}/hooks/icepack?token={URL_TOKEN}",
        webhook_token=BEARER,
        webhook_backoff_base_seconds=0.05,
        webhook_backoff_cap_seconds=0.2,
        **extra,
    )
    register_secrets([*configured.secret_values(), PLANTED])
    return configured


@dataclass
class Running:
    config: WebhookConfig
    stop: asyncio.Event
    task: asyncio.Task[Any]


@pytest.fixture
async def start_webhooks(db: asyncpg.Pool) -> AsyncIterator[Any]:
    """Starts the notifying consumer and sender (with their own LISTEN connection) as the
    planner does; stops them at the end."""
    running: list[tuple[asyncio.Event, list[asyncio.Task[Any]]]] = []

    async def start(settings: Settings) -> Running:
        config = WebhookConfig.from_settings(settings)
        assert config is not None
        stop = asyncio.Event()
        listener = Listener(lambda: icedb.connect(settings, "test-webhooks"), 0.5)
        tasks = [
            asyncio.create_task(listener.run(stop)),
            asyncio.create_task(run_webhooks(db, listener, config, stop, 0.2)),
        ]
        running.append((stop, tasks))
        await eventually(
            lambda: db.fetchval(
                "SELECT 1 FROM icepack.consumer_offsets WHERE consumer = $1", CONSUMER
            ),
            what="the notifying consumer's cursor",
        )
        return Running(config, stop, tasks[1])

    yield start
    for stop, tasks in running:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)


async def table(db: asyncpg.Pool, name: str = "orders") -> int:
    table_id: int = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('lake', 'sales', $1) "
        "RETURNING id",
        name,
    )
    return table_id


async def delivery(db: asyncpg.Pool, type_: str) -> asyncpg.Record | None:
    return await db.fetchrow(
        "SELECT * FROM icepack.webhook_deliveries WHERE type = $1 ORDER BY id LIMIT 1", type_
    )


async def test_held_table_is_delivered_through_an_outage_with_secrets_redacted(
    db: asyncpg.Pool, settings: Settings, receiver: Receiver, start_webhooks: Any
) -> None:
    configured = webhook_settings(settings, receiver.port)
    await start_webhooks(configured)
    table_id = await table(db)
    # The receiver is down (nothing listens on its port) when the table is held.
    await place_hold(
        db,
        table_id,
        action="rewrite_data_files",
        reason=f"rows differ after the rewrite; read with key {PLANTED}",
        evidence={"snapshot": 7, "s3_secret_access_key": "AKIAWRONGSECRET1234"},
    )

    async def failed_twice() -> asyncpg.Record | None:
        row = await delivery(db, "table.held")
        return row if row is not None and row["attempts"] >= 2 else None

    down = await eventually(failed_twice, what="two failed attempts while the receiver is down")
    assert down is not None
    assert down["state"] == "pending" and down["last_status"] is None
    assert "ConnectError" in down["last_error"]
    receiver.start()  # the outage ends
    done = await eventually(
        lambda: db.fetchrow("SELECT * FROM icepack.webhook_deliveries WHERE state = 'delivered'"),
        what="the delivery after the outage",
    )
    assert done is not None
    assert done["last_status"] == 202 and done["attempts"] >= 3

    [(headers, body)] = receiver.requests
    assert headers["Content-Type"].startswith("application/cloudevents+json")
    assert headers["Authorization"] == f"Bearer {BEARER}"
    event = json.loads(body)
    assert event["specversion"] == "1.0"
    assert event["type"] == "dev.icepack.table.held"
    assert event["subject"] == "lake.sales.orders"
    assert event["id"].startswith("icepack-event-")
    assert event["data"]["payload"]["action"] == "rewrite_data_files"
    assert "rows differ" in event["data"]["payload"]["reason"]
    # The planted secret is masked wherever the notification went or was recorded.
    stored = await db.fetch("SELECT body::text, last_error FROM icepack.webhook_deliveries")
    for text in [body.decode(), *(str(v) for r in stored for v in r)]:
        assert PLANTED not in text and URL_TOKEN not in text and BEARER not in text
    assert "***" in event["data"]["payload"]["reason"]


async def test_job_failed_is_notified_and_other_outcomes_are_not(
    db: asyncpg.Pool, settings: Settings, receiver: Receiver, start_webhooks: Any
) -> None:
    receiver.start()
    await start_webhooks(webhook_settings(settings, receiver.port))
    queue = JobQueue(db)
    failing, fine = await table(db, "a"), await table(db, "b")
    for table_id in (failing, fine):
        await queue.enqueue(table_id, [RewriteManifests()])
    first = await queue.claim("executor-1", 60)
    second = await queue.claim("executor-1", 60)
    assert first is not None and second is not None
    await queue.fail(first, "boom", retryable=False, code="ACTION_REFUSED")
    await queue.complete(second, {"actions": []})
    await eventually(lambda: delivery(db, "job.failed"), what="the job.failed delivery")
    await eventually(lambda: asyncio.sleep(0, len(receiver.requests)), what="a request")
    [event] = receiver.events()
    assert event["type"] == "dev.icepack.job.failed"
    assert event["data"]["payload"]["job_id"] == first.id
    # The consumer has read past the succeeded job's event too, and queued nothing for it.
    await eventually(
        lambda: db.fetchval(
            "SELECT count(*) = 0 FROM icepack.events e, icepack.consumer_offsets c "
            "WHERE c.consumer = $1 AND (e.xid, e.id) > (c.last_xid, c.last_event_id)",
            CONSUMER,
        ),
        what="the consumer caught up",
    )
    assert await db.fetchval("SELECT count(*) FROM icepack.webhook_deliveries") == 1


async def test_history_before_webhooks_were_on_is_not_notified(
    db: asyncpg.Pool, settings: Settings, receiver: Receiver, start_webhooks: Any
) -> None:
    table_id = await table(db)
    await place_hold(db, table_id, action="verify", reason="old news", evidence={})
    receiver.start()
    await start_webhooks(webhook_settings(settings, receiver.port))
    await place_hold(db, table_id, action="verify", reason="new news", evidence={})
    await eventually(lambda: asyncio.sleep(0, len(receiver.requests)), what="a request")
    assert [e["data"]["payload"]["reason"] for e in receiver.events()] == ["new news"]


async def test_a_failing_receiver_gets_max_attempts_then_the_delivery_fails(
    db: asyncpg.Pool, settings: Settings, receiver: Receiver, start_webhooks: Any
) -> None:
    """A receiver answering 500 with a 20 MiB body (and the secret URL token in it): each try
    keeps only the first 200 bytes, redacted; after max attempts the delivery fails."""
    receiver.status = 500
    receiver.answer = f"server error at {URL_TOKEN} ".encode() + b"x" * (20 << 20)
    receiver.start()
    await start_webhooks(webhook_settings(settings, receiver.port, webhook_max_attempts=3))
    await place_hold(db, await table(db), action="verify", reason="x", evidence={})
    failed = await eventually(
        lambda: db.fetchrow("SELECT * FROM icepack.webhook_deliveries WHERE state = 'failed'"),
        what="the delivery to fail for good",
    )
    assert failed is not None
    assert failed["attempts"] == 3 and failed["last_status"] == 500
    assert failed["last_error"].startswith("HTTP 500 server error at ***")
    assert len(failed["last_error"]) < 300
    assert len(receiver.requests) == 3


async def test_a_hanging_receiver_never_holds_up_queuing(
    db: asyncpg.Pool, settings: Settings, receiver: Receiver, start_webhooks: Any
) -> None:
    """With a receiver that accepts and never answers (5 s timeout per POST), 40 holds are all
    queued within a fraction of one timeout: the consumer never waits for the sender."""
    receiver.hang.set()
    receiver.start()
    await start_webhooks(webhook_settings(settings, receiver.port, webhook_timeout_seconds=5))
    await place_hold(db, await table(db, "first"), action="verify", reason="x", evidence={})
    await eventually(lambda: asyncio.sleep(0, len(receiver.requests)), what="a hanging POST")
    tables = [await table(db, f"t{i}") for i in range(40)]
    started = time.monotonic()
    async with db.acquire() as conn:
        for table_id in tables:
            await publish(conn, "table.held", table_id=table_id, payload={"reason": "y"})
    await eventually(
        lambda: db.fetchval("SELECT count(*) = 41 FROM icepack.webhook_deliveries"),
        timeout=4,
        what="every hold queued while the receiver hangs",
    )
    assert time.monotonic() - started < 4
    assert (
        await db.fetchval(
            "SELECT count(*) FROM icepack.webhook_deliveries WHERE state = 'delivered'"
        )
        == 0
    )


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("webhook_topics", "table.held,table.exploded", "table.exploded"),
        ("webhook_topics", " , ", "ICEPACK_WEBHOOK_TOPICS"),
        ("webhook_url", "ftp://receiver/x", "ICEPACK_WEBHOOK_URL"),
        ("webhook_url", "http:///no-host", "ICEPACK_WEBHOOK_URL"),
    ],
)
def test_bad_webhook_settings_name_the_bad_value(variable: str, value: str, named: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(**{variable: value})
    assert named in str(raised.value)


def test_webhooks_are_off_without_a_url_and_read_job_finished_for_job_failed() -> None:
    assert WebhookConfig.from_settings(load_settings()) is None
    config = WebhookConfig.from_settings(
        load_settings(webhook_url="https://hooks.example/x", webhook_topics="job.failed")
    )
    assert config is not None and config.topics() == {"job.finished"}


def planner_process(database_url: str, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "icepack_core.cli.app", "service", "planner"],
        env={
            **os.environ,
            "ICEPACK_DATABASE_URL": database_url,
            "ICEPACK_HTTP_PORT": str(free_port()),
            "ICEPACK_LOG_LEVEL": "warning",
            "ICEPACK_POLL_INTERVAL_SECONDS": "0.2",
            **env,
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.slow
async def test_the_planner_process_notifies_and_forgets_its_cursor_when_turned_off(
    db: asyncpg.Pool, database_url: str, receiver: Receiver
) -> None:
    """``icepack service planner`` with ICEPACK_WEBHOOK_URL delivers a hold; restarted without
    it, it drops the ``webhooks`` cursor (so no stale consumer lags or blocks pruning)."""
    receiver.start()
    proc = planner_process(
        database_url, ICEPACK_WEBHOOK_URL=f"http://127.0.0.1:{receiver.port}/hook"
    )
    try:
        await eventually(
            lambda: db.fetchval(
                "SELECT 1 FROM icepack.consumer_offsets WHERE consumer = $1", CONSUMER
            ),
            timeout=60,
            what="the planner's webhooks cursor",
        )
        await place_hold(db, await table(db), action="verify", reason="held", evidence={})
        await eventually(
            lambda: asyncio.sleep(0, len(receiver.requests)), timeout=30, what="a delivery"
        )
        assert receiver.events()[0]["type"] == "dev.icepack.table.held"
    finally:
        stop_process(proc)
    proc = planner_process(database_url)
    try:
        await eventually(
            lambda: db.fetchval(
                "SELECT count(*) = 0 FROM icepack.consumer_offsets WHERE consumer = $1",
                CONSUMER,
            ),
            timeout=60,
            what="the cursor dropped",
        )
    finally:
        stop_process(proc)
