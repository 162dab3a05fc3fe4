"""Discovery of a Polaris catalog reads its policies; a plain REST catalog is told apart.

The Polaris here is ``tests.support.polaris.standin``, a stand-in for Apache Polaris 1.4.1
because Polaris cannot run here (its Maven artifacts are not served to these machines and it
needs Java 21+). It serves the policy API itself and forwards the Iceberg REST API to Apache
Iceberg's real REST catalog server (the REST fixture), as Polaris serves both under one URI.
"""

from __future__ import annotations

import json
from pathlib import Path

import asyncpg

from icepack_core.discovery.catalogs import load_catalog
from icepack_core.discovery.refresh import Discovery
from icepack_core.polaris.store import attachments_of
from icepack_core.policy import resolve
from icepack_core.settings import load_settings
from icepack_core.types import PolicyType
from tests.plugins.catalogs import SCHEMA, rows
from tests.plugins.rest_fixture import IcebergRest
from tests.polaris.conftest import PREFIX, PolarisAdmin, polaris_config
from tests.support.polaris.standin import run_standin

DC = PolicyType.DATA_COMPACTION


async def test_discovery_reads_a_detected_polaris_catalogs_policies(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, iceberg_rest: IcebergRest
) -> None:
    with run_standin(PREFIX, backend=iceberg_rest.uri) as polaris:
        cfg = polaris_config(polaris, include=["pol_ns"])
        catalog = load_catalog(cfg)
        catalog.create_namespace("pol_ns")
        table = catalog.create_table("pol_ns.events", SCHEMA)
        table.append(rows(3))
        catalog.create_table("pol_ns.other", SCHEMA)
        admin = PolarisAdmin(polaris)
        content = {"enable": True, "config": {"compaction_strategy": "sort", "min_input_files": 9}}
        admin.create_ok("pol_ns", "compact_events", DC, **content)
        admin.attach("pol_ns", "compact_events", "table-like", ["pol_ns", "events"])
        bad = admin.create("pol_ns", "bad", DC, json.dumps({"enable": True, "foo": 1}))
        assert bad.status_code == 400  # Polaris refuses content outside the schema
        admin.http.close()

        settings = load_settings(database_url=database_url, data_dir=tmp_path / "d", catalogs=[cfg])
        discovery = Discovery(settings, db)
        result = await discovery.run_once()
        assert result.errors == {} and result.discovered == 2

        source = await db.fetchrow("SELECT * FROM icepack.polaris_sources")
        assert source is not None
        assert source["is_polaris"] and source["last_error"] is None
        assert source["last_requests"] >= 4  # detection, token, catalog, namespace, tables
        attachments = await attachments_of(db, cfg.name)
        events = resolve(attachments, "pol_ns", "events")
        assert events.data_compaction is not None
        assert events.data_compaction.strategy == "sort"
        assert events.data_compaction.min_input_files == 9
        assert events.sources[DC].startswith("polaris table policy compact_events v0")
        other = resolve(attachments, "pol_ns", "other")
        assert other.sources[DC] == "default"

        # A Polaris outage of its policy API: discovery goes on (a new table is found), the
        # last known policies stay, and the failure is recorded.
        polaris.state.fail_with = 503
        catalog.create_table("pol_ns.third", SCHEMA)
        catalog.create_table("pol_ns.fourth", SCHEMA)
        await db.execute(
            "UPDATE icepack.polaris_targets SET checked_at = checked_at - interval '1 day'"
        )
        again = await discovery.run_once()
        discovery.policies.close()
        assert again.errors == {} and again.discovered == 2
        source = await db.fetchrow("SELECT * FROM icepack.polaris_sources")
        assert source is not None
        assert "503" in source["last_error"]
        kept = resolve(await attachments_of(db, cfg.name), "pol_ns", "events")
        assert kept.data_compaction is not None
        assert kept.data_compaction.min_input_files == 9
        assert "refresh failing" in kept.sources[DC]


async def test_a_plain_rest_catalog_is_not_polaris(
    db: asyncpg.Pool, database_url: str, tmp_path: Path, iceberg_rest: IcebergRest
) -> None:
    cfg = iceberg_rest.config("plain_rest", include=["nothing_here"])
    settings = load_settings(database_url=database_url, data_dir=tmp_path / "d", catalogs=[cfg])
    discovery = Discovery(settings, db)
    assert (await discovery.run_once()).errors == {}
    await discovery.run_once()
    discovery.policies.close()
    source = await db.fetchrow("SELECT * FROM icepack.polaris_sources")
    assert source is not None
    assert source["is_polaris"] is False and source["last_error"] is None
    assert await db.fetchval("SELECT count(*) FROM icepack.polaris_policies") == 0
