"""The ZAP handler: which CURVE keys may connect, and who they are.

libzmq asks the handler bound at ``inproc://zeromq.zap.01`` (in the socket's
context) about every new CURVE connection: ``[version, request id, domain,
address, routing id, mechanism, client key]``. The handler answers 200 with
the key's registered name as the ZAP *User-Id* (readable on every frame the
connection delivers, ``frame.get("User-Id")``), or 400 for an unknown key.

Domains: ``client`` (the client ROUTER: client and host keys), ``peer``
(peer ROUTER and replication PUB: host keys only). The allowed keys are
swapped in whole by :meth:`ZapHandler.set_keys` (the host refreshes them from
Consul KV ``zmqueue/keys/``); a revoked key is refused from its next
connection on (established connections stay up until they reconnect).

Bind the handler before any CURVE server socket binds: a context with no ZAP
handler lets every key in.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass

import zmq
import zmq.utils.z85

log = logging.getLogger(__name__)

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
HOST_ONLY_DOMAINS = frozenset({"peer"})


@dataclass(frozen=True)
class KeyEntry:
    name: str
    role: str
    """``client`` | ``host``."""


class ZapHandler:
    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
        self.ctx = ctx
        self.keys: dict[bytes, KeyEntry] = {}
        """z85 public key -> entry; replaced whole, never mutated."""
        self.roles: dict[str, str] = {}
        self.mixed: set[str] = set()
        """Names registered with keys of both roles (treated as clients')."""
        self.counters: Counter[str] = Counter()
        self.stopping = threading.Event()
        self.sock = ctx.socket(zmq.REP)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(ZAP_ENDPOINT)
        self.thread = threading.Thread(target=self._run, name="zap", daemon=True)

    def set_keys(self, entries: dict[bytes, KeyEntry]) -> None:
        """Swap in the allowed keys. A name registered with keys of both roles
        (a client key under a host's name: ``register_key`` refuses it, a KV
        edit does not) counts as a client's, since a connection's role is
        looked up by its User-Id: a host key under it is then checked like a
        client's rather than a client key passing as a host's."""
        roles: dict[str, str] = {}
        mixed: set[str] = set()
        for e in entries.values():
            if roles.setdefault(e.name, e.role) != e.role:
                mixed.add(e.name)
        for name in sorted(mixed - self.mixed):  # (said once, when it appears)
            log.warning("keys of both roles are registered under the name %r: its connections are "
                        "treated as a client's (policies apply) until one is revoked", name)
        self.mixed = mixed
        self.keys = dict(entries)
        self.roles = {**roles, **dict.fromkeys(mixed, "client")}

    def role_of(self, name: str | None) -> str | None:
        return self.roles.get(name) if name else None

    def start(self) -> ZapHandler:
        self.thread.start()
        return self

    def decide(self, domain: str, mechanism: bytes, client_key: bytes) -> tuple[bool, str, str]:
        """(allowed, user id, reason)."""
        if mechanism != b"CURVE":
            return False, "", f"mechanism {mechanism!r} is not allowed"
        z85 = zmq.utils.z85.encode(client_key) if len(client_key) == 32 else b""
        entry = self.keys.get(z85)
        if entry is None:
            return False, "", "key not registered for this cluster"
        if domain in HOST_ONLY_DOMAINS and entry.role != "host":
            return False, "", f"{entry.name} is not a host key"
        return True, entry.name, "OK"

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        while not self.stopping.is_set():
            if not poller.poll(100):
                continue
            try:
                msg = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.ZMQError:
                continue
            self._answer(msg)

    def _answer(self, msg: list[bytes]) -> None:
        if len(msg) < 6:
            self.counters["zap_malformed"] += 1
            self.sock.send_multipart([b"1.0", msg[1] if len(msg) > 1 else b"", b"500",
                                      b"malformed", b"", b""])
            return
        version, rid, domain, address, _routing, mechanism = msg[:6]
        key = msg[6] if len(msg) > 6 else b""
        ok, user, reason = self.decide(domain.decode(errors="replace"), mechanism, key)
        self.counters["zap_accepted" if ok else "zap_denied"] += 1
        if not ok:
            log.warning("refused a %s connection from %s: %s", domain.decode(errors="replace"),
                        address.decode(errors="replace"), reason)
        self.sock.send_multipart([version, rid, b"200" if ok else b"400", reason.encode(),
                                  user.encode(), b""])

    def stop(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(timeout=2)
        self.sock.close(linger=0)
