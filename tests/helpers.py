"""Small helpers shared by integration tests."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import consul

from zmqueue.localcluster import ConsulAgent


def consul_for(agent: ConsulAgent) -> consul.Consul:
    host, _, port = agent.http_addr.rpartition(":")
    return consul.Consul(host=host, port=int(port), connections_timeout=5)


def service_entry(agent: ConsulAgent, node: str) -> dict[str, Any] | None:
    _, entries = consul_for(agent).health.service("zmqueue")
    for e in entries:
        if e["Service"]["ID"] == f"zmqueue-{node}":
            return dict(e)
    return None


def check_statuses(agent: ConsulAgent, node: str) -> dict[str, str]:
    entry = service_entry(agent, node)
    if entry is None:
        return {}
    return {c["CheckID"]: c["Status"] for c in entry["Checks"] if c.get("ServiceID")}


ADVISORY_SETTLE_S = 1.5
"""How long an advisory check must stay away to count as removed: longer
than a host's heartbeat (1 s, when it re-reads its disk) and its KV watch's
wait (2 s at most, but new notes follow a KV change at once)."""


def wait_check_removed(agent: ConsulAgent, node: str, check_id: str, timeout_s: float, what: str) -> None:
    """Wait until the host's advisory check ``check_id`` (``kv:``, ``disk:``)
    is gone from its registered service and stays gone for ``ADVISORY_SETTLE_S``.
    One read is not enough: a host replaces such a check (deregister, then
    register and warn) whenever its notes change, so a read can fall in
    between and find it missing while it stands (zmqueue.controlplane.advisory)."""
    from tests.conftest import wait_for

    since: list[float] = []

    def gone_for_good() -> bool:
        st = check_statuses(agent, node)
        if not st or check_id in st:  # (no service at all is not a removed check)
            since.clear()
            return False
        since[:] = since or [time.monotonic()]
        return time.monotonic() - since[0] >= ADVISORY_SETTLE_S

    wait_for(gone_for_good, timeout_s + ADVISORY_SETTLE_S, what, interval_s=0.1)


class Cuttable:
    """A TCP forwarder on 127.0.0.1 to ``target``. ``cut()`` closes every
    connection and closes new ones at once; ``heal()`` forwards again."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.conns: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.forwarding = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            if not self.forwarding:
                conn.close()
                continue
            try:
                up = socket.create_connection(self.target, timeout=5)
                up.settimeout(None)  # (the 5 s was for the connect: Consul's blocking queries idle)
            except OSError:
                conn.close()
                continue
            with self.lock:
                self.conns |= {conn, up}
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        with self.lock:  # (each direction's reader closes its socket: none is left open)
            self.conns.discard(a)
        a.close()

    def cut(self) -> None:
        self.forwarding = False
        with self.lock:
            conns, self.conns = self.conns, set()
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def heal(self) -> None:
        self.forwarding = True

    def close(self) -> None:
        self.listener.close()
        self.cut()


def take_and_delete(q: Any, max_messages: int, into: list[bytes], wait_time: float = 1) -> int:
    """One receive of ``q`` (a zmqueue Queue): the bodies appended to
    ``into``, the messages deleted; returns how many came."""
    msgs = q.receive(max_messages=max_messages, wait_time=wait_time)
    into.extend(m.body for m in msgs)
    if msgs:
        q.delete_batch(msgs)
    return len(msgs)


def bodies_of(q: Any, n: int, timeout_s: float, what: str) -> list[bytes]:
    """Receive from ``q`` (a zmqueue Queue) until ``n`` messages came, or fail
    after ``timeout_s``; their bodies, sorted (the messages are not deleted)."""
    from tests.conftest import wait_for

    got: list[bytes] = []

    def enough() -> bool:
        got.extend(m.body for m in q.receive(10, wait_time=1))
        return len(got) >= n

    wait_for(enough, timeout_s, what)
    return sorted(got)


def back_and_not_dead_lettered(q: Any, dlq: Any, visibility_s: int, timeout_s: float = 30) -> Any:
    """The one message of ``q`` comes back (visible) once its visibility
    timeout runs out, and stays there; returned, received once more. (The
    wait of two more visibility timeouts shows that something does NOT
    happen: a subscription left open on a host is pushed the message again
    each time it comes back, every push a receive, and with a small
    ``max_receive_count`` it ends in the dead-letter queue ``dlq``.)"""
    from tests.conftest import wait_for

    wait_for(lambda: q.stats()["visible"] == 1, timeout_s, "the message back in its queue, visible")
    time.sleep(2 * visibility_s + 1)  # (bounded: see above)
    st = q.stats()
    assert (st["visible"], st["in_flight"], dlq.stats()["total"]) == (1, 0, 0), (st, dlq.stats())
    [m] = wait_for(lambda: q.receive(wait_time=1), 10, "the message received")
    return m


def segments_hold(stream_dirs: Iterable[Path], marker: bytes) -> bool:
    """Whether a segment file in one of ``stream_dirs`` holds ``marker``
    (bodies are stored as sent in an unencrypted queue)."""
    for d in stream_dirs:
        for f in d.glob("*.seg"):
            try:
                if marker in f.read_bytes():
                    return True
            except FileNotFoundError:  # (removed meanwhile)
                pass
    return False
