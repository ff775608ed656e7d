"""One DEALER connection from a client to one host, with request timeouts.

Request ids start at a random 64-bit value per connection and count up, so a
host can recognise a retried request (same id) and answer it from its cache
instead of applying it twice. Replies that arrive after their request timed
out are discarded. Frames flagged PUSH (subscription deliveries) go to
``on_push``.

Each connection watches its link with a ZeroMQ socket monitor. When the link
drops (the host process died or restarted: its kernel closed the TCP
connection) or a (re)connect is refused (nothing listens there), the replies
to the requests in flight cannot come, so they fail at once with
:class:`~zmqueue.errors.ConnectionLost` instead of after the request timeout.
A frozen host (SIGSTOP, a stalled VM: its ZeroMQ I/O thread stops too) keeps
its connections open but stops answering the connection's ZMTP heartbeats, so
the link is dropped after ``HEARTBEAT_TIMEOUT_MS`` and counts the same way. A
host whose process runs but whose request loop is stuck still answers
heartbeats: that costs the request timeout.

Every call on a connection's socket holds the connection's ``lock``
(ZeroMQ sockets are not thread safe: closing one while another thread polls
it is undefined behaviour in libzmq). A client closed from another thread
closes the connections whose lock is free and marks the others
:attr:`Connection.closing`: the thread in a call on one sees the mark within
``LINK_CHECK_MS`` (waits are sliced), closes it and raises
:class:`~zmqueue.errors.ClientClosed`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from zmqueue import protocol
from zmqueue.errors import (
    ClientClosed,
    ConnectionLost,
    InvalidParameter,
    ProtocolError,
    RequestTimeout,
    ZmqueueError,
    from_wire,
)
from zmqueue.protocol import Command, Frame, RequestIds, new_request_id

PushHandler = Callable[[Frame], None]
HANDSHAKE_FAILED: dict[int, str] = {
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "the host refused this client's CURVE key (ZAP status {value}): "
                                     "register its public key (zmqueue keys register) or check "
                                     "curve_secret_file",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "the security handshake failed: CURVE is on at one end only "
                                         "(pass curve_secret_file, or the CLI's --curve-secret, to a "
                                         "secured system), or the host's public key given in "
                                         "curve_server_keys is wrong",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "the handshake did not finish in time: the host is frozen, "
                                          "or CURVE is on at one end only (pass curve_secret_file, or "
                                          "the CLI's --curve-secret, to a secured system), or the "
                                          "host's public key given in curve_server_keys is wrong",
}
"""Why a link failed its ZMTP handshake, as a user can act on it."""
LINK_EVENTS = (zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED
               | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
               | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
"""What a connection's monitor reports: a link up, a link down, a refused
(re)connect (ZeroMQ retries every 100 ms while nothing listens), a failed
handshake (followed by a link down)."""
LINK_CHECK_MS = 100
"""A request waiting for its reply reads its connection's monitor this often."""
HEARTBEAT_IVL_MS = 1000
HEARTBEAT_TIMEOUT_MS = 3000
"""A ZMTP PING every second; a link with no traffic for 3 s after one is
dropped (the host's I/O thread answers PINGs by itself, busy or not, so only
a frozen process misses them)."""
HANDSHAKE_IVL_MS = 3000
"""A (re)connect whose ZMTP handshake does not finish in 3 s is dropped (the
kernel of a frozen host still accepts TCP connections)."""


CLOSED = "this zmqueue client is closed; connect again with zmqueue.connect()"


def close_if_closing(conns: Iterable[Connection]) -> None:
    """In the connections' own thread: close those the client marked
    ``closing``, and raise ClientClosed if any of them was (or is closed).
    Also what a ZeroMQ error on a closed connection's socket turns into."""
    hit = [c for c in conns if c.closing or c.closed]
    for c in hit:
        if not c.closed:
            c.close()
    if hit:
        raise ClientClosed(f"{CLOSED} (it was closed while this call waited)") from None


