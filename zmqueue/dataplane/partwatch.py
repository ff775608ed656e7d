"""Which partitions a host pass must look at for its parked polls or its
push subscriptions: those that may have changed, not every one.

A pass looks at a watched partition when one of its streams changed in the
pass (the service's ``dirty`` streams, which every request that stages a
record marks; :meth:`PartWatch.note_changed` hands over at commit what
changed after the look), when its timer is due (a poll's deadline, a
stream's next visibility time), when the set of streams changed (every
partition), and when :meth:`PartWatch.touch` names it (a subscriber's
credit came back, a stream started or resumed writing). Every watched
partition is also looked at once per ``RECHECK_MS`` whatever happened: what
such a recheck finds to hand out reached none of the paths above; the
caller counts it (``late``) and says so in the log, and it is served late,
not lost. Before, every pass looked at every partition with a parked poll
or a subscriber: ~2-5 us each, a third of a busy host's time with 64.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from zmqueue.dataplane.topology import PartKey, StreamKey

if TYPE_CHECKING:
    from zmqueue.dataplane.service import QueueService
    from zmqueue.dataplane.stream import Stream

RECHECK_MS = 1000
"""Every watched partition is looked at at least this often."""

log = logging.getLogger(__name__)


class PartWatch:
    def __init__(self, what: str, watched: Mapping[PartKey, Any]) -> None:
        self.what = what
        """What is watched, for the log ("a parked poll", "a subscriber")."""
        self.watched = watched
        """The owner's per-partition map (its waiters, its subscribers): the
        partitions in it are the watched ones."""
        self.touched: set[PartKey] = set()
        self.timer: dict[PartKey, tuple[int, bool]] = {}
        """Per partition, when to look at it again without a change, and
        whether that is the recheck (not a deadline or visibility time)."""
        self.heap: list[tuple[int, PartKey]] = []
        """(time, partition), soonest first: every timed partition has an
        entry at or before its timer (``queued``); entries a later schedule
        outdated are dropped or re-queued as they come up, so a pass finds
        its due timers without walking every watched partition."""
        self.queued: dict[PartKey, int] = {}
        """Per partition, its soonest entry in ``heap``."""
        self.set_version = -1
        self.late = 0
        """Hand-outs found by a recheck: a change no path above reported."""

    def touch(self, part: PartKey) -> None:
        """Look at ``part`` in the next pass if it is watched (a stream of it
        may have become receivable other than by a request, a subscriber's
        credit came back, a waiter parked or left)."""
        if part in self.watched:
            self.touched.add(part)

    def note_changed(self, keys: Iterable[StreamKey]) -> None:
        """Streams changed in this pass (the service's dirty set, at commit):
        their watched partitions are looked at in the next pass."""
        watched = self.watched
        if watched:
            self.touched.update(p for p in ((k[0], k[1]) for k in keys) if p in watched)

    def due(self, svc: QueueService, now: int) -> list[tuple[PartKey, bool]]:
        """The watched partitions to look at in this pass, each with whether
        only the recheck brought it (nothing reported a change)."""
        touched, timer, watched = self.touched, self.timer, self.watched
        self.touched = set()
        if svc.set.version != self.set_version:  # streams opened or closed: look at every one
            self.set_version = svc.set.version
            touched.update(watched)
        for key in svc.dirty:  # changed by this pass's requests
            part = (key[0], key[1])
            if part in watched:
                touched.add(part)
        out = [(p, False) for p in touched if p in watched]
        heap, queued = self.heap, self.queued
        while heap and heap[0][0] <= now:
            at, p = heapq.heappop(heap)
            if queued.get(p) != at:
                continue  # (a later entry of p stands in for it)
            del queued[p]
            if p not in watched or p not in timer:
                continue
            t, recheck = timer[p]
            if t <= now:
                if p not in touched:
                    out.append((p, recheck))
            else:  # rescheduled later meanwhile: queue its timer
                heapq.heappush(heap, (t, p))
                queued[p] = t
        return out

    def schedule(self, part: PartKey, now: int, streams: list[Stream], deadline: int | None = None) -> None:
        """Look at ``part`` again by ``deadline`` (if any), its streams' next
        visibility time, or the recheck, whichever comes first."""
        at, recheck = (now + RECHECK_MS, True)
        if deadline is not None and deadline <= at:
            at, recheck = deadline, False
        for st in streams:
            nxt = st.store.next_wakeup_ms(now)
            if nxt is not None and nxt < at:
                at, recheck = nxt, False
        self.timer[part] = (at, recheck)
        if at < self.queued.get(part, at + 1):
            heapq.heappush(self.heap, (at, part))
            self.queued[part] = at

    def forget(self, part: PartKey) -> None:
        self.timer.pop(part, None)
        self.touched.discard(part)

    def clear(self) -> None:
        self.timer.clear()
        self.touched.clear()
        self.heap.clear()
        self.queued.clear()

    def next_in(self, now: int) -> int | None:
        """ms to the earliest timer (at least 1), None without one. (The
        soonest heap entry: never after the earliest timer, at times before
        it, when a later schedule outdated it: a pass that finds nothing due.)"""
        if not self.timer:
            return None
        return max(1, self.heap[0][0] - now)

    def found_late(self, part: PartKey) -> None:
        """A recheck found something to hand out on ``part``."""
        self.late += 1
        if self.late & (self.late - 1) == 0:  # (said at the 1st, 2nd, 4th, 8th, ... time)
            log.warning("%s on %s/%s was served by the %d ms recheck: a change reached none of the "
                        "paths that wake it (%d so far)", self.what, part[0], part[1], RECHECK_MS, self.late)
