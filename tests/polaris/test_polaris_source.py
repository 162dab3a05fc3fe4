"""Polaris as a policy source, over HTTP against a stand-in for Polaris and a real Postgres.

Every test here talks to ``tests.support.polaris.standin``, which stands in for Apache Polaris
1.4.1 because Polaris cannot run here (its Maven artifacts are not served to these machines and
it needs Java 21+); it follows the requests and answers a real 1.4.1 server gave.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from icepack_core.discovery.catalogs import gate_for
from icepack_core.polaris.client import PolarisClient
from icepack_core.polaris.refresh import PolicyPass, refresh_policies
from icepack_core.polaris.store import attachments_of
from icepack_core.policy import EffectivePolicy, resolve
from icepack_core.settings import CatalogConfig, Settings
from icepack_core.types import PolicyType
from tests.planning.test_planner import status as planner_status
from tests.polaris.conftest import PolarisAdmin, polaris_config
from tests.support.polaris.standin import RunningStandIn

DC = PolicyType.DATA_COMPACTION
SE = PolicyType.SNAPSHOT_EXPIRY
OR = PolicyType.ORPHAN_FILE_REMOVAL
NOW = datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
V = "2025-02-03"


async def add_tables(db: asyncpg.Pool, catalog: str, names: list[tuple[str, str]]) -> None:
    for namespace, name in names:
        await db.execute(
            "INSERT INTO icepack.tables (catalog, namespace, name, location) "
            "VALUES ($1, $2, $3, $4)",
            catalog,
            namespace,
            name,
            f"file:///warehouse/{namespace}/{name}",
        )


def register(server: RunningStandIn, names: list[tuple[str, str]]) -> None:
    for namespace, name in names:
        server.state.register(tuple(namespace.split(".")), name)


async def effective(
    db: asyncpg.Pool, cfg: CatalogConfig, namespace: str, table: str
) -> EffectivePolicy:
    return resolve(await attachments_of(db, cfg.name), namespace, table)


async def refresh(
    db: asyncpg.Pool, cfg: CatalogConfig, now: datetime = NOW, client: PolarisClient | None = None
) -> PolicyPass:
    if client is not None:
        return await refresh_policies(db, cfg, client, now)
    own = PolarisClient(cfg, gate_for(cfg))
    try:
        return await refresh_policies(db, cfg, own, now)
    finally:
        own.close()


async def test_inheritance_table_override_and_sources(
    db: asyncpg.Pool, polaris: RunningStandIn, admin: PolarisAdmin
) -> None:
    """A catalog policy, a namespace policy and a table-level override: each table gets the
    most specific, and the source names the Polaris policy."""
    tables = [("ns1", "t1"), ("ns1", "t2")]
    register(polaris, tables)
    await add_tables(db, "polaris_cat", tables)
    admin.create_ok(
        "ns1",
        "expiry",
        SE,
        version=V,
        enable=True,
        config={"min_snapshot_to_keep": 3, "max_snapshot_age_days": 2},
    )
    admin.attach("ns1", "expiry", "catalog", [])
    admin.create_ok(
        "ns1",
        "compact_ns",
        DC,
        enable=True,
        config={"target_file_size_bytes": 256 * 2**20, "min_input_files": 8},
    )
    admin.attach("ns1", "compact_ns", "namespace", ["ns1"])
    admin.create_ok(
        "ns1",
        "compact1",
        DC,
        version=V,
        enable=True,
        config={
            "target_file_size_bytes": 134217728,
            "compaction_strategy": "sort",
            "max-concurrent-file-group-rewrites": 5,
        },
    )
    admin.attach("ns1", "compact1", "table-like", ["ns1", "t1"])
    cfg = polaris_config(polaris)  # detected, not configured

    result = await refresh(db, cfg)
    assert result.error is None and result.is_polaris

    t1 = await effective(db, cfg, "ns1", "t1")
    assert t1.data_compaction is not None
    assert t1.data_compaction.target_file_size_bytes == 134217728
    assert t1.data_compaction is not None
    assert t1.data_compaction.strategy == "sort"
    assert t1.data_compaction is not None
    assert t1.data_compaction.min_input_files == 5  # the table policy does not say: default
    assert t1.sources[DC].startswith("polaris table policy compact1 v0, fetched 2026-11-27")
    assert "not used: max-concurrent-file-group-rewrites" in t1.sources[DC]
    assert t1.snapshot_expiry is not None
    assert t1.snapshot_expiry.retain_last == 3 and t1.snapshot_expiry.max_snapshot_age_hours == 48
    assert t1.sources[SE].startswith("polaris catalog policy expiry v0")

    t2 = await effective(db, cfg, "ns1", "t2")
    assert t2.data_compaction is not None
    assert t2.data_compaction.target_file_size_bytes == 256 * 2**20
    assert t2.data_compaction is not None
    assert t2.data_compaction.min_input_files == 8
    assert t2.sources[DC].startswith("polaris namespace ns1 policy compact_ns v0")


async def test_icepack_attachment_beats_polaris_at_the_same_scope(
    db: asyncpg.Pool, polaris: RunningStandIn, admin: PolarisAdmin
) -> None:
    register(polaris, [("ns1", "t1")])
    await add_tables(db, "polaris_cat", [("ns1", "t1")])
    admin.create_ok("ns1", "compact_ns", DC, enable=True, config={"min_input_files": 8})
    admin.attach("ns1", "compact_ns", "namespace", ["ns1"])
    await db.execute(
        "INSERT INTO icepack.policies (policy_type, scope, catalog, namespace, config) "
        "VALUES ($1, 'namespace', 'polaris_cat', 'ns1', $2::jsonb)",
        DC,
        {"min_input_files": 12},
    )
    cfg = polaris_config(polaris)
    await refresh(db, cfg)
    policy = await effective(db, cfg, "ns1", "t1")
    assert policy.data_compaction is not None
    assert policy.data_compaction.min_input_files == 12
    assert policy.sources[DC] == "namespace ns1"


async def test_an_invalid_table_policy_falls_back_to_the_namespace_policy(
    db: asyncpg.Pool, polaris: RunningStandIn, admin: PolarisAdmin
) -> None:
    """Polaris accepts ``min_snapshot_to_keep: 0`` (its schema allows any number); Icepack
    cannot (it would keep no snapshot): that policy is passed over, naming the key, and the
    namespace's applies. Never "no policy": the defaults keep their floors."""
    register(polaris, [("ns1", "t1")])
    await add_tables(db, "polaris_cat", [("ns1", "t1")])
    admin.create_ok("ns1", "ns_expiry", SE, enable=True, config={"max_snapshot_age_days": 3})
    admin.attach("ns1", "ns_expiry", "namespace", ["ns1"])
    admin.create_ok("ns1", "bad", SE, enable=True, config={"min_snapshot_to_keep": 0})
    admin.attach("ns1", "bad", "table-like", ["ns1", "t1"])
    cfg = polaris_config(polaris, polaris=True)
    await refresh(db, cfg)
    policy = await effective(db, cfg, "ns1", "t1")
    assert policy.snapshot_expiry is not None
    assert policy.snapshot_expiry.max_snapshot_age_hours == 72
    assert policy.snapshot_expiry is not None
    assert policy.snapshot_expiry.retain_last == 1
    source = policy.sources[SE]
    assert source.startswith("polaris namespace ns1 policy ns_expiry")
    assert "passed over polaris table policy bad" in source
    assert "min_snapshot_to_keep" in source


