"""`icepack up` restarts a crashed child alone (with backoff) and the others never stop."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_local_stack import free_port_block, service_env
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow
PID_LINE = re.compile(r"^(started|restarted) (\w+)\s+pid (\d+)")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_up_restarts_a_killed_child_and_leaves_the_others_running(
    database_url: str, tmp_path: Path
) -> None:
    base = free_port_block(5)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "icepack_core.cli.app",
        "up",
        env=service_env(database_url, tmp_path, ICEPACK_UP_BASE_PORT=str(base), COLUMNS="200"),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    lines: list[str] = []
    pids: dict[str, list[int]] = {}

    async def read() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            lines.append(line)
            match = PID_LINE.match(line)
            if match:
                pids.setdefault(match.group(2), []).append(int(match.group(3)))

    reader = asyncio.create_task(read())
    try:
        async with httpx.AsyncClient(timeout=2) as client:

            async def ready(port: int) -> bool:
                try:
                    return (await client.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200
                except httpx.TransportError:
                    return False

            async def all_ready() -> bool:
                return all([await ready(base + i) for i in range(5)])

            await eventually(all_ready, timeout=90, interval=0.5, what="5 x /readyz")
            first = {name: found[0] for name, found in pids.items()}
            assert len(first) == 5, lines
            executor_port = base + 4
            os.kill(first["executor"], signal.SIGKILL)

            async def executor_back() -> bool:
                return len(pids.get("executor", [])) == 2 and await ready(executor_port)

            await eventually(
                executor_back, timeout=90, interval=0.5, what="the executor restarted and ready"
            )
            assert pids["executor"][1] != first["executor"]
            assert any("executor" in line and "exited with -9" in line for line in lines), lines
            for name, pid in first.items():
                if name != "executor":
                    assert pids[name] == [pid], (name, pids[name], lines[-60:])  # never restarted
                    assert alive(pid), name
            assert all([await ready(base + i) for i in range(5)])
            assert '"service.stopped"' not in "\n".join(lines)
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), timeout=60)
        await asyncio.wait_for(reader, timeout=10)
    assert proc.returncode == 0, "\n".join(lines[-40:])
    # Children share the pipe: count occurrences (two lines may interleave into one read).
    stopped = [line for line in lines if '"service.stopped"' in line]
    assert "\n".join(lines).count('"service.stopped"') == 5, "\n".join(stopped + lines[-30:])
