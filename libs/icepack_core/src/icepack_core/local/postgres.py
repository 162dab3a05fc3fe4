"""A local PostgreSQL server from the installed binaries (``initdb`` / ``pg_ctl``).

Used by ``icepack demo`` (the embedded default) and by the test harness when neither
``ICEPACK_TEST_DATABASE_URL`` nor Docker is available. When running as root the server runs as
the ``postgres`` user, because PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from icepack_core.local.ports import free_port

_SERVER_USER = "postgres"


def find_pg_bin() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl``.

    Raises:
        FileNotFoundError: no PostgreSQL server binaries are installed.
    """
    explicit = os.environ.get("ICEPACK_PG_BIN")
    candidates = [explicit] if explicit else []
    which = shutil.which("initdb")
    if which:
        candidates.append(str(Path(which).resolve().parent))
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for candidate in candidates:
        if candidate and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    raise FileNotFoundError(
        "PostgreSQL server binaries (initdb, pg_ctl) not found; install PostgreSQL 15+ "
        "or set ICEPACK_PG_BIN to their directory"
    )


@dataclass
class LocalPostgres:
    """A throw-away or persistent server in ``root`` (data in ``root/data``)."""

    root: Path
    port: int = 0
    durable: bool = True  # tests turn fsync off; the demo keeps it on
    database: str = "icepack"

    def __post_init__(self) -> None:
        self.root = self.root.resolve()
        self.bin = find_pg_bin()
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log = self.root / "postgres.log"
        if not self.port:
            self.port = free_port()

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{self.database}"

    def admin_dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _as_server_user(self, args: list[str]) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", _SERVER_USER, "--", *args]
        return args

    def _run(self, args: list[str]) -> None:
        proc = subprocess.run(  # noqa: S603 - fixed binaries, no shell
            self._as_server_user(args), capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{Path(args[0]).name} failed: {proc.stderr.strip() or proc.stdout}")

    def start(self) -> str:
        """Initialise (first time), start, and create the database. Returns its DSN."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, _SERVER_USER)
            shutil.chown(self.socket_dir, _SERVER_USER)
        if not (self.data / "PG_VERSION").exists():
            self._run(
                [
                    str(self.bin / "initdb"),
                    "-D",
                    str(self.data),
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "--no-sync",
                    "-E",
                    "UTF8",
                    "--locale=C",
                ]
            )
        options = (
            f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1 "
            "-c max_connections=300"
        )
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._run(
            [
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-w",
                "-t",
                "60",
                "-o",
                options,
                "start",
            ]
        )
        self._create_database()
        return self.dsn

    def _create_database(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            proc = subprocess.run(  # noqa: S603
                [
                    str(self.bin / "createdb"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-U",
                    "postgres",
                    self.database,
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode == 0 or "already exists" in proc.stderr:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"createdb failed: {proc.stderr.strip()}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server (fast shutdown); safe to call when it is not running."""
        if (self.data / "postmaster.pid").exists():
            self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"])
