"""The host's front door: checks every client request before its handler
runs (authorization, rate limits) and meters what passes (usage records,
per-queue counters, latency histograms).

It runs on the request-loop thread, consulted by the dispatcher through two
hooks: :meth:`FrontDoor.check` (refuse with AccessDenied or Throttled) and
:meth:`FrontDoor.on_reply` (count the outcome). It reads queue configs and
policies through callables the host gives it, so it never touches Consul.
Requests on the peer socket come from hosts (CURVE host keys when secured)
and are neither checked nor metered.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from zmqueue.config import QUEUE_NAME_RE, QueueConfig
from zmqueue.errors import AccessDenied, Throttled, ZmqueueError
from zmqueue.protocol import Command, Frame, Receipt
from zmqueue.security import authz
from zmqueue.security.ratelimit import RateLimiter
from zmqueue.security.usage import UsageBook

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                     10.0, 25.0)
RATE_LIMITED = frozenset({Command.SEND, Command.RECEIVE, Command.DELETE, Command.CHANGE_VISIBILITY,
                          Command.PURGE_QUEUE, Command.QUEUE_STATS, Command.SUBSCRIBE})


_NAMES = {c: c.name for c in Command}
"""Command names (``Enum.name`` is a Python-level descriptor)."""


def queue_of(frame: Frame) -> str:
    """The queue a request acts on ('' when none). For receipts, the queue
    the receipt names (the one the handler acts on), not the ``q`` field."""
    body = frame.body if isinstance(frame.body, dict) else {}
    cmd = frame.command
    try:
        if cmd == Command.CREDIT and body.get("dref") is not None:
            q = body.get("q")  # (the handler deletes dref from the subscription's queue, which q must name)
            return q if isinstance(q, str) else ""
        if cmd in (Command.DELETE, Command.CHANGE_VISIBILITY, Command.CREDIT):
            items = body.get("del") if cmd == Command.CREDIT else body.get("r")
            if isinstance(items, list) and items:
                first = items[0][0] if cmd == Command.CHANGE_VISIBILITY and isinstance(items[0], list) \
                    else items[0]
                return Receipt.decode(first).queue
        if cmd == Command.CREATE_QUEUE:
            cfg = body.get("config")
            return str(cfg.get("name", "")) if isinstance(cfg, dict) else ""
        if cmd in (Command.DELETE_QUEUE, Command.GET_QUEUE, Command.SET_QUEUE_ATTRIBUTES):
            return str(body.get("name", ""))
    except (ZmqueueError, IndexError, TypeError):
        return ""
    q = body.get("q")
    return q if isinstance(q, str) else ""


UNKNOWN_QUEUE = "~unknown"
"""The name requests naming no queue the host knows are metered under (not a
valid queue name): counting each name a client makes up grew the host's
memory and usage file without bound (a 1 MiB name per request)."""


class Admission(NamedTuple):
    """What :meth:`FrontDoor.check` decided about a request."""

    refused: ZmqueueError | None
    """The error to answer instead of handling it; None to handle it."""
    queue: str
    """The queue it is metered under ('' when none, :data:`UNKNOWN_QUEUE` for a
    name the host does not know), given back to :meth:`FrontDoor.on_reply`."""


_HOST_TRAFFIC = Admission(None, "")
"""Peer-socket requests: neither checked nor metered."""


def _carries_deletes(frame: Frame) -> bool:
    """A RECEIVE or CREDIT that deletes too (``del``, or a RECEIVE's ``dref``):
    it needs the delete permission."""
    body = frame.body
    return isinstance(body, dict) and (body.get("del") is not None or body.get("dref") is not None)


class QueueCounters:
    __slots__ = ("bytes_in", "bytes_out", "deletes", "denied", "receives", "redeliveries", "sends",
                 "throttled")

    def __init__(self) -> None:
        self.sends = self.receives = self.deletes = self.redeliveries = 0
        self.bytes_in = self.bytes_out = self.throttled = self.denied = 0

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__slots__}


class Latency:
    """A fixed-bucket histogram (seconds) per command name."""

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}

    def observe(self, command: str, seconds: float) -> None:
        c = self.counts.get(command)
        if c is None:
            c = self.counts[command] = [0] * (len(LATENCY_BUCKETS_S) + 1)
            self.sums[command] = 0.0
        c[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self.sums[command] += seconds


class FrontDoor:
    def __init__(self, configs: Callable[[], Mapping[str, QueueConfig]],
                 policies: Callable[[], Mapping[str, authz.Policy]],
                 role_of: Callable[[str | None], str | None], usage: UsageBook | None) -> None:
        self.configs = configs
        self.policies = policies
        self.role_of = role_of
        self.usage = usage
        self.limiter = RateLimiter()
        self.queues: dict[str, QueueCounters] = {}
        self.latency = Latency()
        self.counters: Counter[str] = Counter()
        self.commit = Latency()
        """Group-commit (flush + fsync) durations, under the name ``flush``."""

    def _q(self, queue: str) -> QueueCounters:
        c = self.queues.get(queue)
        if c is None:
            c = self.queues[queue] = QueueCounters()
        return c

    def check(self, sock: str, user: str | None, frame: Frame, size: int) -> Admission:
        """Let the request through (``refused`` None) or not (the error to
        answer); its queue goes back to :meth:`on_reply` with the request."""
        if sock != "client":
            return _HOST_TRAFFIC
        identity = user or authz.ANONYMOUS
        named = queue_of(frame)
        queue = self._metered(named, frame)
        if self.usage is not None and queue:
            self.usage.add(identity, queue, 1, size, 0)
        if queue:
            self._q(queue).bytes_in += size
        if self.role_of(user) == "host":
            return Admission(None, queue)
        try:
            action = authz.ACTION_OF.get(frame.command)
            deletes = _carries_deletes(frame)
            if named and (action is not None or deletes):
                policy = self.policies().get(named)
                if action is not None:
                    authz.check(policy, action, named, identity)
                if deletes:
                    authz.check(policy, "delete", named, identity)
            cfg = self.configs().get(named) if named else None
            if cfg is not None and (frame.command in RATE_LIMITED or deletes):
                # (a CREDIT costs a token only when it carries deletes: the
                # credits alone and keepalives keep a subscription flowing)
                self._limit(cfg, identity, time.monotonic())
        except AccessDenied as exc:
            self.counters["denied"] += 1
            self._q(queue).denied += 1
            return Admission(exc, queue)
        except Throttled as exc:
            self.counters["throttled"] += 1
            self._q(queue).throttled += 1
            return Admission(exc, queue)
        return Admission(None, queue)

    def _metered(self, named: str, frame: Frame) -> str:
        """The queue a request is counted under: ``named`` if the host knows it
        (or a CREATE_QUEUE of a valid name), else :data:`UNKNOWN_QUEUE`."""
        if not named or named in self.configs():
            return named
        if frame.command == Command.CREATE_QUEUE and QUEUE_NAME_RE.fullmatch(named):
            return named
        return UNKNOWN_QUEUE

    def _limit(self, cfg: QueueConfig, identity: str, now_s: float) -> None:
        self.limiter.check(("q", cfg.name), cfg.rate_limit_per_s, cfg.rate_burst, now_s,
                           f"queue {cfg.name!r}")
        self.limiter.check(("c", identity, cfg.name), cfg.client_rate_limit_per_s, cfg.rate_burst, now_s,
                           f"client {identity} on queue {cfg.name!r}")

    def on_reply(self, sock: str, user: str | None, frame: Frame, started: float, result: Any,
                 size: int, queue: str) -> None:
        """Count a reply (``result`` is the reply body, or the error) to a
        request on ``queue`` (what :meth:`check` found)."""
        if sock != "client":
            return
        self.latency.observe(_NAMES[frame.command], time.monotonic() - started)
        if not queue:
            return
        c = self._q(queue)
        c.bytes_out += size
        if self.usage is not None:
            self.usage.add(user or authz.ANONYMOUS, queue, 0, 0, size)
        if isinstance(result, ZmqueueError) or not isinstance(result, dict):
            return
        if frame.command == Command.SEND:
            c.sends += (len(result.get("ids") or ()) or len(result.get("ib") or b"") // 16
                        or int(result.get("n", 0)))
        elif frame.command == Command.RECEIVE:
            msgs = result.get("m") or ()
            c.receives += len(msgs)
            c.redeliveries += sum(1 for m in msgs if isinstance(m, list) and len(m) > 4
                                  and isinstance(m[4], int) and m[4] > 1)
            for group in result.get("ms") or ():  # column groups: [.., seqs, receive counts, ..]
                c.receives += len(group[4])
                c.redeliveries += len(group[5]) - group[5].count(1)  # (delivered: every count >= 1)
        elif frame.command == Command.DELETE:
            c.deletes += (result.get("results") or []).count(None)
        if "dr" in result:  # deletes carried by a RECEIVE or a CREDIT
            c.deletes += (result["dr"] or []).count(None)

