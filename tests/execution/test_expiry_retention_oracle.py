"""The retention model against Iceberg itself: ``RemoveSnapshots.apply()`` (no commit) on a real
table with branches, a tag and an unreferenced lineage must name the same snapshots as
``Retention.expired`` for any ``older_than`` and ``retain_last``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icepack_core.execution.ledger.expiry_files import retention_of
from icepack_core.execution.ledger.expiry_retention import Retention
from icepack_core.inspection.inspector import Inspector
from icepack_core.settings import Settings
from icepack_core.types import TableRef
from tests.execution.spark_tables import CATALOG, make_small_files_table, unique_name

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "expiry_oracle"


@pytest.fixture(scope="module")
def graph_table(spark: Any) -> str:
    """main: 5 appends; ``dev`` (keeps 2) off the 2nd with 2 commits; ``gone`` off the 3rd
    with 1 commit, then dropped (unreferenced); tag ``t`` on the 1st; 1 more append on main."""
    name = unique_name("graph")
    table = make_small_files_table(spark, NS, name, batches=5)
    ids = [
        r["snapshot_id"]
        for r in spark.sql(
            f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at"
        ).collect()
    ]
    spark.sql(
        f"ALTER TABLE {table} CREATE BRANCH `dev` AS OF VERSION {ids[1]} "
        "WITH SNAPSHOT RETENTION 2 SNAPSHOTS"
    )
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH `gone` AS OF VERSION {ids[2]}")
    spark.sql(f"ALTER TABLE {table} CREATE TAG `t` AS OF VERSION {ids[0]}")
    for branch, n in (("dev", 2), ("gone", 1)):
        for i in range(n):
            spark.sql(f"INSERT INTO {table}.`branch_{branch}` VALUES ({900 + i}, 'a', 'b')")
    spark.sql(f"ALTER TABLE {table} DROP BRANCH `gone`")
    spark.sql(f"INSERT INTO {table} VALUES (999, 'a', 'late')")
    return name


@pytest.fixture(scope="module")
async def graph_retention(graph_table: str, spark_catalog_settings: Settings) -> Retention:
    loaded = await Inspector(spark_catalog_settings).load(TableRef(CATALOG, NS, graph_table))
    assert loaded.table is not None
    return retention_of(loaded.table.metadata)


def iceberg_expires(spark: Any, name: str, older_than_ms: int, retain_last: int) -> set[int]:
    jvm = spark._jvm
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, f"{CATALOG}.{NS}.{name}"
    )
    removed = table.expireSnapshots().expireOlderThan(older_than_ms).retainLast(retain_last).apply()
    return {int(removed.get(i).snapshotId()) for i in range(removed.size())}


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), retain_last=st.integers(1, 6))
def test_the_model_expires_what_iceberg_expires(
    spark: Any, graph_table: str, graph_retention: Retention, data: st.DataObject, retain_last: int
) -> None:
    stamps = sorted(s.timestamp_ms for s in graph_retention.snapshots)
    older_than = data.draw(
        st.sampled_from([0, *stamps, *(t + 1 for t in stamps), stamps[-1] + 10**9])
    )
    ours = graph_retention.expired(
        older_than_ms=older_than, retain_last=retain_last, now_ms=stamps[-1] + 1000
    )
    assert ours == iceberg_expires(spark, graph_table, older_than, retain_last)


def test_the_oracle_case_is_not_trivial(
    spark: Any, graph_table: str, graph_retention: Retention
) -> None:
    """At the latest cutoff Iceberg expires main's old ancestors and the dropped branch's
    commit, and keeps the tag, dev's two newest and main's head: every rule is exercised."""
    newest = max(s.timestamp_ms for s in graph_retention.snapshots) + 1
    expired = iceberg_expires(spark, graph_table, newest, 1)
    assert graph_retention.expired(older_than_ms=newest, retain_last=1, now_ms=newest) == expired
    refs = {r.name: r.snapshot_id for r in graph_retention.refs}
    assert not expired & set(refs.values())
    kept = len(graph_retention.snapshots) - len(expired)
    # main head, tag t, dev's head and parent (dev keeps 2)
    assert kept == 4 and len(expired) == len(graph_retention.snapshots) - 4
    assert iceberg_expires(spark, graph_table, 0, 1) == set()
