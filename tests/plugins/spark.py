"""pytest fixtures: real Spark components, started once per test session and only on demand.

- ``spark_jars``: ``scripts/fetch-maven.sh jars`` into ``.cache/jars`` (a no-op when up to date).
- ``spark_catalog_settings``: Icepack ``Settings`` whose embedded SQL catalog ``icepack`` lives in
  the dedicated database ``icepack_spark`` of the session Postgres, warehouse in a temp dir.
  PyIceberg's ``SqlCatalog`` and every Spark below see the same tables through it.
- ``spark``: an in-process SparkSession (``local[2]``) with the Iceberg runtime and the JDBC
  catalog ``icepack``.
- ``thrift_server`` / ``connect_server``: the Spark Thrift Server (HiveServer2 protocol) and the
  Spark Connect server as subprocesses with the same catalog confs; each yields a
  ``SparkServer`` and is terminated at session end.

The machine has two cores, so servers run ``local[1]`` with a 1 GiB driver, and nothing starts
until a test asks for it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from icepack_core.local.ports import free_port
from icepack_core.settings import Settings, load_settings
from icepack_core.spark.catalog_conf import AWS_BUNDLE_JAR, jars_for
from icepack_core.spark.session import jars_dir, session_conf, spark_properties
from tests.plugins.startup import record_startup

REPO_ROOT = Path(__file__).resolve().parents[2]
JARS_DIR = REPO_ROOT / ".cache" / "jars"
SPARK_DATABASE = "icepack_spark"
SERVER_START_DEADLINE_S = 120.0
THRIFT_SERVER_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
SECTION = "spark start-up"  # of the start-up summary (tests/plugins/startup.py)


def _unavailable(message: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def spark_home() -> Path:
    """The pyspark wheel's install dir, a complete SPARK_HOME (bin/, jars/ incl. thriftserver)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def close_pyspark_result_sockets() -> None:
    """Make PySpark close the local socket it reads ``collect()`` results from.

    PySpark 3.5 leaves that socket to the garbage collector ("will be automatically closed when
    garbage-collected", ``pyspark/rdd.py``), which under ``filterwarnings=error`` turns every
    ``collect()``/``first()`` into an unraisable ``ResourceWarning``. This replacement reads
    the same stream and closes the socket when the stream is exhausted or dropped.
    """
    import pyspark.context
    import pyspark.rdd
    import pyspark.sql.dataframe
    import pyspark.sql.pandas.conversion
    from pyspark import java_gateway

    # PySpark leaves this function unannotated; typed here as the pair it returns.
    connect_and_auth: Callable[[Any, Any], tuple[Any, Any]] = java_gateway.local_connect_and_auth

    def load_from_socket(sock_info: Any, serializer: Any) -> Iterator[Any]:
        sockfile, sock = connect_and_auth(sock_info[0], sock_info[1])
        sock.settimeout(None)  # as PySpark does: materialisation time is unbounded
        try:
            yield from serializer.load_stream(sockfile)
        finally:
            sockfile.close()
            sock.close()

    for module in (pyspark.rdd, pyspark.context, pyspark.sql.dataframe,
                   pyspark.sql.pandas.conversion):  # fmt: skip
        if hasattr(module, "_load_from_socket"):
            module._load_from_socket = load_from_socket  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def spark_jars() -> Path:
    """``.cache/jars`` filled by ``scripts/fetch-maven.sh jars`` (Iceberg runtime, JDBC,
    Connect)."""
    script = REPO_ROOT / "scripts" / "fetch-maven.sh"
    result = subprocess.run(
        [str(script), "jars", str(JARS_DIR)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        _unavailable(
            f"scripts/fetch-maven.sh jars failed ({result.returncode}):\n"
            f"{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
    return JARS_DIR


@pytest.fixture(scope="session")
async def spark_database_url(pg_admin_url: str) -> str:
    """URL of the database ``icepack_spark`` (recreated empty once per session)."""
    admin = await asyncpg.connect(pg_admin_url)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {SPARK_DATABASE} WITH (FORCE)")
        await admin.execute(f"CREATE DATABASE {SPARK_DATABASE}")
    finally:
        await admin.close()
    return urlunsplit(urlsplit(pg_admin_url)._replace(path=f"/{SPARK_DATABASE}"))


@pytest.fixture(scope="session")
def spark_catalog_settings(
    spark_database_url: str, spark_jars: Path, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    """Settings whose effective catalog ``icepack`` is the one every Spark fixture uses."""
    data_dir = tmp_path_factory.mktemp("spark-data")
    return load_settings(
        database_url=spark_database_url,
        data_dir=data_dir,
        spark_jars_dir=spark_jars,
        spark_master="local[2]",
        spark_conf={
            "spark.driver.memory": "1g",
            "spark.sql.warehouse.dir": str(data_dir / "spark-warehouse"),
        },
    )


def with_aws_bundle(settings: Settings) -> Settings:
    """``settings`` whose ``spark.jars`` also hold the Iceberg AWS bundle.

    The session's jars are fixed when its JVM starts, and every Spark test shares one session:
    the object-store tests (S3FileIO, Glue) add their catalogs to it at run time, so the bundle
    must be on it from the start whichever test starts it.
    """
    directory = jars_dir(settings)
    jars = jars_for(directory, settings.effective_catalogs())
    jars += [jar for jar in sorted(directory.glob(f"{AWS_BUNDLE_JAR}*.jar")) if jar not in jars][
        -1:
    ]
    spark_jars = ",".join(str(jar.resolve()) for jar in jars)
    return settings.model_copy(
        update={"spark_conf": {**settings.spark_conf, "spark.jars": spark_jars}}
    )


@pytest.fixture(scope="session")
def spark(spark_catalog_settings: Settings) -> Iterator[object]:
    """The shared in-process SparkSession (``local[2]``, Iceberg, JDBC catalog ``icepack``)."""
    from icepack_core.spark.session import build_local_session

    close_pyspark_result_sockets()
    started = time.monotonic()
    session, created = build_local_session(with_aws_bundle(spark_catalog_settings))
    session.sql("SHOW NAMESPACES IN icepack").collect()  # the catalog really answers
    record_startup(SECTION, "local session", time.monotonic() - started)
    try:
        yield session
    finally:
        if created:
            session.stop()


@dataclass(frozen=True)
class SparkServer:
    """A Spark server subprocess listening on ``host:port``; ``log`` holds its output."""

    kind: str
    host: str
    port: int
    log: Path
    process: subprocess.Popen[bytes]

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


def _port_answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _start_server(kind: str, settings: Settings, workdir: Path, port: int) -> Iterator[SparkServer]:
    """Launch one Spark server class via spark-submit, wait for its port, stop it afterwards."""
    home = spark_home()
    conf = session_conf(settings, connect_server=kind == "connect")
    jars = conf["spark.jars"].replace(",", os.pathsep)
    conf |= {
        # Also on the driver's own class path: the Thrift Server's Hive session code closes the
        # class loader `spark.jars` live in when a client session ends, and classes not loaded
        # by then fail with NoClassDefFoundError for every later session.
        "spark.driver.extraClassPath": jars,
        "spark.master": "local[1]",
        "spark.driver.memory": "1g",
        "spark.sql.warehouse.dir": str(workdir / "spark-warehouse"),
        # PyHive's `USE default` touches the session catalog: keep its Derby metastore here.
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={workdir / 'metastore_db'};create=true"
        ),
    }
    args: list[str] = []
    if kind == "thrift":
        main_class = THRIFT_SERVER_CLASS
        args = [
            "--hiveconf", "hive.server2.thrift.bind.host=127.0.0.1",
            "--hiveconf", f"hive.server2.thrift.port={port}",
        ]  # fmt: skip
    else:
        main_class = CONNECT_SERVER_CLASS
        conf["spark.connect.grpc.binding.address"] = "127.0.0.1"
        conf["spark.connect.grpc.binding.port"] = str(port)
    properties = workdir / "spark.properties"
    properties.write_text(spark_properties(conf))
    properties.chmod(0o600)
    # --class must come first: spark-submit recognises the server classes by it.
    command = [
        str(home / "bin" / "spark-submit"),
        "--class", main_class,
        "--properties-file", str(properties),
        *args,
    ]  # fmt: skip
    log_path = workdir / f"{kind}-server.log"
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_CONF_DIR=str(workdir))
    started = time.monotonic()
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=log_file, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    server = SparkServer(kind, "127.0.0.1", port, log_path, process)
    try:
        deadline = started + SERVER_START_DEADLINE_S
        while not _port_answers(server.host, port):
            if process.poll() is not None:
                pytest.fail(
                    f"Spark {kind} server exited with {process.returncode} before listening; "
                    f"log tail:\n{server.log_tail()}"
                )
            if time.monotonic() > deadline:
                pytest.fail(
                    f"Spark {kind} server did not listen on {port} within "
                    f"{SERVER_START_DEADLINE_S:.0f} s; log tail:\n{server.log_tail()}"
                )
            time.sleep(0.25)
        record_startup(SECTION, f"{kind} server", time.monotonic() - started)
        yield server
    finally:
        # The server's state is throw-away (its warehouse is the test session's): a clean
        # shutdown buys nothing, and a JVM that sits out SIGTERM costs the suite each second.
        process.terminate()
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="session")
def thrift_server(
    spark_catalog_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SparkServer]:
    """The Spark Thrift Server (HiveServer2 protocol, PyHive/Kyuubi path) on 127.0.0.1."""
    workdir = tmp_path_factory.mktemp("thrift-server")
    yield from _start_server("thrift", spark_catalog_settings, workdir, free_port())


@pytest.fixture(scope="session")
def connect_server(
    spark_catalog_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SparkServer]:
    """A Spark Connect server on 127.0.0.1 (client URL ``sc://127.0.0.1:PORT``)."""
    workdir = tmp_path_factory.mktemp("connect-server")
    yield from _start_server("connect", spark_catalog_settings, workdir, free_port())
