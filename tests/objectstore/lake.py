"""The object-store lake the tests in this package maintain: SeaweedFS (S3 + its own Iceberg
REST catalog) with a planted S3 secret, a Spark Connect server configured from the confs
Icepack generates, and oracles that do not go through Spark.

Why SeaweedFS's own REST catalog rather than Apache Iceberg's REST fixture with ``S3FileIO``:
it is one process that serves both the catalog and the bucket its tables live in, starts in a
few seconds, and is what the discovery and quarantine tests already run; the fixture would
need the AWS bundle on its class path and S3 settings passed through its environment, for
the same ``S3FileIO`` on the Spark side. What Spark exercises is the same either way: a
``type=rest`` catalog handing out ``s3://`` locations, read and written by ``S3FileIO``.

Why a Spark Connect server rather than the in-process session: a server of its own starts with
exactly the jars and confs ``session_conf`` derives from the S3 catalog (``spark.jars`` is
fixed when a JVM starts), as a deployment's remote Spark does, and the executor reaches it
through the ``connect`` engine, the production shape.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
from pyiceberg.table import Table

from icepack_core.discovery.catalogs import load_catalog
from icepack_core.execution.job_runner import JobRunner
from icepack_core.intents import Intent
from icepack_core.local.object_store import ObjectStore
from icepack_core.queue.jobs import Job, JobQueue
from icepack_core.settings import CatalogConfig, Settings, load_settings
from icepack_core.spark.engine import SparkEngine
from icepack_core.types import JobTrigger
from tests.objectstore.aging import age_objects

CATALOG = "lake"
REGION = "us-east-1"


@dataclass(frozen=True)
class StoreAdmin:
    """Where ``weed shell`` reaches the store's master and filer (``host:port``)."""

    master: str
    filer: str

    @classmethod
    def of(cls, args: Any) -> StoreAdmin:
        """From the ``weed mini`` command line (``-master.port=N``, ``-filer.port=N``)."""
        ports = {
            name: str(arg).partition("=")[2]
            for arg in args
            for name in ("master", "filer")
            if str(arg).startswith(f"-{name}.port=")
        }
        return cls(f"127.0.0.1:{ports['master']}", f"127.0.0.1:{ports['filer']}")


@dataclass(frozen=True)
class Lake:
    """The running lake: the store, its admin addresses, the Spark Connect URL, the logs."""

    store: ObjectStore
    admin: StoreAdmin
    connect_url: str
    spark_log: Path
    store_log: Path

    def catalog(self, include: list[str] | None = None) -> CatalogConfig:
        """Icepack's config of the REST catalog: S3 endpoint (path-style), region, keys."""
        return CatalogConfig(
            name=CATALOG,
            type="rest",
            uri=self.store.rest_uri,
            credential=f"{self.store.access_key}:{self.store.secret_key}",
            warehouse="s3://warehouse",
            s3_endpoint=self.store.s3_endpoint,
            s3_access_key_id=self.store.access_key,
            s3_secret_access_key=self.store.secret_key,
            region=REGION,
            include=include or ["*"],
        )

    def settings(self, database_url: str, data_dir: Path, namespace: str, **extra: Any) -> Settings:
        """Service settings on ``database_url``: this catalog limited to ``namespace``, the
        executor on this lake's Spark Connect server."""
        values: dict[str, Any] = {
            "database_url": database_url,
            "data_dir": data_dir,
            "catalogs": [self.catalog([namespace, f"{namespace}.*"])],
            "spark_engine": "connect",
            "spark_connect_url": self.connect_url,
            "poll_interval_seconds": 0.5,
            "discovery_interval_seconds": 2,
            "job_lease_seconds": 120,
            "db_pool_max": 6,
            "expiry_min_age_hours": 0.0,
        }
        return load_settings(**(values | extra))

    def s3(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.store.s3_endpoint,
            region_name=REGION,
            aws_access_key_id=self.store.access_key,
            aws_secret_access_key=self.store.secret_key,
        )

    def table(self, namespace: str, name: str) -> Table:
        """The table as PyIceberg loads it from the REST catalog (fresh each call)."""
        return load_catalog(self.catalog()).load_table((namespace, name))


