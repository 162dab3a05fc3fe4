"""The scoped verification through the remote engines: the snapshot views, ``EXPLAIN`` and the
entries diff are plain SQL, so Thrift and Connect prove and fingerprint the same partitions as
the in-process engine. The file diff is read from the metadata by this process (the executor's
catalog), whatever the engine."""

from __future__ import annotations

import json
from typing import Any

import pytest

from icepack_core.execution.maintenance import TableMaintenance
from icepack_core.intents import parse_intent
from icepack_core.settings import Settings
from icepack_core.spark.engine import ConnectEngine, ThriftEngine
from icepack_core.types import TableRef
from tests.execution.spark_tables import CATALOG, metadata_loader, unique_name
from tests.execution.verify_scope_support import HOT, make_partitioned_table
from tests.execution.verify_support import content

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "verify_scope_remote"


@pytest.mark.parametrize("kind", ["thrift", "connect"])
async def test_scoped_verification_through_a_remote_engine(
    kind: str, request: pytest.FixtureRequest, spark: Any, spark_catalog_settings: Settings
) -> None:
    server = request.getfixturevalue(f"{kind}_server")
    engine = (
        ThriftEngine(server.host, server.port)
        if kind == "thrift"
        else ConnectEngine(f"sc://{server.host}:{server.port}")
    )
    name = unique_name(f"scoped_{kind}")
    table = make_partitioned_table(spark, NS, name)
    before = content(spark, table)
    try:
        outcome = await TableMaintenance(
            engine,
            TableRef(CATALOG, NS, name),
            metadata=metadata_loader(spark_catalog_settings, NS, name),
        ).run(
            parse_intent(
                {"action": "rewrite_data_files", "params": {"options": {"min-input-files": "2"}}}
            )
        )
    finally:
        await engine.close()
    assert outcome.verification is not None
    (record,) = outcome.verification.to_json()["snapshots"]
    assert record["ok"] and record["scope"] == "partitions", record.get("scope_reason")
    assert record["files_diff"] == "metadata", record.get("files_diff_fallback")
    assert {json.loads(p["partition"])["part"] for p in record["fingerprinted"]} == set(HOT)
    assert (record["partitions_proven"], record["rows_before"], record["rows_after"]) == (2, 24, 24)
    assert record["checksum_before"] == record["checksum_after"] != "0"
    assert content(spark, table) == before
