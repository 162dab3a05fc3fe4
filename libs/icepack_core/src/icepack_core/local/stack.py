"""Running Icepack on one machine: every service as its own process (``icepack up``), and the
embedded default with a local Postgres (``icepack demo``)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from secrets import token_urlsafe
from typing import IO

from rich.console import Console
from rich.markup import escape

from icepack_core.errors import ConfigError
from icepack_core.local.object_store import (
    LocalSeaweed,
    WeedNotInstalled,
    embedded_catalog_env,
    ensure_bucket,
)
from icepack_core.local.ports import PortInUse, PortReservation
from icepack_core.local.postgres import LocalPostgres
from icepack_core.runtime.service import BASE_PORT, PORT_OFFSETS
from icepack_core.settings import Settings

console = Console(stderr=True)
STOP_GRACE_SECONDS = 30.0
# `icepack demo`: short loops so the demo moves in seconds (each can still be overridden).
DEMO_ENV = {
    "ICEPACK_DISCOVERY_INTERVAL_SECONDS": "5",
    "ICEPACK_POLL_INTERVAL_SECONDS": "1",
    "ICEPACK_LOG_FORMAT": "console",
}
DEMO_DEADLINE_SECONDS = 900.0
DEMO_BUCKET = "icepack-demo"  # `icepack demo --object-store`: the lake's bucket
WATCH_SECONDS = 3.0
# A crashed child comes back after 1 s, 2 s, 4 s ... at most 30 s; a minute up resets that.
RESTART_INITIAL_SECONDS = 1.0
RESTART_MAX_SECONDS = 30.0
RESTART_RESET_AFTER_SECONDS = 60.0


def service_ports(base: int = BASE_PORT) -> dict[str, int]:
    return {name: base + offset for name, offset in PORT_OFFSETS.items()}


def up_base_port() -> int:
    """The first service's port: ``ICEPACK_UP_BASE_PORT``, else ``BASE_PORT``; the others
    follow it (``PORT_OFFSETS``).

    Raises:
        ConfigError: the value is not a number, or puts a service's port outside 1-65535
            (the message names the value).
    """
    raw = os.environ.get("ICEPACK_UP_BASE_PORT", "").strip()
    if not raw:
        return BASE_PORT
    try:
        base = int(raw)
    except ValueError:
        raise ConfigError(f"ICEPACK_UP_BASE_PORT={raw!r} is not a port number") from None
    last = base + max(PORT_OFFSETS.values())
    if base < 1 or last > 65535:
        raise ConfigError(
            f"ICEPACK_UP_BASE_PORT={raw!r}: the services would listen on ports {base}-{last}, "
            "outside 1-65535"
        )
    return base


@dataclass
class Child:
    """One service process of ``icepack up`` and its restart state."""

    name: str
    proc: subprocess.Popen[bytes] | None
    started: float
    delay: float = RESTART_INITIAL_SECONDS
    restart_at: float | None = None
    restarts: int = 0


def run_all(
    settings: Settings,
    services: Sequence[str],
    *,
    base_port: int | None = None,
    duration: float | None = None,
    env: dict[str, str] | None = None,
    log_dir: Path | None = None,
    watch: Callable[[], bool] | None = None,
    reserved: PortReservation | None = None,
) -> int:
    """Start ``services`` as child processes; stop them all on SIGINT/SIGTERM, after
    ``duration`` seconds, or when ``watch`` (called every few seconds) returns True. A child
    that exits on its own is restarted alone, after a backoff (1 s doubling to 30 s, back to
    1 s once it had run for a minute), and each restart is logged; the others keep running.
    With ``log_dir``, each child's output goes to ``NAME.log`` there. The services' ports are
    checked free first (``reserved``, when the caller holds them already, is released just
    before the children start).
    Returns 0 when all stopped cleanly, 2 at once when a service or a port is refused."""
    try:
        ports = service_ports(up_base_port() if base_port is None else base_port)
    except ConfigError as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return 2
    unknown = [s for s in services if s not in ports]
    if unknown:
        console.print(f"[red]unknown service(s): {', '.join(unknown)}[/]")
        return 2
    try:
        held = reserved or PortReservation({name: ports[name] for name in services})
    except PortInUse as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return 2
    held.release()
    with ExitStack() as logs:
        start = _Launcher(ports, env or {}, log_dir, logs)
        children: dict[str, Child] = {}
        for name in services:
            proc = start(name)
            children[name] = Child(name, proc, time.monotonic())
            console.print(
                f"started {name:<10} pid {proc.pid:<7} "
                f"http://{settings.http_host}:{ports[name]}/healthz",
                highlight=False,
            )
        failed: list[str] = []
        try:
            _supervise(children, start, duration, watch)
        finally:
            live = {c.name: c.proc for c in children.values() if c.proc is not None}
            failed += _stop_children(live)
    return 1 if failed else 0


@dataclass
class _Launcher:
    """Starts one service as a child process on its port (output to ``NAME.log`` in
    ``log_dir`` when given; the files close with ``logs``)."""

    ports: dict[str, int]
    env: dict[str, str]
    log_dir: Path | None
    logs: ExitStack

    def __call__(self, name: str) -> subprocess.Popen[bytes]:
        child_env = {**os.environ, **self.env, "ICEPACK_HTTP_PORT": str(self.ports[name])}
        output: IO[bytes] | None = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            output = self.logs.enter_context((self.log_dir / f"{name}.log").open("ab"))
        return subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "icepack_core.cli.app", "service", name],
            env=child_env,
            stdout=output,
            stderr=output,
        )


def _supervise(
    children: dict[str, Child],
    start: Callable[[str], subprocess.Popen[bytes]],
    duration: float | None,
    watch: Callable[[], bool] | None,
) -> None:
    """Keep ``children`` running until SIGINT/SIGTERM, ``duration`` or ``watch`` says stop
    (the previous signal handlers are back on return)."""
    stopping = False
    next_watch = time.monotonic() + WATCH_SECONDS

    def request_stop(_sig: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    deadline = time.monotonic() + duration if duration is not None else None
    try:
        while not stopping:
            for child in children.values():
                _supervise_child(child, start)
            if deadline is not None and time.monotonic() >= deadline:
                stopping = True
            if watch is not None and not stopping and time.monotonic() >= next_watch:
                stopping = watch()
                next_watch = time.monotonic() + WATCH_SECONDS
            time.sleep(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _supervise_child(child: Child, start: Callable[[str], subprocess.Popen[bytes]]) -> None:
    """Notice that ``child`` exited and schedule its restart, or restart it when due."""
    now = time.monotonic()
    if child.proc is not None:
        code = child.proc.poll()
        if code is None:
            return
        uptime = now - child.started
        if uptime >= RESTART_RESET_AFTER_SECONDS:
            child.delay = RESTART_INITIAL_SECONDS  # it had been healthy: start over
        child.restart_at = now + child.delay
        console.print(
            f"[yellow]{child.name} (pid {child.proc.pid}) exited with {code} after "
            f"{uptime:.0f} s; restarting it in {child.delay:g} s[/]",
            highlight=False,
        )
        child.delay = min(child.delay * 2, RESTART_MAX_SECONDS)
        child.proc = None
        return
    if child.restart_at is not None and now >= child.restart_at:
        child.proc = start(child.name)
        child.started, child.restart_at = now, None
        child.restarts += 1
        console.print(
            f"restarted {child.name:<10} pid {child.proc.pid:<7} (restart {child.restarts})",
            highlight=False,
        )


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


class DemoWatch:
    """Reads the demo fleet from Postgres every few seconds, prints it when it changed, and
    says when every demo table is healthy (``run_all``'s ``watch``)."""

    def __init__(
        self,
        settings: Settings,
        started: float,
        until_healthy: bool,
        deadline: float,
        ui_url: str,
        ports: Sequence[int] = (),
        strays: int | None = None,
    ) -> None:
        self.settings, self.started, self.ui_url, self.ports = settings, started, ui_url, ports
        self.strays = strays  # stray files to be quarantined (None: the demo lake's default)
        self.until_healthy, self.deadline = until_healthy, deadline
        self.catalog = settings.effective_catalogs()[0].name
        self.last: object = None
        self.healthy_after: float | None = None
        self.timed_out = False
        self.failures = 0

    async def _read(self) -> object:
        from icepack_core.db import pool as db
        from icepack_core.local.demo_lake import read_state

        conn = await db.connect(self.settings, "demo")
        try:
            if self.strays is None:
                return await read_state(conn, self.catalog)
            return await read_state(conn, self.catalog, self.strays)
        finally:
            await conn.close()

    def __call__(self) -> bool:
        from icepack_core.local.demo_lake import DemoState, render_state

        elapsed = time.monotonic() - self.started
        try:
            state = asyncio.run(self._read())
        except Exception as exc:  # a hiccup of the demo's own database: say so, keep going
            self.failures += 1
            if self.failures in (1, 10):
                console.print(f"[yellow]cannot read the demo state: {exc}[/]")
            return False
        assert isinstance(state, DemoState)
        if state != self.last:
            console.print(render_state(state, elapsed))
            self.last = state
        if state.healthy and self.healthy_after is None:
            self.healthy_after = elapsed
            console.print(
                f"[bold green]all demo tables healthy after {elapsed:.0f} s[/] - "
                f"open {self.ui_url}" + ("" if self.until_healthy else "  (Ctrl-C to stop)"),
                highlight=False,
            )
        if self.until_healthy and self.healthy_after is None and elapsed >= self.deadline:
            console.print(f"[bold red]demo tables not healthy after {self.deadline:.0f} s[/]")
            self.timed_out = True
            return True
        # Stop only once every service serves HTTP: its SIGTERM handler is installed by then,
        # so it stops cleanly (a service still importing would die of the signal).
        return self.until_healthy and self.healthy_after is not None and self._serving()

    def _serving(self) -> bool:
        for port in self.ports:
            try:
                socket.create_connection((self.settings.http_host, port), timeout=1).close()
            except OSError:
                return False
        return True


def _start_object_store(store: LocalSeaweed, dsn: str) -> dict[str, str]:
    """Start the demo's SeaweedFS and its bucket; the settings that put the lake there."""
    console.print(f"starting SeaweedFS (S3) in {store.root} ...")
    started = store.start()
    ensure_bucket(started, DEMO_BUCKET)
    console.print(f"object store: {started.s3_endpoint} (bucket {DEMO_BUCKET})", highlight=False)
    return embedded_catalog_env(started, dsn, DEMO_BUCKET)


def _prepare_demo(settings: Settings, *, object_store: bool) -> None:
    """Migrate the demo's database, write the demo lake (first run only) and attach the demo
    policies (orphan removal only on the local file system).

    Raises:
        subprocess.CalledProcessError: the migration failed.
    """
    from icepack_core.local.demo_lake import attach_demo_policies, create_demo_lake

    subprocess.run(
        [sys.executable, "-m", "icepack_core.cli.app", "migrate"], check=True, env=os.environ
    )
    created = create_demo_lake(settings, say=console.print)
    console.print(
        f"demo lake: {'wrote ' + ', '.join(created) if created else 'reused'} "
        f"(warehouse {settings.effective_catalogs()[0].warehouse})",
        soft_wrap=True,  # one line whatever the terminal's width: the location is copied
        highlight=False,
    )

    async def policies() -> None:
        from icepack_core.db import pool as db

        conn = await db.connect(settings, "demo")
        try:
            catalog = settings.effective_catalogs()[0].name
            await attach_demo_policies(conn, catalog, orphans=not object_store)
        finally:
            await conn.close()

    asyncio.run(policies())


def _demo_env(server: LocalPostgres, root: Path) -> dict[str, str]:
    """Start the demo's Postgres; the services' environment: ``DEMO_ENV`` (each overridable),
    that database, the data dir."""
    console.print(f"starting PostgreSQL in {server.root} ...")
    dsn = server.start()
    return {
        **{k: os.environ.get(k, v) for k, v in DEMO_ENV.items()},
        "ICEPACK_DATABASE_URL": dsn,
        "ICEPACK_DATA_DIR": str(root),
    }


def _demo_preflight() -> bool:
    """Set the demo's logging up and say whether it can run Spark here (if not, the error
    names the missing extra)."""
    from icepack_core.errors import MissingExtra
    from icepack_core.spark.extra import require_spark
    from icepack_core.telemetry.logs import setup_logging

    setup_logging("demo", level="warning", fmt="console")  # the summary is the demo's output

    try:
        require_spark("local", "icepack demo")
    except MissingExtra as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return False
    return True


def _run_demo_services(
    env: dict[str, str],
    root: Path,
    started: float,
    duration: float | None,
    *,
    until_healthy: bool,
    deadline: float,
    object_store: bool,
    base: int,
    reserved: PortReservation,
) -> int:
    """Run every service on the demo's database, on the ports from ``base`` (held by
    ``reserved``), printing the fleet as it changes (see ``run_demo``) once the database is
    migrated and the lake written (``env`` becomes this process's environment too); 1 when
    ``until_healthy`` and the tables never got healthy."""
    from icepack_core.settings import load_settings

    os.environ.update(env)
    settings = load_settings()
    _prepare_demo(settings, object_store=object_store)
    dsn = env["ICEPACK_DATABASE_URL"]
    ui_url = f"http://{settings.http_host}:{base}/ui"
    console.print(
        f"database: psql {dsn}\nservice logs: {root / 'logs'}\nUI: {ui_url}", highlight=False
    )
    watch = DemoWatch(
        settings,
        started,
        until_healthy,
        deadline,
        ui_url,
        list(service_ports(base).values()),
        strays=0 if object_store else None,
    )
    code = run_all(
        settings,
        list(PORT_OFFSETS),
        base_port=base,
        duration=duration,
        env=env,
        log_dir=root / "logs",
        watch=watch,
        reserved=reserved,
    )
    if until_healthy and watch.healthy_after is None:
        return 1
    return code


def run_demo(
    duration: float | None = None,
    data_dir: Path | None = None,
    *,
    until_healthy: bool = False,
    deadline: float = DEMO_DEADLINE_SECONDS,
    object_store: bool = False,
) -> int:
    """Start (or reuse) a local Postgres under the data dir, migrate, write the demo lake with
    Spark (first run only), and run all services with short loops, printing the fleet's state
    until Ctrl-C or ``duration``; with ``until_healthy``, exit 0 once every demo table is
    healthy (1 after ``deadline`` seconds). With ``object_store``, a local SeaweedFS (the one
    the tests use) holds the lake in bucket ``DEMO_BUCKET``: every read and write, Spark's
    included, goes through S3. Returns 2 at once, before starting anything, when PySpark (the
    ``icepack-core[spark]`` extra) is not installed: the demo lake is written with Spark and
    the executor runs on it."""
    from icepack_core.errors import MissingExtra

    if not _demo_preflight():
        return 2
    started = time.monotonic()
    root = (data_dir or Path(os.environ.get("ICEPACK_DATA_DIR", ".icepack"))).resolve()
    try:
        base = up_base_port()
        ports = service_ports(base)
        # Held from here: Postgres, SeaweedFS and Spark, started first, take none of them.
        reserved = PortReservation(ports)
    except (ConfigError, PortInUse) as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return 1
    server = LocalPostgres(root / "pg")
    server.stop()  # a server an interrupted demo left running
    store = LocalSeaweed(
        root / "object-store",
        secret_key=token_urlsafe(18),
        table_bucket=None,
        avoid_ports=ports.values(),
    )
    try:
        env = _demo_env(server, root)
        if object_store:
            env |= _start_object_store(store, env["ICEPACK_DATABASE_URL"])
        return _run_demo_services(
            env,
            root,
            started,
            duration,
            until_healthy=until_healthy,
            deadline=deadline,
            object_store=object_store,
            base=base,
            reserved=reserved,
        )
    except (ConfigError, MissingExtra) as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return 1
    except (subprocess.CalledProcessError, WeedNotInstalled) as exc:
        console.print(f"[bold red]error:[/] {exc}")
        return 1
    except KeyboardInterrupt:  # Ctrl-C while the demo lake was being written
        console.print("interrupted")
        return 130
    finally:
        reserved.release()
        server.stop()
        store.stop()
