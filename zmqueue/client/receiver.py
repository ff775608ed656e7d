"""Pipelined receives: the next RECEIVE answered while the caller handles this batch.

``queue.receive_pipeline(max_messages=100)`` returns a :class:`ReceivePipeline`.
Its :meth:`~ReceivePipeline.receive` returns a batch as :meth:`Queue.receive`
does, but keeps ``in_flight`` (default 2) RECEIVE requests in flight: while
the caller handles one batch, the host is already taking the next one from
its store and the reply is on its way. A consumer loop that waits one round
trip per batch (receive, handle, delete, receive ...) leaves the host idle
while it handles a batch, and itself idle while the host works; with a
request ahead both work at once. This is the prefetch of RabbitMQ's
``basic.qos`` or of NATS's pull consumers with several pulls outstanding,
for the request/reply receive.

:meth:`~ReceivePipeline.delete` takes the handled messages; their deletes
ride on the next RECEIVE sent to the host that writes their stream (as
:meth:`Queue.delete_and_receive`'s do), so a steady loop sends one request
per batch. Deletes of other streams go at once as DELETE requests.

Semantics:

- a received message's visibility timeout starts when the host answers,
  which may be up to ``in_flight - 1`` batches before the caller gets it: a
  handler slow enough to matter should extend it (or use ``in_flight=1``);
- requests go ahead only while there is a backlog: after an answer with a
  full batch (``max_messages``), to the (partition, host) it came from,
  without waiting (``wait_ms`` 0). Once an answer is short (the backlog
  there is gone: a request ahead would likely come back empty, a host's
  work for nothing) or a request fails, nothing more is sent ahead: the
  next batch is taken the way :meth:`Queue.delete_and_receive` takes it (a
  sweep of every serving host, then a long poll up to ``wait_time``, the
  pending deletes riding on it), and requests go ahead again after a full
  batch. So a consumer that keeps up, or idles, makes the requests a plain
  one makes, and routing, failover and retries are the plain receive's;
- a delete's outcome is known once the request that carried it is answered
  (``on_deleted`` hears it); a delete whose request got no answer (a host
  died) or failed goes again with the next one (deleting a message already
  deleted succeeds), and :meth:`~ReceivePipeline.receive` raises what the
  plain receive raises. A delete refused (a stale receipt: the message's
  visibility timeout ran out and it went to another consumer), or failed
  for good when the pipeline closed, is added to
  :attr:`ReceivePipeline.failed_deletes` with its error. Such a message may
  be delivered again (at-least-once), never lost. An exception raised by
  ``on_deleted`` does not disturb the pipeline (as a subscription's
  handler's does not): it is logged and counted in
  :attr:`ReceivePipeline.callback_errors`, never raised by ``receive`` or
  ``close``;
- :meth:`~ReceivePipeline.close` (or leaving a ``with`` block) waits for the
  requests in flight, gives back the messages received but not yet
  returned (visible again at once, their receive counts as before: nobody
  saw them, so they do not near ``max_receive_count``), and sends the
  deletes still pending;
- FIFO queues: a message group's next messages are not handed out while its
  earlier ones are in flight, so a request ahead finds only other groups'
  messages; with one busy group it comes back empty (and the next batch
  falls back to the plain receive). Receiving ahead pays off with several
  groups.

Not thread safe: one pipeline per thread. It has its own connections to the
hosts (so requests of the thread's other calls do not read its replies).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zmqueue.client.breaker import CircuitBreaker
from zmqueue.client.models import Message
from zmqueue.client.receipts import Carry, Deletable, deletables, outcomes, stream_groups
from zmqueue.client.receiving import check_receive, give_back, targets_now
from zmqueue.client.routing import FIFO_ORIGIN
from zmqueue.client.transport import Connection, LinkWatch
from zmqueue.errors import (
    ClientClosed,
    ConnectionLost,
    InvalidParameter,
    InvalidReceipt,
    NotLeader,
    RequestTimeout,
    ZmqueueError,
    from_wire,
)
from zmqueue.protocol import MAX_BATCH, Command

if TYPE_CHECKING:
    from zmqueue.client.queue import Queue

log = logging.getLogger(__name__)

OnDeleted = Callable[[list[Deletable], list[ZmqueueError | None]], None]
"""Called with deletes whose outcome is known, one outcome each (None =
deleted, else the error: refused, or unknown as its request got no answer)."""
MAX_IN_FLIGHT = 8
DEFAULT_IN_FLIGHT = 2
"""One request ahead of the one being answered: enough to keep the host
busy while the caller handles a batch (more only adds invisible messages)."""
CLOSE_WAIT_S = 5.0
"""How long :meth:`ReceivePipeline.close` waits for the requests in flight."""


@dataclass(eq=False)
class _Ask:
    """One RECEIVE in flight, and the deletes it carries."""

    conn: Connection
    request_id: int
    partition: int
    sent_at: float
    carried: list[Deletable]
    """The deletes riding on it (empty: none)."""
    msgs: list[Message] = field(default_factory=list)
    done: bool = False


class ReceivePipeline:
    def __init__(self, queue: Queue, max_messages: int = 10, wait_time: float = 1.0,
                 visibility_timeout: int | None = None, in_flight: int = DEFAULT_IN_FLIGHT,
                 on_deleted: OnDeleted | None = None) -> None:
        check_receive(max_messages, wait_time)
        if type(in_flight) is not int or not 1 <= in_flight <= MAX_IN_FLIGHT:
            raise InvalidParameter(f"in_flight must be 1 to {MAX_IN_FLIGHT}", field="in_flight")
        if on_deleted is not None and not callable(on_deleted):
            raise InvalidParameter("on_deleted must be a function of (items, errors), "
                                   f"got {on_deleted!r:.60}", field="on_deleted")
        self.queue = queue
        self.max_messages = max_messages
        self.wait_time = wait_time
        self.visibility_timeout = visibility_timeout
        self.in_flight = in_flight
        self.on_deleted = on_deleted
        self.failed_deletes: list[tuple[Deletable, ZmqueueError]] = []
        """Deletes refused (stale receipts), or failed when the pipeline
        closed, each with its error: those messages may come again."""
        self.requests = 0
        """RECEIVE requests sent ahead."""
        self.fallbacks = 0
        """Batches taken the plain way (:meth:`Queue.delete_and_receive`)."""
        self.callback_errors = 0
        """Exceptions raised by ``on_deleted`` (each logged, none raised to the caller)."""
        self._asks: deque[_Ask] = deque()
        self._acks: list[Deletable] = []
        self._waited: list[Deletable] = []
        """Deletes that did not ride on the last request (another stream's)."""
        self._ahead = False
        self._conns: dict[str, Connection] = {}
        self._watch = LinkWatch()
        self._closed = False
        self._body: dict[str, Any] = {"q": queue.name, "max": max_messages, "cols": True, "wait_ms": 0}
        if visibility_timeout is not None:
            self._body["vis_s"] = visibility_timeout

    # --- the caller's side -------------------------------------------------------
    def receive(self) -> list[Message]:
        """The next batch (up to ``max_messages``); empty after ``wait_time``
        without a message."""
        self._check_open()
        while True:
            self._top_up()
            if not self._asks:
                return self._fallback()
            msgs = self._next()
            if msgs:
                return msgs

    def delete(self, receipts: Iterable[Deletable]) -> None:
        """Delete these handled messages (receipts or the Messages): with the
        next request (see :attr:`failed_deletes` for the outcome)."""
        self._check_open()
        self._acks.extend(deletables(receipts, "ReceivePipeline.delete"))

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("this receive pipeline was closed; open another with "
                               "queue.receive_pipeline(), or delete with queue.delete_batch()")
        if self.queue.client.closed:
            raise ClientClosed("this zmqueue client is closed; connect again with zmqueue.connect()")

    def raise_failed(self) -> None:
        """Raise the error of the first delete in :attr:`failed_deletes`, if
        any (for a caller that treats a refused delete as fatal)."""
        if self.failed_deletes:
            raise self.failed_deletes[0][1]

    def close(self) -> None:
        """Wait for the requests in flight (at most ``CLOSE_WAIT_S``), make the
        messages they brought visible again, send the pending deletes, and
        close the pipeline's connections."""
        if self._closed:
            return
        self._closed = True
        self._ahead = False
        try:
            if not self.queue.client.closed:
                self._settle()
            else:
                self._abandon()
        finally:
            self._watch.clear()
            for conn in self._conns.values():
                self.queue.client.forget_connection(conn)
            self._conns.clear()

    def __enter__(self) -> ReceivePipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- requests ahead ----------------------------------------------------------
    def _top_up(self) -> None:
        """While the last answer was a full batch: send until ``in_flight`` are
        in flight, to where it came from (but see
        :func:`~zmqueue.client.receiving.receive_targets`: now and then
        elsewhere)."""
        while self._ahead and len(self._asks) < self.in_flight:
            p, endpoint = targets_now(self.queue)[0]
            if self.queue.client.guards.for_endpoint(endpoint)[0].state != CircuitBreaker.CLOSED:
                self._ahead = False  # a host that failed lately: the plain receive probes it
                return
            self._send(p, endpoint)

    def _conn(self, endpoint: str) -> Connection:
        conn = self._conns.get(endpoint)
        if conn is None:
            conn = self._conns[endpoint] = self.queue.client.dedicated_connection(endpoint)
            self._watch.add(conn)
        return conn

    def _send(self, p: int, endpoint: str) -> None:
        body = {**self._body, "p": p}
        carry, carried = self._carry(p, endpoint)
        if carry is not None:
            carry.put(body)
        conn = self._conn(endpoint)
        rid = conn.next_request_id()
        try:
            conn.send(Command.RECEIVE, body, rid)
        except ZmqueueError:  # a full send queue, a refused link: the plain receive's retries
            self._acks[:0] = carried
            self._ahead = False
            return
        self.requests += 1
        self._asks.append(_Ask(conn, rid, p, time.monotonic(), carried))

    def _carry(self, p: int, endpoint: str) -> tuple[Carry | None, list[Deletable]]:
        """The pending deletes of the stream that ``endpoint`` writes for
        partition ``p`` (the largest such group), to ride on the request.
        The others wait for the next request (which may go to their stream's
        writer: now and then a request goes elsewhere); those that waited once
        already go now, as DELETE requests."""
        if not self._acks and not self._waited:
            return None, []
        old = len(self._waited)  # acks[:old] waited once already
        acks = self._waited + self._acks
        self._acks, self._waited = [], []
        if len(acks) > MAX_BATCH:
            self._delete_now(acks[MAX_BATCH:])
            acks = acks[:MAX_BATCH]
        try:
            groups = stream_groups(self.queue, acks)
        except ZmqueueError:  # a malformed receipt, or another queue's: refused alone
            acks, old = self._checked(acks, old)
            groups = stream_groups(self.queue, acks) if acks else {}
        carry: Carry | None = None
        carried: list[Deletable] = []
        for (gp, origin), group in sorted(groups.items(), key=lambda g: -len(g[1].idxs)):
            if carry is None and gp == p and self.queue.routes.for_stream(gp, origin)[:1] == [endpoint]:
                carry = group.carry(gp, origin)
                carried = group.items
                continue
            self._delete_now([acks[i] for i in group.idxs if i < old])
            self._waited += [acks[i] for i in group.idxs if i >= old]
        return carry, carried

    def _checked(self, acks: list[Deletable], old: int) -> tuple[list[Deletable], int]:
        """``acks`` without the items refused before any request (their error
        reported), and how many of those left had waited once."""
        good: list[Deletable] = []
        good_old = 0
        for i, item in enumerate(acks):
            try:
                self.queue.by_stream([item])
            except ZmqueueError as exc:
                self._outcome([item], [exc])
                continue
            good.append(item)
            good_old += i < old
        return good, good_old

    def _delete_now(self, items: list[Deletable]) -> None:
        """DELETE requests now (outcomes reported; a request that fails
        reports its error for each of its items)."""
        for i in range(0, len(items), MAX_BATCH):
            chunk = items[i:i + MAX_BATCH]
            try:
                errors = self.queue.delete_batch(chunk)
            except ZmqueueError as exc:
                errors = [exc] * len(chunk)
            self._outcome(chunk, errors)

    def _outcome(self, items: list[Deletable], errors: list[ZmqueueError | None]) -> None:
        if not items:
            return
        self.failed_deletes.extend((m, e) for m, e in zip(items, errors, strict=True) if e is not None)
        if self.on_deleted is None:
            return
        try:
            self.on_deleted(items, errors)
        except Exception:  # the application's: the answers, deletes and close go on regardless
            self.callback_errors += 1
            log.exception("receive pipeline of %r: on_deleted raised on %d deletes; the pipeline goes on",
                          self.queue.name, len(items))

    # --- answers -----------------------------------------------------------------
    def _next(self) -> list[Message]:
        """Wait for the oldest request's answer (or its end: a timeout, a
        dropped link) and return its messages."""
        ask = self._asks[0]
        deadline = ask.sent_at + self.queue.client.request_timeout_ms / 1000
        while not ask.done:
            timeout_ms = max(0, int((deadline - time.monotonic()) * 1000))
            readable, dropped = self._watch.poll(timeout_ms)
            for conn in readable + dropped:
                for data in conn.recv_queued():
                    self._take(conn, data)
            for conn in dropped:  # the answers that came first are taken; the others cannot come
                self._unanswered([a for a in self._asks if a.conn is conn and not a.done],
                                 conn.lost("RECEIVE"))
            if not ask.done and time.monotonic() >= deadline:
                self._unanswered([ask], RequestTimeout(
                    f"RECEIVE to {ask.conn.endpoint} got no reply within "
                    f"{self.queue.client.request_timeout_ms} ms", endpoint=ask.conn.endpoint))
        self._asks.popleft()
        return ask.msgs

    def _take(self, conn: Connection, data: bytes) -> None:
        frame = conn.reply_of(data)
        if frame is None or frame.command != Command.RECEIVE:
            return
        ask = next((a for a in self._asks if a.conn is conn and a.request_id == frame.request_id
                    and not a.done), None)
        if ask is None:  # the answer to a request given up on: its messages come back later
            return
        ask.done = True
        if frame.is_error:
            # the plain receive follows the routes, retries and raises what is not passing
            err = from_wire(frame.body)
            if isinstance(err, NotLeader):
                self.queue._follow(ask.partition, FIFO_ORIGIN if self.queue.config.fifo else None, err)
            self._acks[:0] = ask.carried  # not applied: they go again
            self._ahead = False
            return
        body = frame.body
        ask.msgs = self.queue.messages_of(ask.partition, body)
        if ask.msgs:
            self.queue._lucky = (ask.partition, ask.conn.endpoint)
        if len(ask.msgs) < self.max_messages:
            # not a full batch: the backlog here is gone, a request ahead would
            # likely come back empty (a host's cost for nothing); the plain
            # receive sweeps and waits
            self._ahead = False
        if ask.carried:
            results = body.get("dr") if isinstance(body, dict) else None
            if results is None:  # not taken with the receive (a host that no longer writes it)
                self._acks[:0] = ask.carried
            else:
                n = len(ask.carried)
                errors: list[ZmqueueError | None] = [None] * n
                outcomes(list(range(n)), results, errors)
                self._outcome(ask.carried, errors)

    def _unanswered(self, asks: list[_Ask], err: ZmqueueError) -> None:
        """Requests that cannot be answered now: their deletes go again (a
        message already deleted deletes again without error); their messages,
        if the host took any, come back after their visibility timeout."""
        for ask in asks:
            ask.done = True
            self._acks[:0] = ask.carried
        if asks:
            self._ahead = False
            if isinstance(err, ConnectionLost | RequestTimeout):
                self.queue.client.guards.for_endpoint(asks[0].conn.endpoint)[0].failure()
            self.queue.refresh()

    def _fallback(self) -> list[Message]:
        """A batch the plain way, carrying the pending deletes; requests go
        ahead again if it was full."""
        pending = self._waited + self._acks
        acks, self._acks, self._waited = pending[:MAX_BATCH], pending[MAX_BATCH:], []
        self.fallbacks += 1
        try:
            errors, msgs = self._delete_and_receive(acks)
        except ZmqueueError:
            self._acks[:0] = acks  # outcome unknown: they go again next time
            raise
        self._ahead = len(msgs) == self.max_messages and self.queue._lucky is not None
        self._outcome(acks, errors)
        return msgs

    def _delete_and_receive(self, acks: list[Deletable]
                            ) -> tuple[list[ZmqueueError | None], list[Message]]:
        """``Queue.delete_and_receive``; if it refuses the receipts before
        sending anything (a malformed one, another queue's), again without the
        refused ones (reported; ``acks`` keeps the rest)."""
        try:
            return self.queue.delete_and_receive(acks, self.max_messages, self.wait_time,
                                                 self.visibility_timeout)
        except (InvalidReceipt, InvalidParameter):
            good, _ = self._checked(acks, 0)
            if len(good) == len(acks):
                raise  # not the receipts (a host's refusal): the caller's
            acks[:] = good
        return self.queue.delete_and_receive(acks, self.max_messages, self.wait_time,
                                             self.visibility_timeout)

    def _abandon(self) -> None:
        """``close`` of a pipeline whose client was closed: the pending deletes,
        and those riding on requests still unanswered, are reported failed."""
        pending = [d for ask in self._asks if not ask.done for d in ask.carried]
        pending += self._waited + self._acks
        self._asks.clear()
        self._acks, self._waited = [], []
        if pending:
            err = ClientClosed("the client was closed before these deletes were sent or answered; "
                               "the messages come back after their visibility timeout")
            self._outcome(pending, [err] * len(pending))

    def _settle(self) -> None:
        """``close``: the answers still to come, their messages made visible
        again, the pending deletes sent."""
        deadline = time.monotonic() + CLOSE_WAIT_S
        unreturned: list[Message] = []
        while self._asks and time.monotonic() < deadline:
            unreturned.extend(self._next())
        self._asks.clear()
        # given back: visible now, their receive counts as before (nobody saw
        # them, so they do not near max_receive_count); best effort: what is
        # not given back now comes back after its visibility timeout
        give_back(self.queue, unreturned)
        pending, self._acks, self._waited = self._waited + self._acks, [], []
        if pending:
            self._delete_now(pending)
