"""Free TCP ports on 127.0.0.1.

A port is reserved by binding it, and handed out only once per process, so
two callers in one process never get the same port. Across pytest-xdist
workers the kernel's ephemeral allocator keeps them apart.
"""

from __future__ import annotations

import socket
import threading

_lock = threading.Lock()
_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    with _lock:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = int(s.getsockname()[1])
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise RuntimeError("could not find a free port on 127.0.0.1")


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    return [free_port(host) for _ in range(n)]
