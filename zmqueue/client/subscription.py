"""Push consumption: one DEALER per serving host of each partition, a thread
that feeds the handler, and credits returned as messages are finished.

The thread hands the handler every message pushed so far, then returns the
credits of that batch to each host in one ``CREDIT``, which also carries the
deletes (``auto_delete``) of the handled messages of one stream: one round
trip per batch of up to ``prefetch`` messages per host, not per message.

On a FIFO queue, once the handler raises on a message, the later messages of
its group in the same batch are held back: neither handed to the handler nor
deleted. A host pushes a group's in-flight messages in one batch (the group
is shut while one is in flight), so they share the failed message's
visibility deadline and come back with it, behind it, in order.

A subscription follows the queue's routes: every keepalive round it re-reads
them, subscribes to each host that has come to serve a partition (a new FIFO
writer after a failover, a host that took over a dead host's stream) and
drops the hosts that no longer do. A host whose keepalive or credit fails
(dead, or restarted and so without the subscription) is dropped at once, and
the routes are then re-read every ``RESYNC_S`` until every partition is
served again. A host whose connection drops (its process died or restarted)
is dropped as soon as the connection's monitor says so. A subscription to a
queue that was deleted stops by itself.

However its thread ends (``close()``, a stop by itself: the queue deleted, a
handler wrapper's ``Unhandled(stop=True)``, its ``stop_if``; an unexpected
error), it takes its subscription back from every host (``UNSUBSCRIBE``,
best-effort) and closes its connections. A host keeps a subscription it is
not told about for 30 s and pushes to it again each time a message's
visibility timeout runs out, every push counting as a receive: the message
in hand of a subscription that stopped without this went to the dead-letter
queue without being handled again. After ``UNSUBSCRIBE`` the messages pushed
and not yet handed to the handler are given back (visible at once, their
receive counts as before: nobody saw them, so they do not near
``max_receive_count``); the one the handler failed on (and a FIFO group's
held back behind it) stays in flight on its host and comes back once, after
its visibility timeout. A stopping subscription returns no credits (only the
deletes of the messages it handled), so nothing more is pushed to it.
``close()`` unsubscribes first, then waits for the handler in progress.
Subscriptions still open when the interpreter exits are closed then, as by
``close()`` (their daemon threads would otherwise just vanish)."""

from __future__ import annotations

import atexit
import contextlib
import inspect
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import zmq

from zmqueue.client.models import Message
from zmqueue.client.receipts import stream_groups
from zmqueue.client.receiving import give_back
from zmqueue.client.transport import Connection, LinkWatch
from zmqueue.errors import (
    ClientClosed,
    ConnectionLost,
    InvalidParameter,
    NotLeader,
    ProtocolError,
    QueueNotFound,
    RequestTimeout,
    Throttled,
    Unavailable,
    ZmqueueError,
    from_wire,
)
from zmqueue.protocol import Command, Frame

if TYPE_CHECKING:
    from zmqueue.client.queue import Queue

log = logging.getLogger(__name__)
PUMP_MS = 100
KEEPALIVE_S = 5.0
"""Each host gets a keepalive (``CREDIT`` n=0) this often, and the routes are
re-read as often (a host drops a subscription silent for 30 s)."""
RESYNC_S = 1.0
"""While a partition lacks a subscribed host, or a subscribe failed, the
routes are re-read and the missing subscriptions retried this often."""
CONTROL_TIMEOUT_MS = 2000
"""Timeout of a keepalive, (un)subscribe during a resync: short, since the
one subscription thread waits for it."""
CLOSE_WAIT_S = 5.0
"""``close()`` waits this long for a handler in progress (its message can
still be finished and deleted)."""
SubKey = tuple[int, str]
_OPEN: set[Subscription] = set()
"""The subscriptions started and not yet unsubscribed (closed at exit)."""
_OPEN_LOCK = threading.Lock()


def is_async(handler: Callable[..., Any]) -> bool:
    """Whether calling ``handler`` makes a coroutine: an ``async def``
    function, a partial of one, or an object whose ``__call__`` is one."""
    call = inspect.getattr_static(type(handler), "__call__", None)  # (its class's, inherited too)
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


class Unhandled(Exception):
    """Raised by a handler wrapper (:mod:`zmqueue.aio`'s) for a message its
    handler did not handle to the end through no fault of the message: its
    handling was cancelled (counted failed: a FIFO group waits behind it), or
    it could not be handed over at all (``stop``: the subscription stops, not
    counted). Logged as a warning, without a traceback; the message comes back
    after its visibility timeout."""

    def __init__(self, why: str, stop: bool = False) -> None:
        super().__init__(why)
        self.stop = stop


