"""Decompression bombs against both inspectors (issue #28, finding 3).

A real table's manifest is replaced by a valid Avro container with the same header whose one
block expands 1000x beyond the cap (``ICEPACK_AVRO_MAX_BLOCK_BYTES``, 256 KiB here): a deflate
block of 256 MiB of zeros (about 256 KB on disk), or a snappy block of the same (snappy expands
at most ~21x, so 12 MB on disk, its header declaring the 256 MiB). The inspector service runs
as its own process, on a real SQL catalog, Postgres and files; the table must be marked
failed with the manifest's path, the service must stay up and inspect other tables, and its
peak RSS must not grow with the bomb. go-inspector, a child of the service, is also run
directly as the test's child, so its own peak RSS can be read (``os.wait4``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import zlib
from pathlib import Path

import asyncpg
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from icepack_core.discovery.refresh import Discovery
from icepack_core.inspection.avro_scan import SYNC_SIZE, open_container
from icepack_core.inspection.go_inspector import resolve_binary
from icepack_core.local.ports import free_port
from icepack_core.settings import CatalogConfig, load_settings
from tests.plugins.catalogs import rows
from tests.support.waiting import eventually

CAP = 256 * 1024
EXPANDED = 1000 * CAP  # 250 MiB
MIB = 1 << 20


def _long(value: int) -> bytes:
    """Avro's zig-zag varint."""
    u = (value << 1) ^ (value >> 63)
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def _bytes(data: bytes) -> bytes:
    return _long(len(data)) + data


