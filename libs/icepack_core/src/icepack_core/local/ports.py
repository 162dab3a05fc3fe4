"""Local TCP ports for the servers the demo, the benches and the tests start on this machine."""

from __future__ import annotations

import socket
from collections.abc import Collection, Mapping


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_port_below(limit: int) -> int:
    """A free port below ``limit`` (SeaweedFS adds 10000 to some ports for gRPC)."""
    while True:
        port = free_port()
        if port < limit:
            return port


class PortInUse(RuntimeError):
    """A port a local service needs is held by another process; the message names both."""


class PortReservation:
    """Holds named ports on 127.0.0.1 bound (not listening) until ``release``.

    A port bound here is one the kernel hands to no one else, neither to ``bind(0)`` nor as
    an outgoing connection's local port: the services' ports stay theirs while the servers
    started before them (Postgres, SeaweedFS, Spark) pick free ports of their own.

    Raises:
        PortInUse: another process holds one of ``ports`` (every socket bound so far is
            closed again).
    """

    def __init__(self, ports: Mapping[str, int]) -> None:
        self.ports = dict(ports)
        self._held: list[socket.socket] = []
        for name, port in self.ports.items():
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError as exc:
                sock.close()
                self.release()
                raise PortInUse(
                    f"port {port} for {name} is in use ({exc.strerror}); stop what holds it "
                    "or choose other ports with ICEPACK_UP_BASE_PORT"
                ) from exc
            self._held.append(sock)

    def release(self) -> None:
        """Close every held socket (idempotent); the ports are free for their services."""
        for sock in self._held:
            sock.close()
        self._held.clear()


def listener_ports(
    count: int, *, below: int, offset: int, avoid: Collection[int] = ()
) -> list[int]:
    """``count`` distinct free ports below ``below`` for a server that also listens on each
    port + ``offset`` (SeaweedFS: gRPC on http port + 10000): no port and no port + ``offset``
    is in ``avoid``, is another chosen one or its partner, or is in use right now."""
    taken = set(avoid)
    chosen: list[int] = []
    while len(chosen) < count:
        port = free_port_below(below)
        if {port, port + offset} & taken or not _bindable(port + offset):
            continue
        chosen.append(port)
        taken |= {port, port + offset}
    return chosen


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