def split_s3(path: str) -> tuple[str, str]:
    """``s3://bucket/key`` (or ``s3a://``/``s3n://``) as ``(bucket, key)``, the key as written
    (S3FileIO does not decode ``%``)."""
    scheme, sep, rest = path.partition("://")
    assert sep and scheme in ("s3", "s3a", "s3n"), path
    bucket, _, key = rest.partition("/")
    return bucket, key


def object_exists(s3: Any, path: str) -> bool:
    bucket, key = split_s3(path)
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except s3.exceptions.ClientError as exc:
        if exc.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    return True


def object_bytes(s3: Any, path: str) -> bytes:
    bucket, key = split_s3(path)
    body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    return body


def referenced_objects(table: Table) -> set[str]:
    """Every file a snapshot of ``table`` still references (manifest lists, manifests, live
    data and delete files, statistics) and its metadata files, read by PyIceberg."""
    io = table.io
    paths = {table.metadata_location} | {e.metadata_file for e in table.metadata.metadata_log}
    paths |= {s.statistics_path for s in table.metadata.statistics}
    for snapshot in table.metadata.snapshots:
        paths.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            paths.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                paths.add(entry.data_file.file_path)
    return paths


def missing_objects(lake: Lake, table: Table) -> list[str]:
    """Referenced files of ``table`` that are gone from the bucket. Must always be empty."""
    s3 = lake.s3()
    return sorted(p for p in referenced_objects(table) if not object_exists(s3, p))


def content(table: Table) -> tuple[int, str]:
    """Live rows (deletes applied, as PyIceberg reads them) and a SHA-256 of them in a
    canonical order: the oracle, independent of Spark."""
    rows = table.scan().to_arrow().to_pylist()
    canonical = sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)
    return len(rows), hashlib.sha256("\n".join(canonical).encode()).hexdigest()


async def run_job(
    db: Any,
    settings: Settings,
    engine: SparkEngine,
    table_id: int,
    actions: Sequence[Intent],
    clock: datetime | None = None,
) -> Job:
    """One job of ``actions`` on the table, claimed and run through ``JobRunner`` (the
    executor's path); returns the job as it finished."""
    queue = JobQueue(db)
    enqueued = await queue.enqueue(table_id, actions, trigger=JobTrigger.MANUAL)
    job = await queue.claim_id(enqueued.job.id, "executor@s3", 600)
    assert job is not None
    runner = JobRunner(db, settings, queue, engine, "executor@s3")
    if clock is not None:
        runner.execution.ledger.clock = lambda: clock
    done = (await runner.run(job)).job
    assert done is not None
    return done


async def actions_of(db: Any, job_id: int) -> dict[str, dict[str, Any]]:
    rows = await db.fetch(
        "SELECT action, state, output, error, started_at, finished_at FROM icepack.job_actions "
        "WHERE job_id = $1 ORDER BY id",
        job_id,
    )
    return {r["action"]: dict(r) for r in rows}


async def ledger(db: Any, job_id: int) -> list[dict[str, Any]]:
    return [
        dict(r)
        for r in await db.fetch(
            "SELECT path, kind, state, size_bytes, quarantine_path FROM icepack.deletions "
            "WHERE job_id = $1 ORDER BY id",
            job_id,
        )
    ]


def age(lake: Lake, location: str, keys: list[str], seconds_ago: int) -> None:
    """Back-date the objects ``keys`` (relative to ``location``) by ``seconds_ago``."""
    bucket, root = split_s3(location)
    by_dir: dict[str, set[str]] = {}
    for key in keys:
        parent, _, leaf = f"{root}/{key}".rpartition("/")
        by_dir.setdefault(f"/buckets/{bucket}/{parent}", set()).add(leaf)
    mtime = int(time.time()) - seconds_ago
    for directory, names in by_dir.items():
        age_objects(lake.admin, directory, names, mtime)
    s3 = lake.s3()
    for key in keys:  # as S3 lists them, which is what Iceberg's listing reads
        modified = s3.head_object(Bucket=bucket, Key=f"{root}/{key}")["LastModified"]
        assert modified.timestamp() <= mtime + 1, (key, modified)
