"""Free TCP ports on 127.0.0.1 for services we start (Consul agents, pinned
host ports).

Ports come from a range below the kernel's ephemeral range (Linux default
32768-60999), so an outgoing connection's local port can never take a port we
handed out, even when a service is stopped and restarted on the same port
(the Consul-outage tests do that). A port is checked free by binding it, and
handed out only once per process; pytest-xdist workers draw from separate
random points of the range, so collisions between them are unlikely, and a
service that loses such a race is retried by its starter.
"""

from __future__ import annotations

import os
import random
import socket
import threading

LOW, HIGH = 20000, 32000
_lock = threading.Lock()
_handed_out: set[int] = set()
_rng = random.Random(os.getpid() ^ int.from_bytes(os.urandom(4), "big"))


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with _lock:
        for _ in range(500):
            port = _rng.randrange(LOW, HIGH)
            if port not in _handed_out and _bindable(host, port):
                _handed_out.add(port)
                return port
    raise RuntimeError(f"could not find a free port on {host} in {LOW}-{HIGH}")


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    return [free_port(host) for _ in range(n)]
