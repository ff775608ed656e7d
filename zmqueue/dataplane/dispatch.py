"""Decode request frames, route them to handlers, encode replies.

A handler gets a :class:`Request` and returns the reply body, raises a
:class:`~zmqueue.errors.ZmqueueError` (encoded as an error reply), or returns
:data:`DEFERRED` and answers later with ``request.reply()`` (long polls).
Replies go to an :class:`Outbox` that the request loop flushes after the
group commit, so nothing is acknowledged before it is written. Malformed
frames are answered with an error when their header is readable, otherwise
dropped; either way they are counted, never fatal.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from zmqueue import protocol
from zmqueue.dataplane.reqcache import ReplyCache
from zmqueue.errors import InternalError, InvalidParameter, ProtocolError, UnknownCommand, ZmqueueError
from zmqueue.protocol import Command, Frame

log = logging.getLogger(__name__)

DEFERRED: Any = object()
"""Returned by a handler that will answer later through ``Request.reply``."""

MUTATING = frozenset({
    Command.CREATE_QUEUE, Command.DELETE_QUEUE, Command.SET_QUEUE_ATTRIBUTES, Command.PURGE_QUEUE,
    Command.SEND,
    Command.DELETE, Command.CHANGE_VISIBILITY,
})
"""Commands whose replies are cached by request id (a retry is not applied twice)."""


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Outbox:
    """Frames waiting to be sent: (socket name, routing id, payload)."""

    items: list[tuple[str, bytes, bytes]] = field(default_factory=list)
    early: list[tuple[str, bytes, bytes]] = field(default_factory=list)
    """Replies that need no commit of this loop pass (what they acknowledge
    was committed in an earlier one): the loop sends them right after the
    drain, before its timers and flush."""

    def put(self, sock: str, identity: bytes, payload: bytes, early: bool = False) -> None:
        (self.early if early else self.items).append((sock, identity, payload))

    def take(self) -> list[tuple[str, bytes, bytes]]:
        items, self.items = self.items, []
        if self.early:
            items, self.early = self.early + items, []
        return items

    def take_early(self) -> list[tuple[str, bytes, bytes]]:
        items, self.early = self.early, []
        return items


@dataclass(eq=False)
class Request:
    sock: str
    identity: bytes
    frame: Frame
    outbox: Outbox
    cache: ReplyCache | None = None
    answered: bool = False
    also: list[tuple[str, bytes]] = field(default_factory=list)
    """Retries of this request that arrived while it was being handled."""
    user: str | None = None
    """The authenticated client identity (CURVE/ZAP User-Id), None without CURVE."""
    started: float = 0.0
    meter: Any = None
    """Called as ``meter(request, reply body or error, reply bytes)`` (front door)."""
    note: Any = None
    """What the dispatcher's guard learnt about the request (the front door:
    the queue it acts on), for the meter."""
    prepared: bytes | None = None
    """The reply, encoded ahead by :meth:`prepare`."""
    committed: bool = False
    """What the reply acknowledges is already committed (a released
    synchronous ack): it may leave before this loop pass's flush."""
    fingerprint: int = 0
    """A mutating request's :func:`protocol.request_fingerprint` (0 for others)."""

    @property
    def body(self) -> Any:
        return self.frame.body

    def prepare(self, body: Any) -> None:
        """Encode the reply ``body`` now, while it waits (for replicas): a later
        :meth:`reply` with the same body only sends it."""
        self.prepared = protocol.encode_reply(self.frame.command, self.frame.request_id, body)

    def reply(self, body: Any) -> None:
        if self.answered:
            return
        self.answered = True
        payload = self.prepared
        if payload is None:
            payload = protocol.encode_reply(self.frame.command, self.frame.request_id, body)
        if self.meter is not None:
            self.meter(self, body, len(payload))
        self._send(payload)

    def fail(self, exc: ZmqueueError) -> None:
        if self.answered:
            return
        self.answered = True
        payload = protocol.encode_error(self.frame.command, self.frame.request_id, exc)
        if self.meter is not None:
            self.meter(self, exc, len(payload))
        self._send(payload, cache=False)

    def _send(self, payload: bytes, cache: bool = True) -> None:
        """Send to the requester (and to retries of it that arrived meanwhile).

        Only successes are cached: a retry after an error (not the writer, not
        found yet, unavailable) must be tried again, not answered the same way.
        """
        if self.cache is not None:
            key = (self.user or "", int(self.frame.command), self.frame.request_id)
            if cache:
                self.cache.put(key, payload, now_ms(), self.fingerprint)
            self.cache.done(key)
        self.outbox.put(self.sock, self.identity, payload, self.committed)
        for sock, identity in self.also:
            self.outbox.put(sock, identity, payload, self.committed)


Handler = Callable[[Request], Any]


