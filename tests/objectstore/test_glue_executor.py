"""Glue as the executor's catalog: Spark's ``GlueCatalog`` against the Glue emulator (moto),
data on SeaweedFS's S3 through ``S3FileIO``, from the confs Icepack generates.

The table is discovered through Glue, then the executor's path (``JobQueue`` ->
``JobExecution`` -> ``TableMaintenance`` on the local Spark engine) compacts it and expires
its snapshots. Contents (rows + checksum) are compared before and after, and every file a
remaining snapshot references is looked up on S3 with boto3.

moto does not authenticate, but it tells Glue calls from S3 calls by the request's signature,
so Spark's Glue client needs *some* credentials: Iceberg gives the Glue client no static-key
properties, only the AWS default chain (an IAM role in production). The test puts dummy keys
in the JVM's system properties (the chain's first source). The data's S3 keys are the
SeaweedFS keys from the catalog settings, which SeaweedFS checks: the dummy ones would not do.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from icepack_core.discovery.refresh import Discovery
from icepack_core.intents import (
    ExpireSnapshots,
    ExpireSnapshotsParams,
    RewriteDataFiles,
    RewriteDataFilesParams,
)
from icepack_core.safety.evidence import action_safety
from icepack_core.settings import CatalogConfig, Settings, load_settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.spark.sql import qualified_name
from tests.execution.spark_tables import fingerprint, snapshot_count
from tests.objectstore.jobs import run_job
from tests.objectstore.s3_checks import missing_referenced_objects, object_exists, s3_client
from tests.plugins.catalogs import Seaweed, running_moto

pytestmark = [pytest.mark.spark, pytest.mark.slow]
CATALOG = "glue_s3"  # the Spark catalog name equals the Icepack catalog name
GLUE_API_KEYS = {"aws.accessKeyId": "testing", "aws.secretAccessKey": "testing"}


@pytest.fixture(scope="module")
def moto_glue() -> Iterator[str]:
    """A Glue emulator of this module's own: in the session's, other tests' namespaces are
    tables this test's ``include`` leaves out, recorded as unmaintained; one whose location
    cannot be read makes expiry refuse (``LOCATION_UNKNOWN``), as it must."""
    with running_moto() as endpoint:
        yield endpoint


@pytest.fixture
def glue_settings(
    spark: Any,
    spark_catalog_settings: Settings,
    database_url: str,
    moto_glue: str,
    seaweed: Seaweed,
    tmp_path: Path,
) -> Iterator[tuple[Settings, CatalogConfig, Any]]:
    """Settings whose one catalog is Glue (moto) with its warehouse in a fresh SeaweedFS
    bucket; yields them, the catalog and a boto3 S3 client for the oracles."""
    bucket = f"glue-{uuid.uuid4().hex[:8]}"
    s3 = s3_client(seaweed.s3_endpoint, seaweed.access_key, seaweed.secret_key)
    s3.create_bucket(Bucket=bucket)
    system = spark._jvm.java.lang.System
    previous = {key: system.getProperty(key) for key in GLUE_API_KEYS}
    for key, value in GLUE_API_KEYS.items():
        system.setProperty(key, value)
    cfg = CatalogConfig(
        name=CATALOG,
        type="glue",
        region="us-east-1",
        endpoint=moto_glue,
        s3_endpoint=seaweed.s3_endpoint,
        s3_access_key_id=seaweed.access_key,
        s3_secret_access_key=seaweed.secret_key,
        warehouse=f"s3://{bucket}/wh",
    )
    settings = load_settings(
        database_url=database_url,
        data_dir=tmp_path / "data",
        catalogs=[cfg.model_dump(mode="python")],
        spark_jars_dir=spark_catalog_settings.spark_jars_dir,
        spark_conf=spark_catalog_settings.spark_conf,
    )
    try:
        yield settings, cfg, s3
    finally:
        for key, value in previous.items():
            if value is None:
                system.clearProperty(key)
            else:
                system.setProperty(key, value)


def small_files_table(spark: Any, namespace: str, name: str, batches: int) -> str:
    table = qualified_name(CATALOG, [namespace], name)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_name(CATALOG, [], namespace)}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, part STRING, payload STRING) USING iceberg "
        "TBLPROPERTIES ('format-version'='2')"
    )
    for b in range(batches):
        spark.sql(
            f"INSERT INTO {table} SELECT id, 'a', concat('row-', id) "
            f"FROM range({b * 20}, {(b + 1) * 20})"
        )
    return table


async def test_glue_table_on_s3_is_compacted_and_expired_by_the_executor(
    spark: Any, db: asyncpg.Pool, glue_settings: tuple[Settings, CatalogConfig, Any]
) -> None:
    settings, cfg, s3 = glue_settings
    namespace, name = f"g{uuid.uuid4().hex[:6]}", "events"
    # The executor's session gets the Glue catalog from the generated confs first, as in
    # production (the table is written through the same catalog).
    LocalEngine(settings)._spark()
    table = small_files_table(spark, namespace, name, batches=8)
    before = fingerprint(spark, table)
    files_before = int(spark.sql(f"SELECT count(*) AS n FROM {table}.files").first()["n"])
    assert (
        spark.sql(f"SELECT file_path FROM {table}.files")
        .first()["file_path"]
        .startswith(f"{cfg.warehouse}/")
    )

    # Only this test's namespace: the session's Glue emulator holds other tests' tables too.
    settings = settings.model_copy(
        update={"catalogs": [cfg.model_copy(update={"include": [namespace]})]}
    )
    found = await Discovery(settings, db).run_once()
    assert found.errors == {} and found.discovered == 1
    table_id = await db.fetchval(
        "SELECT id FROM icepack.tables WHERE catalog = $1 AND namespace = $2 AND name = $3",
        CATALOG,
        namespace,
        name,
    )

    _job, (compacted,) = await run_job(
        db,
        settings,
        table_id,
        [RewriteDataFiles(params=RewriteDataFilesParams(options={"min-input-files": "2"}))],
    )
    assert int(compacted["rewritten_data_files_count"]) == files_before
    assert int(spark.sql(f"SELECT count(*) AS n FROM {table}.files").first()["n"]) == 1
    assert fingerprint(spark, table) == before
    assert missing_referenced_objects(spark, s3, table) == []
    stored = await db.fetchrow(
        "SELECT a.* FROM icepack.job_actions a JOIN icepack.jobs j "
        "ON j.id = a.job_id WHERE j.table_id = $1 AND a.action = 'rewrite_data_files'",
        table_id,
    )
    assert stored is not None
    # What the UI and `icepack job` say about it, read from what the executor stored.
    safety = action_safety(
        stored["action"], stored["state"], stored["output"], stored["impact"]
    ).model_dump()
    assert safety["verdict"] == "verified", safety
    assert safety["live_rows"]["before"] == safety["live_rows"]["after"] == before[0]

    older = datetime.now(UTC) + timedelta(milliseconds=1)
    job, (expired,) = await run_job(
        db,
        settings,
        table_id,
        [ExpireSnapshots(params=ExpireSnapshotsParams(older_than=older, retain_last=1))],
    )
    assert snapshot_count(spark, table) == 1
    assert int(expired["deleted_data_files_count"]) == files_before
    ledger = await db.fetch(
        "SELECT path, kind, state FROM icepack.deletions WHERE job_id = $1", job.id
    )
    assert ledger and all(r["state"] == "deleted" for r in ledger)
    assert sum(r["kind"] == "data" for r in ledger) == files_before
    assert [r["path"] for r in ledger if object_exists(s3, r["path"])] == []
    assert fingerprint(spark, table) == before
    assert missing_referenced_objects(spark, s3, table) == []
