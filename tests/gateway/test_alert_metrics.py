"""The alerting gauges of the gateway's ``/metrics`` (icepack_gateway.alert_metrics), read from
a real Postgres written by the real producers: jobs through ``JobQueue`` (enqueue, claim, fail
with the exception's code), catalog passes through discovery's ``apply_listing``, holds through
``place_hold`` (the executor's), pending verifications and quarantined files through the named
statements the executor runs, under a claimed job's fence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from icepack_core.db.queries import load_query
from icepack_core.discovery.limits import CatalogCalls
from icepack_core.discovery.refresh import apply_listing
from icepack_core.intents import ExpireSnapshots, ExpireSnapshotsParams, Intent, RewriteDataFiles
from icepack_core.planning.planner import Planner
from icepack_core.queue.events import EventConsumer, publish
from icepack_core.queue.jobs import JobQueue
from icepack_core.safety.holds import place_hold
from icepack_core.settings import CatalogConfig, Settings
from icepack_gateway.app import create_app

REWRITE = [RewriteDataFiles()]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text answer by (name, sorted labels)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def scrape(
    db: asyncpg.Pool, **settings: object
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    app = create_app(db, settings=Settings(**settings))  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        response = await client.get("/metrics")
    assert response.status_code == 200
    return samples(response.text)


async def table(db: asyncpg.Pool, catalog: str, name: str) -> int:
    table_id: int = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name) VALUES ($1, 'ns', $2) RETURNING id",
        catalog,
        name,
    )
    return table_id


async def test_an_empty_fleet_exports_every_alerting_gauge_at_zero(db: asyncpg.Pool) -> None:
    got = await scrape(db, catalogs=[CatalogConfig(name="lake", type="sql", uri="sqlite://")])
    for name, labels in [
        ("icepack_tables_held", (("catalog", "lake"),)),
        ("icepack_tables_failure_backoff", (("catalog", "lake"),)),
        ("icepack_jobs_finished_last_hour", (("state", "failed"),)),
        ("icepack_queue_oldest_claimable_job_age_seconds", ()),
        ("icepack_pending_verifications_stale", ()),
        ("icepack_quarantined_bytes", ()),
    ]:
        assert got[(name, labels)] == 0, name
    assert got[("icepack_discovery_interval_seconds", ())] == 60


async def test_failures_holds_backoff_and_queue_wait(db: asyncpg.Pool) -> None:
    queue = JobQueue(db)
    failing_id, held_id, waiting_id = [await table(db, "lake", n) for n in ("f", "h", "w")]
    # A job that fails for good, with its exception's code: backoff starts for its action.
    await queue.enqueue(failing_id, REWRITE)
    job = await queue.claim("executor-1", 60)
    assert job is not None
    await queue.fail(job, "rows differ", retryable=False, code="VERIFICATION_FAILED")
    await place_hold(db, held_id, action="rewrite_data_files", reason="rows differ", evidence={})
    await queue.enqueue(waiting_id, REWRITE)

    got = await scrape(db, failure_backoff_base_seconds=900)
    assert got[("icepack_tables_held", (("catalog", "lake"),))] == 1
    assert got[("icepack_tables_failure_backoff", (("catalog", "lake"),))] == 1
    key = (("action", "rewrite_data_files"), ("reason", "VERIFICATION_FAILED"))
    assert got[("icepack_job_failures_last_hour", key)] == 1
    assert got[("icepack_jobs_finished_last_hour", (("state", "failed"),))] == 1
    assert got[("icepack_queue_oldest_claimable_job_age_seconds", ())] > 0
    assert got[("icepack_jobs_claimed_last_hour", ())] == 1
    assert ("icepack_job_claim_latency_seconds", (("quantile", "0.99"),)) in got

    # With no backoff configured the failed table is not resting; the failure still counts.
    got = await scrape(db, failure_backoff_base_seconds=0)
    assert got[("icepack_tables_failure_backoff", (("catalog", "lake"),))] == 0
    assert got[("icepack_job_failures_last_hour", key)] == 1


async def test_reaped_job_is_classed_lease_expired(db: asyncpg.Pool) -> None:
    queue = JobQueue(db)
    table_id = await table(db, "lake", "t")
    await queue.enqueue(table_id, REWRITE, max_attempts=1)
    assert await queue.claim("executor-1", 60) is not None
    [reaped] = await queue.reap(now=datetime.now(UTC) + timedelta(minutes=5))
    assert reaped.state.value == "failed" and reaped.error_code == "LEASE_EXPIRED"
    got = await scrape(db)
    key = (("action", "rewrite_data_files"), ("reason", "LEASE_EXPIRED"))
    assert got[("icepack_job_failures_last_hour", key)] == 1


async def test_catalog_passes_and_consumer_lag(db: asyncpg.Pool) -> None:
    cfg = CatalogConfig(name="lake", type="sql", uri="sqlite://")
    await apply_listing(db, cfg, [], CatalogCalls())
    await db.execute(load_query("catalog_status_error"), "broken", "connection refused")
    consumer = EventConsumer(db, "planner", handler=lambda conn, event: None)  # type: ignore[arg-type,return-value]
    async with db.acquire() as conn:
        await conn.execute(load_query("consumer_offset_ensure"), consumer.name)
        await publish(conn, "table.discovered", payload={})
    got = await scrape(db)
    last_ok = got[("icepack_catalog_last_success_timestamp_seconds", (("catalog", "lake"),))]
    assert abs(last_ok - datetime.now(UTC).timestamp()) < 60
    assert got[("icepack_catalog_failing", (("catalog", "lake"),))] == 0
    assert got[("icepack_catalog_pass_seconds", (("catalog", "lake"),))] >= 0
    assert got[("icepack_catalog_failing", (("catalog", "broken"),))] == 1
    assert got[("icepack_catalog_last_success_timestamp_seconds", (("catalog", "broken"),))] == 0
    assert got[("icepack_consumer_lag_seconds", (("consumer", "planner"),))] > 0


async def test_stale_pending_verification_and_quarantine(db: asyncpg.Pool) -> None:
    queue = JobQueue(db)
    table_id = await table(db, "lake", "t")
    await queue.enqueue(table_id, REWRITE)
    job = await queue.claim("executor-1", 60)
    assert job is not None
    await db.fetchrow(
        load_query("table_pending_verification_begin"), table_id, 7, job.id, job.fence, "rewrite"
    )
    ids = await db.fetchrow(
        load_query("deletion_record_batch"),
        job.id,
        job.fence,
        table_id,
        "remove_orphan_files",
        "orphan",
        "not referenced",
        ["s3://b/x", "s3://b/y"],
        [100, 23],
    )
    assert ids is not None
    assert ids["written"] == 2
    for row in await db.fetch("SELECT id FROM icepack.deletions ORDER BY id"):
        await db.fetchval(
            load_query("deletion_mark_quarantined"),
            job.id,
            job.fence,
            row["id"],
            f"s3://b/q/{row['id']}",
            datetime.now(UTC) - timedelta(seconds=1),
        )
    # Its job still runs under the fence: pending, not stale (even past a lease).
    got = await scrape(db, job_lease_seconds=0.001)
    assert got[("icepack_pending_verifications", ())] == 1
    assert got[("icepack_pending_verifications_stale", ())] == 0
    assert got[("icepack_quarantined_bytes", ())] == 123
    assert got[("icepack_quarantine_purge_due_files", ())] == 2
    # The job dies with the row still there: stale once a lease has passed.
    await queue.fail(job, "executor died", retryable=False)
    got = await scrape(db, job_lease_seconds=0.001)
    assert got[("icepack_pending_verifications_stale", ())] == 1
    assert got[("icepack_pending_verification_stale_age_seconds", ())] > 0
    got = await scrape(db, job_lease_seconds=3600)
    assert got[("icepack_pending_verifications_stale", ())] == 0


@pytest.mark.parametrize("code", ["lower_case", "", "X" * 65, "A-B"])
async def test_a_malformed_error_class_is_stored_as_unexpected(db: asyncpg.Pool, code: str) -> None:
    queue = JobQueue(db)
    table_id = await table(db, "lake", "t")
    await queue.enqueue(table_id, REWRITE)
    job = await queue.claim("executor-1", 60)
    assert job is not None
    done = await queue.fail(job, "x", retryable=False, code=code)
    assert done.error_code == "UNEXPECTED"


ACTIONS = ["rewrite_data_files", "expire_snapshots"]
INTENTS: dict[str, Intent] = {
    "rewrite_data_files": RewriteDataFiles(),
    "expire_snapshots": ExpireSnapshots(
        params=ExpireSnapshotsParams(older_than=datetime(2020, 1, 1, tzinfo=UTC))
    ),
}
# Per table, its history oldest first: (action, failed?, minutes ago). Ages avoid the edges of
# the backoff windows (15 min doubling, capped at 4 h here) by a minute or more.
histories_st = st.lists(
    st.lists(
        st.tuples(
            st.sampled_from(ACTIONS),
            st.booleans(),
            st.sampled_from([2, 7, 20, 45, 100, 200, 290, 400]),
        ),
        max_size=5,
    ),
    min_size=1,
    max_size=4,
)


@pytest.mark.slow
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(histories=histories_st)
async def test_backoff_gauge_counts_the_tables_the_planner_rests(
    db: asyncpg.Pool, histories: list[list[tuple[str, bool, int]]]
) -> None:
    """The fleet-wide gauge agrees with the planner: a table counts iff ``Planner``'s
    ``failure_streaks`` (job_failure_streaks + failure_backoff) has an action resting now."""
    await db.execute("TRUNCATE icepack.jobs, icepack.tables, icepack.events CASCADE")
    settings = Settings(failure_backoff_base_seconds=900, failure_backoff_cap_seconds=4 * 3600)
    queue = JobQueue(db)
    planner = Planner(settings, db, queue)
    now = datetime.now(UTC)
    resting = 0
    for i, history in enumerate(histories):
        table_id = await table(db, "lake", f"t{i}")
        for action, failed, minutes in sorted(history, key=lambda h: -h[2]):
            at = now - timedelta(minutes=minutes)
            await queue.enqueue(table_id, [INTENTS[action]], not_before=at - timedelta(1))
            job = await queue.claim("executor-1", 60, now=at - timedelta(seconds=30))
            assert job is not None
            if failed:
                await queue.fail(job, "boom", retryable=False, now=at, code="PERMANENT")
            else:
                await queue.record_action(
                    job, action=action, state="succeeded", started_at=at, finished_at=at
                )
                await queue.complete(job, {"actions": []})
        streaks = await planner.failure_streaks(table_id)
        resting += any(s.retry_after > datetime.now(UTC) for s in streaks.values())
    got = await scrape(db, failure_backoff_base_seconds=900, failure_backoff_cap_seconds=4 * 3600)
    assert got[("icepack_tables_failure_backoff", (("catalog", "lake"),))] == resting
