"""One contract, three engines: in-process PySpark, the Spark Thrift Server, Spark Connect.

Each engine creates an Iceberg table, fills it with several small files, runs a real
``rewrite_data_files`` procedure built by ``procedure_call`` and must report the procedure's
output columns as dicts while the table's row count and content checksum stay the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from icepack_core.settings import Settings
from icepack_core.spark.engine import ConnectEngine, LocalEngine, SparkEngine, ThriftEngine
from icepack_core.spark.sql import (
    procedure_call,
    qualified_name,
    quote_identifier,
    spark_conf_set,
)
from icepack_core.types import TableRef

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CATALOG = "icepack"
# A table name that needs quoting everywhere: space, backtick, dot, non-ASCII.
TABLE = "daily orders`v2.é"
INSERTS = 6


@pytest.fixture(params=["local", "thrift", "connect"])
def make_engine(
    request: pytest.FixtureRequest, spark_catalog_settings: Settings
) -> Callable[[], SparkEngine]:
    """A factory for the engine under test; its server (or session) is shared per session."""
    kind = request.param
    if kind == "local":
        session = request.getfixturevalue("spark")
        return lambda: LocalEngine(spark_catalog_settings, session=session)
    if kind == "thrift":
        server = request.getfixturevalue("thrift_server")
        return lambda: ThriftEngine(server.host, server.port)
    server = request.getfixturevalue("connect_server")
    return lambda: ConnectEngine(f"sc://{server.host}:{server.port}")


async def table_fingerprint(engine: SparkEngine, table: str) -> dict[str, Any]:
    (row,) = await engine.sql(
        f"SELECT count(*) AS row_count, CAST(coalesce(sum(hash(*)), 0) AS STRING) AS checksum "
        f"FROM {table}"
    )
    return row


async def data_file_count(engine: SparkEngine, namespace: str) -> int:
    files = qualified_name(CATALOG, [namespace, TABLE], "files")
    (row,) = await engine.sql(f"SELECT count(*) AS n FROM {files}")
    return int(row["n"])


async def test_rewrite_data_files_keeps_rows_and_reports_its_output(
    make_engine: Callable[[], SparkEngine],
) -> None:
    async with make_engine() as engine:
        namespace = f"contract_{engine.kind}"
        table = qualified_name(CATALOG, [namespace], TABLE)
        await engine.sql(f"CREATE NAMESPACE IF NOT EXISTS {quote_identifier(CATALOG)}."
                         f"{quote_identifier(namespace)}")  # fmt: skip
        await engine.sql(f"DROP TABLE IF EXISTS {table}")
        assert (
            await engine.sql(
                f"CREATE TABLE {table} (id bigint, name string, amount double) USING iceberg"
            )
            == []
        )
        for batch in range(INSERTS):
            await engine.sql(
                f"INSERT INTO {table} VALUES ({batch}, 'n{batch}''s', {batch * 1.5}), "
                f"({batch + 100}, NULL, -1.0)"
            )
        before = await table_fingerprint(engine, table)
        assert int(before["row_count"]) == 2 * INSERTS
        assert await data_file_count(engine, namespace) >= INSERTS

        call = procedure_call(
            CATALOG,
            "rewrite_data_files",
            {"table": TableRef("icepack", namespace, TABLE), "options": {"min-input-files": "2"}},
        )
        (result,) = await engine.sql(call)

        assert result["rewritten_data_files_count"] >= INSERTS
        assert result["added_data_files_count"] == 1
        assert result["failed_data_files_count"] == 0
        assert int(result["rewritten_bytes_count"]) > 0
        assert await table_fingerprint(engine, table) == before
        assert await data_file_count(engine, namespace) == 1


async def test_set_statements_apply_to_the_engine_session(
    make_engine: Callable[[], SparkEngine],
) -> None:
    async with make_engine() as engine:
        rows = await engine.sql(spark_conf_set("spark.sql.shuffle.partitions", "3"))
        assert rows == [{"key": "spark.sql.shuffle.partitions", "value": "3"}]
        (row,) = await engine.sql("SET spark.sql.shuffle.partitions")
        assert row["value"] == "3"
        await engine.sql(spark_conf_set("spark.sql.shuffle.partitions", "4"))


async def test_a_failing_statement_raises_and_the_engine_stays_usable(
    make_engine: Callable[[], SparkEngine],
) -> None:
    async with make_engine() as engine:
        missing = qualified_name(CATALOG, ["contract_missing"], "nope")
        with pytest.raises(Exception, match=r"(?i)not found|cannot be found|TABLE_OR_VIEW"):
            await engine.sql(f"SELECT * FROM {missing}")
        assert await engine.sql("SELECT 1 AS one") == [{"one": 1}]
