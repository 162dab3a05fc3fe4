"""Webhook notifications of chosen outbox events, for deployments without Alertmanager
(docs/architecture.md, "Notifications").

Two halves that meet in ``webhook_deliveries``:

* the **notifying consumer** (an ``EventConsumer`` named ``webhooks``, run by the planner)
  reads the chosen topics and, in the transaction that advances its cursor, queues one row per
  event with its CloudEvent (``notify.cloudevents``), redacted. An event is queued exactly once,
  and it never waits for a receiver: queuing is one insert.
* the **sender** claims due rows (``FOR UPDATE SKIP LOCKED`` with a lease, so replicas never
  send a row at the same time), POSTs each in structured CloudEvents mode with a bounded
  timeout, a few at once, and records the outcome: delivered on 2xx; otherwise due again after
  ``base·2^(attempts-1)`` (capped, with jitter) until ``max_attempts``, then failed. A dead or
  hanging receiver costs the sender one timeout per attempt and nothing else: the service's
  other loops never wait on it.

Errors are stored and logged through ``redact_text``; the webhook URL and token are registered
secrets (``Settings.secret_values``), so neither appears in a row, a log line or a span.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import structlog

from icepack_core.db.pool import Conn
from icepack_core.db.queries import load_query
from icepack_core.db.resilience import retry_db, survive
from icepack_core.notify.cloudevents import (
    CONTENT_TYPE,
    TableName,
    cloud_event,
    notification_kind,
)
from icepack_core.queue.events import Event, EventConsumer, Listener, run_consumer, wait_for_wake
from icepack_core.settings import Settings
from icepack_core.telemetry.logs import redact_text
from icepack_core.types import WEBHOOK_JOB_FAILED, Topic

CONSUMER = "webhooks"
WAKE_TOPIC = "webhook.pending"  # NOTIFY payload of a queued delivery (webhook_delivery_enqueue)
PRUNE_EVERY_SECONDS = 600.0
ERROR_BYTES = 200  # of a receiver's error answer kept as the reason
log = structlog.get_logger("icepack.webhooks")


@dataclass(frozen=True)
class WebhookConfig:
    """Where and what to notify, and how hard to try (from ``ICEPACK_WEBHOOK_*``)."""

    url: str
    kinds: frozenset[str]  # outbox topics, and/or job.failed
    token: str | None = None
    timeout_seconds: float = 5.0
    max_attempts: int = 12
    backoff_base_seconds: float = 10.0
    backoff_cap_seconds: float = 3600.0
    batch: int = 16  # deliveries claimed per round, sent at once
    retention_seconds: float = 7 * 86400.0

    @classmethod
    def from_settings(cls, settings: Settings) -> WebhookConfig | None:
        """The configuration, or None when ``ICEPACK_WEBHOOK_URL`` is unset (webhooks off)."""
        if settings.webhook_url is None:
            return None
        token = settings.webhook_token
        return cls(
            url=settings.webhook_url.get_secret_value(),
            kinds=frozenset(settings.webhook_topics.split(",")),
            token=None if token is None else token.get_secret_value(),
            timeout_seconds=settings.webhook_timeout_seconds,
            max_attempts=settings.webhook_max_attempts,
            backoff_base_seconds=settings.webhook_backoff_base_seconds,
            backoff_cap_seconds=settings.webhook_backoff_cap_seconds,
            retention_seconds=settings.event_retention_hours * 3600,
        )

    def topics(self) -> frozenset[str]:
        """The outbox topics the consumer reads (``job.failed`` is read from job.finished)."""
        topics = self.kinds - {WEBHOOK_JOB_FAILED}
        return topics | {Topic.JOB_FINISHED.value} if WEBHOOK_JOB_FAILED in self.kinds else topics

    def retry_after(self, attempts: int) -> float:
        """Seconds before the next try of a delivery that failed its ``attempts``-th try."""
        delay: float = min(
            self.backoff_cap_seconds, self.backoff_base_seconds * 2 ** min(attempts - 1, 30)
        )
        return delay * (0.5 + random.random() * 0.5)  # jitter spreads retries of an outage


def notifying_consumer(pool: asyncpg.Pool, config: WebhookConfig) -> EventConsumer:
    """The consumer that queues a delivery for each chosen event, in its own transaction."""

    async def handle(conn: Conn, event: Event) -> None:
        kind = notification_kind(event, config.kinds)
        if kind is None:
            return
        table = None
        if event.table_id is not None:
            row = await conn.fetchrow(load_query("webhook_table_name"), event.table_id)
            if row is not None:
                table = TableName(row["catalog"], row["namespace"], row["name"])
        body = cloud_event(event, kind, table)
        await conn.execute(
            load_query("webhook_delivery_enqueue"), event.id, kind, event.table_id, body
        )

    return EventConsumer(pool, CONSUMER, handle, topics=config.topics())


@dataclass(frozen=True)
class Attempt:
    """What one POST of one delivery came to."""

    delivered: bool
    status: int | None
    error: str | None


class WebhookSender:
    """Sends due deliveries to the receiver and records each outcome."""

    def __init__(
        self, pool: asyncpg.Pool, config: WebhookConfig, client: httpx.AsyncClient
    ) -> None:
        self.pool = pool
        self.config = config
        self.client = client
        # A claim outlives one POST by a margin, so only a dead sender's rows are taken over.
        self.lease_seconds = config.timeout_seconds + 30.0

    async def deliver_due(self) -> int:
        """Claim up to ``batch`` due deliveries, POST them concurrently, record the outcomes;
        returns how many were claimed."""
        rows = await self.pool.fetch(
            load_query("webhook_delivery_claim"), self.config.batch, self.lease_seconds
        )
        await asyncio.gather(*(self._deliver(row) for row in rows))
        return len(rows)

    async def _deliver(self, row: asyncpg.Record) -> None:
        attempt = await self.post(row["body"])
        if attempt.delivered:
            await self.pool.execute(load_query("webhook_delivery_done"), row["id"], attempt.status)
            log.info("webhook.delivered", event_id=row["event_id"], type=row["type"])
            return
        state = await self.pool.fetchval(
            load_query("webhook_delivery_retry"),
            row["id"],
            attempt.status,
            attempt.error,
            self.config.retry_after(row["attempts"]),
            self.config.max_attempts,
        )
        log.warning(
            "webhook.delivery_failed",
            event_id=row["event_id"],
            attempts=row["attempts"],
            status=attempt.status,
            error=attempt.error,
            state=state,
        )

    async def post(self, body: Any) -> Attempt:
        """One POST of a CloudEvent, bounded: at most ``timeout_seconds`` in all (a receiver
        that trickles its answer is cut off too) and the first ``ERROR_BYTES`` of an error
        answer read. Never raises for the receiver's sake: whatever goes wrong is the
        attempt's error."""
        headers = {"Content-Type": CONTENT_TYPE}
        if self.config.token is not None:
            headers["Authorization"] = f"Bearer {self.config.token}"
        document = body if isinstance(body, str) else json.dumps(body)
        try:
            async with asyncio.timeout(self.config.timeout_seconds):
                return await self._exchange(document.encode(), headers)
        except Exception as exc:  # refused, reset, timed out, bad TLS, anything else
            # httpx names the URL in some errors: the URL is a registered secret.
            return Attempt(False, None, redact_text(f"{type(exc).__name__}: {exc}")[:1000])

    async def _exchange(self, content: bytes, headers: dict[str, str]) -> Attempt:
        async with self.client.stream(
            "POST",
            self.config.url,
            content=content,
            headers=headers,
            timeout=self.config.timeout_seconds,
        ) as response:
            status = response.status_code
            if 200 <= status < 300:
                return Attempt(True, status, None)
            answer = b""
            async for chunk in response.aiter_bytes():
                answer += chunk
                if len(answer) >= ERROR_BYTES:
                    break
        reason = redact_text(answer[:ERROR_BYTES].decode("utf-8", "replace"))
        return Attempt(False, status, f"HTTP {status} {reason}".strip())

    async def run(self, stop: asyncio.Event, wake: asyncio.Event, poll_seconds: float) -> None:
        """Deliver until ``stop``: right away while there is due work, else on a wake-up (a
        delivery was queued) or every ``poll_seconds`` (retries fall due by time). Finished
        rows older than the retention are pruned every ten minutes."""
        loop = asyncio.get_running_loop()
        pruned_at = 0.0

        async def one_round() -> None:
            nonlocal pruned_at
            if loop.time() - pruned_at > PRUNE_EVERY_SECONDS:
                await retry_db(self.prune, stop, log, "webhook.prune")
                pruned_at = loop.time()
            sent = await retry_db(self.deliver_due, stop, log, "webhook.deliver")
            if not sent and not stop.is_set():
                await wait_for_wake(wake, stop, poll_seconds)

        while not stop.is_set():
            await survive(one_round, stop, log, "webhook.sender")

    async def prune(self) -> None:
        await self.pool.execute(load_query("webhook_delivery_prune"), self.config.retention_seconds)


async def run_webhooks(
    pool: asyncpg.Pool,
    listener: Listener,
    config: WebhookConfig,
    stop: asyncio.Event,
    poll_seconds: float,
    client_factory: Callable[[], httpx.AsyncClient] = httpx.AsyncClient,
) -> None:
    """The notifying consumer and the sender, until ``stop``. The consumer's cursor starts at
    the current horizon the first time (history is not notified)."""
    await retry_db(
        lambda: pool.execute(load_query("webhook_consumer_start"), CONSUMER),
        stop,
        log,
        "webhook.start",
    )
    consumer = notifying_consumer(pool, config)
    wake = listener.subscribe([WAKE_TOPIC])
    async with client_factory() as client:
        sender = WebhookSender(pool, config, client)
        await asyncio.gather(
            run_consumer(consumer, listener, stop, poll_seconds),
            sender.run(stop, wake, poll_seconds),
        )


async def forget_consumer(pool: asyncpg.Pool) -> None:
    """Webhooks are off: drop the notifying consumer's cursor (a stale one would show as a
    lagging consumer and keep events from being pruned). Pending deliveries stay as they are."""
    await pool.execute(load_query("webhook_consumer_forget"), CONSUMER)
