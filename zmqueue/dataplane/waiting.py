"""Long polls parked on a partition until a message is receivable, their
wait time runs out, or the client cancels them."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zmqueue.dataplane.dispatch import Request
from zmqueue.dataplane.topology import PartKey, StreamKey
from zmqueue.errors import ZmqueueError

if TYPE_CHECKING:
    from zmqueue.dataplane.service import QueueService

MAX_WAITERS = 100_000
RECHECK_MS = 1000
"""Every partition with parked polls is looked at at least this often."""

log = logging.getLogger(__name__)


def has_messages(reply: dict[str, Any]) -> bool:
    """Whether a RECEIVE reply (``QueueService.take``: lists ``m``, column
    groups ``ms`` only when there is one) holds any message."""
    return bool(reply["m"]) or "ms" in reply


@dataclass
class Waiter:
    request: Request
    max_messages: int
    visibility_s: int | None
    deadline_ms: int
    cols: bool = False
    """The client reads column groups (RECEIVE ``cols``)."""


class Waiters:
    """The parked polls of every partition, served in the order they parked.

    A host pass looks only at the partitions that may have changed: those
    with a stream changed in the pass (the service's ``dirty`` streams,
    which every request that stages a record marks, and which
    :meth:`note_changed` hands over at commit for what changed after the
    pass's serve), those whose timer is due (a waiter's deadline, a stream's
    next visibility time), all of them when the set of streams changed, and
    the ones :meth:`touch` names (a stream that starts or resumes writing).
    Every partition is also looked at once per ``RECHECK_MS`` whatever
    happened: a change that reached no path above is then served late, and
    counted in :attr:`late` (and logged), not lost. Before, every pass
    looked at every partition with a parked poll: ~2-5 us each, a sixth to a
    third of a busy host's time with 64 of them.
    """

    def __init__(self) -> None:
        self.by_part: dict[PartKey, deque[Waiter]] = {}
        self.due: dict[PartKey, int] = {}
        """Per partition, the earliest deadline of its waiters (as of the last
        sweep, lowered by every park): the waiters are swept for deadlines
        only once it passes, not on every look (O(waiters) each)."""
        self.timer: dict[PartKey, tuple[int, bool]] = {}
        """Per partition, when to look at it again without a change, and
        whether that is the recheck (not a deadline or visibility time)."""
        self.touched: set[PartKey] = set()
        self.set_version = -1
        self.total = 0
        self.late = 0
        """Waiters served by a recheck: a change no path above reported."""

    def park(self, part: PartKey, req: Request, max_n: int, vis_s: int | None, deadline: int,
             cols: bool = False) -> None:
        if self.total >= MAX_WAITERS:
            req.reply({"m": []})
            return
        self.by_part.setdefault(part, deque()).append(Waiter(req, max_n, vis_s, deadline, cols))
        self.due[part] = min(self.due.get(part, deadline), deadline)
        self.touched.add(part)
        self.total += 1

    def count(self, part: PartKey) -> int:
        return len(self.by_part.get(part, ()))

    def touch(self, part: PartKey) -> None:
        """Look at ``part`` in the next pass (a stream of it may have become
        receivable other than by a request: it started or resumed writing)."""
        if part in self.by_part:
            self.touched.add(part)

    def note_changed(self, keys: Iterable[StreamKey]) -> None:
        """Streams changed in this pass (the service's dirty set, at commit):
        their partitions are looked at in the next pass."""
        if self.by_part:
            by_part = self.by_part
            self.touched.update(p for p in ((k[0], k[1]) for k in keys) if p in by_part)

    def serve(self, svc: QueueService, now: int) -> int | None:
        """Answer waiters that can be; returns ms until the next due time."""
        by_part = self.by_part
        if not by_part:
            self.total = 0
            self.touched.clear()
            self.timer.clear()
            return None
        touched = self.touched
        if svc.set.version != self.set_version:  # streams opened or closed: look at every one
            self.set_version = svc.set.version
            touched.update(by_part)
        for key in svc.dirty:  # changed by this pass's requests
            part = (key[0], key[1])
            if part in by_part:
                touched.add(part)
        timer = self.timer
        look = [p for p in by_part if p in touched or timer.get(p, (now, False))[0] <= now]
        self.touched = set()
        for part in look:
            self._look(svc, part, now, part not in touched and timer.get(part, (now, False))[1])
        self.total = sum(map(len, by_part.values()))
        if not timer:
            return None
        return max(1, min(t for t, _ in timer.values()) - now)

    def _look(self, svc: QueueService, part: PartKey, now: int, recheck: bool) -> None:
        q = self.by_part[part]
        streams = svc.set.led_streams(part)
        while q:
            w = q[0]
            if w.request.answered:
                q.popleft()
                continue
            if not any(st.store.has_visible(now) for st in streams):
                break
            reply = svc.take(streams, w.max_messages, w.visibility_s, now, w.cols)
            if not has_messages(reply):
                break
            q.popleft()
            w.request.reply(reply)
            if recheck:
                self.late += 1
                if self.late & (self.late - 1) == 0:  # (said at the 1st, 2nd, 4th, 8th, ... time)
                    log.warning("a parked poll on %s/%s was served by the %d ms recheck: a change "
                                "reached none of the paths that wake it (%d so far)",
                                part[0], part[1], RECHECK_MS, self.late)
        due = self.due.get(part, now)
        if due <= now:  # a deadline passed: answer those waiters (empty)
            kept = [w for w in q if w.deadline_ms > now and not w.request.answered]
            if len(kept) < len(q):
                for w in q:
                    if w.deadline_ms <= now:
                        w.request.reply({"m": []})
                q = self.by_part[part] = deque(kept)
            due = self.due[part] = min((w.deadline_ms for w in q), default=now)
        if not q:
            del self.by_part[part]
            self.due.pop(part, None)
            self.timer.pop(part, None)
            return
        at, is_recheck = (due, False) if due <= now + RECHECK_MS else (now + RECHECK_MS, True)
        for st in streams:
            nxt = st.store.next_wakeup_ms(now)
            if nxt is not None and nxt < at:
                at, is_recheck = nxt, False
        self.timer[part] = (at, is_recheck)

    def cancel(self, identity: bytes, request_id: int) -> bool:
        for part, q in self.by_part.items():
            for w in q:
                if w.request.identity == identity and w.request.frame.request_id == request_id:
                    q.remove(w)
                    self.total -= 1
                    self.touched.add(part)  # (a partition left without waiters goes at its next look)
                    w.request.reply({"m": []})
                    return True
        return False

    def answer_all(self, part: PartKey) -> None:
        self.due.pop(part, None)
        self.timer.pop(part, None)
        for w in self.by_part.pop(part, deque()):
            w.request.reply({"m": []})

    def fail_partition(self, part: PartKey, exc: ZmqueueError) -> None:
        self.due.pop(part, None)
        self.timer.pop(part, None)
        for w in self.by_part.pop(part, deque()):
            w.request.fail(exc)
