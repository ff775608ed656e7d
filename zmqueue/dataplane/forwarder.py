"""Host-to-host requests from the request loop, without blocking it.

Used to move dead letters to a DLQ partition that another host serves. One
DEALER per endpoint; ``poll()`` (called from the loop's tick) collects replies
and times out requests that got none, calling each request's callback once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq

from zmqueue import protocol
from zmqueue.dataplane.server import Wakeable
from zmqueue.errors import ProtocolError, RequestTimeout, ZmqueueError, from_wire
from zmqueue.protocol import Command, RequestIds

Callback = Callable[[Any, ZmqueueError | None], None]
MAX_PENDING = 10_000

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    endpoint: str
    deadline_ms: int
    callback: Callback


class Forwarder:
    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
        self.ctx = ctx
        self.socks: dict[str, zmq.Socket[bytes]] = {}
        self.pending: dict[int, _Pending] = {}
        self._ids = RequestIds()
        self.refused_replies = 0
        """Replies (or timeouts) whose callback refused what a peer sent
        (a ZmqueueError): logged and counted, never raised into the loop."""
        self.curve: Any = None
        """CURVE client keys (zmqueue.security.curve.CurveKeys) when the host is
        secured: ``curve.client(sock, endpoint)`` before every connect."""

    def _sock(self, endpoint: str) -> zmq.Socket[bytes]:
        s = self.socks.get(endpoint)
        if s is None:
            s = self.ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.SNDHWM, 10_000)
            s.setsockopt(zmq.MAXMSGSIZE, protocol.PEER_MAX_FRAME_BYTES)
            if self.curve is not None:
                try:
                    self.curve.client(s, endpoint)
                except ZmqueueError:
                    s.close(linger=0)
                    raise
            s.connect(endpoint)
            self.socks[endpoint] = s
        return s

    def notify(self, endpoint: str, command: Command, body: Any) -> bool:
        """Send a request that asks for no reply (the body says so; see
        POSITION); False if it could not be queued. Nothing waits for it."""
        try:
            self._sock(endpoint).send(protocol.encode_request(command, self._ids.next(), body),
                                      zmq.NOBLOCK)
        except (zmq.ZMQError, ZmqueueError):
            return False
        return True

    def request(self, endpoint: str, command: Command, body: Any, callback: Callback,
                now_ms: int, timeout_ms: int = 5000) -> None:
        if len(self.pending) >= MAX_PENDING:
            callback(None, RequestTimeout("too many forwarded requests in flight"))
            return
        rid = self._ids.next()
        try:
            self._sock(endpoint).send(protocol.encode_request(command, rid, body), zmq.NOBLOCK)
        except zmq.ZMQError:
            callback(None, RequestTimeout(f"cannot queue a request to {endpoint}"))
            return
        except ZmqueueError as exc:  # no CURVE key known for the endpoint yet
            callback(None, exc)
            return
        self.pending[rid] = _Pending(endpoint, now_ms + timeout_ms, callback)

    def poll(self, now_ms: int, ready: frozenset[Wakeable] | None = None) -> None:
        """Replies on the sockets in ``ready`` (None: every socket), then timeouts."""
        if not self.pending and ((ready is not None and not ready) or not self.socks):
            return  # nothing awaited and nothing ready to read
        for sock in self.socks.values():
            while ready is None or sock in ready:
                try:
                    data = sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                try:
                    frame = protocol.decode(data, protocol.PEER_MAX_FRAME_BYTES)
                except ProtocolError as exc:
                    self.refused_replies += 1
                    log.warning("refused a reply: %s", exc)
                    continue
                p = self.pending.pop(frame.request_id, None)
                if p is not None:
                    self._answer(p, None if frame.is_error else frame.body,
                                 from_wire(frame.body) if frame.is_error else None)
        expired = [rid for rid, p in self.pending.items() if p.deadline_ms <= now_ms]
        for rid in expired:
            p = self.pending.pop(rid)
            if self.curve is not None and p.endpoint in self.socks:
                # a CURVE connection refused once never reconnects by itself
                self.socks.pop(p.endpoint).close(linger=0)
            self._answer(p, None, RequestTimeout(f"no reply from {p.endpoint}"))

    def _answer(self, p: _Pending, body: Any, err: ZmqueueError | None) -> None:
        """Run a request's callback. A reply the callback refuses (a peer's
        malformed or inconsistent answer: a ZmqueueError) is logged and
        counted; it must not take the host's request loop down with it."""
        try:
            p.callback(body, err)
        except ZmqueueError as exc:
            self.refused_replies += 1
            log.warning("refused a reply from %s: %s", p.endpoint, exc)

    def close(self) -> None:
        for s in self.socks.values():
            s.close(linger=0)
        self.socks.clear()
