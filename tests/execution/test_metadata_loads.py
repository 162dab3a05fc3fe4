"""One compaction job loads its table's metadata from the catalog twice.

Once before its CALL (the inspection before, the read probe, the scope and the start snapshot)
and once after it (the verification, the inspection after, the own-commit measurement and the
second read probe): ``job_context.TableMetadata``.

Real Spark, real Postgres, the real catalog: PyIceberg's ``SqlCatalog`` on the Spark fixtures'
Postgres catalog, subclassed only to count ``load_table`` calls, installed in the executor's own
``Inspector``; the job is planned by ``Planner.plan`` and run by ``JobRunner.run``. Contents
are checked before and after, and no file a snapshot references is gone.
"""

from __future__ import annotations

from typing import Any

import pytest

from icepack_core.settings import Settings
from icepack_core.types import JobState
from tests.execution.executor_jobs import job_runner, plan_and_run, register
from tests.execution.spark_tables import (
    data_file_count,
    fingerprint,
    make_small_files_table,
    missing_referenced_files,
    unique_name,
)
from tests.support.counting_catalog import CountingCatalogs

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "metadata_loads"
REWRITE = "rewrite_data_files"


async def test_one_compaction_job_loads_the_table_metadata_twice(
    db: Any, spark: Any, runner_settings: Settings
) -> None:
    name = unique_name("loads")
    table = make_small_files_table(spark, NS, name, batches=8)
    contents, files = fingerprint(spark, table), data_file_count(spark, table)
    assert files >= 8
    table_id = await register(db, spark, table, NS, name)
    runner = job_runner(db, runner_settings, spark)
    catalogs = CountingCatalogs(runner_settings.effective_catalogs())
    runner.execution.inspector.catalogs = catalogs

    planned, job = await plan_and_run(db, runner_settings, spark, table_id, runner=runner)

    assert job.state == JobState.SUCCEEDED
    assert planned.recommendation is not None
    assert [a.action for a in planned.recommendation.actions] == [REWRITE]
    assert fingerprint(spark, table) == contents and data_file_count(spark, table) == 1
    assert missing_referenced_files(spark, table) == []
    # Everything the job read about its table came from two loads: before and after the CALL.
    assert catalogs.loads == [f"('{NS}', '{name}')"] * 2, catalogs.loads
    # ... and every reader was served: both probes planned, the rewrite was verified.
    assert job.outcome is not None
    probes = job.outcome["read_probe"]
    assert (probes["before"]["files_planned"], probes["after"]["files_planned"]) == (files, 1)
    actions = await db.fetch(
        "SELECT action, state, output, impact FROM icepack.job_actions WHERE job_id = $1",
        job.id,
    )
    (action,) = actions
    assert (action["action"], action["state"]) == (REWRITE, "succeeded")
    assert action["output"]["verification"]["status"] == "verified"
    assert action["impact"]["before"]["data_file_count"] == files
    assert action["impact"]["after"]["data_file_count"] == 1
