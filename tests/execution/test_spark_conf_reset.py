"""Spark confs a table sets for its action (``icepack.spark.sql.*``) do not outlive the action
on the shared session: the next table runs with the session's own values."""

from __future__ import annotations

from typing import Any

import pytest

from icepack_core.errors import InvalidIdentifier
from icepack_core.execution.maintenance import AfterCall, TableMaintenance
from icepack_core.intents import parse_intent
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.spark.sql import spark_conf_reset, spark_conf_set, spark_conf_show
from icepack_core.types import TableRef
from tests.execution.spark_tables import CATALOG, fingerprint, make_small_files_table, unique_name

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "confs"
SHUFFLE = "spark.sql.shuffle.partitions"
PLANNING = "spark.sql.iceberg.data-planning-mode"  # has a '-': SET must backquote it
TUNED = {
    "icepack.spark.sql.shuffle.partitions": "7",
    "icepack.spark.sql.iceberg.data-planning-mode": "local",
}


def conf(spark: Any, key: str) -> str:
    value: str = spark.sql(spark_conf_show(key)).first()["value"]
    return value


async def test_confs_of_one_table_are_reset_before_the_next(
    spark: Any, spark_catalog_settings: Settings
) -> None:
    engine = LocalEngine(spark_catalog_settings, session=spark)
    spark.sql(spark_conf_set(SHUFFLE, "11"))  # the session's own value, not Spark's default
    spark.sql(spark_conf_reset(PLANNING))
    a, b = unique_name("tuned"), unique_name("plain")
    tables = {n: make_small_files_table(spark, NS, n, batches=3) for n in (a, b)}
    before = {n: fingerprint(spark, t) for n, t in tables.items()}
    seen: dict[str, tuple[str, str]] = {}

    def recorder(name: str) -> AfterCall:
        async def after_call(_action: str) -> None:
            seen[name] = (conf(spark, SHUFFLE), conf(spark, PLANNING))

        return after_call

    action = {"action": "rewrite_manifests", "params": {"use_caching": False}}
    tuned = TableMaintenance(engine, TableRef(CATALOG, NS, a), TUNED, after_call=recorder(a))
    outcome = await tuned.run(parse_intent(action))
    assert seen[a] == ("7", "local")  # in effect during A's action
    assert outcome.sql[:2] == [f"SET `{PLANNING}`=local", f"SET {SHUFFLE}=7"]
    assert (conf(spark, SHUFFLE), conf(spark, PLANNING)) == ("11", "<undefined>")

    plain = TableMaintenance(engine, TableRef(CATALOG, NS, b), {}, after_call=recorder(b))
    await plain.run(parse_intent(action))
    assert seen[b] == ("11", "<undefined>")  # B does not inherit A's confs
    assert {n: fingerprint(spark, t) for n, t in tables.items()} == before


async def test_confs_are_reset_when_the_action_fails(
    spark: Any, spark_catalog_settings: Settings
) -> None:
    engine = LocalEngine(spark_catalog_settings, session=spark)
    spark.sql(spark_conf_set(SHUFFLE, "11"))
    missing = TableMaintenance(engine, TableRef(CATALOG, NS, unique_name("missing")), TUNED)
    with pytest.raises(Exception, match=r"(?i)not found|cannot be found|no such"):
        await missing.run(parse_intent({"action": "rewrite_manifests"}))
    assert (conf(spark, SHUFFLE), conf(spark, PLANNING)) == ("11", "<undefined>")


def test_conf_statements_refuse_keys_outside_the_allowlist() -> None:
    with pytest.raises(InvalidIdentifier, match=r"spark\.sql\.warehouse\.dir"):
        spark_conf_show("spark.sql.warehouse.dir")
    with pytest.raises(InvalidIdentifier, match=r"spark\.sql\.warehouse\.dir"):
        spark_conf_reset("spark.sql.warehouse.dir")