async def test_a_detached_or_edited_policy_is_seen_after_its_period(
    db: asyncpg.Pool, polaris: RunningStandIn, admin: PolarisAdmin
) -> None:
    register(polaris, [("ns1", "t1")])
    await add_tables(db, "polaris_cat", [("ns1", "t1")])
    admin.create_ok("ns1", "compact1", DC, enable=True, config={"min_input_files": 9})
    admin.attach("ns1", "compact1", "table-like", ["ns1", "t1"])
    admin.create_ok("ns1", "expiry", SE, enable=True, config={"min_snapshot_to_keep": 4})
    admin.attach("ns1", "expiry", "namespace", ["ns1"])
    cfg = polaris_config(polaris, polaris=True)
    await refresh(db, cfg)
    compaction = (await effective(db, cfg, "ns1", "t1")).data_compaction
    assert compaction is not None and compaction.min_input_files == 9

    admin.detach("ns1", "compact1", "table-like", ["ns1", "t1"])
    admin.update("ns1", "expiry", 0, enable=True, config={"min_snapshot_to_keep": 6})
    soon = await refresh(db, cfg, NOW + timedelta(seconds=60))  # nothing due yet
    assert soon.requests == 0
    compaction = (await effective(db, cfg, "ns1", "t1")).data_compaction
    assert compaction is not None and compaction.min_input_files == 9

    await refresh(db, cfg, NOW + timedelta(seconds=cfg.polaris_namespace_ttl_seconds + 1))
    policy = await effective(db, cfg, "ns1", "t1")
    assert policy.snapshot_expiry is not None
    assert policy.snapshot_expiry.retain_last == 6  # namespace level: within its period
    assert policy.sources[SE].startswith("polaris namespace ns1 policy expiry v1")
    assert policy.data_compaction is not None
    assert policy.data_compaction.min_input_files == 9  # table level: not yet

    later = NOW + timedelta(seconds=cfg.polaris_table_ttl_seconds + 1)
    await refresh(db, cfg, later)
    policy = await effective(db, cfg, "ns1", "t1")
    assert policy.data_compaction is not None
    assert policy.data_compaction.min_input_files == 5 and policy.sources[DC] == "default"