def _deflate_zeros(n: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = bytes(MIB)
    return b"".join([*(c.compress(piece) for _ in range(n // MIB)), c.flush()])


def _snappy_zeros(n: int) -> bytes:
    """A valid raw snappy stream of ``n`` zeros (``n`` a multiple of 64 plus one), with Avro's
    CRC-32 appended: one literal zero, then 64-byte copies at offset 1."""
    assert (n - 1) % 64 == 0
    head = bytearray()
    v = n
    while v >= 0x80:
        head.append((v & 0x7F) | 0x80)
        v >>= 7
    head.append(v)
    head += b"\x00\x00"  # literal, length 1: a zero byte
    body = b"\xfe\x01\x00" * ((n - 1) // 64)  # copy (2-byte offset) of 64 bytes at offset 1
    crc = 0
    zeros = bytes(MIB)
    left = n
    while left:
        take = min(left, MIB)
        crc = zlib.crc32(zeros[:take], crc)
        left -= take
    return bytes(head) + body + crc.to_bytes(4, "big")


def plant_bomb(manifest: Path, codec: str) -> None:
    """Rewrite ``manifest`` as a container with its own header (codec changed) and one block
    expanding to ``EXPANDED`` bytes."""
    container = open_container(manifest.read_bytes())
    meta = {**container.meta, "avro.codec": codec}
    header = b"Obj\x01" + _long(len(meta))
    for key, value in meta.items():
        header += _bytes(key.encode()) + _bytes(value.encode())
    header += _long(0) + container.sync
    block = _deflate_zeros(EXPANDED) if codec == "deflate" else _snappy_zeros(EXPANDED + 1)
    assert len(block) < EXPANDED // 20
    manifest.write_bytes(header + _long(1) + _bytes(block) + container.sync)
    assert len(container.sync) == SYNC_SIZE


_MEASURE = """
import json, os, sys
with open(sys.argv[1], "wb") as out:
    pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ, file_actions=[
        (os.POSIX_SPAWN_DUP2, out.fileno(), 1)])
_, status, usage = os.wait4(pid, 0)
print(json.dumps([os.waitstatus_to_exitcode(status), usage.ru_maxrss]))
"""


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


async def _assessed(db: asyncpg.Pool, name: str) -> asyncpg.Record | None:
    return await db.fetchrow(
        "SELECT h.health, h.issues FROM icepack.health_assessments h "
        "JOIN icepack.tables t ON t.id = h.table_id WHERE t.name = $1 "
        "ORDER BY h.id DESC LIMIT 1",
        name,
    )


async def _fingerprinted(db: asyncpg.Pool, name: str) -> bool:
    found = await db.fetchval(
        "SELECT count(*) FROM icepack.data_file_fingerprints f "
        "JOIN icepack.tables t ON t.id = f.table_id WHERE t.name = $1",
        name,
    )
    return bool(found)


@pytest.mark.parametrize("inspector", ["pyiceberg", "iceberg-go"])
@pytest.mark.parametrize("codec", ["deflate", "snappy"])
async def test_a_bomb_fails_its_table_and_the_inspector_carries_on(
    db: asyncpg.Pool,
    database_url: str,
    tmp_path: Path,
    scratch_catalog: tuple[CatalogConfig, SqlCatalog],
    codec: str,
    inspector: str,
) -> None:
    cfg, catalog = scratch_catalog
    catalog.create_namespace("b")
    catalog.create_table("b.fine", rows(0).schema).append(rows(5))
    settings = load_settings(database_url=database_url, data_dir=tmp_path / "d", catalogs=[cfg])
    env = {
        **os.environ,
        "ICEPACK_DATABASE_URL": database_url,
        "ICEPACK_CATALOGS": json.dumps([cfg.model_dump(mode="json")]),
        "ICEPACK_METADATA_INSPECTOR": inspector,
        "ICEPACK_AVRO_MAX_BLOCK_BYTES": str(CAP),
        "ICEPACK_POLL_INTERVAL_SECONDS": "0.3",
        "ICEPACK_HTTP_PORT": str(free_port()),
        "ICEPACK_LOG_LEVEL": "warning",
    }
    log = tmp_path / "inspector.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "icepack_core.cli.app", "service", "inspector"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        await Discovery(settings, db).run_once()
        fine = await eventually(
            lambda: _assessed(db, "fine"), timeout=120, interval=0.2, what="fine assessed"
        )
        assert fine is not None
        assert fine["health"] != "unknown", fine
        # The baseline includes the pass that fingerprints the healthy table's small file
        # after its record (first_sight: it loads the in-process reader once).
        await eventually(
            lambda: _fingerprinted(db, "fine"), timeout=120, interval=0.2, what="fine's file read"
        )
        before = _peak_rss_mib(proc.pid)

        bomb = catalog.create_table("b.bomb", rows(0).schema)
        bomb.append(rows(5))
        snapshot = catalog.load_table("b.bomb").current_snapshot()
        assert snapshot is not None
        (manifest,) = snapshot.manifests(bomb.io)
        path = Path(manifest.manifest_path.removeprefix("file://"))
        plant_bomb(path, codec)
        await Discovery(settings, db).run_once()
        failed = await eventually(
            lambda: _assessed(db, "bomb"), timeout=120, interval=0.2, what="bomb assessed"
        )
        assert failed is not None
        assert failed["health"] == "unknown"
        (issue,) = (
            json.loads(failed["issues"])
            if isinstance(failed["issues"], str)
            else (failed["issues"])
        )
        assert issue["code"] == "INSPECTION_FAILED"
        assert path.name in issue["message"], issue
        assert codec in issue["message"] and str(CAP) in issue["message"], issue
        assert proc.poll() is None, log.read_text()[-3000:]
        grew = _peak_rss_mib(proc.pid) - before
        assert grew < 64, f"the inspector's peak RSS grew {grew:.0f} MiB on a bomb"

        # Still inspecting: a table created after the bomb is assessed.
        catalog.create_table("b.after", rows(0).schema).append(rows(3))
        await Discovery(settings, db).run_once()
        after = await eventually(
            lambda: _assessed(db, "after"), timeout=120, interval=0.2, what="after assessed"
        )
        assert after is not None
        assert after["health"] != "unknown", after
        assert proc.poll() is None
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=45)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log.read_text()[-3000:]


@pytest.mark.parametrize("codec", ["deflate", "snappy"])
def test_go_inspector_peak_rss_stays_bounded_on_a_bomb(
    scratch_catalog: tuple[CatalogConfig, SqlCatalog], codec: str
) -> None:
    """go-inspector as the test's own child: its peak RSS (``ru_maxrss`` from ``wait4``) stays
    far below the bomb's expanded size, and it reports the manifest as corrupt."""
    _, catalog = scratch_catalog
    catalog.create_namespace("g")
    table = catalog.create_table("g.bomb", rows(0).schema)
    table.append(rows(5))
    table = catalog.load_table("g.bomb")
    snapshot = table.current_snapshot()
    assert snapshot is not None
    (manifest,) = snapshot.manifests(table.io)
    path = Path(manifest.manifest_path.removeprefix("file://"))
    plant_bomb(path, codec)
    out_file = path.parent / "go-out.json"
    argv = [
        str(resolve_binary(None)),
        "--metadata-location",
        table.metadata_location,
        "--max-block-bytes",
        str(CAP),
    ]
    # A forked child's ru_maxrss counts the parent's pages before its exec, so go-inspector is
    # started by a small Python (not by pytest's large process) that reports its wait4 usage.
    measured = subprocess.run(
        [sys.executable, "-S", "-c", _MEASURE, str(out_file), *argv],
        capture_output=True,
        check=True,
        timeout=300,
    )
    code, peak_kib = json.loads(measured.stdout)
    out = out_file.read_bytes()
    peak_mib = peak_kib / 1024
    assert code == 1
    message = json.loads(out)["error"]["message"]
    assert path.name in message and "block too large" in message, message
    assert peak_mib < 100, f"go-inspector peaked at {peak_mib:.0f} MiB ({EXPANDED >> 20} MiB bomb)"
