"""Session-wide fixtures: a real PostgreSQL server and a migrated database per test.

Where the server comes from (first that works):
1. ``ICEPACK_TEST_DATABASE_URL`` — an existing server (the URL's user must be able to CREATE
   DATABASE);
2. Docker via testcontainers, when a Docker daemon answers;
3. the local ``initdb``/``pg_ctl`` binaries in a temp dir (as user ``postgres`` under root);
4. otherwise: fail when ``CI=true``, skip when not.

Each test gets its own database cloned from a migrated template: real commits, so NOTIFY and
the xmin horizon behave as in production (no rolled-back transactions).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from icepack_core.db.migrate import migrate
from icepack_core.db.pool import create_pool
from icepack_core.local.postgres import LocalPostgres
from icepack_core.settings import Settings, load_settings

pytest_plugins = [
    "tests.plugins.startup",
    "tests.plugins.spark",
    "tests.plugins.catalogs",
    "tests.plugins.rest_fixture",
]

TEMPLATE = "icepack_template"
# The fixture (anywhere in a test's fixture closure) that makes a test of each kind.
KIND_BY_FIXTURE = {
    "pg_admin_url": "postgres",
    "spark_jars": "spark",
    "iceberg_rest": "catalog_server",
    "rest_fixture_classpath": "catalog_server",
    "seaweed": "catalog_server",
    "lake": "catalog_server",
    "moto_glue": "catalog_server",
    "browser": "browser",
}
_counter = itertools.count()


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


def _docker_answers() -> bool:
    if not os.environ.get("DOCKER_HOST") and not Path("/var/run/docker.sock").exists():
        return False
    import docker

    try:
        client = docker.from_env(timeout=2)
    except Exception:
        return False
    try:
        return bool(client.ping())
    except Exception:
        return False
    finally:
        client.close()


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    """A superuser URL of a running PostgreSQL server for this test session."""
    explicit = os.environ.get("ICEPACK_TEST_DATABASE_URL")
    if explicit:
        yield explicit
        return
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:15", driver=None) as container:
            yield container.get_connection_url()
        return
    try:
        # Not under pytest's tmp dir: that is private to root, and the server runs as postgres.
        root = Path(tempfile.mkdtemp(prefix="icepack-test-pg-"))
        server = LocalPostgres(root, durable=False, database="postgres")
        server.start()
    except (FileNotFoundError, RuntimeError) as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no PostgreSQL for the tests: {exc}")
        pytest.skip(f"no PostgreSQL for the tests: {exc}")
    try:
        yield server.admin_dsn()
    finally:
        server.stop()
        remove_in_background(root)


def remove_in_background(root: Path) -> None:
    """Delete a throw-away directory without waiting for it.

    The session's server holds one database per test (about 9 MB and hundreds of files each):
    deleting several GB of small files took 16-25 s at session end on this machine's ext4
    (mounted with ``discard``), and nothing reads them again.
    """
    # `sh` starts `rm` in the background and exits: `rm` outlives this process, and no child
    # is left for the interpreter to reap.
    subprocess.run(
        ["sh", "-c", 'rm -rf -- "$1" >/dev/null 2>&1 &', "remove", str(root)],
        check=True,
        start_new_session=True,
    )


@pytest.fixture(scope="session")
async def pg_template(pg_admin_url: str) -> str:
    """Name of a migrated template database that per-test databases are cloned from."""
    admin = await asyncpg.connect(pg_admin_url)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {TEMPLATE}")
        await admin.execute(f"CREATE DATABASE {TEMPLATE}")
    finally:
        await admin.close()
    conn = await asyncpg.connect(_with_database(pg_admin_url, TEMPLATE))
    try:
        await migrate(conn)
    finally:
        await conn.close()
    return TEMPLATE


async def create_database(admin_url: str, template: str | None) -> str:
    """A fresh database (cloned from ``template`` when given); returns its URL."""
    name = f"icepack_test_{os.getpid()}_{next(_counter)}"
    admin = await asyncpg.connect(admin_url)
    try:
        clause = f" TEMPLATE {template}" if template else ""
        await admin.execute(f"CREATE DATABASE {name}{clause}")
    finally:
        await admin.close()
    return _with_database(admin_url, name)


@pytest.fixture
async def database_url(pg_admin_url: str, pg_template: str) -> str:
    """URL of a migrated database that belongs to this test alone."""
    return await create_database(pg_admin_url, pg_template)


@pytest.fixture
async def empty_database_url(pg_admin_url: str) -> str:
    """URL of an empty database (no schema) that belongs to this test alone."""
    return await create_database(pg_admin_url, None)


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return load_settings(
        database_url=database_url,
        data_dir=tmp_path / "data",
        db_pool_max=12,
        poll_interval_seconds=0.5,
    )


@pytest.fixture
async def db(settings: Settings) -> AsyncIterator[asyncpg.Pool]:
    """An asyncpg pool on this test's migrated database."""
    pool = await create_pool(settings, "test")
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture(scope="session")
def _tracer_provider() -> InMemorySpanExporter:
    """One global tracer provider for in-process tests, recording to memory."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from icepack_core.telemetry.tracing import export_spans

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    export_spans(provider, exporter, batch=False)  # as production exports: redacted
    trace.set_tracer_provider(provider)
    return exporter


@pytest.fixture
def spans(_tracer_provider: InMemorySpanExporter) -> InMemorySpanExporter:
    """The in-memory span exporter, emptied for this test."""
    _tracer_provider.clear()
    return _tracer_provider


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with the kinds of component it uses (see ``markers`` in pyproject.toml):
    from its fixture closure, ``e2e`` for tests/e2e, and ``unit`` when it uses none."""
    for item in items:
        closure = set(getattr(item, "fixturenames", ()))
        kinds = {kind for fixture, kind in KIND_BY_FIXTURE.items() if fixture in closure}
        if "e2e" in item.path.parts:
            kinds.add("e2e")
        # A test that starts a component itself says so with the marker.
        kinds |= {
            kind
            for kind in set(KIND_BY_FIXTURE.values())
            if item.get_closest_marker(kind) is not None
        }
        for kind in sorted(kinds or {"unit"}):
            item.add_marker(kind)
