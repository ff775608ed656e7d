"""Push consumers: credit-based flow control over the client's connection.

A subscriber starts with ``prefetch`` credits. Each pushed message costs one
credit; the client returns credits (CREDIT) as it finishes messages, so a slow
consumer never holds more than ``prefetch`` messages it has not finished.
Pushed messages are ordinary receives: under their visibility timeout, and
deleted by receipt. A host pushes from the streams it writes.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from zmqueue import protocol
from zmqueue.dataplane.dispatch import Outbox
from zmqueue.dataplane.partwatch import PartWatch
from zmqueue.dataplane.topology import PartKey
from zmqueue.errors import InvalidParameter
from zmqueue.protocol import Command

if TYPE_CHECKING:
    from zmqueue.dataplane.service import QueueService
    from zmqueue.dataplane.stream import Stream

PUSH_BATCH_MAX = 100
MAX_SUBSCRIBERS = 10_000
IDLE_EXPIRY_S = 30.0
"""A subscriber not heard from (CREDIT, keepalives every 5 s) this long is dropped."""


@dataclass
class Subscriber:
    sub_id: int
    part: PartKey
    identity: bytes
    prefetch: int
    visibility_s: int | None
    cols: bool = False
    """Plain messages go as column groups (``ms``), as a RECEIVE with ``cols``."""
    credit: int = 0
    delivered: int = 0
    last_seen: float = 0.0

    def __post_init__(self) -> None:
        self.credit = self.prefetch
        self.last_seen = time.monotonic()


class Pusher:
    """The push subscribers of this host. A host pass looks only at the
    partitions its :class:`PartWatch` names (changed in the pass, a
    visibility time due, a subscriber's credit back, or the once-a-second
    recheck), and drops idle subscribers once a second."""

    def __init__(self) -> None:
        self.outbox: Outbox | None = None
        self.subs: dict[int, Subscriber] = {}
        self.by_part: dict[PartKey, dict[int, Subscriber]] = {}
        self.watch = PartWatch("a subscriber", self.by_part)
        self.next_expiry = 0.0
        self._ids = itertools.count(1)
        self.pushed: dict[str, int] = {}
        """Messages pushed, per queue (the ``zmqueue_queue_pushed_total`` metric)."""
        self.redelivered: dict[str, int] = {}
        """Of those, pushed with a receive count > 1 (added to the queue's
        ``zmqueue_queue_redeliveries_total``)."""

    def subscribe(self, part: PartKey, identity: bytes, prefetch: int, vis_s: int | None,
                  cols: bool = False) -> int:
        if len(self.subs) >= MAX_SUBSCRIBERS:
            raise InvalidParameter(f"this host has {MAX_SUBSCRIBERS} subscribers already")
        sub_id = next(self._ids)
        sub = self.subs[sub_id] = Subscriber(sub_id, part, identity, prefetch, vis_s, cols)
        self.by_part.setdefault(part, {})[sub_id] = sub
        self.watch.touch(part)
        return sub_id

    def _remove(self, sub_id: int) -> None:
        sub = self.subs.pop(sub_id)
        mine = self.by_part.get(sub.part)
        if mine is not None:
            mine.pop(sub_id, None)
            if not mine:
                del self.by_part[sub.part]
                self.watch.forget(sub.part)

    def part_of(self, sub_id: int, identity: bytes) -> PartKey:
        return self._get(sub_id, identity).part

    def _get(self, sub_id: int, identity: bytes) -> Subscriber:
        sub = self.subs.get(sub_id)
        if sub is None or sub.identity != identity:
            raise InvalidParameter(
                f"no subscription {sub_id} on this connection: it was never made here, or this host "
                f"dropped it (it no longer writes the partition, or heard no CREDIT for "
                f"{IDLE_EXPIRY_S:.0f} s); subscribe again", field="subscription")
        return sub

    def add_credit(self, sub_id: int, identity: bytes, n: int) -> int:
        """Return ``n`` credits (0 = a keepalive)."""
        sub = self._get(sub_id, identity)
        if n > 0:
            self.watch.touch(sub.part)  # credit back: it may take what is waiting
        sub.credit = min(sub.credit + n, sub.prefetch)
        sub.last_seen = time.monotonic()
        return sub.credit

    def unsubscribe(self, sub_id: int, identity: bytes) -> None:
        self._get(sub_id, identity)
        self._remove(sub_id)

    def drop_partition(self, part: PartKey) -> None:
        for sub_id in list(self.by_part.get(part, ())):
            self._remove(sub_id)

    def push_all(self, svc: QueueService, now: int) -> int | None:
        """Push what can be; returns ms until the next due time (a visibility
        time, the recheck), None without subscribers."""
        assert self.outbox is not None, "register() the service first"
        if not self.subs:
            self.watch.clear()
            return None
        mono = time.monotonic()
        if mono >= self.next_expiry:  # (once a second: every subscriber is looked through)
            self.next_expiry = mono + 1.0
            for sub_id in [i for i, s in self.subs.items() if s.last_seen < mono - IDLE_EXPIRY_S]:
                self._remove(sub_id)
        for part, recheck in self.watch.due(svc, now):
            subs = self.by_part[part].values()
            if not any(sub.credit > 0 for sub in subs):  # (credit back touches it)
                self.watch.schedule(part, now, [])
                continue
            streams = svc.set.led_streams(part)
            for sub in subs:
                if self._push(svc, sub, streams, now) and recheck:
                    self.watch.found_late(part)
            self.watch.schedule(part, now, streams)
        return self.watch.next_in(now)

    def _push(self, svc: QueueService, sub: Subscriber, streams: list[Stream], now: int) -> bool:
        """One batch to ``sub`` if it has credit and there are messages; whether it got any."""
        assert self.outbox is not None
        if sub.credit <= 0 or not any(st.store.has_visible(now) for st in streams):
            return False
        got = svc.take(streams, min(sub.credit, PUSH_BATCH_MAX), sub.visibility_s, now, sub.cols)
        msgs, groups = got["m"], got.get("ms") or []
        # lists: [id, body, attrs, receipt, count, ...]; groups: [.., seqs, counts, sent]
        counts = [m[4] for m in msgs] + [c for g in groups for c in g[5]]
        if not counts:
            return False
        sub.credit -= len(counts)
        sub.delivered += len(counts)
        q = sub.part[0]
        self.pushed[q] = self.pushed.get(q, 0) + len(counts)
        again = sum(1 for c in counts if c > 1)
        if again:
            self.redelivered[q] = self.redelivered.get(q, 0) + again
        body = {"sub": sub.sub_id, "q": q, "p": sub.part[1], "m": msgs}
        if groups:
            body["ms"] = groups
            if "inc" in got:
                body["inc"] = got["inc"]
        self.outbox.put("client", sub.identity, protocol.encode_push(Command.DELIVER, body))
        return True
