"""The adversarial suite: the whole pipeline (discovery -> inspection -> planning -> execution,
the real services) over a table zoo no happy-path test has, plus a poison job.

It asserts the promises, not a script: every table keeps its rows and content (an oracle
independent of Spark's hash), no file a snapshot references is gone, every rewrite committed
was verified or its table is on hold, no table exceeds its failure budget, and no service loop
died. The continuously written tables (``STREAMS``) are written by a writer in another process
while the pipeline maintains them: their rows must be the writer's committed rows, none of the
writer's snapshots may be reverted, and none of them may be held. The figures are written to
``test-artifacts/adversarial.json`` and printed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from bench.upserts import logical_rows
from icepack_core.discovery.catalogs import load_catalog
from icepack_core.queue.deferrals import DEFER_BASE
from icepack_core.settings import Settings
from icepack_core.types import REWRITES as VERIFIED_REWRITES
from icepack_discovery.service import DiscoveryService
from icepack_executor.service import ExecutorService
from icepack_inspector.service import InspectorService
from icepack_planner.service import PlannerService
from tests.e2e.adversarial_zoo import (
    NAMESPACE,
    PARTITION_TYPES,
    STREAMS,
    ZooTable,
    build_streams,
    build_zoo,
    content_digest,
)
from tests.execution.spark_tables import missing_referenced_files
from tests.support.services import running
from tests.support.settings import service_settings
from tests.support.stored_jobs import enqueue_hand_written
from tests.support.stream_writer import START_DEADLINE_S, StreamWriter
from tests.support.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ARTIFACT = Path(__file__).resolve().parents[2] / "test-artifacts" / "adversarial.json"
# Every action that commits ``replace`` snapshots and is verified (manifest rewrites too: the
# continuously written tables grow enough manifests to get one).
REWRITES = tuple(sorted(a.value for a in VERIFIED_REWRITES))


@pytest.fixture
def pipeline_settings(
    database_url: str, spark_catalog_settings: Settings, tmp_path: Path
) -> Settings:
    return service_settings(
        database_url,
        spark_catalog_settings,
        tmp_path,
        include=[NAMESPACE, f"{NAMESPACE}.*"],
        discovery_interval_seconds=5,
        job_lease_seconds=120,
    )


async def settled(db: asyncpg.Pool, tables: list[ZooTable]) -> bool:
    """Every zoo table was discovered, inspected and planned after its last job finished, and
    nothing is queued or running."""
    row = await db.fetchrow(
        "SELECT (SELECT count(*) FROM icepack.jobs WHERE state IN ('queued', 'running')) AS busy,"
        "       (SELECT count(*) FROM icepack.tables t WHERE t.namespace = $1 AND EXISTS ("
        "          SELECT 1 FROM icepack.recommendations r WHERE r.table_id = t.id"
        "             AND r.created_at > coalesce((SELECT max(j.finished_at) FROM icepack.jobs j"
        "                                           WHERE j.table_id = t.id), '-infinity')))"
        "        AS planned",
        NAMESPACE,
    )
    assert row is not None
    return bool(row["busy"] == 0 and row["planned"] == len(tables))


def verified_snapshots(output: dict[str, Any]) -> set[int]:
    """Snapshot ids a rewrite's stored verification evidence covers."""
    evidence = output.get("verification")
    records = list(evidence.get("snapshots") or []) if isinstance(evidence, dict) else []
    return {int(r["snapshot_id"]) for r in records if isinstance(r, dict) and "snapshot_id" in r}


async def rewritten_while_written(db: asyncpg.Pool, writer: StreamWriter) -> bool:
    """Every continuously written table had a rewrite finish (either way) while its writer
    kept committing after it."""
    writer.check_alive()
    finished = await db.fetch(
        "SELECT t.name, max(j.finished_at) AS at FROM icepack.job_actions a "
        "JOIN icepack.jobs j ON j.id = a.job_id JOIN icepack.tables t ON t.id = j.table_id "
        "WHERE t.namespace = $1 AND a.action = 'rewrite_data_files' "
        "AND a.state IN ('succeeded', 'failed') AND j.finished_at IS NOT NULL GROUP BY t.name",
        NAMESPACE,
    )
    at = {r["name"]: r["at"].timestamp() for r in finished}
    return all(
        name in at and sum(c["at"] > at[name] for c in writer.target(name).commits()) >= 2
        for name in STREAMS
    )