class Connection:
    """Not thread safe: the client gives each thread its own connections."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str,
                 on_push: PushHandler | None = None, curve: Any = None) -> None:
        self.endpoint = endpoint
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 10_000)
        self.sock.setsockopt(zmq.RCVHWM, 100_000)
        self.sock.setsockopt(zmq.MAXMSGSIZE, protocol.MAX_FRAME_BYTES)
        self.sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
        self.sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
        self.sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_IVL_MS)
        if curve is not None:  # zmqueue.security.curve.CurveKeys
            try:
                curve.client(self.sock, endpoint)
            except ZmqueueError:
                self.sock.close(linger=0)
                raise
        self.monitor: zmq.Socket[bytes] = self.sock.get_monitor_socket(LINK_EVENTS)
        """Readable when the link changed; :meth:`link_drops` reads it."""
        self.sock.connect(endpoint)
        self.drops = 0
        """How often the link went down (dropped, or a (re)connect refused)."""
        self.why: str | None = None
        """What the last drop was, as the monitor told it (None while the link is up)."""
        self.refused = False
        """The host refused the handshake (a CURVE key or mechanism): ZeroMQ does
        not reconnect after that, so every request fails at once; a new
        connection tries again."""
        self.sock_poller = zmq.Poller()
        self.sock_poller.register(self.sock, zmq.POLLIN)
        """Kept for the connection's life (``Socket.poll`` builds a new Poller per call)."""
        self.on_push = on_push
        self._ids = RequestIds()
        self.lock = threading.RLock()
        self.closed = False
        self.closing = False
        """Set by a client closed while a thread was in a call on this
        connection: that thread closes it."""

    def next_request_id(self) -> int:
        return self._ids.next()

    def send(self, command: Command, body: Any, request_id: int) -> None:
        with self.lock:
            if self.closing or self.closed:
                close_if_closing([self])
            self._send(command, body, request_id)

    def _send(self, command: Command, body: Any, request_id: int) -> None:
        frame = protocol.encode_request(command, request_id, body)
        if len(frame) > protocol.MAX_FRAME_BYTES:  # a host would drop the connection, not answer
            raise InvalidParameter(
                f"this {command.name} request is {len(frame)} bytes, over the "
                f"{protocol.MAX_FRAME_BYTES}-byte limit of one request; send fewer or smaller "
                "messages per call (e.g. split the batch)", field="request", size=len(frame),
                limit=protocol.MAX_FRAME_BYTES)
        try:
            self.sock.send(frame, zmq.NOBLOCK)
        except zmq.Again:
            # no pipe to queue in: a refused handshake took it (its event may lag a little)
            if not self.refused and self.monitor.poll(LINK_CHECK_MS):
                self.link_drops()
            if self.refused:
                raise self.lost(command.name) from None
            raise RequestTimeout(f"send queue to {self.endpoint} is full; the host is not reading",
                                 endpoint=self.endpoint) from None

    def request(self, command: Command, body: Any = None, timeout_ms: int = 5000,
                request_id: int | None = None) -> Any:
        """Send one request and wait for its reply; raise its error if any."""
        with self.lock:
            try:
                return self._request(command, body, timeout_ms, request_id)
            except zmq.ZMQError:
                close_if_closing([self])
                raise

    def _request(self, command: Command, body: Any, timeout_ms: int, request_id: int | None) -> Any:
        rid = self.next_request_id() if request_id is None else request_id
        drops = self.link_drops()  # older drops are not this request's
        if self.refused:
            raise self.lost(command.name)
        if self.closing or self.closed:
            close_if_closing([self])
        self._send(command, body, rid)
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            remaining = int((deadline - time.monotonic()) * 1000)
            if remaining < 0:
                raise RequestTimeout(
                    f"{command.name} to {self.endpoint} got no reply within {timeout_ms} ms",
                    endpoint=self.endpoint, timeout_ms=timeout_ms)
            # the DEALER alone (a second socket in the poll costs every
            # request); the monitor is read whenever a slice passes quietly
            if not self.sock_poller.poll(min(remaining, LINK_CHECK_MS)):
                if self.closing:
                    close_if_closing([self])
                if self.link_drops() != drops:
                    raise self.lost(command.name)
                continue
            frame = self.reply_of(self.sock.recv())
            if frame is not None and frame.request_id == rid and frame.command == command:
                if frame.is_error:
                    raise from_wire(frame.body)
                return frame.body

    def link_drops(self) -> int:
        """Read the link events queued by the monitor; returns :attr:`drops`.
        A caller that noted the count before sending knows its replies cannot
        come once it grows."""
        while int(self.monitor.get(zmq.EVENTS)) & zmq.POLLIN:
            event = recv_monitor_message(self.monitor)
            kind = event["event"]
            if kind == zmq.EVENT_CONNECTED:  # TCP is up; a handshake failure may follow
                self.why = None
            elif kind in HANDSHAKE_FAILED:
                self.why = HANDSHAKE_FAILED[kind].format(value=event["value"])
                self.refused = kind != zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
            elif kind == zmq.EVENT_DISCONNECTED:
                self.drops += 1
                self.why = self.why or "the connection dropped (the host stopped, froze or restarted)"
            else:  # EVENT_CONNECT_RETRIED: after a drop, or a refused connect
                self.drops += 1
                self.why = self.why or "nothing accepts connections there (the host is down)"
        return self.drops

    def lost(self, what: str) -> ConnectionLost:
        """The error of a request whose link dropped while it waited."""
        why = self.why or "the connection dropped"
        return ConnectionLost(f"{what} to {self.endpoint} got no reply: {why}", endpoint=self.endpoint,
                              reason=why, refused=self.refused)

    def reply_of(self, data: bytes) -> Frame | None:
        """The reply frame in ``data``; None for a push (handed to ``on_push``)
        or an undecodable frame (dropped)."""
        try:
            frame = protocol.decode(data)
        except ProtocolError:
            return None
        if frame.is_push:
            if self.on_push is not None:
                self.on_push(frame)
            return None
        return frame

    def pump(self, timeout_ms: int) -> None:
        """Wait up to ``timeout_ms`` for a frame, then take every frame queued:
        pushes go to ``on_push``, late replies to timed-out requests are
        discarded (used by subscribers between requests)."""
        with self.lock:
            if self.closing or self.closed:
                close_if_closing([self])
            try:
                if not self.sock_poller.poll(timeout_ms):
                    return
                while True:
                    try:
                        self.reply_of(self.sock.recv(zmq.NOBLOCK))
                    except zmq.Again:
                        return
            except zmq.ZMQError:
                close_if_closing([self])
                raise

    def recv_queued(self) -> list[bytes]:
        """The frames queued on the socket now (none: an empty list)."""
        with self.lock:
            if self.closing or self.closed:
                close_if_closing([self])
            out: list[bytes] = []
            recv = self.sock.recv
            try:
                while True:
                    out.append(recv(zmq.NOBLOCK))
            except zmq.Again:
                return out

    def close_if_idle(self) -> bool:
        """From any thread: close it unless a thread is in a call on its
        socket now (its lock is held); True if it is closed."""
        if self.closed:
            return True
        if not self.lock.acquire(blocking=False):
            return False
        try:
            self.close()
        finally:
            self.lock.release()
        return True

    def close(self) -> None:
        with self.lock:  # (not under a call of another thread)
            if self.closed:
                return
            self.closed = True
            with contextlib.suppress(zmq.ZMQError):  # (ETERM: the context is being terminated)
                self.sock.disable_monitor()
            self.monitor.close(linger=0)
            self.sock.close(linger=0)


