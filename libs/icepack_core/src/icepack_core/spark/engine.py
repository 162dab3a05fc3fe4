"""One interface, three Spark engines: in-process PySpark, Spark Connect, HiveServer2/Thrift.

``SparkEngine.sql`` takes a statement that was built by ``icepack_core.spark.sql`` (engines
never build SQL) and returns its rows as dicts, column name -> value. PySpark, Spark Connect and
PyHive all block, so each engine crosses into a worker thread at exactly one place
(``_run``); statements on one engine run one at a time, because ``SET`` statements and the
PyHive cursor are per session and not thread-safe.

A cancelled ``sql()`` stops waiting but cannot interrupt the statement already sent to Spark;
Iceberg's optimistic commit is the guard against a stale one (docs/architecture.md, "Jobs,
leases, fences, locks").
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

import structlog

from icepack_core.settings import Settings
from icepack_core.spark.extra import require_spark, spark_imports
from icepack_core.spark.session import build_local_session

if TYPE_CHECKING:
    from pyspark.sql import Row, SparkSession

log = structlog.get_logger("icepack.spark")
T = TypeVar("T")
Rows = list[dict[str, Any]]


class SparkEngine(ABC):
    """Runs Spark SQL statements for Icepack.

    Contract: ``sql`` returns every row of the statement's result as a dict (an empty list for
    statements without a result set, such as DDL or ``SET``); ``close`` releases what the
    engine opened and is idempotent. Engines open their connection lazily on first use.
    """

    kind: ClassVar[Literal["local", "connect", "thrift"]]

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._closed = False

    async def sql(self, statement: str) -> Rows:
        """Run one statement and return its rows.

        Raises:
            RuntimeError: the engine is closed.
            MissingExtra: the engine's client is not installed (``icepack-core[spark]``).
            Exception: whatever the underlying client raises for a failed statement (a Py4J,
                Spark Connect or PyHive error); the executor classifies it.
        """
        async with self._lock:
            if self._closed:  # checked under the lock: a close() may have been waiting too
                raise RuntimeError(f"{self.kind} Spark engine is closed")
            running = asyncio.ensure_future(self._run(self._execute, statement))
            try:
                return await asyncio.shield(running)
            except asyncio.CancelledError:
                # Cancelling cannot stop the statement's thread: a rewrite's CALL may go on
                # committing (``interrupt`` cancels only Spark's running jobs). The lock is
                # held until it ends, so the next statement on this engine (the verification
                # after a cancel) sees every commit it made.
                with contextlib.suppress(Exception):
                    await running
                raise

    async def close(self) -> None:
        """Release the session/connection this engine opened (idempotent)."""
        if self._closed:
            return
        self._closed = True
        async with self._lock:
            await self._run(self._close)

    async def interrupt(self) -> None:
        """Ask Spark to stop what this engine is running (the lease was lost or the job was
        cancelled). Does not wait for the running ``sql`` call, and never takes its lock."""
        await asyncio.to_thread(self._interrupt)

    def _interrupt(self) -> None:  # noqa: B027 - engines without a cancel hook do nothing
        """Blocking: cancel running work, if the client can."""

    async def __aenter__(self) -> SparkEngine:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @staticmethod
    async def _run(func: Callable[..., T], *args: Any) -> T:
        # The one boundary where blocking Spark clients cross into a thread.
        return await asyncio.to_thread(func, *args)

    @abstractmethod
    def _execute(self, statement: str) -> Rows:
        """Blocking: run ``statement``, return rows as dicts."""

    @abstractmethod
    def _close(self) -> None:
        """Blocking: release resources; called once."""


def _rows_from_spark(rows: list[Row]) -> Rows:
    return [row.asDict(recursive=True) for row in rows]


class LocalEngine(SparkEngine):
    """In-process PySpark (the embedded default).

    Uses ``session`` when given (never stopped here: close only what you opened); otherwise
    builds or reuses the process's session from ``settings`` on first use and stops it on
    ``close`` only if this engine created it.
    """

    kind = "local"

    def __init__(self, settings: Settings, session: SparkSession | None = None) -> None:
        super().__init__()
        self._settings = settings
        self._session = session
        self._owns_session = False

    def _spark(self) -> SparkSession:
        if self._session is None:
            self._session, self._owns_session = build_local_session(self._settings)
        return self._session

    def _execute(self, statement: str) -> Rows:
        return _rows_from_spark(self._spark().sql(statement).collect())

    def _interrupt(self) -> None:
        if self._session is not None:
            self._session.sparkContext.cancelAllJobs()

    def _close(self) -> None:
        if self._session is not None and self._owns_session:
            self._session.stop()
        self._session = None


class ConnectEngine(SparkEngine):
    """Spark Connect (``sc://host:port``).

    The catalogs are configured on the server (``spark-submit --conf`` from
    ``icepack_core.spark.session.session_conf``), not by this client: static confs such as
    ``spark.jars`` and extensions cannot be set over Connect, and catalog secrets should not
    travel with every session. The client session is created with the Connect-only
    ``create()`` directly on the Connect ``SparkSession`` class, so that it does not switch the
    whole process into Connect mode (``SPARK_CONNECT_MODE_ENABLED``) and can coexist with a
    local session in the same process.
    """

    kind = "connect"

    def __init__(self, url: str) -> None:
        super().__init__()
        self._url = url
        self._session: Any = None  # pyspark.sql.connect.session.SparkSession

    def _spark(self) -> Any:
        if self._session is None:
            with spark_imports("connect"):
                from pyspark.sql.connect.session import SparkSession as ConnectSession

            log.info("spark.connect.opening", url=self._url)
            self._session = ConnectSession.builder.remote(self._url).create()
        return self._session

    def _execute(self, statement: str) -> Rows:
        rows: list[Row] = self._spark().sql(statement).collect()
        return _rows_from_spark(rows)

    def _interrupt(self) -> None:
        if self._session is not None:
            self._session.interruptAll()

    def _close(self) -> None:
        if self._session is not None:
            self._session.stop()
        self._session = None


class ThriftEngine(SparkEngine):
    """HiveServer2 protocol via PyHive: Kyuubi or the Spark Thrift Server.

    As with Connect, catalogs are configured on the server. ``auth`` is PyHive's mode: ``NONE``
    (SASL PLAIN, the HiveServer2 default), ``NOSASL``, or ``LDAP``/``CUSTOM`` with a password.
    """

    kind = "thrift"

    def __init__(
        self,
        host: str,
        port: int,
        *,
        username: str | None = None,
        password: str | None = None,
        auth: str = "NONE",
    ) -> None:
        super().__init__()
        self._host = host
        self._port = port
        self._username = username
        self._password = password
        self._auth = auth
        self._connection: Any = None  # pyhive.hive.Connection

    @classmethod
    def from_settings(cls, settings: Settings) -> ThriftEngine:
        """The engine ``ICEPACK_SPARK_THRIFT_*`` describes."""
        assert settings.spark_thrift_host is not None  # Settings validates this for thrift
        secret = settings.spark_thrift_password
        return cls(
            settings.spark_thrift_host,
            settings.spark_thrift_port,
            username=settings.spark_thrift_username,
            password=secret.get_secret_value() if secret is not None else None,
            auth=settings.spark_thrift_auth,
        )

    def _cursor(self) -> Any:
        if self._connection is None:
            with spark_imports("thrift"):
                from pyhive import hive

            log.info("spark.thrift.opening", host=self._host, port=self._port, auth=self._auth)
            self._connection = hive.connect(
                host=self._host,
                port=self._port,
                username=self._username,
                password=self._password if self._auth in ("LDAP", "CUSTOM") else None,
                auth=self._auth,
            )
        return _spark_thrift_cursor(self._connection)

    def _execute(self, statement: str) -> Rows:
        cursor = self._cursor()
        try:
            cursor.execute(statement)
            if not cursor.description:  # HiveServer2 said: no result set
                return []
            names = [column[0] for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        finally:
            cursor.close()

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
        self._connection = None


# What the Spark Thrift Server reports for a statement whose result has no columns (DDL):
# a placeholder string column, answered by an empty row-based set that PyHive cannot parse.
_SPARK_EMPTY_SCHEMA = [("Result", "STRING_TYPE", None, None, None, None, True)]


def _spark_thrift_cursor(connection: Any) -> Any:
    """A PyHive cursor that reads the Spark Thrift Server's "no columns" answer as no rows."""
    from pyhive import hive

    class SparkThriftCursor(hive.Cursor):  # type: ignore[misc]
        def _fetch_more(self) -> None:
            try:
                super()._fetch_more()
            except TypeError:
                # PyHive iterates `results.columns`, which is None in that answer.
                if self.description != _SPARK_EMPTY_SCHEMA:
                    raise
                self._state = self._STATE_FINISHED

    return SparkThriftCursor(connection)


def engine_for(settings: Settings) -> SparkEngine:
    """The engine ``ICEPACK_SPARK_ENGINE`` selects; nothing is opened until the first ``sql``.

    Raises:
        MissingExtra: that engine's client (the ``icepack-core[spark]`` extra) is not
            installed; checked here, without importing it, so a process fails before any work.
    """
    require_spark(settings.spark_engine)
    if settings.spark_engine == "connect":
        assert settings.spark_connect_url is not None  # Settings validates this for connect
        return ConnectEngine(settings.spark_connect_url)
    if settings.spark_engine == "thrift":
        return ThriftEngine.from_settings(settings)
    return LocalEngine(settings)