def stream_problems(spark: Any, writer: StreamWriter, table: ZooTable, held: bool) -> list[str]:
    """A continuously written table after its writer stopped: the writer's rows, every writer
    snapshot still an ancestor, not held."""
    log = writer.target(table.name)
    problems = []
    if held:
        problems.append(f"{table.name}: held while a writer committed")
    if logical_rows(spark, table.qualified) != log.model():
        problems.append(f"{table.name}: rows differ from the writer's committed rows")
    ancestors = {
        int(r[0])
        for r in spark.sql(
            f"SELECT snapshot_id FROM {table.qualified}.history WHERE is_current_ancestor"
        ).collect()
    }
    if reverted := [s for s in log.committed() if s not in ancestors]:
        problems.append(f"{table.name}: writer snapshots reverted: {reverted[:3]}")
    if len(log.committed()) < 4:
        problems.append(f"{table.name}: the writer committed {len(log.committed())} times")
    return problems


# A rewrite that lost DEFER_AFTER commits in a row to a writer (the copy-on-write stream's
# deletes) is deferred for DEFER_BASE, as designed: each wait below allows for one deferral.
DEFERRAL_S = DEFER_BASE.total_seconds()


@pytest.mark.timeout(1800 + 2 * DEFERRAL_S)
async def test_the_whole_pipeline_keeps_every_promise_on_the_zoo(
    spark: Any,
    spark_catalog_settings: Settings,
    pipeline_settings: Settings,
    db: asyncpg.Pool,
    tmp_path: Path,
) -> None:
    (catalog_cfg,) = spark_catalog_settings.effective_catalogs()
    zoo = build_zoo(spark, load_catalog(catalog_cfg))
    streams = build_streams(spark)
    tables = zoo + streams
    before = {t.name: content_digest(spark, t) for t in zoo}
    writer = StreamWriter.for_tables(
        spark_catalog_settings,
        NAMESPACE,
        [(name, kind) for name, (kind, _, _) in STREAMS.items()],
        tmp_path / "writer",
        max_rounds=10_000,
    ).start()
    # An operator enables orphan removal for the namespace: the nested locations must stop it
    # there (and only there).
    await db.execute(
        "INSERT INTO icepack.policies (policy_type, scope, catalog, namespace, config) "
        "VALUES ('system.orphan-file-removal', 'namespace', $1, $2, '{}'::jsonb)",
        catalog_cfg.name,
        NAMESPACE,
    )

    services = [DiscoveryService(), InspectorService(), PlannerService(), ExecutorService()]
    async with running(services, pipeline_settings):
        try:
            await eventually(
                lambda: rewritten_while_written(db, writer),
                timeout=900 + START_DEADLINE_S + DEFERRAL_S,
                interval=2,
                what="a rewrite of every continuously written table while its writer writes",
            )
            writer.stop()
        finally:
            writer.kill()
        await eventually(
            lambda: settled(db, tables),
            timeout=900 + DEFERRAL_S,
            interval=2,
            what="every zoo table maintained and re-planned",
        )
        # A poison job arrives at a settled fleet: it fails alone, the executor goes on.
        poison = await enqueue_hand_written(  # a poison job: not actions at all
            db,
            await db.fetchval("SELECT min(id) FROM icepack.tables"),
            ["actions", "skipped"],
            dedupe_key="poison",
        )

        async def poison_failed() -> bool:
            failed: bool = await db.fetchval(
                "SELECT state = 'failed' FROM icepack.jobs WHERE id = $1", poison.id
            )
            return failed

        await eventually(poison_failed, timeout=120, what="the poison job to fail")

    jobs = await db.fetch(
        "SELECT j.id, j.state, j.error, t.name FROM icepack.jobs j "
        "JOIN icepack.tables t ON t.id = j.table_id WHERE t.namespace = $1",
        NAMESPACE,
    )
    actions = await db.fetch(
        "SELECT a.action, a.state, a.output, t.name FROM icepack.job_actions a "
        "JOIN icepack.jobs j ON j.id = a.job_id JOIN icepack.tables t ON t.id = j.table_id "
        "WHERE t.namespace = $1",
        NAMESPACE,
    )
    holds = {
        r["name"]: r["maintenance_hold"]
        for r in await db.fetch(
            "SELECT name, maintenance_hold FROM icepack.tables "
            "WHERE namespace = $1 AND maintenance_hold IS NOT NULL",
            NAMESPACE,
        )
    }

    problems = []
    for table in tables:
        spark.sql(f"REFRESH TABLE {table.qualified}")
        if table.name in STREAMS:
            problems += stream_problems(spark, writer, table, table.name in holds)
        elif content_digest(spark, table) != before[table.name]:
            problems.append(f"{table.name}: rows or contents changed")
        if missing := missing_referenced_files(spark, table.qualified):
            problems.append(f"{table.name}: referenced files deleted: {missing[:3]}")
        replaces = {
            int(r["snapshot_id"])
            for r in spark.sql(
                f"SELECT snapshot_id FROM {table.qualified}.snapshots WHERE operation = 'replace'"
            ).collect()
        }
        covered = set().union(
            *(
                verified_snapshots(a["output"] or {})
                for a in actions
                if a["name"] == table.name and a["action"] in REWRITES
            )
        )
        if replaces - covered and table.name not in holds:
            problems.append(
                f"{table.name}: rewrite snapshots {sorted(replaces - covered)} "
                "were never verified and the table is not held"
            )
    failed = {
        t.name: sum(1 for j in jobs if j["name"] == t.name and j["state"] == "failed")
        for t in tables
    }
    over_budget = {n: c for n, c in failed.items() if c > pipeline_settings.job_max_attempts}
    if over_budget:
        problems.append(f"tables over their failure budget: {over_budget}")
    compacted = {
        a["name"]
        for a in actions
        if a["action"] == "rewrite_data_files" and a["state"] == "succeeded"
    }
    not_compacted = sorted({t.name for t in tables} - compacted - set(holds))
    if not_compacted:
        errors = {j["name"]: j["error"] for j in jobs if j["name"] in not_compacted}
        problems.append(f"never compacted: {not_compacted} ({errors})")
    orphan_skips = await db.fetch(
        "SELECT t.name, r.actions FROM icepack.recommendations r "
        "JOIN icepack.tables t ON t.id = r.table_id WHERE t.name IN ('outer_t', 'inner_t')"
    )
    refused = {
        r["name"]
        for r in orphan_skips
        for s in r["actions"]["skipped"]
        if s["action"] == "remove_orphan_files" and "LOCATION_OVERLAP" in s["reason"]
    }
    if refused != {"outer_t", "inner_t"}:
        problems.append(f"orphan removal not refused for nested locations: {refused}")

    summary = {
        "tables": len(tables),
        "partition_types": sorted(PARTITION_TYPES),
        "column_types_also": ["fixed", "uuid", "struct", "list", "map"],
        "writer_commits": {
            name: {
                "committed": len(writer.target(name).committed()),
                "failed": len(writer.target(name).failed()),
            }
            for name in STREAMS
        },
        "kinds": sorted({t.kind for t in tables}),
        "jobs": len(jobs),  # the poison job included (its table is a zoo table)
        "jobs_succeeded": sum(1 for j in jobs if j["state"] == "succeeded"),
        "rewrites_verified": sum(
            len(verified_snapshots(a["output"] or {})) for a in actions if a["action"] in REWRITES
        ),
        "holds": holds,
        "max_failed_jobs_one_table": max(failed.values(), default=0),
        "poison_job": "failed alone",
    }
    ARTIFACT.parent.mkdir(exist_ok=True)
    ARTIFACT.write_text(json.dumps(summary, indent=2, default=str))
    print(json.dumps(summary, indent=2, default=str))
    assert not problems, "\n".join(problems)
