"""End to end on the embedded default: a small-files table goes discovery -> inspector ->
planner -> executor -> re-inspection with no manual step and comes back healthy, with the same
rows, and one trace follows it through all four services."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from icepack_core.safety.evidence import action_safety
from icepack_core.settings import Settings
from icepack_discovery.service import DiscoveryService
from icepack_executor.service import ExecutorService
from icepack_inspector.service import InspectorService
from icepack_planner.service import PlannerService
from tests.execution.spark_tables import (
    data_file_count,
    fingerprint,
    make_small_files_table,
    missing_referenced_files,
)
from tests.support.services import running
from tests.support.settings import service_settings
from tests.support.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "flow"


@pytest.fixture
def flow_settings(database_url: str, spark_catalog_settings: Settings, tmp_path: Path) -> Settings:
    return service_settings(database_url, spark_catalog_settings, tmp_path, include=[f"{NS}.*"])


async def test_small_files_table_heals_itself(
    spark: Any, flow_settings: Settings, db: asyncpg.Pool, spans: InMemorySpanExporter
) -> None:
    table = make_small_files_table(spark, NS, "events", batches=12)
    before, files_before = fingerprint(spark, table), data_file_count(spark, table)

    async def healthy_after_a_job() -> asyncpg.Record | None:
        row = await db.fetchrow(
            "SELECT t.id, h.health, h.issues, "
            "  (SELECT count(*) FROM icepack.jobs j WHERE j.table_id = t.id "
            "    AND j.state = 'succeeded') AS jobs_done "
            "FROM icepack.tables t JOIN LATERAL (SELECT * FROM icepack.health_assessments a "
            "  WHERE a.table_id = t.id ORDER BY a.id DESC LIMIT 1) h ON true "
            "WHERE t.namespace = $1 AND t.name = 'events'",
            NS,
        )
        return row if row and row["jobs_done"] >= 1 and row["health"] == "healthy" else None

    services = [DiscoveryService(), InspectorService(), PlannerService(), ExecutorService()]
    async with running(services, flow_settings):
        first = await eventually(
            lambda: db.fetchrow(
                "SELECT health, issues FROM icepack.health_assessments ORDER BY id LIMIT 1"
            ),
            timeout=60,
            what="first assessment",
        )
        assert first is not None
        assert first["health"] != "healthy"
        assert "SMALL_FILES" in {i["code"] for i in first["issues"]}
        done = await eventually(
            healthy_after_a_job, timeout=240, interval=0.5, what="table healthy after maintenance"
        )
        assert done is not None

    assert fingerprint(spark, table) == before  # same rows, same contents
    assert data_file_count(spark, table) < files_before
    assert missing_referenced_files(spark, table) == []
    action = await db.fetchrow(
        "SELECT a.* FROM icepack.job_actions a JOIN icepack.jobs j ON j.id = a.job_id "
        "WHERE j.table_id = $1 AND a.action = 'rewrite_data_files'",
        done["id"],
    )
    assert action is not None
    assert action["state"] == "succeeded"
    # What the UI and `icepack job` say about it, read from what the executor stored.
    safety = action_safety(
        action["action"], action["state"], action["output"], action["impact"]
    ).model_dump()
    assert safety["verdict"] == "verified", safety
    assert safety["live_rows"]["before"] == safety["live_rows"]["after"] == before[0]
    assert safety["snapshots"] and all(r["rows_after"] == before[0] for r in safety["snapshots"])
    assert action["impact"]["before"]["data_file_count"] == files_before
    assert action["impact"]["after"]["data_file_count"] < files_before
    assert "CALL `icepack`.`system`.`rewrite_data_files`" in action["sql_text"]
    recommendation = await db.fetchrow(
        "SELECT actions FROM icepack.recommendations WHERE table_id = $1 AND job_id IS NOT NULL",
        done["id"],
    )
    assert recommendation is not None
    assert "small files" in recommendation["actions"]["actions"][0]["reason"]

    # One trace: discovery's event -> inspector -> planner -> executor for this table.
    by_trace: dict[int, set[str]] = {}
    for span in spans.get_finished_spans():
        by_trace.setdefault(span.context.trace_id, set()).add(span.name)
    journeys = [
        names
        for names in by_trace.values()
        if "discovery table.discovered" in names and "executor job" in names
    ]
    assert journeys, sorted(by_trace.values(), key=len)[-3:]
    assert {"inspector table", "planner table"} <= journeys[0]
