"""Running Icepack on one machine: every service as its own process (``icepack up``), and the
embedded default with a local Postgres (``icepack demo``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from icepack_core.localpg import LocalPostgres
from icepack_core.runner import BASE_PORT, PORT_OFFSETS
from icepack_core.settings import Settings

console = Console(stderr=True)
STOP_GRACE_SECONDS = 30.0


def service_ports(base: int = BASE_PORT) -> dict[str, int]:
    return {name: base + offset for name, offset in PORT_OFFSETS.items()}


def run_all(
    settings: Settings,
    services: Sequence[str],
    *,
    base_port: int | None = None,
    duration: float | None = None,
    env: dict[str, str] | None = None,
) -> int:
    """Start ``services`` as child processes; stop them all on SIGINT/SIGTERM, after
    ``duration`` seconds, or when one exits unexpectedly. Returns 0 when all stopped cleanly."""
    if base_port is None:
        base_port = int(os.environ.get("ICEPACK_UP_BASE_PORT", BASE_PORT))
    ports = service_ports(base_port)
    unknown = [s for s in services if s not in ports]
    if unknown:
        console.print(f"[red]unknown service(s): {', '.join(unknown)}[/]")
        return 2
    children: dict[str, subprocess.Popen[bytes]] = {}
    for name in services:
        child_env = {**os.environ, **(env or {}), "ICEPACK_HTTP_PORT": str(ports[name])}
        children[name] = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "icepack_core.cli", "service", name], env=child_env
        )
        console.print(f"started {name:<10} pid {children[name].pid:<7} "
                      f"http://{settings.http_host}:{ports[name]}/healthz")
    stopping = False

    def request_stop(_sig: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    deadline = time.monotonic() + duration if duration is not None else None
    failed: list[str] = []
    try:
        while not stopping:
            for name, proc in children.items():
                if proc.poll() is not None:
                    console.print(f"[red]{name} exited with {proc.returncode}; stopping all[/]")
                    failed.append(name)
                    stopping = True
            if deadline is not None and time.monotonic() >= deadline:
                stopping = True
            time.sleep(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        failed += _stop_children(children)
    return 1 if failed else 0


def _stop_children(children: dict[str, subprocess.Popen[bytes]]) -> list[str]:
    for proc in children.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    unclean = []
    for name, proc in children.items():
        try:
            code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        if code != 0:
            unclean.append(name)
    return unclean


def run_demo(duration: float | None = None, data_dir: Path | None = None) -> int:
    """Start (or reuse) a local Postgres under the data dir, migrate, and run all services."""
    from icepack_core.settings import load_settings

    root = (data_dir or Path(os.environ.get("ICEPACK_DATA_DIR", ".icepack"))).resolve()
    server = LocalPostgres(root / "pg")
    console.print(f"starting PostgreSQL in {server.root} ...")
    dsn = server.start()
    env = {"ICEPACK_DATABASE_URL": dsn, "ICEPACK_DATA_DIR": str(root)}
    os.environ.update(env)
    try:
        settings = load_settings()
        subprocess.run(
            [sys.executable, "-m", "icepack_core.cli", "migrate"], check=True, env=os.environ
        )
        console.print(f"database: {dsn}  (psql {dsn})")
        return run_all(settings, list(PORT_OFFSETS), duration=duration, env=env)
    finally:
        server.stop()
