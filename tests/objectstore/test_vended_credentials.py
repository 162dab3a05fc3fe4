"""Credential vending end to end: a REST catalog that vends S3 keys in loadTable's answers,
a bucket only those keys open, and Icepack configured with no storage keys at all.

The catalog is ``tests/objectstore/vending_proxy.py``: a real HTTP server in front of
SeaweedFS's real Iceberg REST catalog that adds the keys to loadTable answers as Polaris does.
It stands in for Polaris, which cannot run here (its server is not installable on these
machines), and neither REST catalog that does run here vends credentials.

SeaweedFS runs with keys of its own (distinct, random), which only the test's seeding and
oracles, and the proxy's vended answers, know. Icepack's catalog settings hold the proxy's
client credential and ``vended_credentials: true``; its PyIceberg reads (discovery,
inspection) and its Spark (the executor's rewrite) must both ask for and use what is vended.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from icepack_core.access.tokens import TokenStore
from icepack_core.discovery.catalogs import load_catalog
from icepack_core.discovery.refresh import Discovery
from icepack_core.inspection.inspector import Inspector
from icepack_core.intents import RewriteDataFiles, RewriteDataFilesParams
from icepack_core.local.object_store import LocalSeaweed, ObjectStore
from icepack_core.settings import CatalogConfig, Settings, load_settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.spark.sql import qualified_name
from icepack_core.telemetry.logs import setup_logging
from icepack_core.types import TableRef
from icepack_gateway.app import create_app
from tests.objectstore.jobs import run_job
from tests.objectstore.s3_checks import missing_referenced_objects, s3_client
from tests.objectstore.vending_proxy import DELEGATION, VendingProxy
from tests.plugins.catalogs import SCHEMA, rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]
CATALOG = "vend"
SECRET = f"vendedSecret-{secrets.token_hex(8)}"  # planted: must appear nowhere Icepack writes


@pytest.fixture(scope="module")
def vending_store() -> Iterator[ObjectStore]:
    """A SeaweedFS of its own whose keys only the vending catalog hands out."""
    root = Path(tempfile.mkdtemp(prefix="icepack-vend-"))
    with LocalSeaweed(root, access_key=f"vendedKey{secrets.token_hex(4)}", secret_key=SECRET) as s:
        yield s


@pytest.fixture(scope="module")
def proxy(vending_store: ObjectStore) -> Iterator[VendingProxy]:
    vended = {
        "s3.access-key-id": vending_store.access_key,
        "s3.secret-access-key": vending_store.secret_key,
        "s3.endpoint": vending_store.s3_endpoint,
        "s3.path-style-access": "true",
        "client.region": vending_store.region,
    }
    server = VendingProxy(
        vending_store.rest_uri,
        vending_store.access_key,
        vending_store.secret_key,
        vended,
        vend_prefix="s3://warehouse",
    ).start()
    try:
        yield server
    finally:
        server.stop()


def backend_catalog(store: ObjectStore) -> Any:
    """The seeding and oracle side: SeaweedFS's catalog with its own keys (not Icepack's)."""
    return load_catalog(
        CatalogConfig(
            name="backend",
            type="rest",
            uri=store.rest_uri,
            credential=f"{store.access_key}:{store.secret_key}",
            warehouse="s3://warehouse",
            s3_endpoint=store.s3_endpoint,
            s3_access_key_id=store.access_key,
            s3_secret_access_key=store.secret_key,
            region=store.region,
        )
    )


def icepack_catalog(proxy: VendingProxy, namespace: str, **extra: Any) -> CatalogConfig:
    """Icepack's view: the vending catalog's client credential, no storage keys."""
    return CatalogConfig(
        name=CATALOG,
        type="rest",
        uri=proxy.uri,
        credential=proxy.credential,
        warehouse="s3://warehouse",
        vended_credentials=True,
        include=[namespace],
        **extra,
    )


def contents(table: Any) -> tuple[int, str]:
    """Rows and a checksum of the live contents, read by PyIceberg on the backend's keys."""
    data = table.scan().to_arrow().sort_by([("id", "ascending")])
    digest = hashlib.sha256(json.dumps(data.to_pylist(), sort_keys=True).encode()).hexdigest()
    return data.num_rows, digest


def seed(store: ObjectStore, namespace: str, appends: int) -> Any:
    catalog = backend_catalog(store)
    catalog.create_namespace(namespace)
    table = catalog.create_table(f"{namespace}.events", SCHEMA)
    for i in range(appends):
        table.append(rows(5, start=i * 5))
    return catalog


@pytest.fixture
def json_logs() -> Iterator[None]:
    """Icepack's JSON logs at info for one test; the root logger is put back after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    setup_logging("vend-test", "info", "json")
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


async def every_row(db: Any) -> list[str]:
    """Every row of every table in Icepack's schema, as JSON text."""
    names = await db.fetch(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'icepack' "
        "AND table_type = 'BASE TABLE'"
    )
    found: list[str] = []
    for (name,) in names:
        found += await db.fetchval(
            f"SELECT coalesce(array_agg(row_to_json(t)::text), '{{}}') FROM icepack.\"{name}\" t"
        )
    return found


