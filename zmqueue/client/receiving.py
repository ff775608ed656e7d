"""How a queue's receive finds its messages, for
:class:`~zmqueue.client.queue.Queue` (``receive``, ``delete_and_receive``)
and the pipelines and subscriptions that read its replies.

A queue's messages may sit on several hosts (partitions, and one stream per
replica on a standard queue). A receive hands out kept messages first
(:mod:`zmqueue.client.leftovers`); else it sweeps its targets, every
(partition, host) that writes a stream, asking each once without waiting (the
one that last had messages first, but every :data:`SHUFFLE_EVERY`-th sweep in
plain random order); then, with a wait, it parks a long poll on all of them at
once: the first answer with messages wins, the others are cancelled and their
late answers merged. Hosts that fail are skipped while others answer; when
none answered, the last failure is raised, never ``[]``. Messages taken beyond
``max_messages`` are kept, or given back at once.

Functions of the Queue they serve, which holds their state (routes, kept
messages, the stream references of column-read messages, the last productive
target)."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from zmqueue.client.breaker import CircuitOpen
from zmqueue.client.models import Message, StreamRef
from zmqueue.client.receipts import Carry, Deletable, apply, batch, deletables, outcomes, stream_groups
from zmqueue.client.retry import backoff
from zmqueue.client.routing import FIFO_ORIGIN, REFRESH_MIN_S
from zmqueue.client.transport import Connection, LinkWatch
from zmqueue.config import MAX_VISIBILITY_S
from zmqueue.errors import (
    InvalidParameter,
    NotLeader,
    ProtocolError,
    QueueNotFound,
    RequestTimeout,
    Unavailable,
    ZmqueueError,
    from_wire,
)
from zmqueue.protocol import MAX_BATCH, Command, ReceiptEncoder

if TYPE_CHECKING:
    from zmqueue.client.queue import Queue

CANCEL_GRACE_MS = 2000
LEFTOVERS_CHECK_S = REFRESH_MIN_S
"""Kept messages are handed out only after the queue was re-read at most this
long ago (a queue deleted and created again: the kept ones are of the old one)."""
SHUFFLE_EVERY = 8
"""Every 8th receive sweep asks its targets in plain random order, so messages
on other hosts are found even while the last productive one never runs dry."""


@dataclass
class _Tried:
    """What one receive's requests came to so far: whether any host answered
    (messages or none: the queue is then reachable, and ``[]`` means empty),
    how many attempts (sweeps, long polls) were made, and the last failure
    (an error reply, no reply, a refused link, the client's own guards)."""

    give_up_at: float
    """While no host answered: when the receive stops retrying (the request timeout after it began)."""
    answered: bool = False
    attempts: int = 0
    error: ZmqueueError | None = None
    taken_at: float = 0.0
    """When the messages returned were taken, as this client can tell: the start
    of the sweep that got them, or the arrival of a long poll's first answer
    with messages (:mod:`zmqueue.client.leftovers`)."""

    def failure(self, queue: str) -> ZmqueueError:
        """The error a receive that no host answered raises: the last
        attempt's, of its class (RequestTimeout, CircuitOpen, NotLeader...),
        naming the queue and saying what to do."""
        err = self.error or Unavailable("no host answered")
        return type(err)(f"no host serving {queue!r} answered this receive after {self.attempts} "
                         f"attempt(s) (last: {err.message}); its messages are kept: retry once its "
                         "hosts are up (zmqueue status)", **{**err.details, "queue": queue})


def ends_receive(err: ZmqueueError) -> bool:
    """An error a host answers a RECEIVE with that no retry within the
    receive's wait can change: the queue is gone, or the host holds messages
    of this encrypted queue but not its key. The sweep and the long poll both
    raise it when nothing else arrived (a retry until the wait ends answered
    [] after the whole wait)."""
    return isinstance(err, QueueNotFound) or (isinstance(err, Unavailable)
                                              and bool(err.details.get("missing_key")))


def check_receive(max_messages: int, wait_time: float) -> None:
    """A receive's arguments, checked before any request (InvalidParameter naming the bad one)."""
    if type(max_messages) is not int or not 1 <= max_messages <= MAX_BATCH:
        raise InvalidParameter(f"max_messages must be 1 to {MAX_BATCH} (a whole number), got "
                               f"{max_messages!r}", field="max_messages")
    if type(wait_time) not in (int, float) or not 0 <= wait_time <= 20:
        raise InvalidParameter(f"wait_time must be 0 to 20 seconds, got {wait_time!r}",
                               field="wait_time")


def targets_now(queue: Queue) -> list[tuple[int, str]]:
    """Where a receive asks now (routes re-read when old, or while empty)."""
    queue._fresh_routes()
    return queue._until_known(partial(receive_targets, queue), f"no host serves {queue.name!r} now; retry")


def delete_and_receive(queue: Queue, receipts: Iterable[Deletable], max_messages: int, wait_time: float,
                       visibility_timeout: int | None) -> tuple[list[ZmqueueError | None], list[Message]]:
    """:meth:`Queue.delete_and_receive`: the deletes of one stream (the
    largest whose writer is among the targets) ride on the receive's first
    request, sent to that writer; the others go as DELETE requests first."""
    receipts = deletables(receipts, "delete_and_receive")
    if not receipts:
        return [], queue.receive(max_messages, wait_time, visibility_timeout)
    check_receive(max_messages, wait_time)
    groups = stream_groups(queue, receipts)
    out: list[ZmqueueError | None] = [None] * len(receipts)
    carry: Carry | None = None
    targets: list[tuple[int, str]] | None = None
    queue._leftovers.prune(time.monotonic(), queue.incarnation)
    if not queue._leftovers:
        targets = targets_now(queue)
        for (p, origin), group in sorted(groups.items(), key=lambda g: -len(g[1].idxs)):
            eps = queue.routes.for_stream(p, origin)
            if eps and (p, eps[0]) in targets:
                carry = group.carry(p, origin)
                del groups[(p, origin)]
                first = (p, eps[0])
                targets = [first, *[t for t in targets if t != first]]
                break
    for (p, origin), group in groups.items():
        apply(queue, Command.DELETE, receipts, group.idxs, p, origin, None, out)
    msgs = receive(queue, max_messages, wait_time, visibility_timeout, carry, targets)
    if carry is not None:
        if carry.results is None:  # not taken with the receive: a DELETE of its own
            apply(queue, Command.DELETE, receipts, carry.idxs, carry.partition, carry.origin, None, out)
        else:
            outcomes(carry.idxs, carry.results, out)
    return out, msgs


def receive(queue: Queue, max_messages: int, wait_time: float, visibility_timeout: int | None,
            carry: Carry | None = None, targets: list[tuple[int, str]] | None = None
            ) -> list[Message]:
    """Kept messages first (:mod:`zmqueue.client.leftovers`), else a sweep
    of ``targets`` (default: the current ones; ``carry`` rides on the
    first), then a long poll."""
    if queue._leftovers:
        queue._fresh_routes(LEFTOVERS_CHECK_S)  # (the queue deleted and created again?)
        if visibility_timeout is not None and (type(visibility_timeout) is not int
                                               or not 0 <= visibility_timeout <= MAX_VISIBILITY_S):
            # (checked here, before kept messages are re-timed with it; else the host checks it)
            raise InvalidParameter(f"visibility_timeout must be 0-{MAX_VISIBILITY_S} seconds, got "
                                   f"{visibility_timeout!r}", field="visibility_timeout")
        vis = queue.config.visibility_timeout_s if visibility_timeout is None else visibility_timeout
        out, release, retime = queue._leftovers.take_for(max_messages, time.monotonic(),
                                                         queue.incarnation, vis)
        give_back(queue, release)
        if retime:
            out = _retimed(queue, out, retime, vis)
        if out:
            return out
    if targets is None:
        targets = targets_now(queue)
    body: dict[str, Any] = {"q": queue.name, "max": max_messages, "cols": True}
    if visibility_timeout is not None:
        body["vis_s"] = visibility_timeout
    now = time.monotonic()
    deadline = now + wait_time
    tried = _Tried(now + queue.client.request_timeout_ms / 1000)
    got = _sweep(queue, targets, body, max_messages, carry, tried)
    targets = receive_targets(queue) or targets  # the sweep may have re-routed
    while not got:
        now = time.monotonic()
        if now >= deadline:
            if tried.answered:  # the queue is reachable, and empty (or on hosts that failed)
                break
            if tried.attempts >= 2 and now >= tried.give_up_at:
                err = tried.failure(queue.name)
                raise err from tried.error
            # no host answered yet (a failover, a host restarting): sweep again,
            # for as long as a request is retried
            time.sleep(backoff(tried.attempts))
            queue.refresh()
            targets = receive_targets(queue) or targets
            got = _sweep(queue, targets, body, max_messages, None, tried)
            continue
        got, failed = long_poll(queue, targets, body, int((deadline - now) * 1000), tried)
        if got or not failed:
            break
        time.sleep(0.05)  # a host refused (not the writer yet): re-route and wait again
        queue.refresh()
        targets = receive_targets(queue) or targets
    vis = queue.config.visibility_timeout_s if visibility_timeout is None else visibility_timeout
    out, release = queue._leftovers.split(got, max_messages, tried.taken_at, vis)
    give_back(queue, release)
    return out


def _retimed(queue: Queue, out: list[Message], retime: list[Message], vis: int) -> list[Message]:
    """``out`` (kept messages handed out now) once those of ``retime`` (taken
    with another visibility timeout than this receive's ``vis``) were made
    invisible for ``vis`` seconds from now, as a receive with ``vis`` would;
    those that could not be (a stale receipt: another consumer may have
    them; the request failed) are left out: they come back through the
    queue after the timeout they were taken with."""
    try:
        errors = batch(queue, Command.CHANGE_VISIBILITY, list(retime), [vis] * len(retime))
        dropped = {id(m) for m, err in zip(retime, errors, strict=True) if err is not None}
    except ZmqueueError:
        dropped = {id(m) for m in retime}
    return [m for m in out if id(m) not in dropped] if dropped else out


def receive_targets(queue: Queue) -> list[tuple[int, str]]:
    n = queue.config.partitions
    start = next(queue._rr) % n
    pairs = [(p, ep) for i in range(n) for p in [(start + i) % n] for ep in queue.routes.for_receive(p)]
    random.shuffle(pairs)
    lucky = queue._lucky
    if lucky is not None and next(queue._sweeps) % SHUFFLE_EVERY and lucky in pairs:
        # where messages were last time is the likeliest place now (one
        # producer's messages sit on its home host): one round trip, not ~n/2
        pairs.remove(lucky)
        pairs.insert(0, lucky)
    return pairs


def give_back(queue: Queue, msgs: list[Message]) -> None:
    """Give back messages this handle took but will not hand out: visible
    now, their receive counts as before (CHANGE_VISIBILITY ``back``: a
    message nobody saw must not near max_receive_count; FIFO: the kept
    ones of a group it hands a message of out come back behind it); if
    that fails they come back after their visibility timeout."""
    for i in range(0, len(msgs), MAX_BATCH):  # (each chunk on its own: one failing leaves the rest)
        chunk: list[Deletable] = list(msgs[i:i + MAX_BATCH])
        with contextlib.suppress(ZmqueueError):
            batch(queue, Command.CHANGE_VISIBILITY, chunk, [0] * len(chunk), {"back": True})


def _sweep(queue: Queue, targets: list[tuple[int, str]], body: dict[str, Any], max_n: int,
           carry: Carry | None = None, tried: _Tried | None = None) -> list[Message]:
    """Ask each target once without waiting, until max_n are collected;
    the first carries ``carry``'s deletes (``carry`` is the first target).
    A host that answered with messages and ``"x": false`` (its copies of
    the partition's other streams hold nothing visible) ends the sweep of
    that partition: one round trip where a sweep of R hosts took R.
    A target that fails is skipped (the others may answer); ``tried``
    hears whether any answered, and the last failure."""
    if tried is None:
        tried = _Tried(0.0)
    tried.attempts += 1
    started = time.monotonic()
    out: list[Message] = []
    stale = False
    final: Unavailable | None = None
    """A refusal that ends the receive if nothing else arrives (:func:`ends_receive`)."""
    done: set[int] = set()  # partitions whose other hosts hold nothing visible (reply "x")
    for k, (p, ep) in enumerate(targets):
        if len(out) >= max_n:
            break
        if p in done:
            continue
        ask = {**body, "p": p, "max": max_n - len(out), "wait_ms": 0}
        if k == 0 and carry is not None:
            carry.put(ask)
        try:
            reply = queue.client.request(ep, Command.RECEIVE, ask)
        except NotLeader as exc:  # FIFO: the one stream's writer is named; else re-read routes
            named = queue.config.fifo and queue._follow(p, FIFO_ORIGIN, exc) is not None
            stale = stale or not named
            tried.error = exc
            continue
        except Unavailable as exc:
            stale = True
            if ends_receive(exc):
                final = exc
            tried.error = exc
            continue
        tried.answered = True
        if k == 0 and carry is not None:
            carry.results = reply.get("dr")  # None from a host that predates "del" / "dref"
        got = messages_of(queue, p, reply)
        if got:
            queue._lucky = (p, ep)
            out.extend(got)
            if reply.get("x") is False:  # its copies of the partition's other streams are empty
                done.add(p)
    if stale:
        queue.refresh()
    if final is not None and not out:
        raise final  # (no retry within the wait changes it: the messages wait for their key)
    if out:
        tried.taken_at = started
    return out


def long_poll(queue: Queue, targets: list[tuple[int, str]], body: dict[str, Any], wait_ms: int,
              tried: _Tried | None = None) -> tuple[list[Message], bool]:
    """Park a long poll on every target at once; the first answer with
    messages wins, the others are cancelled and their answers merged.
    Also says whether any target refused (error reply or no reply).
    Several targets may share a connection (one host writing streams of
    several partitions): requests are matched by request id. Each host's
    circuit breaker is asked first (an open one is skipped, as a refusal)
    and told the outcome: an answer is a success, silence a failure.
    An answer that :func:`ends_receive` (the queue deleted while the poll
    waited, say) ends the poll and is raised if nothing else arrived.
    ``tried`` hears whether any target answered, and the last failure."""
    if tried is None:
        tried = _Tried(0.0)
    tried.attempts += 1
    pending: dict[int, tuple[int, str]] = {}
    watch = LinkWatch()
    failed = False
    final: ZmqueueError | None = None
    asked: set[str] = set()
    for p, ep in targets:
        if ep not in asked:
            try:
                queue.client.guards.for_endpoint(ep)[0].before()
            except CircuitOpen as exc:
                failed = True
                tried.error = exc
                continue
            asked.add(ep)
        conn = queue.client.connection(ep)
        watch.add(conn)
        rid = conn.next_request_id()
        conn.send(Command.RECEIVE, {**body, "p": p, "wait_ms": wait_ms}, rid)
        pending[rid] = (p, ep)
    out: list[Message] = []
    silent: set[str] = set()
    """Hosts that did not answer (or whose link dropped): their breakers hear of it."""
    deadline = time.monotonic() + (wait_ms + queue.client.request_timeout_ms) / 1000
    cancelled = False
    while pending and time.monotonic() < deadline:
        timeout = max(0, int((deadline - time.monotonic()) * 1000))
        readable, dropped = watch.poll(timeout)
        for conn in readable + dropped:
            # (a dropped link: the host died or restarted; answers that
            # came first are taken, the others cannot come)
            for data in conn.recv_queued():
                waiting = len(pending)
                err = _take_reply(queue, conn, data, pending, out)
                if err is not None:
                    failed = True
                    tried.error = err
                    if ends_receive(err):
                        final = err
                elif len(pending) < waiting:
                    tried.answered = True
        for conn in dropped:
            lost = [rid for rid, (_, ep) in pending.items() if ep == conn.endpoint]
            for rid in lost:
                del pending[rid]
            if lost:
                silent.add(conn.endpoint)
                tried.error = conn.lost("RECEIVE")
        if (out or final) and not cancelled:
            cancelled = True
            tried.taken_at = time.monotonic()
            for rid, (p, ep) in pending.items():
                conn = queue.client.connection(ep)
                conn.send(Command.CANCEL, {"q": queue.name, "p": p, "rid": rid}, conn.next_request_id())
            deadline = min(deadline, time.monotonic() + CANCEL_GRACE_MS / 1000)
    if not cancelled and pending:
        silent.update(ep for _, ep in pending.values())
        ep = next(iter(pending.values()))[1]
        tried.error = RequestTimeout(f"RECEIVE to {ep} got no reply within {wait_ms} ms of waiting and "
                                     f"{queue.client.request_timeout_ms} ms more", endpoint=ep)
    for ep in asked:
        breaker = queue.client.guards.for_endpoint(ep)[0]
        if ep in silent:
            breaker.failure()
        else:
            breaker.success()
    if final is not None and not out:
        raise final
    return out, failed or bool(silent)


def _take_reply(queue: Queue, conn: Connection, data: bytes, pending: dict[int, tuple[int, str]],
                out: list[Message]) -> ZmqueueError | None:
    """A frame read from ``conn``: an awaited reply's messages go to
    ``out``; the error if it was an error reply."""
    frame = conn.reply_of(data)
    if frame is None:
        return None
    asked = pending.pop(frame.request_id, None) if frame.command == Command.RECEIVE else None
    if asked is None:
        return None
    if frame.is_error:
        err = from_wire(frame.body)
        if isinstance(err, NotLeader):
            queue._follow(asked[0], FIFO_ORIGIN if queue.config.fifo else None, err)
        return err
    got = messages_of(queue, asked[0], frame.body)
    if got:
        queue._lucky = asked
        out.extend(got)
    return None


def messages_of(queue: Queue, p: int, reply: dict[str, Any]) -> list[Message]:
    """The messages of a RECEIVE reply or a DELIVER push: lists (``m``),
    then column groups (``ms``, from a host that reads ``cols``)."""
    out = [Message.from_wire(queue.name, m) for m in reply["m"]]
    groups = reply.get("ms")
    if not groups:
        return out
    inc = reply.get("inc")  # the queue's incarnation (None from a host that names none)
    if not (inc is None or (type(inc) is int and inc >= 0)):
        raise ProtocolError("malformed incarnation in a receive reply")
    for group in groups:
        if not (isinstance(group, list) and len(group) == 7 and isinstance(group[0], str)
                and type(group[1]) is int):
            raise ProtocolError("malformed column group in a receive reply")
        key = (p, group[0], group[1], inc)
        stream = queue._streams.get(key)
        if stream is None:
            stream = queue._streams[key] = StreamRef(p, group[0], group[1],
                                                     ReceiptEncoder(queue.name, p, group[0], inc), inc)
        out.extend(Message.from_columns(queue.name, stream, group))
    return out
