"""Schemathesis against the real gateway process's ``/openapi.json``: no generated request,
read or (authenticated) write, gets a 5xx, and every response matches the documented schema.

Schemathesis is a pinned dev dependency (root ``pyproject.toml``, ``uv.lock``): the test runs the
``schemathesis`` console script installed beside this interpreter, so nothing is fetched while
the tests run.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import httpx
import pytest

from icepack_core.access.tokens import TokenStore
from icepack_core.local.ports import free_port
from tests.gateway.seed import seed_fleet, seed_many

MAX_EXAMPLES = 20

# Path parameters of a table seed_fleet creates (it has status, health, a recommendation
# and jobs), so the second run reaches the handlers' database paths, not only their 404s.
EXISTING_TABLE = """
[parameters]
"path.catalog" = "demo"
"path.namespace" = "web"
"path.table" = "clicks"
"""

# The operations whose path names a catalog: the ones EXISTING_TABLE's parameters apply to.
SEEDED_OPERATIONS = ["--include-path-regex", r"\{catalog\}"]

# What schemathesis prints when one of the requested checks fails on a response. A failed run
# without it is the tool crashing by itself (e.g. a SystemError from CPython 3.11's compile()
# in its code generation): rerun, and skip if it keeps crashing.
FINDINGS = ("Server error", "violates schema")

pytestmark = pytest.mark.slow


def _is_finding(report: str) -> bool:
    """Whether a failed run failed one of our checks (rather than crashing by itself)."""
    return any(marker in report for marker in FINDINGS)


def _schemathesis() -> list[str]:
    """The command that runs the installed schemathesis (the venv's console script)."""
    script = Path(sys.executable).with_name("schemathesis")
    if not script.is_file():
        pytest.fail(
            f"{script} is missing: schemathesis is a dev dependency, run `make setup` "
            "(uv sync) to install it"
        )
    return [str(script)]


async def _wait_ready(client: httpx.AsyncClient, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            if (await client.get("/readyz")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError("the gateway never became ready")


@pytest.mark.timeout(900)
async def test_openapi_fuzzing_finds_no_server_errors(
    database_url: str, db: asyncpg.Pool, tmp_path: Path
) -> None:
    command = _schemathesis()
    await seed_fleet(db)
    await seed_many(db, 120)
    token, _ = await TokenStore(db).create("schemathesis")

    port = free_port()
    env = {
        **os.environ,
        "ICEPACK_DATABASE_URL": database_url,
        "ICEPACK_HTTP_PORT": str(port),
        "ICEPACK_LOG_LEVEL": "warning",
    }
    log = (tmp_path / "gateway.log").open("wb")
    gateway = subprocess.Popen(
        [sys.executable, "-m", "icepack_core.cli.app", "service", "gateway"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=5) as client:
            await _wait_ready(client, time.monotonic() + 60)
        # Twice: every operation with free-form path parameters (mostly 404s and 422s), then
        # only the operations the pinned parameters name, so they answer from seeded rows (the
        # others would only repeat the first run).
        runs = [("generated", "", []), ("seeded table", EXISTING_TABLE, SEEDED_OPERATIONS)]
        for name, config, only in runs:
            config_file = tmp_path / f"schemathesis-{len(config)}.toml"
            config_file.write_text(config)
            for _attempt in range(3):
                run = await asyncio.create_subprocess_exec(
                    *command,
                    "--config-file",
                    str(config_file),
                    "run",
                    f"{base}/openapi.json",
                    "--checks",
                    "not_a_server_error,response_schema_conformance",
                    "--max-examples",
                    str(MAX_EXAMPLES),
                    "--seed",
                    "7",
                    # One worker: in threads, CPython 3.11's ``ast.parse`` (which Hypothesis
                    # calls to describe a filter) can fail with "AST constructor recursion
                    # depth mismatch", a crash of the tool that is no verdict on the gateway.
                    "--workers",
                    "1",
                    "--request-timeout",
                    "20",
                    "--no-color",
                    *only,
                    "--header",
                    f"Authorization: Bearer {token}",
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                    cwd=tmp_path,
                )
                output, _ = await asyncio.wait_for(run.communicate(), timeout=390)
                report = output.decode(errors="replace")
                if run.returncode == 0 or _is_finding(report):
                    break
            else:
                if not _is_finding(report):
                    # Three crashes of the tool itself (its own tracebacks, no check failed):
                    # not a verdict on the gateway either way.
                    pytest.skip(f"schemathesis crashed internally 3 times:\n{report[-2000:]}")
            print(f"--- schemathesis, {name} ---\n{report[-4000:]}")  # with -s / on failure
            gateway_log = (tmp_path / "gateway.log").read_text(errors="replace")
            assert run.returncode == 0, (
                f"schemathesis ({name}) found failures:\n{report[-12000:]}\n"
                f"--- gateway log ---\n{gateway_log[-4000:]}"
            )
            assert gateway.poll() is None, "the gateway exited during the run"
    finally:
        gateway.send_signal(signal.SIGTERM)
        try:
            gateway.wait(timeout=20)
        except subprocess.TimeoutExpired:
            gateway.kill()
            gateway.wait()
        log.close()
