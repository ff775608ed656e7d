"""Pipelined sends: many single-message SEND requests in flight from one thread.

``queue.pipeline(window=32)`` returns a :class:`SendPipeline`. Its
:meth:`~SendPipeline.send` sends one message as its own request and returns
at once with a :class:`PendingSend`; it waits only while ``window`` requests
are already unanswered. This is what NATS's ``publish_async`` or RabbitMQ's
asynchronous publisher confirms give: a producer that makes messages one at a
time still keeps the host busy, instead of waiting a round trip per message.
Hosts take the requests that arrive together into one storage commit (and,
with R=3, one replicated block), so pipelining pays most where one send at a
time pays a whole commit each.

Semantics (the same promise as :meth:`Queue.send`, per message):

- a message is confirmed when its PendingSend has an ``id``; it then has the
  durability of a plain send (written per the queue's fsync policy, and on
  the sync replicas with synchronous replication);
- a request that fails in a way that may be retried (no reply within the
  request timeout, NotLeader, Unavailable, Throttled) is retried, with the
  same request id, once the requests in flight have settled, through the
  same retry path as ``Queue.send``; a message that still fails, or fails
  for good (e.g. InvalidParameter for an oversized body), gets its
  ``error``. Nothing is dropped silently: :meth:`SendPipeline.flush` waits
  for every send and returns the ones that failed, and leaving a ``with``
  block raises the first failure's error;
- standard queues only. A FIFO queue promises order within a message group,
  and a retried request that lands after later ones of its group would break
  it; FIFO producers use ``send`` / ``send_batch`` (one batch of up to 1,000
  keeps its order).

Not thread safe: one pipeline per thread (it uses the thread's connections).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from zmqueue.client.breaker import Bulkhead, CircuitOpen
from zmqueue.client.models import AttributeValue, OutgoingMessage
from zmqueue.client.transport import Connection, LinkWatch
from zmqueue.errors import (
    ClientClosed,
    InvalidParameter,
    Throttled,
    Unavailable,
    ZmqueueError,
    from_wire,
)
from zmqueue.protocol import Command

if TYPE_CHECKING:
    from zmqueue.client.queue import Queue

MAX_WINDOW = 1000
DEFAULT_WINDOW = 32
RETRYABLE = (Unavailable, Throttled)
"""Failures of one request that say nothing about the message (Unavailable
covers NotLeader, RequestTimeout and an open circuit): sent again."""


@dataclass(eq=False)
class PendingSend:
    """One pipelined message: ``id`` once confirmed, ``error`` if it failed."""

    index: int
    """Its place among the pipeline's sends (0, 1, ...)."""
    partition: int
    wire: list[Any] = field(repr=False)
    id: str | None = None
    error: ZmqueueError | None = None
    sent_at: float = 0.0
    """``time.monotonic()`` when it was first sent."""
    done_at: float = 0.0
    """``time.monotonic()`` when it was confirmed or failed for good."""
    request_id: int = 0

    @property
    def done(self) -> bool:
        return self.id is not None or self.error is not None