async def api_answers(db: Any, namespace: str) -> list[str]:
    token, _ = await TokenStore(db).create("vend-test")
    transport = httpx.ASGITransport(app=create_app(db))
    answers = []
    async with httpx.AsyncClient(
        transport=transport,
        base_url="http://gateway",
        headers={"Authorization": f"Bearer {token}"},
    ) as client:
        for path in ("/tables", f"/tables/{CATALOG}/{namespace}/events", "/jobs", "/summary"):
            answer = await client.get(path)
            assert answer.status_code == 200, (path, answer.text)
            answers.append(answer.text)
        job_ids = [j["id"] for j in (await client.get("/jobs")).json()["items"]]
        assert job_ids
        for job_id in job_ids:
            for tail in ("", "/deletions"):
                answers.append((await client.get(f"/jobs/{job_id}{tail}")).text)
    return answers


async def test_vended_keys_let_icepack_inspect_and_compact_and_appear_nowhere(
    spark: Any,
    spark_catalog_settings: Settings,
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    vending_store: ObjectStore,
    proxy: VendingProxy,
    spans: InMemorySpanExporter,
    capfd: pytest.CaptureFixture[str],
    json_logs: None,
) -> None:
    namespace = f"v{uuid.uuid4().hex[:6]}"
    backend = seed(vending_store, namespace, appends=6)
    before = contents(backend.load_table(f"{namespace}.events"))
    settings: Settings = load_settings(
        database_url=database_url,
        data_dir=tmp_path / "data",
        catalogs=[icepack_catalog(proxy, namespace).model_dump(mode="python")],
        spark_jars_dir=spark_catalog_settings.spark_jars_dir,
        spark_conf=spark_catalog_settings.spark_conf,
    )
    # The store really refuses anyone without its keys (so what follows used the vended ones).
    with pytest.raises(Exception, match=r"SignatureDoesNotMatch|AccessDenied"):
        s3_client(vending_store.s3_endpoint, vending_store.access_key, "wrong").list_objects_v2(
            Bucket="warehouse"
        )

    found = await Discovery(settings, db).run_once()
    assert found.errors == {} and found.discovered == 1
    status = await Inspector(settings).inspect(TableRef(CATALOG, namespace, "events"))
    assert (status.data_file_count, status.record_count) == (6, 30)  # manifests read on S3

    table_id = await db.fetchval(
        "SELECT id FROM icepack.tables WHERE catalog = $1 AND namespace = $2", CATALOG, namespace
    )
    LocalEngine(settings)._spark()  # the executor's session gets the vending catalog's confs
    _job, (compacted,) = await run_job(
        db,
        settings,
        table_id,
        [RewriteDataFiles(params=RewriteDataFilesParams(options={"min-input-files": "2"}))],
    )
    assert int(compacted["rewritten_data_files_count"]) == 6
    after = backend.load_table(f"{namespace}.events")
    assert contents(after) == before
    assert len(after.inspect.files()) == 1
    s3 = s3_client(vending_store.s3_endpoint, vending_store.access_key, vending_store.secret_key)
    name = qualified_name(CATALOG, [namespace], "events")
    assert missing_referenced_objects(spark, s3, name) == []

    # Both clients asked for vended credentials on every table load.
    loads = [s for s in proxy.loads() if f"/namespaces/{namespace}/" in s.path]
    clients = {s.headers.get("x-client-version", "?").split()[0] for s in loads}
    assert {"PyIceberg", "Apache"} <= clients, clients
    assert all(s.asked_for_vending for s in loads), [s.headers for s in loads]

    # The planted secret: in no log line, row, span or API answer.
    captured = capfd.readouterr()
    lines = (captured.out + captured.err).splitlines()
    assert lines and not [line for line in lines if SECRET in line]
    assert not [row for row in await every_row(db) if SECRET in row]
    assert not [s.name for s in spans.get_finished_spans() if SECRET in s.to_json()]
    assert not [a for a in await api_answers(db, namespace) if SECRET in a]


async def test_wrong_static_keys_do_not_shadow_the_vended_ones(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    vending_store: ObjectStore,
    proxy: VendingProxy,
) -> None:
    """An operator's stale static keys beside vending: the vended ones are used."""
    namespace = f"w{uuid.uuid4().hex[:6]}"
    seed(vending_store, namespace, appends=3)
    cfg = icepack_catalog(
        proxy,
        namespace,
        s3_endpoint=vending_store.s3_endpoint,
        s3_access_key_id="stale-key",
        s3_secret_access_key="stale-secret",
    )
    settings = load_settings(database_url=database_url, data_dir=tmp_path / "d", catalogs=[cfg])
    status = await Inspector(settings).inspect(TableRef(CATALOG, namespace, "events"))
    assert (status.data_file_count, status.record_count) == (3, 15)


def test_the_catalog_behind_the_stand_in_does_not_vend(vending_store: ObjectStore) -> None:
    """Why the stand-in: SeaweedFS's REST catalog answers a vending request with no keys."""
    namespace = f"n{uuid.uuid4().hex[:6]}"
    catalog = seed(vending_store, namespace, appends=1)
    url = f"{vending_store.rest_uri}/v1/warehouse/namespaces/{namespace}/tables/events"
    answer = catalog._session.get(url, headers={DELEGATION: "vended-credentials"})
    assert answer.status_code == 200
    assert answer.json().get("config", {}) == {}
    assert "storage-credentials" not in answer.json()
