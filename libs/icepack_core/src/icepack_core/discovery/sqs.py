"""Changes pushed in through Amazon SQS: Glue table-change events and S3 metadata-file writes.

A catalog configured with ``sqs_queue_url`` gets an ``SqsWatcher``: it long-polls the queue
(``WaitTimeSeconds`` 20) and understands two message shapes:

* EventBridge's "Glue Data Catalog Table State Change" (``detail.databaseName``,
  ``detail.changedTables``, ``detail.typeOfChange``): each named table is refreshed alone
  (``refresh.refresh_table``: one load, no listing). A ``DeleteTable`` is only a hint, like
  every message: standard SQS redelivers and reorders, and anyone allowed ``sqs:SendMessage``
  can send one. The table is loaded from the catalog, and only the catalog's definite "no such
  table" marks it dropped (as the SQL ``NOTIFY`` path reads the catalog's own row); a forged
  or stale delete of a live table changes nothing, and a load that fails leaves the message on
  the queue;
* S3 event notifications whose ``ObjectCreated`` records name a ``*.metadata.json`` file: the
  known table whose metadata lives in that directory is refreshed; a file of a table discovery
  does not know yet refreshes the whole catalog, at most once per ``UNKNOWN_REFRESH_SECONDS``
  (a busy table the catalog's ``include``/``exclude`` leaves out is never known: each of its
  commits would otherwise cost a full pass; the poll catches what the limit skips).

A message is deleted only after what it caused is committed to the outbox, so a crash between
the two replays it, and a replay (or an SQS duplicate) changes nothing: refreshing a table that
did not change writes no event. A message that cannot be parsed, or whose refresh fails, is
left on the queue: it becomes visible again and, after the queue's ``maxReceiveCount``, the
queue's redrive policy moves it to its dead-letter queue. An S3 notification can arrive before
the writer's catalog commit; when the file is not yet the table's metadata (nor in its metadata
log), the message is made visible again after ``RETRY_SECONDS`` instead of being deleted, up to
``MAX_EARLY_RECEIVES`` receives: a file no commit ever made the table's (a failed writer) is
then deleted and logged, on a queue without a redrive policy too (the poll stays the net).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

import asyncpg
import structlog
from aiobotocore.session import get_session

from icepack_core.db.queries import load_query
from icepack_core.discovery.catalogs import CatalogSet, load_table
from icepack_core.discovery.refresh import refresh_catalog, refresh_table
from icepack_core.errors import PoisonMessage
from icepack_core.settings import CatalogConfig
from icepack_core.telemetry.logs import redact_text
from icepack_core.types import TableRef, join_namespace, split_namespace

WAIT_SECONDS = 20  # SQS long polling: the longest wait the API allows
RETRY_SECONDS = 5  # an S3 notification that ran ahead of its commit is looked at again then
MAX_EARLY_RECEIVES = 60  # about 5 minutes of looking again
UNKNOWN_REFRESH_SECONDS = 60.0
GLUE_DETAIL_TYPE = "Glue Data Catalog Table State Change"
GLUE_DELETES = frozenset({"DeleteTable", "BatchDeleteTable"})
METADATA_SUFFIXES = (".metadata.json", ".metadata.json.gz", ".gz.metadata.json")
log = structlog.get_logger("icepack.discovery.sqs")


@dataclass(frozen=True, slots=True)
class NamedTable:
    """A table named by a Glue event: database (one namespace level) and table name.

    ``dropped`` says what the event claims; it is never trusted (see ``_refresh_named``)."""

    levels: tuple[str, ...]
    name: str
    dropped: bool = False


@dataclass(frozen=True, slots=True)
class MetadataFile:
    """A metadata file an S3 notification says was written."""

    location: str


Hint = NamedTable | MetadataFile


def parse_message(body: str) -> list[Hint]:
    """What a message says changed; ``[]`` for a message that asks for nothing (S3's test event).

    Raises:
        PoisonMessage: the body is not a Glue table-change event or an S3 event notification.
    """
    try:
        data: Any = json.loads(body)
    except ValueError:
        raise PoisonMessage("the message body is not JSON") from None
    if not isinstance(data, dict):
        raise PoisonMessage("the message body is not a JSON object")
    if data.get("Event") == "s3:TestEvent":
        return []
    if data.get("detail-type") == GLUE_DETAIL_TYPE:
        return _glue_hints(data.get("detail"))
    if isinstance(data.get("Records"), list):
        return _s3_hints(data["Records"])
    raise PoisonMessage("neither a Glue table state change nor an S3 event notification")


def _glue_hints(detail: Any) -> list[Hint]:
    if not isinstance(detail, dict):
        raise PoisonMessage("a Glue event without its detail")
    database, tables = detail.get("databaseName"), detail.get("changedTables")
    if not isinstance(database, str) or not database or not isinstance(tables, list):
        raise PoisonMessage("a Glue event without databaseName and changedTables")
    dropped = detail.get("typeOfChange") in GLUE_DELETES
    return [NamedTable((database,), t, dropped) for t in tables if isinstance(t, str) and t]


def _s3_hints(records: list[Any]) -> list[Hint]:
    hints: list[Hint] = []
    for record in records:
        try:
            if not str(record["eventName"]).startswith("ObjectCreated:"):
                continue
            bucket = record["s3"]["bucket"]["name"]
            key = unquote_plus(record["s3"]["object"]["key"])  # S3 URL-encodes keys in events
        except (KeyError, TypeError):
            raise PoisonMessage("an S3 record without eventName, bucket or key") from None
        if key.endswith(METADATA_SUFFIXES):
            hints.append(MetadataFile(f"s3://{bucket}/{key}"))
    return hints


class SqsWatcher:
    """Consumes one catalog's SQS queue until stopped; see the module docstring for the rules."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        catalogs: CatalogSet,
        cfg: CatalogConfig,
        wait_seconds: int = WAIT_SECONDS,
    ) -> None:
        assert cfg.sqs_queue_url is not None
        self.pool = pool
        self.catalogs = catalogs
        self.cfg = cfg
        self.queue_url = cfg.sqs_queue_url
        self.wait_seconds = wait_seconds
        self.deleted = 0  # messages handled and deleted (tests and logs)
        self._unknown_refreshed_at = -UNKNOWN_REFRESH_SECONDS  # the first one runs at once
        self.left = 0  # messages left on the queue (poison, failed or early)

    async def run(self, stop: asyncio.Event) -> None:
        """Receive and handle messages until ``stop``; an SQS outage is retried with backoff."""
        session = get_session()
        backoff = 1.0
        while not stop.is_set():
            try:
                async with session.create_client(
                    "sqs", region_name=self.cfg.region, endpoint_url=self.cfg.sqs_endpoint
                ) as sqs:
                    while not stop.is_set():
                        await self._receive_once(sqs, stop)
                        backoff = 1.0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the queue is unreachable: wait, then try again
                log.warning(
                    "discovery.sqs_unavailable",
                    catalog=self.cfg.name,
                    error=redact_text(f"{type(exc).__name__}: {exc}"),
                    retry_in=backoff,
                )
                try:
                    await asyncio.wait_for(stop.wait(), timeout=backoff)
                except TimeoutError:
                    backoff = min(backoff * 2, 60.0)

    async def _receive_once(self, sqs: Any, stop: asyncio.Event) -> None:
        receive = asyncio.ensure_future(
            sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=self.wait_seconds,
                AttributeNames=["ApproximateReceiveCount"],
            )
        )
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({receive, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if not receive.done():
            receive.cancel()  # stopping: an in-flight receive is simply abandoned
            return
        for message in receive.result().get("Messages", []):
            await self.handle(sqs, message)

    async def handle(self, sqs: Any, message: dict[str, Any]) -> None:
        """Apply one message, then delete it; leave it on the queue when it cannot be applied."""
        message_id = message.get("MessageId")
        try:
            done = await self._apply(parse_message(message.get("Body", "")))
        except Exception as exc:  # poison or failed: the queue's redrive policy takes over
            self.left += 1
            log.warning(
                "discovery.sqs_message_left",
                catalog=self.cfg.name,
                message_id=message_id,
                error=redact_text(f"{type(exc).__name__}: {exc}"),
            )
            return
        receives = int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
        if not done and receives >= MAX_EARLY_RECEIVES:
            log.warning(
                "discovery.sqs_never_committed",
                catalog=self.cfg.name,
                message_id=message_id,
                receives=receives,
            )
        elif not done:  # ran ahead of its commit: look again shortly
            self.left += 1
            await sqs.change_message_visibility(
                QueueUrl=self.queue_url,
                ReceiptHandle=message["ReceiptHandle"],
                VisibilityTimeout=RETRY_SECONDS,
            )
            return
        await sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        self.deleted += 1

    async def _apply(self, hints: list[Hint]) -> bool:
        """Refresh what ``hints`` name; False when a metadata file is not committed yet."""
        done = True
        for hint in hints:
            if isinstance(hint, NamedTable):
                await self._refresh_named(hint)
            else:
                done = await self._refresh_for_file(hint.location) and done
        return done

    async def _refresh_named(self, hint: NamedTable) -> None:
        """Record what the catalog says the table is now, whatever the event claimed: a table
        is marked dropped only when its load answers "no such table" (``refresh_table``)."""
        result = await refresh_table(self.pool, self.catalogs, self.cfg, hint.levels, hint.name)
        if hint.dropped:  # the catalog, not the message, decided: say what it decided
            log.info(
                "discovery.sqs_delete_checked",
                catalog=self.cfg.name,
                table=join_namespace((*hint.levels, hint.name)),
                marked_dropped=result.dropped,
            )

    async def _refresh_for_file(self, location: str) -> bool:
        rows = await self.pool.fetch(
            load_query("table_find_by_metadata_dir"), self.cfg.name, location
        )
        if not rows:  # a table discovery does not know yet: only a listing can name it
            if time.monotonic() - self._unknown_refreshed_at >= UNKNOWN_REFRESH_SECONDS:
                self._unknown_refreshed_at = time.monotonic()
                await refresh_catalog(self.pool, self.catalogs, self.cfg)
            return True
        committed = True
        for row in rows:
            levels = split_namespace(row["namespace"])
            await refresh_table(self.pool, self.catalogs, self.cfg, levels, row["name"])
            committed = await self._is_committed(levels, row["name"], location) and committed
        return committed

    async def _is_committed(self, levels: tuple[str, ...], name: str, location: str) -> bool:
        """Whether ``location`` is the table's metadata or in its metadata log (committed, maybe
        superseded since)."""
        catalog = await self.catalogs.get(self.cfg.name)
        ref = TableRef(self.cfg.name, join_namespace(levels), name)
        table = await load_table(catalog, ref, self.catalogs.gates[self.cfg.name])
        seen = {table.metadata_location, *(e.metadata_file for e in table.metadata.metadata_log)}
        return _same_object(location, seen)


def _same_object(location: str, candidates: set[str]) -> bool:
    def canonical(value: str) -> str:
        for alias in ("s3a://", "s3n://"):
            if value.startswith(alias):
                return "s3://" + value.removeprefix(alias)
        return value

    return canonical(location) in {canonical(c) for c in candidates}
