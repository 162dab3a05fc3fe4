"""go-inspector against real remote storage and catalogs: Apache Iceberg's REST catalog server
(`--rest-uri`, OAuth2 client credentials) and SeaweedFS S3 (`s3://` metadata location). Its
contract must equal the Python inspector's on the same tables."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from icepack_core.discovery.catalogs import load_catalog
from icepack_core.inspection.go_inspector import DEFAULT_BINARY
from icepack_core.inspection.inspector import Inspector
from icepack_core.inspection.status import RUN_FIELDS
from icepack_core.settings import CatalogConfig, load_settings
from icepack_core.types import TableRef
from tests.inspection.test_external_cli_go import REPO
from tests.plugins.catalogs import SCHEMA, Seaweed, rows
from tests.plugins.rest_fixture import IcebergRest

GO_BINARY = REPO / DEFAULT_BINARY
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not GO_BINARY.is_file(), reason="go-inspector is not built"),
]


async def run_go(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        str(GO_BINARY),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, (out.decode(), err.decode())
    answer: dict[str, Any] = json.loads(out)
    return answer


def comparable(status: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if k not in RUN_FIELDS | {"catalog"}}


async def make_table(cfg: CatalogConfig) -> str:
    catalog = load_catalog(cfg)
    namespace = f"go_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    table = catalog.create_table(f"{namespace}.events", SCHEMA)
    table.append(rows(3))
    table.append(rows(4, start=3))
    return namespace


async def python_status(cfg: CatalogConfig, namespace: str, tmp_path: Path) -> dict[str, Any]:
    settings = load_settings(
        database_url="postgresql://unused@127.0.0.1:1/x", data_dir=tmp_path, catalogs=[cfg]
    )
    status = await Inspector(settings).inspect(TableRef(cfg.name, namespace, "events"))
    return status.model_dump(mode="json")


async def test_rest_mode_against_the_iceberg_rest_server(
    iceberg_rest: IcebergRest, tmp_path: Path
) -> None:
    cfg = iceberg_rest.config()
    namespace = await make_table(cfg)
    ours = await python_status(cfg, namespace, tmp_path)
    go = await run_go(
        "--rest-uri",
        iceberg_rest.uri,
        "--credential",
        iceberg_rest.credential,
        "--warehouse",
        iceberg_rest.warehouse,
        "--identifier",
        f"{namespace}.events",
        "--catalog",
        cfg.name,
    )
    assert go["inspector"] == "iceberg-go" and go["data_file_count"] == 2
    assert comparable(go) == comparable(ours)


async def test_s3_metadata_location_on_seaweedfs(seaweed: Seaweed, tmp_path: Path) -> None:
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
    namespace = await make_table(cfg)
    ours = await python_status(cfg, namespace, tmp_path)
    assert ours["metadata_location"].startswith("s3://")
    env = {
        "AWS_ACCESS_KEY_ID": seaweed.access_key,
        "AWS_SECRET_ACCESS_KEY": seaweed.secret_key,
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": seaweed.s3_endpoint,
        "PATH": "/usr/bin:/bin",
    }
    go = await run_go(
        "--metadata-location",
        ours["metadata_location"],
        "--namespace",
        namespace,
        "--table",
        "events",
        env=env,
    )
    assert go["record_count"] == 7
    assert comparable(go) == comparable(ours)
