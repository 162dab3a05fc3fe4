"""pytest fixtures: Apache Iceberg's own REST catalog server (the "REST fixture").

``iceberg_rest`` runs ``org.apache.iceberg.rest.RESTCatalogServer`` 1.11.0 once per session from
the classpath ``scripts/fetch-maven.sh rest-fixture`` resolves into ``.cache/rest-fixture``
(``tools/rest-fixture/pom.xml``: iceberg-core and its ``tests`` jar, the iceberg-open-api
``test-fixtures`` jar, Jetty 12.1, sqlite-jdbc, Hadoop client): ``java -cp '<dir>/*'`` with a
``file://`` warehouse in a temp dir and the server's default backend, a JdbcCatalog on SQLite,
there in a file beside the warehouse (the default in-memory SQLite breaks under concurrent
requests). It answers the OAuth2 client-credentials exchange (``POST /v1/oauth/tokens``, any client
id and secret, token ``client-credentials-token:sub=<client id>``) but does not check tokens on
other requests. ``loadTable`` answers carry an ``ETag`` (derived from the metadata location) and a
matching ``If-None-Match`` is answered ``304 Not Modified`` (new in 1.11.0).

``run_rest_fixture`` starts another, separate instance (tests that stop a server use their own).
The server listens on all interfaces (``RESTCatalogServer`` has no bind-address setting).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

from icepack_core.local.object_store import stop_process
from icepack_core.local.ports import free_port
from icepack_core.settings import CatalogConfig
from tests.plugins.startup import record_startup

REPO_ROOT = Path(__file__).resolve().parents[2]
REST_FIXTURE_DIR = REPO_ROOT / ".cache" / "rest-fixture"
STAMP = ".icepack-rest-fixture.stamp"
START_DEADLINE_S = 60.0  # it answers after ≈1.5 s here
# Client credentials Icepack is configured with (the fixture accepts any pair).
CLIENT_ID, CLIENT_SECRET = "icepack", "fixture-secret"
# A small JVM that starts quickly: C1 only, serial GC (the fixture serves a handful of tables).
JVM_OPTS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xms64m", "-Xmx512m", "-Xshare:auto")
MAIN_CLASS = "org.apache.iceberg.rest.RESTCatalogServer"
# Section of the start-up summary (seconds to the first `GET /v1/config` answer).
SECTION = "iceberg REST fixture start-up"


def _unavailable(message: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@dataclass(frozen=True)
class IcebergRest:
    """A running REST fixture: its base URI and the warehouse its tables are written under."""

    uri: str
    warehouse: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def credential(self) -> str:
        return f"{CLIENT_ID}:{CLIENT_SECRET}"

    def config(self, name: str = "rest", **extra: Any) -> CatalogConfig:
        """Icepack's catalog config for this server, with OAuth2 client credentials."""
        return CatalogConfig(
            name=name,
            type="rest",
            uri=self.uri,
            warehouse=self.warehouse,
            credential=self.credential,
            **extra,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            stop_process(self.proc)


def _log_tail(log: Path, limit: int = 3000) -> str:
    try:
        return log.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


def _wait_config(uri: str, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"the REST fixture exited with {proc.returncode} before "
                f"answering:\n{_log_tail(log)}"
            )
        try:
            with urllib.request.urlopen(f"{uri}/v1/config", timeout=2) as response:
                if response.status == 200:
                    return
                last = f"HTTP {response.status}"
        except urllib.error.HTTPError as exc:
            exc.close()
            last = f"HTTP {exc.code}"
        except OSError as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(0.1)
    raise RuntimeError(f"GET {uri}/v1/config: {last} after {timeout:g}s:\n{_log_tail(log)}")


@contextmanager
def run_rest_fixture(classpath: Path, label: str = "rest-fixture") -> Iterator[IcebergRest]:
    """One REST fixture process on a free port with its own ``file://`` warehouse; stopped
    (and its directory removed) on exit. ``classpath`` is the directory of the fixture's jars."""
    java = shutil.which("java")
    if java is None:
        _unavailable("java is not installed (the Iceberg REST fixture is a JVM server)")
    root = Path(tempfile.mkdtemp(prefix="icepack-rest-fixture-"))
    warehouse = root / "warehouse"
    warehouse.mkdir()
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")},
        # RESTCatalogServer maps CATALOG_X_Y to catalog property x.y (and __ to -).
        "CATALOG_WAREHOUSE": warehouse.as_uri(),
        # Not the default jdbc:sqlite::memory:, which is one database *per connection*: once the
        # JDBC pool opens a second connection (concurrent requests, as discovery's parallel
        # table loads make), requests fail with "no such table: iceberg_tables".
        "CATALOG_URI": f"jdbc:sqlite:{root / 'catalog.db'}",
        "CATALOG_REST_PORT": str(port),
    }
    log = root / "server.log"
    with log.open("wb") as out:
        started = time.monotonic()
        proc = subprocess.Popen(
            [java, *JVM_OPTS, "-cp", f"{classpath.resolve()}/*", MAIN_CLASS],
            env=env,
            cwd=root,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = IcebergRest(f"http://127.0.0.1:{port}", warehouse.as_uri(), proc, log)
    try:
        _wait_config(server.uri, proc, log, START_DEADLINE_S)
        record_startup(SECTION, label, time.monotonic() - started)
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def rest_fixture_classpath() -> Path:
    """The REST fixture's classpath directory, ``.cache/rest-fixture`` (``scripts/fetch-maven.sh
    rest-fixture``, a no-op when its stamp is current), checked against its stamp."""
    script = REPO_ROOT / "scripts" / "fetch-maven.sh"
    result = subprocess.run(
        [str(script), "rest-fixture", str(REST_FIXTURE_DIR)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if result.returncode != 0:
        _unavailable(
            f"scripts/fetch-maven.sh rest-fixture failed ({result.returncode}):\n"
            f"{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
    stamp = (REST_FIXTURE_DIR / STAMP).read_text()
    jars = [line.removeprefix("jar=") for line in stamp.splitlines() if line.startswith("jar=")]
    assert any(j.endswith("-test-fixtures.jar") for j in jars), f"{STAMP} names {jars}"
    return REST_FIXTURE_DIR


@pytest.fixture(scope="session")
def iceberg_rest(rest_fixture_classpath: Path) -> Iterator[IcebergRest]:
    """Iceberg's REST catalog server, shared by the session (tests use their own namespaces)."""
    with run_rest_fixture(rest_fixture_classpath, "iceberg_rest") as server:
        yield server
