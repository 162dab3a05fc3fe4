"""Discovery and inspection against real catalog servers: a Glue emulator (moto) and
SeaweedFS's S3 + Iceberg REST catalog (with OAuth2-style client credentials)."""

from __future__ import annotations

import uuid
from pathlib import Path

import asyncpg
import boto3
import pytest

from icepack_core.discovery.catalogs import load_catalog
from icepack_core.discovery.refresh import Discovery
from icepack_core.inspection.inspector import Inspector
from icepack_core.settings import CatalogConfig, load_settings
from icepack_core.types import TableRef
from tests.inspection.oracle import assert_matches_oracle
from tests.plugins.catalogs import SCHEMA, Seaweed, rows

pytestmark = pytest.mark.slow


async def _discover_and_inspect(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, cfg: CatalogConfig, namespace: str
) -> None:
    catalog = load_catalog(cfg)
    catalog.create_namespace(namespace)
    one = catalog.create_table(f"{namespace}.one", SCHEMA)
    one.append(rows(3))
    one.append(rows(2, start=3))
    catalog.create_table(f"{namespace}.two", SCHEMA)
    # Only this test's namespace: the session's servers hold other tests' tables too.
    cfg = cfg.model_copy(update={"include": [namespace]})
    settings = load_settings(database_url=database_url, data_dir=tmp_path / "d", catalogs=[cfg])
    discovery = Discovery(settings, db)
    first = await discovery.run_once()
    assert first.errors == {}
    assert first.discovered == 2

    status = await Inspector(settings).inspect(TableRef(cfg.name, namespace, "one"))
    assert (status.data_file_count, status.record_count, status.snapshot_count) == (2, 5, 2)
    assert_matches_oracle(status, catalog.load_table(f"{namespace}.one"))

    catalog.drop_table(f"{namespace}.two")
    one.append(rows(1, start=9))
    again = await discovery.run_once()
    assert (again.discovered, again.changed, again.dropped) == (0, 1, 1)


async def test_glue_catalog_discovery_and_inspection(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, moto_glue: str
) -> None:
    bucket = f"icepack-{uuid.uuid4().hex[:8]}"
    s3 = boto3.client(
        "s3",
        endpoint_url=moto_glue,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    s3.create_bucket(Bucket=bucket)
    cfg = CatalogConfig(
        name="glue",
        type="glue",
        region="us-east-1",
        endpoint=moto_glue,
        s3_endpoint=moto_glue,
        s3_access_key_id="testing",
        s3_secret_access_key="testing",
        warehouse=f"s3://{bucket}/wh",
    )
    await _discover_and_inspect(db, database_url, tmp_path, cfg, f"g{uuid.uuid4().hex[:6]}")


async def test_rest_catalog_on_seaweedfs_discovery_and_inspection(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, seaweed: Seaweed
) -> None:
    cfg = CatalogConfig(
        name="weed",
        type="rest",
        uri=seaweed.rest_uri,
        credential=f"{seaweed.access_key}:{seaweed.secret_key}",
        warehouse="s3://warehouse",
        s3_endpoint=seaweed.s3_endpoint,
        s3_access_key_id=seaweed.access_key,
        s3_secret_access_key=seaweed.secret_key,
        region="us-east-1",
    )
    await _discover_and_inspect(db, database_url, tmp_path, cfg, f"w{uuid.uuid4().hex[:6]}")
