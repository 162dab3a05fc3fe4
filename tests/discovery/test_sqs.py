"""Changes pushed through Amazon SQS, against moto's server with real SQS, Glue and S3 calls.

The watcher consumes Glue table-change events and S3 notifications for metadata files; it
deletes a message only after its refresh is committed, coalesces duplicates (a refresh that
changes nothing writes nothing), and leaves poison for the queue's redrive policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import boto3
import pytest

from icepack_core.discovery.catalogs import CatalogSet, load_catalog
from icepack_core.discovery.refresh import Discovery, refresh_catalog
from icepack_core.discovery.sqs import MetadataFile, SqsWatcher, parse_message
from icepack_core.errors import PoisonMessage
from icepack_core.settings import CatalogConfig, load_settings
from tests.plugins.catalogs import rows
from tests.support.waiting import eventually

DEADLINE = 30.0


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, moto_glue: str) -> str:
    """moto's endpoint, with the AWS default credential chain pointed at its test keys."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return moto_glue


def client(endpoint: str, service: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def make_queues(endpoint: str) -> tuple[str, str]:
    """A queue whose redrive policy moves a message to its dead-letter queue after 2 receives."""
    sqs = client(endpoint, "sqs")
    suffix = uuid.uuid4().hex[:8]
    dlq = sqs.create_queue(QueueName=f"icepack-dlq-{suffix}")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    queue = sqs.create_queue(
        QueueName=f"icepack-{suffix}",
        Attributes={
            "VisibilityTimeout": "1",
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "2"}),
        },
    )["QueueUrl"]
    return queue, dlq


def glue_catalog(endpoint: str, queue: str, database: str) -> tuple[CatalogConfig, Any]:
    """A Glue catalog on moto kept to ``database`` (moto's Glue is shared by the session)."""
    bucket = f"icepack-{uuid.uuid4().hex[:8]}"
    client(endpoint, "s3").create_bucket(Bucket=bucket)
    cfg = CatalogConfig(
        name="glue",
        type="glue",
        region="us-east-1",
        endpoint=endpoint,
        s3_endpoint=endpoint,
        s3_access_key_id="testing",
        s3_secret_access_key="testing",
        warehouse=f"s3://{bucket}/wh",
        sqs_queue_url=queue,
        sqs_endpoint=endpoint,
        include=[database],
    )
    return cfg, load_catalog(cfg)


def glue_event(database: str, table: str, change: str = "UpdateTable") -> str:
    return json.dumps(
        {
            "version": "0",
            "source": "aws.glue",
            "detail-type": "Glue Data Catalog Table State Change",
            "detail": {"databaseName": database, "changedTables": [table], "typeOfChange": change},
        }
    )


def s3_event(location: str) -> str:
    bucket, _, key = location.removeprefix("s3://").partition("/")
    return json.dumps(
        {
            "Records": [
                {
                    "eventSource": "aws:s3",
                    "eventName": "ObjectCreated:Put",
                    "s3": {"bucket": {"name": bucket}, "object": {"key": key}},
                }
            ]
        }
    )


async def topics(db: asyncpg.Pool, name: str) -> list[tuple[str, str | None]]:
    recs = await db.fetch(
        "SELECT e.topic, e.payload->>'metadata_location' AS loc FROM icepack.events e "
        "JOIN icepack.tables t ON t.id = e.table_id WHERE t.name = $1 ORDER BY e.id",
        name,
    )
    return [(r["topic"], r["loc"]) for r in recs]


