"""No configured secret reaches a log line, an event, a job row or a span.

A distinct secret is planted in each setting that can hold one (the database URL's
``?password=``, the Spark Connect URL's ``;token=``, an ``fs.azure.account.key.*`` Spark conf,
a catalog's Authorization header, credential and S3 secret key, the Thrift password). Then the
code paths that log or record them run: settings load and a real gateway process starting (its
stderr), log lines that carry the settings and a failing connection, a failing job whose error
and SQL quote the URLs (through ``JobQueue``, ``events.publish`` and the verification hold), and
spans with attributes and a recorded exception (the SDK's in-memory exporter behind the same
redacting processor production exports through). Every captured line, every row of
``icepack.events``/``jobs``/``job_actions``/``tables`` and every span is searched.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest
import structlog
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from icepack_core.execution.job_execution import JobExecution
from icepack_core.execution.maintenance import VerificationFailed
from icepack_core.intents import RewriteDataFiles
from icepack_core.local.ports import free_port
from icepack_core.queue import events
from icepack_core.queue.jobs import JobQueue
from icepack_core.safety.verification import Evidence
from icepack_core.settings import load_settings
from icepack_core.telemetry.logs import setup_logging
from icepack_core.telemetry.tracing import tracer

SECRETS = {
    "db_password": "dbPw-q7Zr81xK",
    "connect_token": "scTok-Vb93LmQa",
    "azure_key": "azKey+Hw2n5TfY0c==",
    "header": "hdrTok-Pq71sWx",
    "credential": "credSec-Jm48Rt",
    "s3_secret": "s3Sec-Nc62Ux0",
    "thrift_password": "thrPw-Ke55Dz",
}


@pytest.fixture
def secret_env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Every ``ICEPACK_*`` setting that can hold a secret, each holding a distinct one."""
    parts = urlsplit(database_url)
    assert parts.password is None  # the test server trusts local connections
    env = {
        "ICEPACK_DATABASE_URL": f"{database_url}?password={SECRETS['db_password']}",
        "ICEPACK_SPARK_ENGINE": "connect",
        "ICEPACK_SPARK_CONNECT_URL": f"sc://spark.example:15002/;token={SECRETS['connect_token']};user_id=icepack",
        "ICEPACK_SPARK_CONF": json.dumps(
            {"fs.azure.account.key.lake.dfs.core.windows.net": SECRETS["azure_key"]}
        ),
        "ICEPACK_CATALOGS": json.dumps(
            [
                {
                    "name": "lake",
                    "type": "rest",
                    "uri": "https://rest.example/api/catalog",
                    "headers": {"Authorization": f"Bearer {SECRETS['header']}"},
                    "s3_access_key_id": "AKIAEXAMPLEID",
                    "s3_secret_access_key": SECRETS["s3_secret"],
                }
            ]
        ),
        "ICEPACK_CATALOG_LAKE_CREDENTIAL": f"icepack-client:{SECRETS['credential']}",
        "ICEPACK_SPARK_THRIFT_PASSWORD": SECRETS["thrift_password"],
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def leaks(text: str) -> list[str]:
    return [name for name, secret in SECRETS.items() if secret in text]


@pytest.fixture
def debug_logging() -> Iterator[None]:
    """Debug logging for one test; the root logger is put back after (py4j logs every call at
    DEBUG, which would flood the rest of the session)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    setup_logging("secrets-test", "debug", "json")
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


async def test_no_secret_in_logs_rows_or_spans(
    secret_env: dict[str, str],
    db: asyncpg.Pool,
    spans: InMemorySpanExporter,
    capfd: pytest.CaptureFixture[str],
    debug_logging: None,
) -> None:
    settings = load_settings()
    log = structlog.get_logger("icepack.test")
    (catalog,) = settings.catalogs
    url, dsn = settings.spark_connect_url, settings.dsn
    # Each secret really is in the configuration (so a clean result means redaction).
    assert catalog.credential is not None
    assert catalog.s3_secret_access_key is not None
    assert settings.spark_thrift_password is not None
    config_text = json.dumps(
        [
            dsn,
            url,
            settings.spark_conf,
            catalog.headers,
            catalog.credential.get_secret_value(),
            catalog.s3_secret_access_key.get_secret_value(),
            settings.spark_thrift_password.get_secret_value(),
        ]
    )
    assert not set(SECRETS) - set(leaks(config_text))

    # Log lines a careless caller might write, and the ones the code writes.
    log.info(
        "settings.loaded",
        settings=settings.model_dump(mode="json"),
        raw=repr(settings),
        env={k: v for k, v in os.environ.items() if "ICEPACK" in k},
    )
    log.info("spark.connect.opening", url=url)
    log.info("service.started", database=settings.masked_dsn)
    assert catalog.credential is not None
    log.info(
        "catalog.loading",
        headers=catalog.headers,
        conf={
            "header.Authorization": catalog.headers["Authorization"],
            "credential": catalog.credential.get_secret_value(),
        },
    )
    try:
        assert catalog.credential is not None
        raise ConnectionError(
            f"cannot reach {url} nor {dsn} "
            f"(ICEPACK_CATALOG_LAKE_CREDENTIAL="
            f"{catalog.credential.get_secret_value()}, "
            f"Authorization: {catalog.headers['Authorization']}, "
            f"conf {settings.spark_conf})"
        )
    except ConnectionError:
        log.exception("executor.engine_failed")

    # A failing job: its action's SQL, output and error, its job error, the event, the hold.
    table_id = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('lake', 'ns', 't') "
        "RETURNING id"
    )
    queue = JobQueue(db)
    enqueued = await queue.enqueue(table_id, [RewriteDataFiles()])
    job = await queue.claim_id(enqueued.job.id, "executor@test", 60)
    assert job is not None
    now = datetime.now(UTC)
    assert settings.spark_thrift_password is not None
    assert catalog.s3_secret_access_key is not None
    failure = (
        f"rewrite_data_files failed: SparkConnectGrpcException: {url} unreachable; "
        f"thrift password={settings.spark_thrift_password.get_secret_value()}; "
        f"s3.secret-access-key={catalog.s3_secret_access_key.get_secret_value()}"
    )
    await queue.record_action(
        job,
        action="rewrite_data_files",
        state="failed",
        started_at=now,
        finished_at=now,
        procedure="rewrite_data_files",
        sql_text=f"CALL lake.system.rewrite_data_files(table => 'ns.t') -- via {url}",
        output={"conf": settings.spark_conf, "endpoint": url, "headers": catalog.headers},
        error=failure,
    )
    await queue.fail(job, f"{failure} (database {dsn})", retryable=False)
    async with db.acquire() as conn:
        assert catalog.credential is not None
        await events.publish(
            conn,
            "catalog.failed",
            payload={
                "error": f"ICEPACK_CATALOG_LAKE_CREDENTIAL={catalog.credential.get_secret_value()}",
                "headers": catalog.headers,
                "spark_conf": settings.spark_conf,
            },
        )
    evidence = Evidence(status="error", start_snapshot_id=None, error=f"database {dsn}")
    held = VerificationFailed(f"check against {url} failed", evidence)
    await JobExecution(db, None, None)._hold(  # type: ignore[arg-type]
        table_id, "rewrite_data_files", str(held), held.evidence.to_json()
    )

    # Spans: attributes, a recorded exception and the error status description.
    with (
        pytest.raises(ConnectionError),
        tracer().start_as_current_span(
            "executor job",
            attributes={
                "icepack.spark_url": url,
                "db.connection_string": dsn,
                "icepack.headers": [catalog.headers["Authorization"]],
            },
        ),
    ):
        raise ConnectionError(f"lost {url} with key {SECRETS['azure_key']}")

    # The search: every captured log line, every row, every span.
    captured = capfd.readouterr()
    lines = (captured.out + captured.err).splitlines()
    assert any("settings.loaded" in line for line in lines)
    assert any("executor.engine_failed" in line for line in lines)
    for line in lines:
        assert not leaks(line), (leaks(line), line)
    rows = []
    for table in ("events", "jobs", "job_actions", "tables"):
        rows += await db.fetchval(
            f"SELECT coalesce(array_agg(row_to_json(t)::text), '{{}}') FROM icepack.{table} t"
        )
    assert any("catalog.failed" in r for r in rows) and any("job.finished" in r for r in rows)
    assert any("unreachable" in r for r in rows)  # the errors are kept, only masked
    for row in rows:
        assert not leaks(row), (leaks(row), row)
    (span,) = [s for s in spans.get_finished_spans() if s.name == "executor job"]
    exported = json.loads(span.to_json())
    assert exported["events"] and exported["events"][0]["name"] == "exception"
    assert not leaks(span.to_json()), span.to_json()


async def test_gateway_process_start_logs_no_secret(
    secret_env: dict[str, str], database_url: str, db: asyncpg.Pool
) -> None:
    """The real service process, configured only through the environment: its start-up and
    shutdown log lines (settings load, ``service.started``...) carry no secret."""
    port = free_port()
    env = {**os.environ, **secret_env, "ICEPACK_HTTP_PORT": str(port), "ICEPACK_LOG_LEVEL": "debug"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "icepack_core.cli.app", "service", "gateway"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            while True:
                try:
                    if (await client.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline and proc.poll() is None, "gateway never ready"
                await asyncio.sleep(0.2)
            await client.get("/tables")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    text = (out + err).decode()
    assert "service.started" in text, text[-2000:]
    assert not leaks(text), (leaks(text), text[-3000:])