async def test_pages_are_followed(
    db: asyncpg.Pool, polaris: RunningStandIn, admin: PolarisAdmin
) -> None:
    """Every page of applicable policies is read (``next-page-token``), one request each."""
    register(polaris, [("ns1", "t1")])
    await add_tables(db, "polaris_cat", [("ns1", "t1")])
    for index, (kind, content) in enumerate(
        [
            (DC, {"enable": True, "config": {"min_input_files": 7}}),
            (SE, {"enable": True, "config": {"min_snapshot_to_keep": 2}}),
            (PolicyType.METADATA_COMPACTION, {"enable": False}),
            (OR, {"enable": False}),
        ]
    ):
        assert isinstance(content, dict)
        admin.create_ok("ns1", f"p{index}", kind, **content)
        admin.attach("ns1", f"p{index}", "table-like", ["ns1", "t1"])
    cfg = polaris_config(polaris, polaris=True)
    client = PolarisClient(cfg, gate_for(cfg))
    client.page_size = 1
    found = client.applicable(("ns1",), "t1")
    assert sorted(p.name for p in found) == ["p0", "p1", "p2", "p3"]
    assert polaris.state.requests["GET applicable-policies"] == 4

    await refresh(db, cfg, client=client)
    client.close()
    policy = await effective(db, cfg, "ns1", "t1")
    assert policy.data_compaction is not None
    assert policy.data_compaction.min_input_files == 7
    assert policy.snapshot_expiry is not None
    assert policy.snapshot_expiry.retain_last == 2
    assert policy.metadata_compaction is None


async def test_orphan_policy_reaching_outside_the_table_is_refused(
    db: asyncpg.Pool, polaris: RunningStandIn, admin: PolarisAdmin, settings: Settings
) -> None:
    """A Polaris orphan-removal policy whose ``locations`` reach outside the table: the
    planner refuses the removal at the choke point, naming the rule and the policy."""
    from icepack_core.db.queries import load_query
    from icepack_core.planning.planner import Planner
    from icepack_core.queue.jobs import JobQueue

    register(polaris, [("ns1", "t1")])
    await add_tables(db, "polaris_cat", [("ns1", "t1")])
    await db.execute(load_query("catalog_status_listing_started"), ["polaris_cat"])
    await db.execute(load_query("catalog_status_ok"), "polaris_cat", 1, [], {}, 0.0)
    admin.create_ok(
        "ns1",
        "orphans",
        OR,
        version=V,
        enable=True,
        max_orphan_file_age_in_days=30,
        locations=["file:///warehouse"],
    )
    admin.attach("ns1", "orphans", "table-like", ["ns1", "t1"])
    cfg = polaris_config(polaris, polaris=True)
    await refresh(db, cfg)
    policy = await effective(db, cfg, "ns1", "t1")
    assert policy.orphan_file_removal is not None
    assert policy.orphan_file_removal.older_than_hours == 720

    table = await db.fetchrow("SELECT * FROM icepack.tables WHERE name = 't1'")
    assert table is not None
    await db.execute(
        "INSERT INTO icepack.status_snapshots (table_id, inspected_at, inspector, status) "
        "VALUES ($1, now(), 'pyiceberg', $2::jsonb)",
        table["id"],
        planner_status(),
    )
    outcome = await Planner(settings, db, JobQueue(db)).plan(table["id"], now=NOW)
    assert outcome.recommendation is not None
    skipped = {s.action: s.reason for s in outcome.recommendation.skipped}
    assert "remove_orphan_files" not in [a.action for a in outcome.recommendation.actions]
    reason = skipped["remove_orphan_files"]
    assert "ORPHAN_LOCATION_OUTSIDE_TABLE" in reason and "polaris table policy orphans" in reason
    assert "file:///warehouse'" in reason
    stored = await db.fetchval(
        "SELECT actions FROM icepack.recommendations WHERE id = $1", outcome.recommendation_id
    )
    assert stored["policy_sources"][OR].startswith("polaris table policy orphans v0")
    assert stored["policy_sources"][DC] == "default"