def queue_depth(endpoint: str, queue: str) -> int:
    attrs = client(endpoint, "sqs").get_queue_attributes(
        QueueUrl=queue,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(
        attrs["ApproximateNumberOfMessagesNotVisible"]
    )


@contextlib.asynccontextmanager
async def consuming(db: asyncpg.Pool, cfg: CatalogConfig) -> AsyncIterator[SqsWatcher]:
    watcher = SqsWatcher(db, CatalogSet([cfg]), cfg, wait_seconds=1)
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        yield watcher
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_glue_events_refresh_the_named_table_once_even_when_duplicated(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, aws: str
) -> None:
    queue, _dlq = make_queues(aws)
    database = f"g{uuid.uuid4().hex[:6]}"
    cfg, catalog = glue_catalog(aws, queue, database)
    catalog.create_namespace(database)
    table = catalog.create_table(f"{database}.orders", rows(0).schema)
    discovery = Discovery(
        load_settings(database_url=database_url, data_dir=tmp_path / "d", catalogs=[cfg]), db
    )
    assert (await discovery.run_once()).discovered == 1

    table.append(rows(3))
    location = catalog.load_table(f"{database}.orders").metadata_location
    sqs = client(aws, "sqs")
    for _ in range(2):  # SQS delivers at least once: a duplicate must change nothing
        sqs.send_message(QueueUrl=queue, MessageBody=glue_event(database, "orders"))
    async with consuming(db, cfg) as watcher:
        await eventually(lambda: _deleted(watcher, 2), timeout=DEADLINE, what="both deleted")
    seen = await topics(db, "orders")
    assert [t for t, _ in seen] == ["table.discovered", "table.changed"]
    assert seen[-1][1] == location
    assert queue_depth(aws, queue) == 0

    catalog.drop_table(f"{database}.orders")
    sqs.send_message(QueueUrl=queue, MessageBody=glue_event(database, "orders", "DeleteTable"))
    async with consuming(db, cfg) as watcher:
        await eventually(lambda: _deleted(watcher, 1), timeout=DEADLINE, what="delete handled")
    assert [t for t, _ in await topics(db, "orders")][-1] == "table.dropped"


async def test_a_delete_event_for_a_live_table_is_checked_with_the_catalog(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, aws: str
) -> None:
    """A forged (or stale, reordered) ``DeleteTable`` must not take a live table out of
    maintenance and out of the location-overlap checks: the catalog still has the table, so it
    stays live; a later real drop is recorded."""
    queue, _dlq = make_queues(aws)
    database = f"g{uuid.uuid4().hex[:6]}"
    cfg, catalog = glue_catalog(aws, queue, database)
    catalog.create_namespace(database)
    catalog.create_table(f"{database}.prod", rows(0).schema)
    discovery = Discovery(
        load_settings(database_url=database_url, data_dir=tmp_path / "d", catalogs=[cfg]), db
    )
    assert (await discovery.run_once()).discovered == 1

    sqs = client(aws, "sqs")
    for change in ("DeleteTable", "BatchDeleteTable"):
        sqs.send_message(QueueUrl=queue, MessageBody=glue_event(database, "prod", change))
    async with consuming(db, cfg) as watcher:
        await eventually(lambda: _deleted(watcher, 2), timeout=DEADLINE, what="both handled")
    assert [t for t, _ in await topics(db, "prod")] == ["table.discovered"]
    dropped_at = await db.fetchval("SELECT dropped_at FROM icepack.tables WHERE name = 'prod'")
    assert dropped_at is None
    assert queue_depth(aws, queue) == 0

    catalog.drop_table(f"{database}.prod")
    sqs.send_message(QueueUrl=queue, MessageBody=glue_event(database, "prod", "DeleteTable"))
    async with consuming(db, cfg) as watcher:
        await eventually(lambda: _deleted(watcher, 1), timeout=DEADLINE, what="the real drop")
    assert [t for t, _ in await topics(db, "prod")] == ["table.discovered", "table.dropped"]


async def _deleted(watcher: SqsWatcher, count: int) -> bool:
    return watcher.deleted >= count


async def test_s3_metadata_notifications_refresh_the_table_whose_directory_it_is(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, aws: str
) -> None:
    queue, dlq = make_queues(aws)
    database = f"g{uuid.uuid4().hex[:6]}"
    cfg, catalog = glue_catalog(aws, queue, database)
    catalog.create_namespace(database)
    table = catalog.create_table(f"{database}.events", rows(0).schema)
    discovery = Discovery(
        load_settings(database_url=database_url, data_dir=tmp_path / "d", catalogs=[cfg]), db
    )
    await discovery.run_once()

    table.append(rows(2))
    location = catalog.load_table(f"{database}.events").metadata_location
    sqs = client(aws, "sqs")
    sqs.send_message(QueueUrl=queue, MessageBody=s3_event(location))
    # A metadata file that never became the table's (a writer that failed before its commit):
    # not deleted, looked at again, and finally moved to the dead-letter queue.
    never = location.rsplit("/", 1)[0] + "/99999-never-committed.metadata.json"
    sqs.send_message(QueueUrl=queue, MessageBody=s3_event(never))
    async with consuming(db, cfg) as watcher:
        await eventually(lambda: _deleted(watcher, 1), timeout=DEADLINE, what="the s3 event")
        await eventually(lambda: _dead(aws, dlq), timeout=DEADLINE, what="the early file's DLQ")
    assert [t for t, _ in await topics(db, "events")] == ["table.discovered", "table.changed"]
    assert (await topics(db, "events"))[-1][1] == location


async def _dead(endpoint: str, dlq: str) -> bool:
    return queue_depth(endpoint, dlq) >= 1


async def test_poison_is_left_for_the_redrive_policy_and_the_watcher_goes_on(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, aws: str
) -> None:
    queue, dlq = make_queues(aws)
    database = f"g{uuid.uuid4().hex[:6]}"
    cfg, catalog = glue_catalog(aws, queue, database)
    catalog.create_namespace(database)
    catalog.create_table(f"{database}.late", rows(0).schema)
    sqs = client(aws, "sqs")
    sqs.send_message(QueueUrl=queue, MessageBody="this is not an event")
    sqs.send_message(QueueUrl=queue, MessageBody=glue_event(database, "late", "CreateTable"))
    async with consuming(db, cfg) as watcher:
        await eventually(lambda: _dead(aws, dlq), timeout=DEADLINE, what="poison in the DLQ")
        await eventually(lambda: _deleted(watcher, 1), timeout=DEADLINE, what="the good one")
    # The unknown table was loaded alone (no listing) and discovered.
    assert [t for t, _ in await topics(db, "late")] == ["table.discovered"]
    body = client(aws, "sqs").receive_message(QueueUrl=dlq)["Messages"][0]["Body"]
    assert body == "this is not an event"


@pytest.mark.parametrize(
    "body",
    [
        "[]",
        "{}",
        '{"Records": [{"eventName": "ObjectCreated:Put"}]}',
        '{"detail-type": "Glue Data Catalog Table State Change"}',
    ],
)
def test_unknown_shapes_are_poison(body: str) -> None:
    with pytest.raises(PoisonMessage):
        parse_message(body)


def test_only_metadata_files_matter_and_keys_are_decoded() -> None:
    event = json.dumps(
        {
            "Records": [
                {
                    "eventName": "ObjectCreated:Put",
                    "s3": {
                        "bucket": {"name": "b"},
                        "object": {"key": "wh/db/t/metadata/00001-a%3Db.metadata.json"},
                    },
                },
                {
                    "eventName": "ObjectCreated:Put",
                    "s3": {"bucket": {"name": "b"}, "object": {"key": "wh/db/t/data/x.parquet"}},
                },
                {
                    "eventName": "ObjectRemoved:Delete",
                    "s3": {
                        "bucket": {"name": "b"},
                        "object": {"key": "wh/db/t/metadata/0.metadata.json"},
                    },
                },
            ]
        }
    )
    (hint,) = parse_message(event)
    assert isinstance(hint, MetadataFile)
    assert hint.location == "s3://b/wh/db/t/metadata/00001-a=b.metadata.json"
    assert parse_message('{"Event": "s3:TestEvent"}') == []


async def test_without_a_redrive_policy_nothing_is_looked_at_for_ever(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, aws: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A metadata file no commit ever made a table's is given up after MAX_EARLY_RECEIVES
    receives (the queue has no dead-letter queue to take it), and notifications for tables
    discovery does not know (here: outside the catalog's ``include``) refresh the whole catalog
    at most once per UNKNOWN_REFRESH_SECONDS, not once each."""
    from icepack_core.discovery import sqs as sqs_module

    monkeypatch.setattr(sqs_module, "MAX_EARLY_RECEIVES", 2)
    passes = 0
    real_refresh = refresh_catalog

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal passes
        passes += 1
        return await real_refresh(*args, **kwargs)

    monkeypatch.setattr(sqs_module, "refresh_catalog", counted)
    sqs = client(aws, "sqs")
    queue = sqs.create_queue(
        QueueName=f"icepack-plain-{uuid.uuid4().hex[:8]}", Attributes={"VisibilityTimeout": "1"}
    )["QueueUrl"]
    database = f"g{uuid.uuid4().hex[:6]}"
    cfg, catalog = glue_catalog(aws, queue, database)
    catalog.create_namespace(database)
    catalog.create_table(f"{database}.known", rows(0).schema)
    await Discovery(
        load_settings(database_url=database_url, data_dir=tmp_path / "d", catalogs=[cfg]), db
    ).run_once()
    location = catalog.load_table(f"{database}.known").metadata_location
    never = location.rsplit("/", 1)[0] + "/99999-never-committed.metadata.json"
    bucket = location.removeprefix("s3://").split("/", 1)[0]
    sqs.send_message(QueueUrl=queue, MessageBody=s3_event(never))
    for i in range(3):
        other = f"s3://{bucket}/other/t{i}/metadata/00001-{i}.metadata.json"
        sqs.send_message(QueueUrl=queue, MessageBody=s3_event(other))

    async with consuming(db, cfg) as watcher:
        await eventually(lambda: _deleted(watcher, 4), timeout=DEADLINE, what="all four handled")
    assert queue_depth(aws, queue) == 0
    assert passes == 1
