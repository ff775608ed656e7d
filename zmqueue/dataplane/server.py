"""The host's ZeroMQ sockets and its single-threaded request loop.

Sockets (all bound on the host's bind address):

- ``client``: ROUTER for client DEALERs (requests, replies, pushes);
- ``peer``: ROUTER for other hosts (catch-up requests, durable positions);
- ``pub``: PUB for replication records, topic = partition; ZMTP heartbeats
  drop a subscriber that stops reading (:data:`PUB_HEARTBEAT_TIMEOUT_MS`).

With a CURVE key pair every socket is a CURVE server; ZAP (the host's
handler, zmqueue.security.zap) admits client and host keys on ``client``
(ZAP domain ``client``) and host keys only on ``peer`` and ``pub`` (domain
``peer``). Requests then carry the connection's ZAP User-Id as identity.

One loop iteration: poll, drain every readable socket (bounded; ``peer``
first, and the replies its replicas' positions release leave at once), let
the service run its timers (once per iteration), flush (group commit), then
send every reply. A reply therefore never leaves before the records it
acknowledges are written. Client sends read together with other client
requests go first; the others wait for the next iteration (see
``RequestLoop._serve``).
"""

from __future__ import annotations

import errno
import logging
import time
from dataclasses import dataclass
from typing import Protocol, cast

import zmq

from zmqueue.dataplane.dispatch import Dispatcher
from zmqueue.errors import StartupError, ZmqueueError
from zmqueue.protocol import MAX_FRAME_BYTES, Command, peek_header

log = logging.getLogger(__name__)

DRAIN_MAX = 2000
"""Most messages read from one socket per loop iteration (fairness bound)."""
_SEND = int(Command.SEND)
_QUEUE_WIDE = frozenset(int(c) for c in (Command.PURGE_QUEUE, Command.DELETE_QUEUE, Command.CREATE_QUEUE,
                                         Command.SET_QUEUE_ATTRIBUTES))
"""Requests a later send of the same connection must not overtake (a purge
would remove it, a queue's deletion or creation decides whether it exists)."""
POLL_MAX_MS = 50
PUB_HEARTBEAT_IVL_MS = 1000
PUB_HEARTBEAT_TIMEOUT_MS = 5000
"""ZMTP heartbeats on the PUB socket: a subscriber that answers no PING for
this long is disconnected (it reconnects by itself, and a replica repairs the
gap by catch-up). A subscriber that stopped reading (a frozen replica host, a
stuck process, a stray SUB on the port) otherwise kept its connection for
good while the PUB queued every frame for it: gigabytes within a minute of
traffic."""


Wakeable = zmq.Socket[bytes] | int
"""What the loop's poller can wait on: a socket, or a file descriptor (the
metadata cache's wake pipe)."""
NOTHING_READY: frozenset[Wakeable] = frozenset()

_NOBLOCK = int(zmq.NOBLOCK)
_NOBLOCK_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)
_RCVMORE = int(zmq.RCVMORE)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
"""Plain ints: pyzmq's flag enums run Python-level ``|``/``&`` code on every call."""


class LoopHooks(Protocol):
    def tick(self, now_ms: int, ready: frozenset[Wakeable] | None = None) -> int | None:
        """Run timers and read the :meth:`wake_sockets` in ``ready`` (None:
        all of them); return ms until the next timer, or None."""

    def flush(self) -> None:
        """Make everything appended this iteration durable per policy."""

    def wake_sockets(self) -> list[Wakeable]:
        """Sockets the hooks read themselves in tick() (replication SUB,
        host-to-host DEALERs, the wake pipe of posted work): their input wakes
        the loop at once."""


@dataclass(frozen=True)
class Endpoints:
    client: str
    pub: str
    peer: str

    def as_meta(self) -> dict[str, str]:
        return {"client_endpoint": self.client, "pub_endpoint": self.pub, "peer_endpoint": self.peer}


def _bind(sock: zmq.Socket[bytes], host: str, port: int, what: str) -> str:
    try:
        if port == 0:
            sock.bind(f"tcp://{host}:*")
        else:
            sock.bind(f"tcp://{host}:{port}")
    except zmq.ZMQError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(
                f"port {port} for the {what} socket is already in use on {host}; "
                f"pick another port or pass 0 for a free one", port=port) from None
        raise StartupError(f"cannot bind the {what} socket on {host}:{port}: {exc}") from None
    return str(sock.getsockopt_string(zmq.LAST_ENDPOINT))


