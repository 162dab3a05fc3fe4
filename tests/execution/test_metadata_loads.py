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

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyiceberg.typedef import Identifier

from icepack_core.discovery.catalogs import CatalogSet, load_catalog
from icepack_core.settings import CatalogConfig, Settings
from icepack_core.types import JobState
from tests.execution.executor_jobs import job_runner, plan_and_run, register
from tests.execution.spark_tables import (
    data_file_count,
    fingerprint,
    make_small_files_table,
    missing_referenced_files,
    unique_name,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]
NS = "metadata_loads"
REWRITE = "rewrite_data_files"


class CountingSqlCatalog(SqlCatalog):
    """The real SQL catalog; every ``load_table`` is appended to ``loads`` first."""

    def __init__(self, name: str, loads: list[str], **properties: str) -> None:
        super().__init__(name, **properties)
        self.loads = loads

    def load_table(self, identifier: str | Identifier) -> Table:
        self.loads.append(str(identifier))
        return super().load_table(identifier)


class CountingCatalogs(CatalogSet):
    """``CatalogSet`` whose SQL catalogs count their table loads into ``loads``."""

    def __init__(self, configs: Iterable[CatalogConfig]) -> None:
        super().__init__(configs)
        self.loads: list[str] = []
        self._counting: dict[str, Catalog] = {}

    async def get(self, name: str) -> Catalog:
        if name not in self._counting:
            real = await asyncio.to_thread(load_catalog, self.configs[name])
            assert isinstance(real, SqlCatalog), type(real)
            self._counting[name] = CountingSqlCatalog(name, self.loads, **real.properties)
        return self._counting[name]


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
