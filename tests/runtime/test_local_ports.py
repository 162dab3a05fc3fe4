"""The services' ports on one machine: held from the start of `icepack demo` so that the servers
it starts first (Postgres, SeaweedFS with its gRPC ports at http port + 10000, Spark) take none
of them, and a port another process holds stops `icepack up` and `icepack demo` at once with
its number and service named, instead of a child that exits and restarts forever."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from icepack_core.errors import ConfigError
from icepack_core.local.ports import PortInUse, PortReservation, listener_ports
from icepack_core.local.stack import service_ports, up_base_port
from icepack_core.runtime.service import BASE_PORT, PORT_OFFSETS
from tests.e2e.test_local_stack import free_port_block, service_env

REPO_ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def listening(port: int) -> Iterator[None]:
    """Another process's server on ``port`` (a listening socket of this one stands in)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield


def bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_a_reservation_keeps_its_ports_from_everyone_until_released() -> None:
    ports = service_ports(free_port_block(5))
    held = PortReservation(ports)
    try:
        assert not any(bindable(port) for port in ports.values())
    finally:
        held.release()
    assert all(bindable(port) for port in ports.values())
    held.release()  # a second release is harmless


def test_a_port_in_use_is_named_and_no_other_port_stays_held() -> None:
    ports = service_ports(free_port_block(5))
    with listening(ports["inspector"]), pytest.raises(PortInUse) as refused:
        PortReservation(ports)
    assert f"port {ports['inspector']} for inspector is in use" in str(refused.value)
    assert all(bindable(port) for port in ports.values())


def test_no_listener_port_nor_its_grpc_partner_is_an_avoided_port() -> None:
    low, high = (int(p) for p in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    if low > 35000 or high < 45000:
        pytest.skip(f"this test assumes the Linux default ephemeral ports, not {low}-{high}")
    # Every port from 45000 up is some service's: only ports whose partner (+10000) is below
    # 45000 may be chosen, a small share of what the kernel hands out.
    avoid = set(range(45000, 65536))
    chosen = listener_ports(8, below=55000, offset=10000, avoid=avoid)
    partners = [port + 10000 for port in chosen]
    assert len(set(chosen + partners)) == 16
    assert not (set(chosen) | set(partners)) & avoid


def icepack(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "icepack_core.cli.app", command],
        env=env | {"COLUMNS": "200"},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_up_refuses_a_port_in_use_before_starting_any_service(
    database_url: str, tmp_path: Path
) -> None:
    base = free_port_block(5)
    ports = service_ports(base)
    env = service_env(database_url, tmp_path, ICEPACK_UP_BASE_PORT=str(base))
    with listening(ports["discovery"]):
        run = icepack("up", env)
    output = run.stdout + run.stderr
    assert run.returncode == 2, output
    assert f"port {ports['discovery']} for discovery is in use" in output
    assert "started" not in output


def test_demo_refuses_a_port_in_use_before_starting_postgres(tmp_path: Path) -> None:
    base = free_port_block(5)
    ports = service_ports(base)
    env = service_env("postgresql://unused", tmp_path, ICEPACK_UP_BASE_PORT=str(base))
    with listening(ports["executor"]):
        run = icepack("demo", env)
    output = run.stdout + run.stderr
    assert run.returncode == 1, output
    assert f"port {ports['executor']} for executor is in use" in output
    assert not (tmp_path / "pg").exists()


@pytest.mark.parametrize(
    ("value", "named"),
    [("80x", "is not a port number"), ("65534", "outside 1-65535"), ("0", "outside 1-65535")],
)
@pytest.mark.parametrize(("command", "code"), [("up", 2), ("demo", 1)])
def test_a_bad_base_port_is_named_before_anything_starts(
    tmp_path: Path, command: str, code: int, value: str, named: str
) -> None:
    # The database is never reached: the port is refused first.
    database_url = "postgresql://icepack@127.0.0.1:1/unused"
    env = service_env(database_url, tmp_path, ICEPACK_UP_BASE_PORT=value)
    run = icepack(command, env)
    output = run.stdout + run.stderr
    assert run.returncode == code, output
    assert f"ICEPACK_UP_BASE_PORT='{value}'" in output and named in output
    assert "started" not in output
    assert not (tmp_path / "pg").exists()


@given(st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8))
def test_up_base_port_takes_exactly_the_numbers_that_fit(raw: str) -> None:
    last = max(PORT_OFFSETS.values())
    with patch.dict(os.environ, {"ICEPACK_UP_BASE_PORT": raw}):
        try:
            fits = 1 <= int(raw.strip()) <= 65535 - last
        except ValueError:
            fits = not raw.strip()  # unset or blank: the default
        if fits:
            assert up_base_port() == (int(raw) if raw.strip() else BASE_PORT)
        else:
            with pytest.raises(ConfigError, match="ICEPACK_UP_BASE_PORT="):
                up_base_port()