class Sockets:
    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], host: str,
                 client_port: int = 0, pub_port: int = 0, peer_port: int = 0,
                 curve: tuple[bytes, bytes] | None = None) -> None:
        self.client = ctx.socket(zmq.ROUTER)
        self.peer = ctx.socket(zmq.ROUTER)
        self.pub = ctx.socket(zmq.PUB)
        for s in (self.client, self.peer, self.pub):
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
            s.setsockopt(zmq.SNDHWM, 100_000)
            s.setsockopt(zmq.RCVHWM, 100_000)
        self.pub.setsockopt(zmq.HEARTBEAT_IVL, PUB_HEARTBEAT_IVL_MS)
        self.pub.setsockopt(zmq.HEARTBEAT_TIMEOUT, PUB_HEARTBEAT_TIMEOUT_MS)
        self.secure = curve is not None
        if curve is not None:
            for s, domain in ((self.client, b"client"), (self.peer, b"peer"), (self.pub, b"peer")):
                s.setsockopt(zmq.CURVE_SERVER, 1)
                s.setsockopt(zmq.CURVE_PUBLICKEY, curve[0])
                s.setsockopt(zmq.CURVE_SECRETKEY, curve[1])
                s.setsockopt(zmq.ZAP_DOMAIN, domain)
        try:
            self.endpoints = Endpoints(
                client=_bind(self.client, host, client_port, "client"),
                pub=_bind(self.pub, host, pub_port, "replication"),
                peer=_bind(self.peer, host, peer_port, "peer"),
            )
        except StartupError:
            self.close()
            raise
        self.by_name = {"client": self.client, "peer": self.peer}

    def close(self) -> None:
        for s in (self.client, self.peer, self.pub):
            s.close(linger=0)


