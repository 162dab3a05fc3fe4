"""The measured outcome's edges without Spark: the read probe never raises, the outcome is
written only under the job's fence, and a prediction counts only for the action it was made
for. Real Postgres, real queue transitions, a real ``Inspector``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import partial

import asyncpg
import pytest

from icepack_core.errors import StaleFence
from icepack_core.execution.job_execution import JobExecution
from icepack_core.execution.outcome import (
    Probe,
    job_outcome,
    measured_action,
    predicted_benefits,
    read_probe,
)
from icepack_core.inspection.inspector import Inspector
from icepack_core.intents import RewriteManifests
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import Settings
from icepack_core.spark.engine import LocalEngine
from icepack_core.types import TableRef


async def test_the_read_probe_records_why_it_could_not_plan_instead_of_raising(
    settings: Settings,
) -> None:
    found = await read_probe(partial(Inspector(settings).load, TableRef("nowhere", "db", "t")))
    probe = found.to_json()
    assert set(probe) == {"error"}
    assert "catalog 'nowhere' is not configured" in probe["error"]


async def test_only_the_fence_holder_writes_the_outcome(
    db: asyncpg.Pool, settings: Settings
) -> None:
    queue = JobQueue(db)
    table_id = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ('c', 'n', 't') RETURNING id"
    )
    await queue.enqueue(table_id, [RewriteManifests()])
    lost = await queue.claim("executor-a", 1)
    assert lost is not None
    # Its lease expired and the reaper handed the job to another executor.
    await queue.reap(now=datetime.now(UTC) + timedelta(minutes=5))
    holder = await queue.claim("executor-b", 60, now=datetime.now(UTC) + timedelta(hours=2))
    assert holder is not None and holder.fence == lost.fence + 1
    execution = JobExecution(db, LocalEngine(settings), Inspector(settings))
    outcome = job_outcome([], Probe.failed("x"), Probe.failed("y"))
    with pytest.raises(StaleFence):
        await execution._record_outcome(lost, outcome)
    assert (await queue.get(holder.id)).outcome is None
    await execution._record_outcome(holder, outcome)
    assert (await queue.get(holder.id)).outcome == outcome.to_json()


def test_a_prediction_counts_only_for_the_action_it_was_made_for() -> None:
    predicted = {
        "actions": [
            {"action": "rewrite_data_files", "benefit": 12},
            {"action": "rewrite_manifests", "benefit": 3},
        ]
    }
    assert predicted_benefits(predicted, ["rewrite_data_files", "rewrite_manifests"]) == [12, 3]
    assert predicted_benefits(predicted, ["rewrite_manifests", "expire_snapshots", "x"]) == [
        None,
        None,
        None,
    ]
    for malformed in (None, {}, {"actions": "no"}, {"actions": [1, {"benefit": "12"}]}):
        assert predicted_benefits(malformed, ["rewrite_data_files"]) == [None]


def test_an_action_whose_inspection_failed_is_not_measured() -> None:
    measured = measured_action("rewrite_data_files", None, None, 12.0)
    entry = measured.to_json()
    assert entry["benefit"] is None and entry["ratio"] is None
    outcome = job_outcome([measured], Probe.failed("a"), Probe.failed("b")).to_json()
    assert outcome["benefit"] is None and outcome["ratio"] is None
    assert outcome["predicted_benefit"] == 12.0