async def test_an_outage_keeps_the_last_known_policies_with_their_age(
    db: asyncpg.Pool, polaris: RunningStandIn, admin: PolarisAdmin
) -> None:
    register(polaris, [("ns1", "t1")])
    await add_tables(db, "polaris_cat", [("ns1", "t1")])
    admin.create_ok("ns1", "compact_ns", DC, enable=True, config={"min_input_files": 8})
    admin.attach("ns1", "compact_ns", "namespace", ["ns1"])
    cfg = polaris_config(polaris, polaris=True)
    await refresh(db, cfg)

    polaris.state.fail_with = 503
    later = NOW + timedelta(hours=7)
    before = polaris.state.requests["GET applicable-policies"]
    failed = await refresh(db, cfg, later)
    assert failed.error is not None and "503" in failed.error
    # The pass stops after the failing chunk (catalog and namespace): the table is not asked.
    assert polaris.state.requests["GET applicable-policies"] - before == 2, failed
    policy = await effective(db, cfg, "ns1", "t1")
    assert policy.data_compaction is not None
    assert policy.data_compaction.min_input_files == 8
    source = policy.sources[DC]
    assert "fetched 2026-11-27 09:00:00 UTC" in source and "refresh failing" in source
    row = await db.fetchrow("SELECT * FROM icepack.polaris_sources")
    assert row is not None
    assert row["last_error_at"] == later and row["last_success_at"] == NOW

    polaris.state.fail_with = None
    again = await refresh(db, cfg, later + timedelta(minutes=1))
    assert again.error is None
    assert "refresh failing" not in (await effective(db, cfg, "ns1", "t1")).sources[DC]


async def test_requests_per_pass_do_not_follow_the_table_count(
    db: asyncpg.Pool, polaris: RunningStandIn, admin: PolarisAdmin
) -> None:
    """60 tables in 3 namespaces: the first pass reads every target once; the next passes read
    only what is due (namespaces every few minutes, tables spread over their period)."""
    tables = [(f"ns{i % 3}", f"t{i}") for i in range(60)]
    register(polaris, tables)
    await add_tables(db, "polaris_cat", tables)
    cfg = polaris_config(
        polaris,
        polaris=True,
        polaris_max_table_reads_per_pass=20,
        polaris_table_ttl_seconds=3600,
        polaris_namespace_ttl_seconds=300,
    )
    client = PolarisClient(cfg, gate_for(cfg))
    first = await refresh(db, cfg, client=client)
    assert first.requests == 1 + 1 + 3 + 20  # token, catalog, namespaces, the table limit
    second = await refresh(db, cfg, NOW + timedelta(seconds=60), client)
    assert second.requests == 20  # the tables never read
    third = await refresh(db, cfg, NOW + timedelta(seconds=120), client)
    assert third.requests == 20
    steady = await refresh(db, cfg, NOW + timedelta(seconds=180), client)
    # Everything fresh: only the rolling share, 60 tables x 60 s / 3600 s, of the oldest read.
    assert steady.requests == 1
    ns_due = await refresh(db, cfg, NOW + timedelta(seconds=301), client)
    client.close()
    assert ns_due.requests == 1 + 3 + 2  # catalog, namespaces, 60 x 121 s / 3600 s tables


