"""One DEALER connection from a client to one host, with request timeouts.

Request ids start at a random 64-bit value per connection and count up, so a
host can recognise a retried request (same id) and answer it from its cache
instead of applying it twice. Replies that arrive after their request timed
out are discarded. Frames flagged PUSH (subscription deliveries) go to
``on_push``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import zmq

from zmqueue import protocol
from zmqueue.errors import ProtocolError, RequestTimeout, ZmqueueError, from_wire
from zmqueue.protocol import Command, Frame, RequestIds, new_request_id

PushHandler = Callable[[Frame], None]


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
        if curve is not None:  # zmqueue.security.curve.CurveKeys
            try:
                curve.client(self.sock, endpoint)
            except ZmqueueError:
                self.sock.close(linger=0)
                raise
        self.sock.connect(endpoint)
        self.poller = zmq.Poller()
        self.poller.register(self.sock, zmq.POLLIN)
        """Kept for the connection's life (``Socket.poll`` builds a new Poller per call)."""
        self.on_push = on_push
        self._ids = RequestIds()
        self.lock = threading.RLock()
        self.closed = False

    def next_request_id(self) -> int:
        return self._ids.next()

    def send(self, command: Command, body: Any, request_id: int) -> None:
        try:
            self.sock.send(protocol.encode_request(command, request_id, body), zmq.NOBLOCK)
        except zmq.Again:
            raise RequestTimeout(f"send queue to {self.endpoint} is full; the host is not reading",
                                 endpoint=self.endpoint) from None

    def request(self, command: Command, body: Any = None, timeout_ms: int = 5000,
                request_id: int | None = None) -> Any:
        """Send one request and wait for its reply; raise its error if any."""
        with self.lock:
            rid = self.next_request_id() if request_id is None else request_id
            self.send(command, body, rid)
            deadline = time.monotonic() + timeout_ms / 1000
            while True:
                frame = self.wait_frame(deadline)
                if frame is None:
                    raise RequestTimeout(
                        f"{command.name} to {self.endpoint} got no reply within {timeout_ms} ms",
                        endpoint=self.endpoint, timeout_ms=timeout_ms)
                if frame.request_id == rid and frame.command == command:
                    if frame.is_error:
                        raise from_wire(frame.body)
                    return frame.body

    def wait_frame(self, deadline: float) -> Frame | None:
        """Next reply frame before ``deadline``; pushes are handed to on_push."""
        while True:
            remaining = int((deadline - time.monotonic()) * 1000)
            if remaining < 0 or not self.poller.poll(remaining):
                return None
            frame = self.reply_of(self.sock.recv())
            if frame is not None:
                return frame

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
            if not self.poller.poll(timeout_ms):
                return
            while True:
                try:
                    self.reply_of(self.sock.recv(zmq.NOBLOCK))
                except zmq.Again:
                    return

    def close(self) -> None:
        self.closed = True
        self.sock.close(linger=0)


def call(ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, command: Command,
         body: Any = None, timeout_ms: int = 5000) -> Any:
    """One-shot request on a fresh connection (tools and tests)."""
    conn = Connection(ctx, endpoint)
    try:
        return conn.request(command, body, timeout_ms)
    finally:
        conn.close()


__all__ = ["Connection", "ZmqueueError", "call", "new_request_id"]
