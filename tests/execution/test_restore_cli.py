"""``icepack restore JOB`` on a PyIceberg table (SQL catalog, local warehouse): the CLI runs a
``restore_quarantine`` job itself, puts each quarantined file's bytes back at its original path,
refuses a file whose path exists again (exit 1, with the reason), and says why when nothing of
a job can be restored. The table's rows are the same before and after."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from typer.testing import CliRunner, Result

from icepack_core.cli.app import app as cli_app
from icepack_core.execution.ledger.file_mover import FileMover
from icepack_core.execution.ledger.quarantine import OrphanQuarantine
from icepack_core.queue.jobs import JobQueue
from icepack_core.settings import CatalogConfig
from tests.plugins.catalogs import rows


@pytest.fixture
def cli(
    database_url: str,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., Awaitable[Result]]:
    cfg, _ = scratch_catalog
    monkeypatch.setenv("ICEPACK_DATABASE_URL", database_url)
    monkeypatch.setenv("ICEPACK_CATALOGS", json.dumps([cfg.model_dump(mode="json")]))
    monkeypatch.setenv("COLUMNS", "200")
    runner = CliRunner()
    return lambda *args: asyncio.to_thread(runner.invoke, cli_app, list(args))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_restore_puts_the_bytes_back_and_refuses_an_occupied_path(
    cli: Callable[..., Awaitable[Result]],
    db: asyncpg.Pool,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
) -> None:
    cfg, catalog = scratch_catalog
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.events", rows(0).schema)
    table.append(rows(5))
    table.append(rows(3, start=5))
    before = table.scan().to_arrow().sort_by("id")
    root = Path(table.location().removeprefix("file://"))
    orphans = [root / "data" / f"orphan-{i}.parquet" for i in range(3)]
    for i, path in enumerate(orphans):
        path.write_bytes(os.urandom(300 + i))
    digests = {p: sha(p) for p in orphans}
    table_id = await db.fetchval(
        "INSERT INTO icepack.tables (catalog, namespace, name, metadata_location)"
        " VALUES ($1, 'ns', 'events', $2) RETURNING id",
        cfg.name,
        table.metadata_location,
    )
    queue = JobQueue(db)
    await queue.enqueue(table_id, [], dedupe_key="orphans")
    source = await queue.claim("executor@test", 60)
    assert source is not None
    quarantine = OrphanQuarantine(
        db,
        source.id,
        source.fence,
        table_id,
        table.location(),
        FileMover(table.io),
        lambda: datetime.now(UTC),
    )
    await quarantine.record([f"file://{p}" for p in orphans], "test orphans")
    assert (await quarantine.quarantine(timedelta(days=7))).moved == 3
    await queue.complete(source, {"actions": []})
    assert not any(p.exists() for p in orphans)

    orphans[0].write_bytes(b"someone wrote here again")
    first = await cli("restore", str(source.id))
    assert first.exit_code == 1, first.output
    assert "2 file(s) restored" in first.output
    assert "refused" in first.output and "exists at" in first.output
    assert orphans[0].read_bytes() == b"someone wrote here again"
    assert all(sha(p) == digests[p] for p in orphans[1:])

    orphans[0].unlink()
    second = await cli("restore", str(source.id))
    assert second.exit_code == 0, second.output
    assert "1 file(s) restored" in second.output
    assert all(sha(p) == digests[p] for p in orphans)
    states = await db.fetch("SELECT state FROM icepack.deletions WHERE job_id = $1", source.id)
    assert {r["state"] for r in states} == {"restored"}

    nothing = await cli("restore", str(source.id))
    assert nothing.exit_code == 1 and "no quarantined files (3 restored)" in nothing.output
    unknown = await cli("restore", "999999")
    assert unknown.exit_code == 1 and "no job 999999" in unknown.output
    assert catalog.load_table("ns.events").scan().to_arrow().sort_by("id") == before