async def test_a_catalog_that_is_not_polaris_is_detected_once(
    db: asyncpg.Pool, polaris: RunningStandIn
) -> None:
    cfg = polaris_config(polaris).model_copy(update={"polaris_prefix": "not_this"})
    # A wrong prefix is a 404 like a server without the policy API.
    result = await refresh(db, cfg)
    assert result.is_polaris is False and result.error is None
    before = sum(polaris.state.requests.values())
    await refresh(db, cfg)
    assert sum(polaris.state.requests.values()) == before  # the answer is kept


async def test_the_credential_and_token_never_reach_rows_or_logs(
    db: asyncpg.Pool,
    polaris: RunningStandIn,
    admin: PolarisAdmin,
    capsys: pytest.CaptureFixture[str],
) -> None:
    register(polaris, [("ns1", "t1")])
    await add_tables(db, "polaris_cat", [("ns1", "t1")])
    admin.create_ok("ns1", "compact_ns", DC, enable=True, config={"min_input_files": 8})
    admin.attach("ns1", "compact_ns", "namespace", ["ns1"])
    cfg = polaris_config(polaris, polaris=True)
    await refresh(db, cfg)
    polaris.state.fail_with = 500
    await refresh(db, cfg, NOW + timedelta(hours=7))
    secrets = [polaris.state.client_secret, *polaris.state.tokens]
    dumped = []
    for table in ("polaris_policies", "polaris_targets", "polaris_sources"):
        rows = await db.fetch(f"SELECT * FROM icepack.{table}")
        dumped.append(json.dumps([dict(r) for r in rows], default=str))
    captured = capsys.readouterr()
    text = "\n".join([*dumped, captured.out, captured.err])
    assert "polaris.refresh_failed" in text  # the failure was logged
    for secret in secrets:
        assert secret not in text


@pytest.mark.parametrize(
    ("content", "status", "body"),
    [
        ({"enable": True}, 400, b""),  # content as an object, not a string
        (json.dumps({"enable": True, "foo": 1}), 400, b"InvalidPolicyException"),
        (json.dumps({"version": "2024-01-01", "enable": True}), 400, b"InvalidPolicyException"),
        (json.dumps({"enable": False}), 200, b'"version":0'),
    ],
)
def test_the_stand_in_validates_content_as_polaris_does(
    polaris: RunningStandIn, admin: PolarisAdmin, content: object, status: int, body: bytes
) -> None:
    """The stand-in's own contract, as the recorded exchanges show it."""
    polaris.state.register(("ns1",))
    answer = admin.create("ns1", "p", DC, content)
    assert answer.status_code == status
    assert body in answer.content if body else answer.content == b""


async def test_nested_namespaces_inherit_from_their_parents(
    db: asyncpg.Pool, polaris: RunningStandIn, admin: PolarisAdmin
) -> None:
    """A policy on namespace ``a`` applies to tables of ``a.b`` unless ``a.b`` has its own;
    the namespace levels travel joined by 0x1F, as Polaris reads them."""
    tables = [("a.b", "t1"), ("a.c", "t2")]
    register(polaris, tables)
    await add_tables(db, "polaris_cat", tables)
    admin.create_ok("a", "outer", DC, enable=True, config={"min_input_files": 6})
    admin.attach("a", "outer", "namespace", ["a"])
    admin.create_ok("a.b", "inner", DC, enable=True, config={"min_input_files": 11})
    admin.attach("a.b", "inner", "namespace", ["a", "b"])
    cfg = polaris_config(polaris, polaris=True)
    result = await refresh(db, cfg)
    assert result.error is None
    inner = await effective(db, cfg, "a.b", "t1")
    assert inner.data_compaction is not None
    assert inner.data_compaction.min_input_files == 11
    assert inner.sources[DC].startswith("polaris namespace a.b policy inner")
    outer = await effective(db, cfg, "a.c", "t2")
    assert outer.data_compaction is not None
    assert outer.data_compaction.min_input_files == 6
    assert outer.sources[DC].startswith("polaris namespace a policy outer")