class LinkWatch:
    """Connections waited on together (a pipeline's hosts, a long poll's, a
    subscription's): one poller over their DEALERs and link monitors, and each
    link's drop count when it was added, so a wait learns which links dropped
    since (the replies to what was sent on them cannot come)."""

    def __init__(self) -> None:
        self.poller = zmq.Poller()
        self._conns: dict[zmq.Socket[bytes], Connection] = {}
        """Each connection's DEALER and its link monitor -> the connection."""
        self._drops: dict[Connection, int] = {}
        """Each connection's link drops when it was added (or last reported)."""

    def __contains__(self, conn: Connection) -> bool:
        return conn in self._drops

    def add(self, conn: Connection) -> None:
        """Wait on ``conn`` too (no-op if it is already watched); drops of its
        link before now are not reported."""
        if conn in self._drops:
            return
        self.poller.register(conn.sock, zmq.POLLIN)
        self.poller.register(conn.monitor, zmq.POLLIN)
        self._conns[conn.sock] = self._conns[conn.monitor] = conn
        with conn.lock:
            self._drops[conn] = conn.link_drops()

    def remove(self, conn: Connection) -> None:
        if self._drops.pop(conn, None) is None:
            return
        for sock in (conn.sock, conn.monitor):
            self.poller.unregister(sock)
            del self._conns[sock]

    def clear(self) -> None:
        for conn in list(self._drops):
            self.remove(conn)

    def close_closing(self) -> None:
        """In the watch's thread: close the connections a client closed from
        another thread marked ``closing``."""
        for conn in self._drops:
            if conn.closing:
                conn.close()

    def poll(self, timeout_ms: int) -> tuple[list[Connection], list[Connection]]:
        """Wait up to ``timeout_ms`` for a frame or a link event. Returns the
        connections with frames to read, and those whose link dropped since
        they were added or last returned here: read their frames first (the
        replies that came before the drop are there); the others are lost.
        Holds the connections' locks meanwhile, and waits in slices of
        ``LINK_CHECK_MS``: a client closed by another thread is seen within one."""
        conns = list(self._drops)
        for c in conns:
            c.lock.acquire()
        try:
            deadline = time.monotonic() + max(0, timeout_ms) / 1000
            while True:
                if any(c.closing or c.closed for c in conns):
                    close_if_closing(conns)
                left = max(0, int((deadline - time.monotonic()) * 1000))
                try:
                    ready = self.poller.poll(min(left, LINK_CHECK_MS))
                except zmq.ZMQError:
                    close_if_closing(conns)
                    raise
                if ready or left <= LINK_CHECK_MS:
                    break
            readable: list[Connection] = []
            dropped: list[Connection] = []
            for sock, _ in ready:
                conn = self._conns[sock]
                if sock is conn.sock:
                    readable.append(conn)
                elif (drops := conn.link_drops()) != self._drops[conn]:
                    self._drops[conn] = drops
                    dropped.append(conn)
            return readable, dropped
        finally:
            for c in conns:
                c.lock.release()


def call(ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, command: Command,
         body: Any = None, timeout_ms: int = 5000) -> Any:
    """One-shot request on a fresh connection (tools and tests)."""
    conn = Connection(ctx, endpoint)
    try:
        return conn.request(command, body, timeout_ms)
    finally:
        conn.close()


__all__ = ["Connection", "LinkWatch", "ZmqueueError", "call", "new_request_id"]
