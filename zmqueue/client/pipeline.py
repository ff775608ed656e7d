"""Pipelined sends: many single-message sends in flight from one thread.

``queue.pipeline(window=32)`` returns a :class:`SendPipeline`. Its
:meth:`~SendPipeline.send` takes one message and returns at once with a
:class:`PendingSend`; it waits only while ``window`` messages are already
unanswered. This is what NATS's ``publish_async`` or RabbitMQ's asynchronous
publisher confirms give: a producer that makes messages one at a time still
keeps the host busy, instead of waiting a round trip per message.

Coalescing (as the SQS SDK's buffered client batches ``SendMessage`` calls
into ``SendMessageBatch``): at most ``max_requests`` SEND requests are in
flight at once (default: one per partition of the queue, so a queue of one
partition gets Nagle's rule: one request in flight, the rest coalesced).
A message sent while fewer are goes out at once as its own request; a
message sent while ``max_requests`` are unanswered waits in the pipeline,
and when a reply frees a request, the waiting messages of a
partition go together as one SEND request (up to :data:`COALESCE_MESSAGES`
messages and :data:`COALESCE_BYTES` of bodies). Under light load every
message still travels alone and at once; under heavy load the host pays its
per-request cost once per group, not once per message. A waiting message
goes out on the pipeline's next call (``send``, ``flush``): replies are read
only then (by ``send`` at most every :data:`POLL_EVERY_S`, unless the window
is full). ``flush`` (and leaving a ``with`` block) sends the waiting messages
at once, beside the requests in flight (standard queues: nothing more will
join them, so holding them would only add a round trip). ``max_requests >=
window`` turns coalescing off (one request per message).

Semantics (the same promise as :meth:`Queue.send`, per message):

- a message is confirmed when its PendingSend has an ``id``; it then has the
  durability of a plain send (written per the queue's fsync policy, and on
  the sync replicas with synchronous replication). Every message of a
  coalesced request gets its own id, in send order;
- a request that fails in a way that may be retried (no reply within the
  request timeout, NotLeader, Unavailable, Throttled) is retried whole, with
  the same request id, once the requests in flight have settled, through the
  same retry path as ``Queue.send`` (so a replica that holds the first try's
  copy answers with the first ids); a message that still fails, or fails for
  good, gets its ``error``. A coalesced request refused for one of its
  messages (InvalidParameter, e.g. MessageTooLarge: a host checks the whole
  request before it stores any of it) is sent again one message per request,
  so only the bad message fails. A request refused for its partition (the
  queue's partitions changed: WrongPartition on FIFO; nothing was stored)
  goes again, first, to the partitions of the re-read config (at most
  MAX_REROUTES times). Nothing is dropped silently:
  :meth:`SendPipeline.flush` waits for every send and returns the ones that
  failed, and leaving a ``with`` block raises the first failure's error;
- FIFO queues: a pipeline keeps one request in flight (``max_requests=1``,
  the only value allowed), so a request is answered, or retried until it is,
  before the next one goes; the messages sent meanwhile wait, in order, and
  go together next. A message group's order is the order of ``send`` calls,
  as with ``send_batch``. Each ``send`` names its ``group_id`` (and may name
  a ``dedup_id``). A send that fails for good for a reason other than its
  own content (say Unavailable after the retries, or QueueNotFound) fails
  every message sent after it in the pipeline with the same error, unsent,
  until the next ``flush``: no later message of its group is stored ahead of
  it. A message refused for its content (InvalidParameter) fails alone (its
  group is resent one message per request, in order), and the others of its
  message group are stored around the gap it leaves.

Not thread safe: one pipeline per thread (it uses the thread's connections).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from zmqueue.client.breaker import Bulkhead, CircuitOpen
from zmqueue.client.models import AttributeValue, OutgoingMessage
from zmqueue.client.routing import FIFO_ORIGIN
from zmqueue.client.transport import Connection, LinkWatch
from zmqueue.errors import (
    ClientClosed,
    DiskFull,
    InvalidParameter,
    NotSent,
    ProtocolError,
    Throttled,
    Unavailable,
    ZmqueueError,
    from_wire,
)
from zmqueue.protocol import RETRY_MARK, Command, refused_plain_bodies, sent_ids

if TYPE_CHECKING:
    from zmqueue.client.queue import Queue

log = logging.getLogger(__name__)

MAX_WINDOW = 1000
DEFAULT_WINDOW = 32
COALESCE_MESSAGES = 1000
"""Messages in one coalesced request at most (a SEND's batch limit)."""
COALESCE_BYTES = 1024 * 1024
"""Bodies' bytes in one coalesced request at most (a larger message goes alone)."""
POLL_EVERY_S = 100e-6
"""``send`` looks for replies that came meanwhile at most this often. A look
(a poll of the pipeline's sockets) costs about as much as the rest of a send,
and no reply comes back sooner than ~150 us on loopback: a producer sending
back to back pays one look per ~20 sends, not one per send, and its waiting
messages go out in larger groups."""
MAX_REROUTES = 5
"""A request refused for its partition is sent to the re-read one at most this often."""
RETRYABLE = (Unavailable, Throttled)
"""Failures of one request that say nothing about its messages (Unavailable
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
    """``time.monotonic()`` when it was given to the pipeline (``send``)."""
    done_at: float = 0.0
    """``time.monotonic()`` when it was confirmed or failed for good."""
    request_id: int = 0
    """The id of the SEND request that carries it (shared by a coalesced group)."""
    plain: bool = False
    """A body alone (no attributes, delay, group or dedup id): it can go as a
    SEND's plain bodies (``b``)."""

    @property
    def done(self) -> bool:
        return self.id is not None or self.error is not None


@dataclass(eq=False)
class _Request:
    """One SEND request of the pipeline: one message, or several coalesced."""

    partition: int
    sends: list[PendingSend]
    request_id: int = 0
    sent_at: float = 0.0
    """``time.monotonic()`` when it was first sent (its deadline counts from it)."""
    as_bodies: bool = False
    """Last sent as plain bodies (``b``), not ``m`` lists."""
    rerouted: int = 0
    """How often its messages were sent to other partitions after a host
    refused their partition (:meth:`zmqueue.client.queue.Queue.misrouted`)."""


def _size(wire: list[Any]) -> int:
    body = wire[0]
    return len(body) if isinstance(body, (bytes, str)) else 0


class SendPipeline:
    """Up to ``window`` single-message sends unanswered, in at most
    ``max_requests`` requests; see the module doc.

    ``on_done`` is called (on this thread, from ``send`` or ``flush``) for
    each message as it is confirmed or fails for good. An exception it raises
    does not disturb the pipeline (as a subscription's handler's does not):
    it is logged and counted in :attr:`callback_errors`, and every message
    still settles and gets its own ``on_done`` call."""

    def __init__(self, queue: Queue, window: int = DEFAULT_WINDOW,
                 on_done: Callable[[PendingSend], None] | None = None,
                 max_requests: int | None = None) -> None:
        self.fifo = queue.config.fifo
        if max_requests is None:
            # one request in flight per partition (Nagle's rule per partition): a
            # second one to the same partition would carry the few messages made
            # during one round trip and cost the host a whole request (measured
            # against 4: docs/PERFORMANCE.md, "Pipelined sends, one request per
            # partition")
            max_requests = 1 if self.fifo else queue.config.partitions
        if self.fifo and max_requests != 1:
            raise InvalidParameter(
                f"{queue.name!r} is a FIFO queue: its pipeline keeps one request in flight "
                f"(max_requests=1, not {max_requests}), so that a retried request lands before "
                "the later sends of its message groups")
        if type(window) is not int or not 1 <= window <= MAX_WINDOW:
            raise InvalidParameter(f"pipeline window must be 1 to {MAX_WINDOW}, got {window}")
        if type(max_requests) is not int or not 1 <= max_requests <= MAX_WINDOW:
            raise InvalidParameter(f"pipeline max_requests must be 1 to {MAX_WINDOW}, got {max_requests!r}",
                                   field="max_requests")
        if on_done is not None and not callable(on_done):
            raise InvalidParameter(f"on_done must be a function of one PendingSend, got {on_done!r:.60}",
                                   field="on_done")
        self.queue = queue
        self.window = window
        self.max_requests = max_requests
        self.on_done = on_done
        self._count = 0
        self._waiting: dict[int, list[PendingSend]] = {}
        """partition -> messages not sent yet (all requests were in flight), oldest first."""
        self._n_waiting = 0
        self._inflight: dict[tuple[str, int], _Request] = {}
        """(endpoint, request id) -> the request, oldest first."""
        self._n_inflight = 0
        """Messages in those requests."""
        self._retry: list[_Request] = []
        self._failed: list[PendingSend] = []
        self._watch = LinkWatch()
        """The connections with requests of this pipeline sent on them."""
        self._slots: dict[str, Bulkhead] = {}
        """Bulkhead slots held while this pipeline has requests in flight (one per host)."""
        self.retried = 0
        """Requests sent again after a retryable failure (a counter for tests and tools)."""
        self.requests = 0
        """SEND requests sent (first tries), for tests and tools: fewer than the
        messages when sends were coalesced."""
        self.callback_errors = 0
        """Exceptions raised by ``on_done`` (each logged, none raised to the caller)."""
        self._polled = 0.0
        """``time.monotonic()`` of ``send``'s last look for replies."""
        self._broken: ZmqueueError | None = None
        """FIFO: the error of a send that failed for good; the later sends fail
        with it, unsent, until the next flush."""
        self._closed = False

    # --- the API ---------------------------------------------------------------------
    def send(self, body: bytes | str, attributes: dict[str, AttributeValue] | None = None,
             delay: int | None = None, group_id: str | None = None,
             dedup_id: str | None = None) -> PendingSend:
        """Send one message; returns at once unless ``window`` sends are
        unanswered. ``group_id`` (required) and ``dedup_id``: FIFO queues."""
        self._check_open()
        if self.queue.client.closed and not self._inflight:  # (else _wait says what became of those)
            raise ClientClosed("this zmqueue client is closed; connect again with zmqueue.connect()")
        if self.fifo and not group_id:
            raise InvalidParameter(f"{self.queue.name!r} is a FIFO queue: each send needs a group_id",
                                   field="group_id")
        if not self._inflight:  # (a re-read while SENDs are in flight would read past their replies)
            self.queue.follow_config()
        if (isinstance(body, bytes) and not attributes and delay is None and group_id is None
                and dedup_id is None):
            wire: list[Any] = [body, None, None, None, None]
            partition, plain = self.queue.next_partition(), True
        else:
            msg = OutgoingMessage(body, attributes, delay, group_id, dedup_id)
            wire, partition, plain = msg.to_wire(), self.queue.partition_for(msg), False
        now = time.monotonic()
        pending = PendingSend(self._count, partition, wire, sent_at=now, plain=plain)
        self._count += 1
        if now - self._polled >= POLL_EVERY_S:  # replies that came meanwhile: settle them early
            self._polled = now
            self._wait(block=False)
        while self._n_inflight + self._n_waiting >= self.window:
            if self._retry:
                self._settle()
            else:
                self._wait(block=True)
        if self._retry:
            self._settle()
        if self._broken is not None:  # (FIFO) an earlier send failed for good
            self._finish([pending], None, self._broken)
            return pending
        self._waiting.setdefault(pending.partition, []).append(pending)
        self._n_waiting += 1
        self._pump()
        return pending

    def flush(self) -> list[PendingSend]:
        """Wait until every send is confirmed or has failed for good; returns
        the sends that failed since the last flush, in send order (empty when
        every one was confirmed)."""
        self._check_open()
        if not self.fifo:
            # nothing more will join the waiting messages: they go now, beside the
            # requests in flight, not one round trip after them
            self._pump(flushing=True)
        self._settle()
        self._release()
        self._broken = None
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
        """Stop without waiting: replies still to come are discarded (those
        sends keep ``id`` and ``error`` None: whether they were stored is
        unknown), and sends not sent yet fail with :class:`NotSent` (they were
        not stored). Sends waiting for a retry keep ``id`` and ``error`` None
        too (an earlier try may have been stored). ``on_done`` is not called.
        Calls after it raise :class:`ClientClosed`; closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        unsent = [m for msgs in self._waiting.values() for m in msgs]
        unsent += [m for req in self._retry if not req.request_id for m in req.sends]
        if unsent:
            err = NotSent(f"not sent: the pipeline was closed before {len(unsent)} of its sends went "
                          "out; they were not stored, send them again")
            now = time.monotonic()
            for m in unsent:
                m.error, m.done_at = err, now
        self._inflight.clear()
        self._n_inflight = 0
        self._waiting.clear()
        self._n_waiting = 0
        self._retry.clear()
        self._release()

    def __enter__(self) -> SendPipeline:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None or self._closed:
            self.close()
            return
        self.confirm_all()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("this send pipeline was closed; open another with queue.pipeline()")

    # --- requests in flight --------------------------------------------------------
    def _pump(self, flushing: bool = False) -> None:
        """Send waiting messages while fewer than ``max_requests`` requests
        are in flight (``flushing``: however many are): each partition's,
        oldest first, as one request. Not while a request waits for its retry
        (it goes first: a FIFO group's order, and a refreshed route for the rest)."""
        while self._waiting and not self._retry and (flushing or len(self._inflight) < self.max_requests):
            p, msgs = next(iter(self._waiting.items()))
            n, size = 0, 0
            for m in msgs:
                size += _size(m.wire)
                if n and (n == COALESCE_MESSAGES or size > COALESCE_BYTES):
                    break
                n += 1
            group, rest = msgs[:n], msgs[n:]
            if rest:
                self._waiting[p] = rest
            else:
                del self._waiting[p]
            self._n_waiting -= n
            self.requests += 1
            self._dispatch(_Request(p, group))

    def _dispatch(self, req: _Request) -> None:
        """Send to the partition's first host whose circuit is not open; with
        none (or a full send queue), to the retry path."""
        client = self.queue.client
        for endpoint in self.queue.routes.for_send(req.partition):
            breaker, bulkhead = client.guards.for_endpoint(endpoint)
            try:
                breaker.before()
                if endpoint not in self._slots:
                    bulkhead.acquire()
                    self._slots[endpoint] = bulkhead
                conn = client.connection(endpoint)
                self._watch.add(conn)
                if not req.request_id:
                    req.request_id = conn.next_request_id()
                    for m in req.sends:
                        m.request_id = req.request_id
                conn.send(Command.SEND, self._body(req), req.request_id)
            except CircuitOpen:
                continue  # a host that failed just now: the next replica
            except RETRYABLE:
                break
            except ZmqueueError as exc:  # not sent: the request could not be encoded, say
                self._refused(req, exc, unsent=True)
                return
            req.sent_at = req.sent_at or time.monotonic()
            self._inflight[(endpoint, req.request_id)] = req
            self._n_inflight += len(req.sends)
            return
        self._retry.append(req)  # the retry path refreshes the routes and backs off

    def _body(self, req: _Request) -> dict[str, Any]:
        req.as_bodies = (not self.fifo and self.queue.client.plain_sends
                         and all(m.plain for m in req.sends))
        if req.as_bodies:
            return {"q": self.queue.name, "p": req.partition, "b": [m.wire[0] for m in req.sends]}
        return {"q": self.queue.name, "p": req.partition, "m": [m.wire for m in req.sends]}

    def _pop(self, key: tuple[str, int]) -> _Request | None:
        req = self._inflight.pop(key, None)
        if req is not None:
            self._n_inflight -= len(req.sends)
        return req

    def _wait(self, block: bool) -> None:
        """Take every reply that has arrived, with ``block`` after waiting for
        one up to the oldest request's deadline; requests past their deadline
        then count as timed out. Then sends what waited for a free request."""
        if not self._inflight:
            self._pump()
            return
        if self.queue.client.closed:  # its sockets are going: the replies cannot come
            self._watch.close_closing()
            raise ClientClosed(f"the client was closed with {self._n_inflight} pipelined sends "
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
        self._pump()

    def _drain(self, conn: Connection) -> None:
        for data in conn.recv_queued():
            self._take(conn, data)

    def _lost(self, conn: Connection) -> None:
        """The link to ``conn``'s host dropped since requests were sent on it
        (the host died or restarted): the replies that came first are taken,
        the others cannot come, so their requests go to the retry path now,
        not after the request timeout."""
        self._drain(conn)
        lost = [key for key in self._inflight if key[0] == conn.endpoint]
        if lost:
            self.queue.client.guards.for_endpoint(conn.endpoint)[0].failure()
        for key in lost:
            req = self._pop(key)
            assert req is not None
            self._retry.append(req)

    def _take(self, conn: Connection, data: bytes) -> None:
        frame = conn.reply_of(data)
        if frame is None:
            return
        endpoint = conn.endpoint
        key = (endpoint, frame.request_id)
        if key not in self._inflight or frame.command != Command.SEND:
            return  # a late reply to a request given up on
        req = self._pop(key)
        assert req is not None
        breaker, _ = self.queue.client.guards.for_endpoint(endpoint)
        breaker.success()  # the host answered, even with an error
        if not frame.is_error:
            self._confirm(req, frame.body)
            return
        err = from_wire(frame.body)
        if isinstance(err, RETRYABLE) or (isinstance(err, DiskFull) and not self.fifo):
            self._retry.append(req)  # (DiskFull: the retry tries the partition's other hosts)
        else:
            self._refused(req, err)

    def _confirm(self, req: _Request, reply: Any) -> None:
        ids = sent_ids(reply)
        if ids is None or len(ids) != len(req.sends):
            bad = ProtocolError(f"a SEND of {len(req.sends)} messages was answered with "
                                f"{'no' if ids is None else len(ids)} ids")
            self._finish(req.sends, None, bad)
            return
        self._finish(req.sends, ids, None)

    def _refused(self, req: _Request, err: ZmqueueError, unsent: bool = False) -> None:
        """A request refused for good (``unsent``: it could not even be sent).
        A coalesced one refused for a message (nothing of it was stored) is
        sent again one message per request, so that only the bad message fails
        (first in the retry list: it is the oldest there when the retries are
        under way). Plain bodies refused by a host from before them go again,
        as a new request, in ``m`` lists."""
        if req.as_bodies and refused_plain_bodies(err):
            self.queue.client.plain_sends = False
            self._retry.append(_Request(req.partition, req.sends))  # (nothing of it was stored)
            return
        if req.rerouted < MAX_REROUTES and self.queue.misrouted(err):
            # the queue's partitions changed: nothing was stored, each message goes
            # (first, in send order) to its group's partition by the config re-read
            by_part: dict[int, list[PendingSend]] = {}
            for m in req.sends:
                m.partition = self.queue.partition_of(m.wire[3])
                by_part.setdefault(m.partition, []).append(m)
            self._retry[:0] = [_Request(p, sends, rerouted=req.rerouted + 1) for p, sends in by_part.items()]
            return
        if len(req.sends) > 1 and (unsent or isinstance(err, InvalidParameter)):
            self._retry[:0] = [_Request(req.partition, [m]) for m in req.sends]
            return
        self._finish(req.sends, None, err)

    def _timed_out(self) -> None:
        """The oldest request got no reply in time: it, and every other one
        past its deadline, go to the retry path (same request id)."""
        now = time.monotonic()
        limit = self.queue.client.request_timeout_ms / 1000
        for key, req in list(self._inflight.items()):
            if now - req.sent_at < limit:
                break
            self._pop(key)
            self.queue.client.guards.for_endpoint(key[0])[0].failure()
            self._retry.append(req)

    def _settle(self) -> None:
        """Send what waits and wait out every request in flight, then retry
        the failed ones one request at a time, in send order, through the
        queue's retry path; until nothing is left."""
        while True:
            while self._inflight or (self._waiting and not self._retry):
                self._wait(block=True)
            if not self._retry:
                return
            self._retry_all()

    def _retry_all(self) -> None:
        """Each request of the retry path in turn, in send order."""
        retry = self._retry
        retry.sort(key=lambda r: r.sends[0].index)
        self._forget_sockets()  # a retry may replace a connection (CURVE reconnects)
        while retry:
            req = retry.pop(0)
            if self._broken is not None:  # (FIFO) an earlier send failed for good: not sent
                self._finish(req.sends, None, self._broken)
                continue
            if req.request_id:  # (not a message sent alone after its group was refused)
                self.retried += 1
            p = req.partition
            try:
                body = self._body(req)
                if req.request_id:
                    body[RETRY_MARK] = True  # (a retry: see Queue.call)
                reply = self.queue.call(p, Command.SEND, body, partial(self.queue.routes.for_send, p),
                                        FIFO_ORIGIN if self.fifo else None,
                                        request_id=req.request_id or None)
            except ZmqueueError as exc:
                self._refused(req, exc)
            else:
                self._confirm(req, reply)

    def _finish(self, sends: list[PendingSend], ids: list[str] | None,
                error: ZmqueueError | None) -> None:
        """Settle ``sends`` (with ``ids``, in order, or ``error``), then call
        ``on_done`` for each (see :meth:`_done`)."""
        now = time.monotonic()
        done = list(sends)
        if (self.fifo and error is not None and self._broken is None
                and not isinstance(error, InvalidParameter)):
            self._broken = error  # the later sends must not be stored ahead of it
            done += sorted((m for msgs in self._waiting.values() for m in msgs), key=lambda m: m.index)
            self._waiting.clear()
            self._n_waiting = 0
        for i, m in enumerate(done):
            m.id, m.error, m.done_at = (ids[i] if ids is not None and i < len(sends) else None), error, now
            if error is not None:
                self._failed.append(m)
        if self.on_done is not None:
            for m in done:
                self._done(self.on_done, m)

    def _done(self, on_done: Callable[[PendingSend], None], m: PendingSend) -> None:
        """``on_done(m)``; an exception it raises is the application's: logged
        and counted, never raised here (the pipeline's state, the replies read
        with this one and the other messages' callbacks must not depend on it)."""
        try:
            on_done(m)
        except Exception:
            self.callback_errors += 1
            log.exception("send pipeline to %r: on_done raised on send %d (id %s); the pipeline "
                          "goes on", self.queue.name, m.index, m.id)

    def _forget_sockets(self) -> None:
        self._watch.clear()

    def _release(self) -> None:
        self._forget_sockets()
        for bulkhead in self._slots.values():
            bulkhead.release()
        self._slots.clear()
