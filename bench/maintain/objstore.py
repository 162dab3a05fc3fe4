"""``bench.maintain --object-store``: the same measurement with the table on S3.

After the local pass, the bench starts the SeaweedFS the tests and ``icepack demo
--object-store`` use (``icepack_core.local.object_store``), writes the same table into a bucket
through a SQL catalog of the same name (``icepack``) in a second database of the bench's
Postgres, and measures it the same way on a new session of the same JVM (``newSession``: its
own catalogs, the same jars and executors). Every read and write of Spark (``S3FileIO``) and of
Icepack's own inspections and verification (PyIceberg's S3 FileIO) then goes through S3, on
loopback: the figures show what the object store's per-request cost does to the job and to its
verification, not network latency.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from pydantic import SecretStr

from bench.maintain import table as bench_table
from bench.maintain.report import Measured
from icepack_core.db import pool as icedb
from icepack_core.db.migrate import migrate
from icepack_core.local.object_store import LocalSeaweed, ObjectStore, ensure_bucket
from icepack_core.local.postgres import LocalPostgres
from icepack_core.settings import CatalogConfig, Settings
from icepack_core.spark.catalog_conf import jars_for, spark_catalog_conf
from icepack_core.spark.session import jars_dir

BUCKET = "bench"
DATABASE = "bench_s3"
Measure = Callable[[Any, Settings, asyncpg.Pool, str, int, bool], Awaitable[Measured]]


def s3_catalog(store: ObjectStore, dsn: str) -> CatalogConfig:
    """The bench catalog's name and kind, with its warehouse in the bench bucket."""
    return CatalogConfig(
        name=bench_table.CATALOG,
        type="sql",
        uri=dsn,
        warehouse=f"s3://{BUCKET}/warehouse",
        s3_endpoint=store.s3_endpoint,
        s3_access_key_id=store.access_key,
        s3_secret_access_key=SecretStr(store.secret_key),
        region=store.region,
    )


def with_aws_bundle(settings: Settings) -> Settings:
    """``settings`` whose session starts with the Iceberg AWS bundle on ``spark.jars`` (a
    session's jars are fixed when its JVM starts; the S3 pass comes later)."""
    placeholder = CatalogConfig(name="s3", type="glue")  # any catalog that needs the bundle
    jars = jars_for(jars_dir(settings), [*settings.effective_catalogs(), placeholder])
    conf = {**settings.spark_conf, "spark.jars": ",".join(str(j.resolve()) for j in jars)}
    return settings.model_copy(update={"spark_conf": conf})


async def measure_on_object_store(
    spark: Any, settings: Settings, server: LocalPostgres, pairs: int, measure: Measure
) -> tuple[Measured, float]:
    """The table on S3, measured by ``measure``; returns it and the seconds writing it took."""
    root = Path(tempfile.mkdtemp(prefix="icepack-bench-s3-"))
    store = LocalSeaweed(root, table_bucket=None)
    try:
        started = store.start()
        ensure_bucket(started, BUCKET)
        dsn = await _fresh_database(server)
        cfg = s3_catalog(started, dsn)
        s3_settings = settings.model_copy(
            update={"database_url": SecretStr(dsn), "catalogs": [cfg]}
        )
        session = spark.newSession()
        for key, value in spark_catalog_conf(cfg).items():
            session.conf.set(key, value)
        print(f"object store: SeaweedFS S3 at {started.s3_endpoint}, bucket {BUCKET}", flush=True)
        t0 = time.perf_counter()
        location, _files = bench_table.write(session)
        written = time.perf_counter() - t0
        print(f"table: written to {location.rsplit('/metadata/', 1)[0]} in {written:.1f} s")
        pool = await icedb.create_pool(s3_settings, "bench-s3")
        try:
            # No verification A/B: its in-process variant is the job's reader, which reads
            # local files only and on S3 is the Spark scan the A/B measures anyway.
            return await measure(session, s3_settings, pool, location, pairs, False), written
        finally:
            await pool.close()
    finally:
        store.stop()
        shutil.rmtree(root, ignore_errors=True)


async def _fresh_database(server: LocalPostgres) -> str:
    admin = await asyncpg.connect(server.admin_dsn())
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        await admin.execute(f"CREATE DATABASE {DATABASE}")
    finally:
        await admin.close()
    dsn = server.admin_dsn(DATABASE)
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    return dsn


@dataclass(frozen=True)
class Side:
    """One store's headline figures (best runs)."""

    job: float
    direct: float
    verification: float
    scans: float

    @classmethod
    def of(cls, m: Measured) -> Side:
        job = min(m.jobs, key=lambda r: r.seconds)
        direct = min(m.directs, key=lambda r: r.seconds)
        return cls(
            job.seconds,
            direct.seconds,
            job.breakdown.get("verification", 0.0),
            sum(job.verification_scans),
        )


def report_side_by_side(local: Measured, s3: Measured, written: float) -> None:
    """Job against the direct CALL and the verification's share, local beside S3."""
    a, b = Side.of(local), Side.of(s3)
    print()
    print("local disk beside the object store (best runs; goal: job <= 1.2x the direct CALL)")
    print(f"{'':34}{'local':>22}{'object store (S3)':>26}")

    def row(label: str, left: str, right: str) -> None:
        print(f"{label:34}{left:>22}{right:>26}")

    row("direct CALL", f"{a.direct:.1f} s", f"{b.direct:.1f} s")
    row(
        "icepack job",
        f"{a.job:.1f} s = {a.job / a.direct:.2f}x",
        f"{b.job:.1f} s = {b.job / b.direct:.2f}x",
    )
    row(
        "verification in the job",
        f"{a.verification:.1f} s = {a.verification / a.job:.0%}",
        f"{b.verification:.1f} s = {b.verification / b.job:.0%}",
    )
    row("  of which fingerprint scans", f"{a.scans:.1f} s", f"{b.scans:.1f} s")
    without_a, without_b = a.job - a.verification, b.job - b.verification
    row(
        "job without the verification",
        f"{without_a:.1f} s = {without_a / a.direct:.2f}x",
        f"{without_b:.1f} s = {without_b / b.direct:.2f}x",
    )
    row("writing the table", "(cached)", f"{written:.1f} s")
