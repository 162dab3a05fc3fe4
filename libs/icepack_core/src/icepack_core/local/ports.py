"""Local TCP ports for the servers the demo, the benches and the tests start on this machine."""

from __future__ import annotations

import socket


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
