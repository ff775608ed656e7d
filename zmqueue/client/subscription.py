"""Push consumption: one DEALER per serving host of each partition, a thread
that feeds the handler, and credits returned as messages are finished.

The thread hands the handler every message pushed so far, then returns the
credits of that batch to each host in one ``CREDIT``, which also carries the
deletes (``auto_delete``) of the handled messages of one stream: one round
trip per batch of up to ``prefetch`` messages per host, not per message."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import zmq

from zmqueue.client.models import Message
from zmqueue.client.transport import Connection
from zmqueue.errors import InvalidParameter, Unavailable, ZmqueueError, from_wire
from zmqueue.protocol import Command, Frame

if TYPE_CHECKING:
    from zmqueue.client.queue import Queue

log = logging.getLogger(__name__)
PUMP_MS = 100
KEEPALIVE_S = 5.0
SubKey = tuple[int, str]


class Subscription:
    def __init__(self, queue: Queue, handler: Callable[[Message], None], prefetch: int,
                 visibility_timeout: int | None, auto_delete: bool) -> None:
        if not 1 <= prefetch <= 1000:
            raise InvalidParameter("prefetch must be 1 to 1000", field="prefetch")
        self.queue = queue
        self.handler = handler
        self.prefetch = prefetch
        self.visibility_timeout = visibility_timeout
        self.auto_delete = auto_delete
        self.stopped = threading.Event()
        self.inbox: deque[tuple[Message, SubKey]] = deque()
        self.conns: dict[SubKey, tuple[Connection, int]] = {}
        self.handled = 0
        self.failed = 0
        self.max_unfinished_seen = 0
        self.thread = threading.Thread(target=self._run, name=f"subscription-{queue.name}",
                                       daemon=True)

    def _on_push(self, key: SubKey) -> Callable[[Frame], None]:
        def on_push(frame: Frame) -> None:
            body = frame.body
            if frame.command == Command.DELIVER and isinstance(body, dict):
                for item in body.get("m", []):
                    self.inbox.append((Message.from_wire(self.queue.name, item), key))
                per_key = sum(1 for _, k in self.inbox if k == key)
                self.max_unfinished_seen = max(self.max_unfinished_seen, per_key)
        return on_push

    def start(self) -> Subscription:
        for p in range(self.queue.config.partitions):
            targets = self.queue.routes.for_receive(p)
            if not targets:
                self.queue.refresh()
                targets = self.queue.routes.for_receive(p)
            if not targets:
                raise Unavailable(f"partition {p} of {self.queue.name!r} has no serving host")
            for ep in targets:
                self._subscribe(p, ep)
        self.thread.start()
        return self

    def _subscribe(self, p: int, endpoint: str) -> None:
        key = (p, endpoint)
        conn = Connection(self.queue.client.ctx, endpoint, on_push=self._on_push(key),
                          curve=self.queue.client.curve_for(endpoint))
        body: dict[str, Any] = {"q": self.queue.name, "p": p, "prefetch": self.prefetch}
        if self.visibility_timeout is not None:
            body["vis_s"] = self.visibility_timeout
        try:
            sub_id = conn.request(Command.SUBSCRIBE, body, self.queue.client.request_timeout_ms)["sub"]
        except ZmqueueError:
            conn.close()
            raise
        self.conns[key] = (conn, sub_id)

    def _run(self) -> None:
        next_keepalive = time.monotonic() + KEEPALIVE_S
        poller = zmq.Poller()
        for conn, _ in self.conns.values():
            poller.register(conn.sock, zmq.POLLIN)
        while not self.stopped.is_set():
            ready = dict(poller.poll(PUMP_MS))
            for conn, _ in list(self.conns.values()):
                if conn.sock in ready:
                    conn.pump(0)
            if time.monotonic() >= next_keepalive:
                next_keepalive = time.monotonic() + KEEPALIVE_S
                for conn, sub_id in list(self.conns.values()):
                    try:
                        conn.request(Command.CREDIT, {"sub": sub_id, "n": 0}, 2000)
                    except ZmqueueError as exc:
                        log.warning("subscription keepalive failed: %s", exc)
            if self.inbox and not self.stopped.is_set():
                self._handle_all()

    def _handle_all(self) -> None:
        """Hand the handler every message pushed so far (more may be pushed
        meanwhile: they wait for the next round), then return each host its
        credits, with the handled messages' deletes."""
        credits: dict[SubKey, int] = {}
        done: dict[SubKey, list[Message]] = {}
        for _ in range(len(self.inbox)):
            if self.stopped.is_set():
                break  # unhandled: delivered again after their visibility timeout
            msg, key = self.inbox.popleft()
            credits[key] = credits.get(key, 0) + 1
            try:
                self.handler(msg)
                self.handled += 1
                if self.auto_delete:
                    done.setdefault(key, []).append(msg)
            except Exception:  # the handler's failure: the message will come back
                self.failed += 1
                log.exception("subscription handler failed on message %s", msg.id)
        for key, n in credits.items():
            self._credit(key, n, done.get(key, []))

    def _credit(self, key: SubKey, n: int, handled: list[Message]) -> None:
        """Return ``n`` credits to the host of ``key``; the deletes of the
        handled messages of one stream ride on it (the host checks that it
        writes the first receipt's stream), the others' go as DELETE."""
        conn, sub_id = self.conns[key]
        body: dict[str, Any] = {"sub": sub_id, "n": n}
        carried: list[Message] = []
        if handled:
            try:
                groups = sorted(self.queue.by_stream(list(handled)).values(), key=len, reverse=True)
            except ZmqueueError as exc:  # not expected: receipts of this queue's own pushes
                log.warning("deleting pushed messages failed: %s", exc)
                groups = []
            if groups:
                carried = [handled[i] for i in groups[0]]
                body["del"] = [m.receipt for m in carried]
            for idxs in groups[1:]:
                self._deleted([handled[i] for i in idxs], None)
        try:
            reply = conn.request(Command.CREDIT, body, self.queue.client.request_timeout_ms)
        except ZmqueueError as exc:
            log.warning("returning credit failed: %s", exc)
            reply = {}
        if carried:
            self._deleted(carried, reply.get("dr") if isinstance(reply, dict) else None)

    def _deleted(self, msgs: list[Message], results: list[Any] | None) -> None:
        """Check the carried deletes' outcomes; without them (an older host, one
        that no longer writes the stream, a failed credit) delete on our own."""
        errors: list[ZmqueueError | None]
        try:
            if results is None:
                errors = self.queue.delete_batch(msgs)
            else:
                errors = [None if r is None else from_wire(r) for r in results]
        except ZmqueueError as exc:
            errors = [exc] * len(msgs)
        for msg, err in zip(msgs, errors, strict=True):
            if err is not None:
                log.warning("deleting message %s failed (it will be delivered again): %s", msg.id, err)

    def close(self) -> None:
        self.stopped.set()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout=5)
        for conn, sub_id in self.conns.values():
            with contextlib.suppress(ZmqueueError):
                conn.request(Command.UNSUBSCRIBE, {"sub": sub_id}, 2000)
            conn.close()
        self.conns.clear()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