class SendPipeline:
    """Up to ``window`` single-message sends in flight; see the module doc.

    ``on_done`` is called (on this thread, from ``send`` or ``flush``) for
    each message as it is confirmed or fails for good; an exception it raises
    comes out of that ``send`` or ``flush``."""

    def __init__(self, queue: Queue, window: int = DEFAULT_WINDOW,
                 on_done: Callable[[PendingSend], None] | None = None) -> None:
        if queue.config.fifo:
            raise InvalidParameter(
                f"{queue.name!r} is a FIFO queue: pipelined sends could reorder a message group "
                "when one is retried; send FIFO messages with send() or send_batch()")
        if not 1 <= window <= MAX_WINDOW:
            raise InvalidParameter(f"pipeline window must be 1 to {MAX_WINDOW}, got {window}")
        self.queue = queue
        self.window = window
        self.on_done = on_done
        self._count = 0
        self._inflight: dict[tuple[str, int], PendingSend] = {}
        """(endpoint, request id) -> the send, oldest first."""
        self._retry: list[PendingSend] = []
        self._failed: list[PendingSend] = []
        self._watch = LinkWatch()
        """The connections with requests of this pipeline sent on them."""
        self._slots: dict[str, Bulkhead] = {}
        """Bulkhead slots held while this pipeline has requests in flight (one per host)."""
        self.retried = 0
        """Requests sent again after a retryable failure (a counter for tests and tools)."""

    # --- the API ---------------------------------------------------------------------
    def send(self, body: bytes | str, attributes: dict[str, AttributeValue] | None = None,
             delay: int | None = None) -> PendingSend:
        """Send one message; returns at once unless ``window`` sends are unanswered."""
        if isinstance(body, bytes) and not attributes and delay is None:
            wire: list[Any] = [body, None, None, None, None]
        else:
            wire = OutgoingMessage(body, attributes, delay).to_wire()
        pending = PendingSend(self._count, self.queue.next_partition(), wire)
        self._count += 1
        self._wait(block=False)  # replies that came meanwhile: settles them early
        while len(self._inflight) >= self.window:
            self._wait(block=True)
        if self._retry:
            self._settle()
        self._dispatch(pending)
        return pending

    def flush(self) -> list[PendingSend]:
        """Wait until every send is confirmed or has failed for good; returns
        the sends that failed since the last flush, in send order (empty when
        every one was confirmed)."""
        self._settle()
        self._release()
        failed, self._failed = sorted(self._failed, key=lambda p: p.index), []
        return failed

    def confirm_all(self) -> None:
        """:meth:`flush`, then raise the first failed send's error, if any
        (every send keeps its own ``id`` or ``error``)."""
        failed = self.flush()
        if failed:
            assert failed[0].error is not None
            raise failed[0].error

    def close(self) -> None:
        """Stop without waiting: replies still to come are discarded, and sends
        waiting for a retry are not sent again (their ``id`` and ``error``
        stay None: their fate is unknown)."""
        self._inflight.clear()
        self._retry.clear()
        self._release()

    def __enter__(self) -> SendPipeline:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None:
            self.close()
            return
        self.confirm_all()

    # --- requests in flight --------------------------------------------------------
    def _dispatch(self, pending: PendingSend) -> None:
        """Send to the partition's first host whose circuit is not open; with
        none (or a full send queue), to the retry path."""
        client = self.queue.client
        for endpoint in self.queue.routes.for_send(pending.partition):
            breaker, bulkhead = client.guards.for_endpoint(endpoint)
            try:
                breaker.before()
                if endpoint not in self._slots:
                    bulkhead.acquire()
                    self._slots[endpoint] = bulkhead
                conn = client.connection(endpoint)
                self._watch.add(conn)
                pending.request_id = pending.request_id or conn.next_request_id()
                conn.send(Command.SEND, self._body(pending), pending.request_id)
            except CircuitOpen:
                continue  # a host that failed just now: the next replica
            except RETRYABLE:
                break
            pending.sent_at = pending.sent_at or time.monotonic()
            self._inflight[(endpoint, pending.request_id)] = pending
            return
        self._retry.append(pending)  # the retry path refreshes the routes and backs off

    def _body(self, pending: PendingSend) -> dict[str, Any]:
        return {"q": self.queue.name, "p": pending.partition, "m": [pending.wire]}

    def _wait(self, block: bool) -> None:
        """Take every reply that has arrived, with ``block`` after waiting for
        one up to the oldest request's deadline; requests past their deadline
        then count as timed out."""
        if not self._inflight:
            return
        if self.queue.client.closed:  # its sockets are going: the replies cannot come
            self._watch.close_closing()
            raise ClientClosed(f"the client was closed with {len(self._inflight)} pipelined sends "
                               "unanswered; their outcome is unknown")
        oldest = next(iter(self._inflight.values()))
        deadline = oldest.sent_at + self.queue.client.request_timeout_ms / 1000
        timeout_ms = max(0, int((deadline - time.monotonic()) * 1000)) if block else 0
        readable, dropped = self._watch.poll(timeout_ms)
        for conn in readable:
            self._drain(conn)
        for conn in dropped:
            self._lost(conn)
        if self._inflight and time.monotonic() >= deadline:
            self._timed_out()

    def _drain(self, conn: Connection) -> None:
        for data in conn.recv_queued():
            self._take(conn, data)

    def _lost(self, conn: Connection) -> None:
        """The link to ``conn``'s host dropped since requests were sent on it
        (the host died or restarted): the replies that came first are taken,
        the others cannot come, so their sends go to the retry path now, not
        after the request timeout."""
        self._drain(conn)
        lost = [key for key in self._inflight if key[0] == conn.endpoint]
        if lost:
            self.queue.client.guards.for_endpoint(conn.endpoint)[0].failure()
        for key in lost:
            self._retry.append(self._inflight.pop(key))

    def _take(self, conn: Connection, data: bytes) -> None:
        frame = conn.reply_of(data)
        if frame is None:
            return
        endpoint = conn.endpoint
        pending = self._inflight.pop((endpoint, frame.request_id), None)
        if pending is None or frame.command != Command.SEND:
            return  # a late reply to a request given up on
        breaker, _ = self.queue.client.guards.for_endpoint(endpoint)
        breaker.success()  # the host answered, even with an error
        if not frame.is_error:
            self._finish(pending, frame.body["ids"][0], None)
            return
        err = from_wire(frame.body)
        if isinstance(err, RETRYABLE):
            self._retry.append(pending)
        else:
            self._finish(pending, None, err)

    def _timed_out(self) -> None:
        """The oldest request got no reply in time: it, and every other one
        past its deadline, go to the retry path (same request id)."""
        now = time.monotonic()
        limit = self.queue.client.request_timeout_ms / 1000
        for key, pending in list(self._inflight.items()):
            if now - pending.sent_at < limit:
                break
            del self._inflight[key]
            self.queue.client.guards.for_endpoint(key[0])[0].failure()
            self._retry.append(pending)

    def _settle(self) -> None:
        """Wait out every request in flight, then retry the failed ones one at
        a time, in send order, through the queue's retry path."""
        while self._inflight:
            self._wait(block=True)
        retry, self._retry = sorted(self._retry, key=lambda p: p.index), []
        if retry:
            self._forget_sockets()  # a retry may replace a connection (CURVE reconnects)
        for pending in retry:
            self.retried += 1
            p = pending.partition
            try:
                reply = self.queue.call(p, Command.SEND, {**self._body(pending), "rt": True},
                                        partial(self.queue.routes.for_send, p),
                                        request_id=pending.request_id or None)
            except ZmqueueError as exc:
                self._finish(pending, None, exc)
            else:
                self._finish(pending, reply["ids"][0], None)

    def _finish(self, pending: PendingSend, mid: str | None, error: ZmqueueError | None) -> None:
        pending.id, pending.error, pending.done_at = mid, error, time.monotonic()
        if error is not None:
            self._failed.append(pending)
        if self.on_done is not None:
            self.on_done(pending)

    def _forget_sockets(self) -> None:
        self._watch.clear()

    def _release(self) -> None:
        self._forget_sockets()
        for bulkhead in self._slots.values():
            bulkhead.release()
        self._slots.clear()