class Dispatcher:
    def __init__(self) -> None:
        self.handlers: dict[Command, Handler] = {}
        self.served_on: dict[Command, frozenset[str]] = {}
        self.outbox = Outbox()
        self.counters: Counter[str] = Counter()
        self.reply_cache = ReplyCache()
        self.guard: Callable[[str, str | None, Frame, int], tuple[ZmqueueError | None, Any]] | None = None
        """Front door: ``(refusal, note)``; a refusal (the error) is answered
        instead of running the handler; the note goes on the Request for the meter."""
        self.meter: Any = None
        self.one_way: dict[Command, Callable[[Any, str | None], bool]] = {}
        """Per command, a handler for one-way messages (no reply, no request
        object): called with the body and the connection's authenticated
        identity (CURVE; None without), True if it handled the message, False
        to serve it as a request. A ZmqueueError it raises is answered to the
        sender as an error reply (handled once: not served again as a request)."""

    def register(self, command: Command, handler: Handler,
                 sockets: tuple[str, ...] = ("client", "peer")) -> None:
        """Serve ``command`` on the named sockets only (host-to-host commands
        are registered for ``peer``, which CURVE restricts to host keys)."""
        self.handlers[command] = handler
        self.served_on[command] = frozenset(sockets)

    def handle(self, sock: str, frames: list[bytes], user: str | None = None) -> None:
        """Handle one multipart message from a ROUTER: [routing id, payload];
        ``user``: the connection's authenticated identity (CURVE), if any."""
        if len(frames) != 2:
            self.counters["malformed"] += 1
            if len(frames) > 2:
                self._reply_malformed(sock, frames[0], frames[-1],
                                      ProtocolError(f"expected one payload frame, got {len(frames) - 1}"))
            return
        identity, payload = frames
        try:
            frame = protocol.decode(payload, max_items=protocol.MAX_REQUEST_ITEMS)
        except ProtocolError as exc:
            self.counters["malformed"] += 1
            self._reply_malformed(sock, identity, payload, exc)
            return
        if frame.flags in protocol.NOT_REQUEST_FLAGS:
            self.counters["unexpected_reply"] += 1
            return
        self.counters["requests"] += 1
        note = None
        if self.guard is not None:
            refused, note = self.guard(sock, user, frame, len(payload))
            if refused is not None:
                self.outbox.put(sock, identity, protocol.encode_error(frame.command, frame.request_id,
                                                                      refused))
                return
        quick = self.one_way.get(frame.command)
        if quick is not None and sock in self.served_on[frame.command]:
            try:
                if quick(frame.body, user):
                    return
            except ZmqueueError as exc:  # refused (malformed, another host's name...): answered so
                self.counters["errors"] += 1
                self.outbox.put(sock, identity, protocol.encode_error(frame.command, frame.request_id, exc))
                return
            except Exception:  # a bug: logged, and served as a request below (it answers INTERNAL)
                self.counters["internal_errors"] += 1
                log.exception("one-way %s failed; answering it as a request", frame.command.name)
        cache = None
        fp = 0
        ckey = (user or "", int(frame.command), frame.request_id)
        if frame.command in MUTATING:
            fp = protocol.request_fingerprint(payload, frame.body)
            cached = self.reply_cache.get(ckey, now_ms())
            if cached is not None:
                if cached[1] != fp:
                    self._reused_id(sock, identity, frame, user)
                    return
                self.counters["retries_answered_from_cache"] += 1
                self.outbox.put(sock, identity, cached[0])
                return
            original = self.reply_cache.in_progress(ckey)
            if original is not None:
                if original.fingerprint != fp:
                    self._reused_id(sock, identity, frame, user)
                    return
                self.counters["retries_joined_in_progress"] += 1
                original.also.append((sock, identity))
                return
            cache = self.reply_cache
        req = Request(sock, identity, frame, self.outbox, cache, user=user, meter=self.meter,
                      started=time.monotonic(), note=note, fingerprint=fp)
        if cache is not None:
            cache.start(ckey, req)
        self.dispatch(req)

    def _reused_id(self, sock: str, identity: bytes, frame: Frame, user: str | None) -> None:
        """Refuse a request whose id a different request of the same identity
        had within the reply cache's time: answering it from the cache would
        confirm what was never applied."""
        self.counters["errors"] += 1
        self.counters["request_ids_reused"] += 1
        who = (f"identity {user!r}" if user else
               "this host's clients (without CURVE every client has the identity '')")
        exc = InvalidParameter(
            f"request id {frame.request_id} was used by a different {frame.command.name} request of "
            f"{who} within the last {self.reply_cache.ttl_ms // 60_000} minutes; nothing was applied. "
            "Request ids must not repeat: start each connection's ids at a random 64-bit value and "
            "count up (the client library does), and resend a request only byte for byte",
            field="request_id")
        self.outbox.put(sock, identity, protocol.encode_error(frame.command, frame.request_id, exc))

    def dispatch(self, req: Request) -> None:
        handler = self.handlers.get(req.frame.command)
        if req.sock not in self.served_on.get(req.frame.command, frozenset({req.sock})):
            handler = None
        try:
            if handler is None:
                raise UnknownCommand(f"command {req.frame.command.name} is not served on this socket",
                                     command=int(req.frame.command))
            result = handler(req)
        except ZmqueueError as exc:
            self.counters["errors"] += 1
            req.fail(exc)
            return
        except Exception as exc:  # a bug: answer, log, keep serving
            self.counters["internal_errors"] += 1
            log.exception("handler for %s failed", req.frame.command.name)
            req.fail(InternalError(f"internal error handling {req.frame.command.name}: {exc!r:.200}"))
            return
        if result is not DEFERRED:
            req.reply(result)

    def _reply_malformed(self, sock: str, identity: bytes, payload: bytes, exc: ZmqueueError) -> None:
        head = protocol.peek_header(payload)
        if head is None:
            return  # nothing to address an answer to: dropped and counted
        cmd, rid = head
        self.outbox.put(sock, identity, protocol.encode_error(cmd, rid, exc))
