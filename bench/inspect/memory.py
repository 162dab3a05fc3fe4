"""Peak memory of each inspector: one full inspection (empty cache) in its own process.

The Python inspector runs in a child (``python -m bench.inspect.memory ...``) exactly as the
inspector service runs it: ``Inspector`` loading the table from the bench's SQL catalog, with
``ManifestStatsStore`` on the bench's Postgres (``manifest_stats`` truncated first, so every
manifest is read and stored). Imports and the catalog's connection come before the timed
inspection; the child reports its own ``VmHWM`` (peak resident set) and its
``VmRSS`` before the inspection (interpreter and imports), not the parent's ``ru_maxrss`` of
children, which on Linux keeps the RSS a forked child had before ``exec``. go-inspector reports
its own ``VmHWM`` likewise (``--verbose``: ``peak_rss_bytes``).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIB = 1 << 20
PYTHON_RSS_GOAL = 1 << 30  # the Python inspector stays under 1 GiB on the 1M-file table


def proc_status(field: str) -> int:
    """A ``/proc/self/status`` memory field in bytes (0 where there is no /proc)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@dataclass
class MemoryRun:
    """One inspection in its own process."""

    wall: float
    cpu: float
    peak_rss: int
    start_rss: int  # the child's RSS before inspecting (Python: interpreter and imports)
    status: dict[str, Any]


def python_run(dsn: str, sa_uri: str, catalog: str, namespace: str, table: str) -> MemoryRun:
    """A full inspection by the Python inspector in a child process."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.inspect.memory", dsn, sa_uri, catalog, namespace, table],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"python inspector child failed: {proc.stderr.strip()[-2000:]}")
    doc = json.loads(proc.stdout)
    return MemoryRun(doc["wall"], doc["cpu"], doc["peak_rss"], doc["start_rss"], doc["status"])


async def _child(dsn: str, sa_uri: str, catalog: str, namespace: str, table: str) -> None:
    import pyiceberg.io.pyarrow  # noqa: F401 - imported up front: its import is not timed

    from icepack_core.db import pool as icedb
    from icepack_core.inspection.inspector import Inspector
    from icepack_core.inspection.store import ManifestStatsStore
    from icepack_core.settings import load_settings
    from icepack_core.types import TableRef

    settings = load_settings(
        database_url=dsn, catalogs=[{"name": catalog, "type": "sql", "uri": sa_uri}]
    )
    pool = await icedb.create_pool(settings, "bench-memory")
    try:
        await pool.execute("TRUNCATE icepack.manifest_stats")
        inspector = Inspector(settings, cache=ManifestStatsStore(pool))
        await inspector.catalogs.get(catalog)  # the catalog's connection is not timed either
        start_rss = proc_status("VmRSS")
        wall, cpu = time.perf_counter(), time.process_time()
        status = await inspector.inspect(TableRef(catalog, namespace, table))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        await pool.close()
    print(
        json.dumps(
            {
                "wall": wall,
                "cpu": cpu,
                "peak_rss": proc_status("VmHWM"),
                "start_rss": start_rss,
                "status": status.model_dump(mode="json"),
            }
        )
    )


def mib(n: int) -> str:
    return f"{n / MIB:,.0f} MiB" if n else "unknown (no /proc)"


if __name__ == "__main__":
    asyncio.run(_child(*sys.argv[1:6]))
