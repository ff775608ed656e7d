"""Push consumption: one DEALER per serving host of each partition, a thread
that feeds the handler, and credits returned as messages are finished."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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
        while not self.stopped.is_set():
            for conn, _ in list(self.conns.values()):
                conn.pump(max(1, PUMP_MS // max(1, len(self.conns))))
            if time.monotonic() >= next_keepalive:
                next_keepalive = time.monotonic() + KEEPALIVE_S
                for conn, sub_id in list(self.conns.values()):
                    try:
                        conn.request(Command.CREDIT, {"sub": sub_id, "n": 0}, 2000)
                    except ZmqueueError as exc:
                        log.warning("subscription keepalive failed: %s", exc)
            while self.inbox and not self.stopped.is_set():
                msg, key = self.inbox.popleft()
                self._handle(msg, key)

    def _handle(self, msg: Message, key: SubKey) -> None:
        delete = False
        try:
            self.handler(msg)
            self.handled += 1
            delete = self.auto_delete
        except Exception:  # the handler's failure: the message will come back
            self.failed += 1
            log.exception("subscription handler failed on message %s", msg.id)
        conn, sub_id = self.conns[key]
        body: dict[str, Any] = {"sub": sub_id, "n": 1}
        if delete:  # the delete rides on the credit (the host that pushed it writes its stream)
            body["del"] = [msg.receipt]
        try:
            reply = conn.request(Command.CREDIT, body, self.queue.client.request_timeout_ms)
        except ZmqueueError as exc:
            log.warning("returning credit failed: %s", exc)
            reply = {}
        if delete:
            self._deleted(msg, reply.get("dr") if isinstance(reply, dict) else None)

    def _deleted(self, msg: Message, results: list[Any] | None) -> None:
        """Check the carried delete's outcome; without one (an older host, one
        that no longer writes the stream, a failed credit) delete on its own."""
        try:
            if results is None:
                self.queue.delete(msg.receipt)
            elif results[0] is not None:
                raise from_wire(results[0])
        except ZmqueueError as exc:
            log.warning("deleting message %s failed (it will be delivered again): %s", msg.id, exc)

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
