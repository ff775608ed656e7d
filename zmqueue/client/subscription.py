"""Push consumption: one DEALER per partition subscription, a thread that
feeds the handler, and credits returned as messages are finished."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from zmqueue.client.models import Message
from zmqueue.client.transport import Connection
from zmqueue.errors import ZmqueueError
from zmqueue.protocol import Command, Frame

if TYPE_CHECKING:
    from zmqueue.client.queue import Queue

log = logging.getLogger(__name__)
PUMP_MS = 100


class Subscription:
    def __init__(self, queue: Queue, handler: Callable[[Message], None], prefetch: int,
                 visibility_timeout: int | None, auto_delete: bool) -> None:
        if not 1 <= prefetch <= 1000:
            from zmqueue.errors import InvalidParameter

            raise InvalidParameter("prefetch must be 1 to 1000", field="prefetch")
        self.queue = queue
        self.handler = handler
        self.prefetch = prefetch
        self.visibility_timeout = visibility_timeout
        self.auto_delete = auto_delete
        self.stopped = threading.Event()
        self.inbox: deque[Message] = deque()
        self.conns: dict[int, tuple[Connection, int]] = {}
        self.handled = 0
        self.failed = 0
        self.max_unfinished_seen = 0
        self.thread = threading.Thread(target=self._run, name=f"subscription-{queue.name}",
                                       daemon=True)

    def _on_push(self, frame: Frame) -> None:
        body = frame.body
        if frame.command == Command.DELIVER and isinstance(body, dict):
            for item in body.get("m", []):
                self.inbox.append(Message.from_wire(self.queue.name, item))
            self.max_unfinished_seen = max(self.max_unfinished_seen, len(self.inbox))

    def start(self) -> Subscription:
        for p in range(self.queue.config.partitions):
            self._subscribe(p)
        self.thread.start()
        return self

    def _subscribe(self, p: int) -> None:
        endpoint = self.queue._routes.get(p)
        if endpoint is None:
            self.queue._refresh()
            endpoint = self.queue._routes.get(p)
        if endpoint is None:
            from zmqueue.errors import Unavailable

            raise Unavailable(f"partition {p} of {self.queue.name!r} has no healthy host")
        conn = Connection(self.queue.client.ctx, endpoint, on_push=self._on_push)
        body: dict[str, Any] = {"q": self.queue.name, "p": p, "prefetch": self.prefetch}
        if self.visibility_timeout is not None:
            body["vis_s"] = self.visibility_timeout
        sub_id = conn.request(Command.SUBSCRIBE, body, self.queue.client.request_timeout_ms)["sub"]
        self.conns[p] = (conn, sub_id)

    def _run(self) -> None:
        while not self.stopped.is_set():
            for conn, _ in list(self.conns.values()):
                conn.pump(PUMP_MS // max(1, len(self.conns)))
            while self.inbox and not self.stopped.is_set():
                self._handle(self.inbox.popleft())

    def _handle(self, msg: Message) -> None:
        try:
            self.handler(msg)
            self.handled += 1
            if self.auto_delete:
                self.queue.delete(msg.receipt)
        except Exception:  # the handler's failure: the message will come back
            self.failed += 1
            log.exception("subscription handler failed on message %s", msg.id)
        p = self.queue._by_partition([msg.receipt])
        part = next(iter(p))
        conn, sub_id = self.conns[part]
        try:
            conn.request(Command.CREDIT, {"sub": sub_id, "n": 1}, self.queue.client.request_timeout_ms)
        except ZmqueueError as exc:
            log.warning("returning credit failed: %s", exc)

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