class RequestLoop:
    def __init__(self, sockets: Sockets, dispatcher: Dispatcher, hooks: LoopHooks) -> None:
        self.sockets = sockets
        self.dispatcher = dispatcher
        self.hooks = hooks
        self.poller = zmq.Poller()
        # the peer socket first (the poll answers in this order): replicas'
        # positions release synchronous sends' replies, which then leave
        # before the pass's client requests are handled
        for name in sorted(sockets.by_name, key=lambda n: n != "peer"):
            self.poller.register(sockets.by_name[name], zmq.POLLIN)
        self.names = {s: n for n, s in sockets.by_name.items()}
        self.extra: set[Wakeable] = set()
        self.last_progress = time.monotonic()
        self.iterations = 0
        self.last_error_log = 0.0
        self.next_timer_ms: int | None = 0
        self.kept: list[tuple[str, list[bytes], str | None]] = []
        """Requests read beside sends and kept for the next pass (see
        :meth:`_serve`): (socket name, frames, user)."""

    def run_guarded(self) -> None:
        """One pass (:meth:`run_once`). A ZmqueueError that escapes it (what a
        peer, a client or Consul sent, refused somewhere no request's handler
        answers it) is logged and counted (``pass_errors`` among the
        dispatcher's counters), and the host goes on serving: one bad input
        must not end the process. So is an OSError (the last line of defence:
        the stores turn theirs into ZmqueueErrors naming the file and what
        to do; a full disk or a stray file must not end the host either).
        What the pass had not done yet (the tick's rest, the commit, the
        replies) the next pass does. Other exceptions (bugs) end the host."""
        try:
            self.run_once()
        except (ZmqueueError, OSError):
            self.dispatcher.counters["pass_errors"] += 1
            now = time.monotonic()
            if now - self.last_error_log >= 1.0:  # (the same error in every pass: once a second)
                self.last_error_log = now
                log.exception("a request loop pass failed (%d so far); the host goes on serving",
                              self.dispatcher.counters["pass_errors"])

    def run_once(self) -> None:
        # one timer tick per pass, after the drain: it also reads the wake
        # sockets the poll found readable, and its answer (ms to the next
        # timer) bounds the next poll; flush adds no timer that is due sooner
        wait = self.next_timer_ms
        timeout = POLL_MAX_MS if wait is None else max(0, min(POLL_MAX_MS, wait))
        if self.dispatcher.outbox.items or self.dispatcher.outbox.early or self.kept:
            timeout = 0
        self._watch_extra()
        ready: list[Wakeable] = []
        polled = self.poller.poll(timeout)
        outbox = self.dispatcher.outbox
        kept_due = bool(self.kept)  # (client requests: before the client socket's new ones)
        for sock, _ in polled:
            name = self.names.get(sock)
            if name is None:
                ready.append(sock)
                continue
            if kept_due and name == "client":
                self._take_kept()
                kept_due = False
            self._drain(sock)
            if outbox.early:  # acks released by replica positions: no need to wait for this pass
                self._send(outbox.take_early())
        if kept_due:
            self._take_kept()
        self.next_timer_ms = self.hooks.tick(int(time.time() * 1000),
                                             frozenset(ready) if ready else NOTHING_READY)
        self.hooks.flush()
        self._send_all()
        self.last_progress = time.monotonic()
        self.iterations += 1

    def _watch_extra(self) -> None:
        wanted = self.hooks.wake_sockets()
        if len(wanted) == len(self.extra) and self.extra.issuperset(wanted):
            return  # the usual pass: the same sockets as before
        current = set(wanted)
        for s in current - self.extra:
            self.poller.register(s, zmq.POLLIN)
        for s in self.extra - current:
            self.poller.unregister(s)
        self.extra = current

    def _take_kept(self) -> None:
        """Handle the requests the last pass kept for this one (they came
        before anything still queued on their socket)."""
        kept, self.kept = self.kept, []
        for name, frames, user in kept:
            self.dispatcher.handle(name, frames, user)

    def _drain(self, sock: zmq.Socket[bytes]) -> None:
        name = self.names[sock]
        if self.sockets.secure:
            self._drain_secure(sock, name)
            return
        recv = sock.recv
        more = sock.getsockopt
        read: list[list[bytes]] = []
        for _ in range(DRAIN_MAX):
            # the poll said readable; after each message EVENTS says whether
            # another is queued (a recv on an empty socket raises zmq.Again,
            # whose construction costs several microseconds per iteration)
            try:
                frames = [recv(_NOBLOCK)]
                while more(_RCVMORE):
                    frames.append(recv(_NOBLOCK))
            except zmq.Again:
                break
            read.append(frames)
            if not cast(int, more(_EVENTS)) & _POLLIN:
                break
        self._serve(name, read, None)

    def _drain_secure(self, sock: zmq.Socket[bytes], name: str) -> None:
        """Like _drain, with the identity ZAP gave the connection."""
        read: list[list[bytes]] = []
        users: list[str | None] = []
        for _ in range(DRAIN_MAX):
            try:
                parts = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            try:
                uid = parts[-1].get("User-Id")
                user = uid if isinstance(uid, str) and uid else None
            except zmq.ZMQError:
                user = None
            read.append([p.bytes for p in parts])
            users.append(user)
        self._serve(name, read, users)

    def _serve(self, name: str, read: list[list[bytes]], users: list[str | None] | None) -> None:
        """Handle the requests one drain read, in order. When client sends came
        together with other client requests (receives, deletes), handle the
        sends only (in order: they share one group commit, and their replies
        wait for no other work) and keep the others, in order, for the next
        pass; a send that came after a kept purge, queue deletion, creation or
        settings change on the same connection is kept too (a PURGE then a
        SEND, pipelined: the send went first and was purged). Hosts' requests
        (``peer``) are handled in order, whole: a replica's position must not wait."""
        handle = self.dispatcher.handle
        commands: list[int] | None = None
        if len(read) > 1 and name == "client":  # (hosts' requests: positions must not wait)
            commands = [h[0] if (h := peek_header(frames[-1])) is not None else -1 for frames in read]
            sends = commands.count(_SEND)
            if sends == 0 or sends == len(commands):
                commands = None
        held: set[bytes] = set()  # connections with a queue-wide request kept: their later sends wait
        for i, frames in enumerate(read):
            user = None if users is None else users[i]
            if commands is not None and (commands[i] != _SEND or frames[0] in held):
                if commands[i] in _QUEUE_WIDE:
                    held.add(frames[0])
                self.kept.append((name, frames, user))
            else:
                handle(name, frames, user)

    def _send_all(self) -> None:
        self._send(self.dispatcher.outbox.take())

    def _send(self, items: list[tuple[str, bytes, bytes]]) -> None:
        by_name = self.sockets.by_name
        for name, identity, payload in items:
            sock = by_name[name]
            try:
                sock.send(identity, _NOBLOCK_MORE)
                sock.send(payload, _NOBLOCK)
            except zmq.Again:
                self.dispatcher.counters["reply_dropped_hwm"] += 1
            except zmq.ZMQError:
                self.dispatcher.counters["reply_dropped"] += 1