class Subscription:
    def __init__(self, queue: Queue, handler: Callable[[Message], None], prefetch: int,
                 visibility_timeout: int | None, auto_delete: bool) -> None:
        if type(prefetch) is not int or not 1 <= prefetch <= 1000:
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
        self.held_back = 0
        """FIFO messages not handed to the handler because an earlier message of
        their group failed in the same batch (they come back behind it)."""
        self.max_unfinished_seen = 0
        self.resubscribed = 0
        """Subscriptions opened after ``start`` (failovers, restarted hosts)."""
        self.dropped = 0
        """Hosts dropped: failed, or no longer serving a partition."""
        self.links_lost = 0
        """Hosts dropped because their connection dropped (seen at once, not at a keepalive)."""
        self.queue_deleted = False
        """The queue was deleted: the subscription stopped by itself."""
        self.stop_if: Callable[[], str | None] | None = None
        """Checked every round (``PUMP_MS``) of the thread: a reason (not
        None) stops the subscription before it hands over another message
        (:mod:`zmqueue.aio` sets it: the event loop of a coroutine handler
        was closed)."""
        self._watch = LinkWatch()
        self._lock = threading.Lock()
        """Guards the hand-over of ``conns`` to :meth:`_unsubscribe_all`."""
        self._degraded = False
        self.thread = threading.Thread(target=self._run, name=f"subscription-{queue.name}",
                                       daemon=True)

    @property
    def serving_all(self) -> bool:
        """Whether, as of the last resync, a host serves every partition of the
        queue (False while one is missing: it is subscribed again within
        RESYNC_S seconds of its host or leader coming back)."""
        return not self._degraded

    def _on_push(self, key: SubKey) -> Callable[[Frame], None]:
        def on_push(frame: Frame) -> None:
            body = frame.body
            if frame.command == Command.DELIVER and isinstance(body, dict):
                try:  # lists (``m``) and column groups (``ms``), as a receive's reply
                    msgs = self.queue.messages_of(key[0], {"m": body.get("m") or [], "ms": body.get("ms"),
                                                           "inc": body.get("inc")})
                except (ProtocolError, TypeError, ValueError) as exc:
                    log.warning("malformed push from %s dropped (its messages come back after "
                                "their visibility timeout): %s", key[1], exc)
                    return
                self.inbox.extend((m, key) for m in msgs)
                per_key = sum(1 for _, k in self.inbox if k == key)
                self.max_unfinished_seen = max(self.max_unfinished_seen, per_key)
        return on_push

    def start(self) -> Subscription:
        """Subscribe at every host serving a partition and start the thread;
        if that fails, the hosts subscribed at so far are unsubscribed."""
        try:
            for p in range(self.queue.config.partitions):
                targets = self.queue.routes.for_receive(p)
                if not targets:
                    self.queue.refresh()
                    targets = self.queue.routes.for_receive(p)
                if not targets:
                    raise Unavailable(f"partition {p} of {self.queue.name!r} has no serving host")
                for ep in targets:
                    try:
                        self._subscribe(p, ep, self.queue.client.request_timeout_ms)
                    except (NotLeader, Unavailable) as exc:
                        # e.g. a FIFO writer still being elected: the thread retries
                        self._degraded = True
                        log.info("subscription to %r: partition %d not subscribed at %s yet, "
                                 "retrying in %.0f s: %s", self.queue.name, p, ep, RESYNC_S, exc)
            with _OPEN_LOCK:
                _OPEN.add(self)
            self.thread.start()
        except BaseException:
            self.stopped.set()
            self._unsubscribe_all()
            raise
        return self

    def _subscribe(self, p: int, endpoint: str, timeout_ms: int) -> None:
        key = (p, endpoint)
        conn = Connection(self.queue.client.ctx, endpoint, on_push=self._on_push(key),
                          curve=self.queue.client.curve_for(endpoint))
        body: dict[str, Any] = {"q": self.queue.name, "p": p, "prefetch": self.prefetch, "cols": True}
        if self.visibility_timeout is not None:
            body["vis_s"] = self.visibility_timeout
        try:
            sub_id = conn.request(Command.SUBSCRIBE, body, timeout_ms)["sub"]
        except ZmqueueError:
            conn.close()
            raise
        self.conns[key] = (conn, sub_id)
        self._watch.add(conn)

    def _drop(self, key: SubKey, why: str, unsubscribe: bool = False) -> None:
        """Forget the host of ``key`` (``unsubscribe``: tell it, unless it has
        been failing); messages it pushed that are still in the inbox are
        handled, their deletes go as DELETE."""
        entry = self.conns.pop(key, None)
        if entry is None:  # (closed meanwhile: unsubscribed there)
            return
        conn, sub_id = entry
        self._watch.remove(conn)
        if unsubscribe and not self.queue.client.guards.for_endpoint(key[1])[0].failures:
            with contextlib.suppress(ZmqueueError):
                conn.request(Command.UNSUBSCRIBE, {"sub": sub_id}, CONTROL_TIMEOUT_MS)
        conn.close()
        self.dropped += 1
        self._degraded = True
        log.warning("subscription to %r: dropped %s for partition %d (%s)",
                    self.queue.name, key[1], key[0], why)

    def _failed(self, key: SubKey, exc: ZmqueueError) -> None:
        """A keepalive or credit to the host of ``key`` failed: a timeout also
        counts against its circuit breaker, so requests avoid it too."""
        timeout = isinstance(exc, RequestTimeout)
        if isinstance(exc, ConnectionLost):
            self.links_lost += 1
        if timeout:
            self.queue.client.guards.for_endpoint(key[1])[0].failure()
        # a host that answered with an error is alive: take the subscription
        # back there, so it stops pushing to a socket that is being closed
        self._drop(key, f"{type(exc).__name__}: {exc}", unsubscribe=not timeout)

    def resync(self) -> None:
        """Re-read the routes and follow them: subscribe to every host that
        serves a partition and is not subscribed yet, drop those that no
        longer serve one. Failures are logged and retried ``RESYNC_S`` later."""
        self.queue.refresh()
        want = {(p, ep) for p in range(self.queue.config.partitions)
                for ep in self.queue.routes.for_receive(p)}
        for key in [k for k in self.conns if k not in want]:
            self._drop(key, "it no longer serves the partition", unsubscribe=True)
        degraded = False
        for p, ep in sorted(want - set(self.conns)):
            try:
                # a host known to be failing is skipped (CircuitOpen), not waited for
                with self.queue.client.guards.for_endpoint(ep)[0].guard():
                    self._subscribe(p, ep, CONTROL_TIMEOUT_MS)
            except QueueNotFound as exc:
                log.warning("subscription to %r stops: the queue was deleted (%s)", self.queue.name, exc)
                self.queue_deleted = True
                self.stopped.set()
                return
            except ZmqueueError as exc:
                degraded = True
                log.info("subscription to %r: subscribing at %s for partition %d failed, "
                         "retrying in %.0f s: %s", self.queue.name, ep, p, RESYNC_S, exc)
                continue
            self.resubscribed += 1
            log.info("subscription to %r: subscribed at %s for partition %d",
                     self.queue.name, ep, p)
        served = {p for p, _ in self.conns}
        self._degraded = degraded or len(served) < self.queue.config.partitions

    def _keepalive(self) -> None:
        for key, (conn, sub_id) in list(self.conns.items()):
            try:
                conn.request(Command.CREDIT, {"sub": sub_id, "n": 0}, CONTROL_TIMEOUT_MS)
            except ZmqueueError as exc:
                self._failed(key, exc)

    def _run(self) -> None:
        """The thread: :meth:`_pump` until the subscription stops, then
        unsubscribe at every host, however it stopped, and leave the client's
        list (a subscription that stopped by itself, its queue deleted or its
        handler ending the thread, was kept there until the client closed)."""
        try:
            self._pump()
        except (zmq.ContextTerminated, ClientClosed):  # the client was closed under it
            pass
        except Exception:  # (a bug): the subscription stops rather than stay open on the hosts
            log.exception("subscription to %r stops: unexpected error; its messages in flight come "
                          "back after their visibility timeout", self.queue.name)
        except BaseException as exc:  # (a handler's SystemExit, say): it ends the thread
            log.warning("subscription to %r stops: %s ended its thread; its messages in flight come "
                        "back after their visibility timeout", self.queue.name, type(exc).__name__)
            raise
        finally:
            self.stopped.set()
            self._unsubscribe_all()
            self._give_back_inbox()
            self.queue.client.untrack(self)  # (its connections are closed: nothing left to close)

    def _give_back_inbox(self) -> None:
        """The thread's end, after unsubscribing: the messages pushed and not
        handed to the handler are given back (visible at once, their receive
        counts as before: nobody saw them, so they do not near
        ``max_receive_count``); best effort, else they come back after their
        visibility timeout. (FIFO: a group's message given back is not handed
        out while an earlier one of its group is in flight.)"""
        msgs = [m for m, _ in self.inbox]
        self.inbox.clear()
        if msgs and not self.queue.client.closed:
            with contextlib.suppress(ZmqueueError, zmq.ZMQError):  # (the client closing meanwhile)
                give_back(self.queue, msgs)

    def _pump(self) -> None:
        next_keepalive = time.monotonic() + KEEPALIVE_S
        next_resync = next_keepalive
        while not self.stopped.is_set():
            readable, dropped = self._watch.poll(PUMP_MS)
            for conn in readable:
                conn.pump(0)
            for key, (conn, _) in list(self.conns.items()):
                if conn in dropped:
                    conn.pump(0)  # what it pushed before the drop is handled
                    self._failed(key, conn.lost("the subscription"))
            why = self.stop_if() if self.stop_if is not None else None
            if why is not None and not self.stopped.is_set():
                log.warning("subscription to %r stops: %s%s", self.queue.name, why,
                            f"; the {len(self.inbox)} messages pushed to it and not handed to its handler "
                            "are given back" if self.inbox else "")
                self.stopped.set()
            if self.inbox and not self.stopped.is_set():
                self._handle_all()
            now = time.monotonic()
            if now >= next_keepalive:
                next_keepalive = now + KEEPALIVE_S
                self._keepalive()
            if self._degraded and next_resync > now + RESYNC_S:
                next_resync = now + RESYNC_S
            if now >= next_resync and not self.stopped.is_set():
                self.resync()
                next_resync = time.monotonic() + (RESYNC_S if self._degraded else KEEPALIVE_S)

    def _handle_all(self) -> None:
        """Hand the handler every message pushed so far (more may be pushed
        meanwhile: they wait for the next round), except a FIFO group's
        messages after one the handler failed on, then return each host its
        credits, with the handled messages' deletes."""
        credits: dict[SubKey, int] = {}
        done: dict[SubKey, list[Message]] = {}
        failed_groups: set[str] = set()
        for _ in range(len(self.inbox)):
            if self.stopped.is_set():
                break  # unhandled: delivered again after their visibility timeout
            msg, key = self.inbox.popleft()
            credits[key] = credits.get(key, 0) + 1
            if msg.group_id in failed_groups:  # behind its group's failed message: comes back after it
                self.held_back += 1
                continue
            try:
                result: Any = self.handler(msg)
                if inspect.isawaitable(result):  # never awaited here: the message is not handled
                    if inspect.iscoroutine(result):
                        result.close()
                    raise TypeError("the handler returned an awaitable, which a subscription's thread "
                                    "cannot await: pass a plain function, or subscribe with zmqueue.aio")
                self.handled += 1
                if self.auto_delete:
                    done.setdefault(key, []).append(msg)
            except Unhandled as exc:
                log.warning("subscription to %r: message %s not handled: %s; it comes back after its "
                            "visibility timeout%s", self.queue.name, msg.id, exc,
                            "; the subscription stops" if exc.stop else "")
                if exc.stop:
                    self.stopped.set()
                    break
                self.failed += 1
                if self.queue.config.fifo and msg.group_id is not None:
                    failed_groups.add(msg.group_id)
            except Exception:  # the handler's failure: the message will come back
                self.failed += 1
                if self.queue.config.fifo and msg.group_id is not None:
                    failed_groups.add(msg.group_id)
                log.exception("subscription handler failed on message %s", msg.id)
        stopping = self.stopped.is_set()  # no credit back: nothing more is pushed to it
        for key, n in credits.items():
            if not stopping or done.get(key):
                self._credit(key, 0 if stopping else n, done.get(key, []))

    def _credit(self, key: SubKey, n: int, handled: list[Message]) -> None:
        """Return ``n`` credits to the host of ``key``; the deletes of the
        handled messages of one stream ride on it (the host checks that it
        writes the first receipt's stream), the others' go as DELETE. A host
        dropped meanwhile gets no credit; its messages' deletes go as DELETE."""
        entry = self.conns.get(key)
        if entry is None:
            if handled:
                self._deleted(handled, None)
            return
        conn, sub_id = entry
        body: dict[str, Any] = {"sub": sub_id, "n": n}
        carried: list[Message] = []
        if handled:
            try:
                groups = sorted(stream_groups(self.queue, handled).items(), key=lambda g: len(g[1].idxs),
                                reverse=True)
            except ZmqueueError as exc:  # not expected: receipts of this queue's own pushes
                log.warning("deleting pushed messages failed: %s", exc)
                groups = []
            if groups:
                (p, origin), group = groups[0]
                carried = [handled[i] for i in group.idxs]
                carry = group.carry(p, origin)  # (read from column groups: by seq and receive count)
                carry.put(body)  # (del or dref, and inc when known)
                if carry.field == "dref":
                    body["q"] = self.queue.name
            for _, group in groups[1:]:
                self._deleted([handled[i] for i in group.idxs], None)
        reply: Any = {}
        try:
            reply = self._credit_request(conn, body)
        except Throttled as exc:
            # its deletes are over the queue's rate limit even after the
            # retries: the credits go alone (never limited), the deletes as
            # DELETE (retried the same way, else logged: they come back)
            log.warning("subscription to %r: credit with deletes throttled: %s", self.queue.name, exc)
            for k in ("del", "dref", "q", "inc"):
                body.pop(k, None)
            try:
                if n:
                    conn.request(Command.CREDIT, body, self.queue.client.request_timeout_ms)
            except ZmqueueError as exc2:
                self._failed(key, exc2)
        except ZmqueueError as exc:
            self._failed(key, exc)
        if carried:
            self._deleted(carried, reply.get("dr") if isinstance(reply, dict) else None)

    def _credit_request(self, conn: Connection, body: dict[str, Any]) -> Any:
        """One CREDIT; a Throttled reply (its deletes cost a token of the
        queue's rate limit) is retried as ``Client.request`` retries, with the
        same request id, until the subscription stops."""
        client = self.queue.client
        rid = conn.next_request_id()
        return client.retry_throttled(
            lambda: conn.request(Command.CREDIT, body, client.request_timeout_ms, rid), self.stopped)

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

    def _unsubscribe_all(self) -> None:
        """Take the subscription back from every host (``UNSUBSCRIBE``,
        best-effort) and close the connections; from any thread, idempotent.
        The messages pushed and not finished stay in flight on their host
        and come back after their visibility timeout (PROTOCOL § UNSUBSCRIBE)."""
        with self._lock:
            conns, self.conns = self.conns, {}
        if threading.current_thread() is self.thread or not self.thread.is_alive():
            self._watch.clear()  # (else the thread's poll sees them closed, and ends)
            with _OPEN_LOCK:  # (else the thread ends with this, or exit closes it again)
                _OPEN.discard(self)
        for conn, sub_id in conns.values():
            try:  # (a ZMQError: the client's context is being terminated)
                with contextlib.suppress(ZmqueueError, zmq.ZMQError):
                    conn.request(Command.UNSUBSCRIBE, {"sub": sub_id}, CONTROL_TIMEOUT_MS)
            finally:
                conn.close()

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """Stop: unsubscribe at every host and close the connections at once
        (nothing more is pushed to it while it waits: a host would push the
        message in hand again each time its visibility timeout ran out), then
        wait up to ``wait_s`` for the handler in progress (not from the
        handler itself), whose message is then deleted by a DELETE. The
        client forgets it last (after its connections were closed: a
        concurrent ``Client.close`` still closes it, idempotently, before it
        ends the ZeroMQ context)."""
        self.stopped.set()
        self._unsubscribe_all()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout=wait_s)
        self.queue.client.untrack(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_open_at_exit() -> None:
    """At interpreter exit (after the non-daemon threads were joined, before
    the daemon ones vanish): close the subscriptions still open, waiting up
    to ``CLOSE_WAIT_S`` in all for their handlers in progress."""
    with _OPEN_LOCK:
        subs = list(_OPEN)
    if not subs:
        return
    log.info("closing %d zmqueue subscriptions still open at exit", len(subs))
    for sub in subs:
        sub.close(wait_s=0)
    deadline = time.monotonic() + CLOSE_WAIT_S
    for sub in subs:
        sub.close(wait_s=max(0.0, deadline - time.monotonic()))


def _forget_open_in_child() -> None:
    """After a fork: the parent's subscriptions are not the child's to close
    (their sockets and threads are the parent's)."""
    global _OPEN, _OPEN_LOCK
    _OPEN, _OPEN_LOCK = set(), threading.Lock()


atexit.register(_close_open_at_exit)
os.register_at_fork(after_in_child=_forget_open_in_child)
