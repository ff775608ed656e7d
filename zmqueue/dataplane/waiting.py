"""Long polls parked on a partition until a message is receivable, their
wait time runs out, or the client cancels them."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from zmqueue.dataplane.dispatch import Request
from zmqueue.dataplane.partwatch import PartWatch
from zmqueue.dataplane.topology import PartKey
from zmqueue.errors import ZmqueueError

if TYPE_CHECKING:
    from zmqueue.dataplane.service import QueueService

MAX_WAITERS = 100_000


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
    A host pass looks only at the partitions its :class:`PartWatch` names
    (changed in the pass, timer due, touched, or the once-a-second recheck)."""

    def __init__(self) -> None:
        self.by_part: dict[PartKey, deque[Waiter]] = {}
        self.due: dict[PartKey, int] = {}
        """Per partition, the earliest deadline of its waiters (as of the last
        sweep, lowered by every park): the waiters are swept for deadlines
        only once it passes, not on every look (O(waiters) each)."""
        self.watch = PartWatch("a parked poll", self.by_part)
        self.where: dict[tuple[bytes, int], PartKey] = {}
        """Each parked waiter's partition by (client identity, request id):
        a CANCEL looks in that partition only (it scanned every waiter; a
        long poll over P partitions cancels P - 1 of them when one answers)."""
        self.total = 0
        """Parked waiters, kept by every park and removal (for MAX_WAITERS;
        a pass used to recount them, O(partitions))."""

    def park(self, part: PartKey, req: Request, max_n: int, vis_s: int | None, deadline: int,
             cols: bool = False) -> None:
        if self.total >= MAX_WAITERS:
            req.reply({"m": []})
            return
        self.by_part.setdefault(part, deque()).append(Waiter(req, max_n, vis_s, deadline, cols))
        self.where[(req.identity, req.frame.request_id)] = part
        self.due[part] = min(self.due.get(part, deadline), deadline)
        self.watch.touch(part)
        self.total += 1

    def count(self, part: PartKey) -> int:
        return len(self.by_part.get(part, ()))

    def serve(self, svc: QueueService, now: int) -> int | None:
        """Answer waiters that can be; returns ms until the next due time."""
        if not self.by_part:
            self.total = 0
            self.where.clear()
            self.watch.clear()
            return None
        for part, recheck in self.watch.due(svc, now):
            self._look(svc, part, now, recheck)
        return self.watch.next_in(now)

    def _look(self, svc: QueueService, part: PartKey, now: int, recheck: bool) -> None:
        q = self.by_part[part]
        streams = svc.set.led_streams(part)
        while q:
            w = q[0]
            if w.request.answered:
                self._forget(q.popleft())
                continue
            if not any(st.store.has_visible(now) for st in streams):
                break
            reply = svc.take(streams, w.max_messages, w.visibility_s, now, w.cols)
            if not has_messages(reply):
                break
            self._forget(q.popleft())
            w.request.reply(reply)
            if recheck:
                self.watch.found_late(part)
        due = self.due.get(part, now)
        if due <= now:  # a deadline passed: answer those waiters (empty), drop the answered
            kept: deque[Waiter] = deque()
            for w in q:
                if w.deadline_ms <= now:
                    self._forget(w)
                    w.request.reply({"m": []})
                elif w.request.answered:
                    self._forget(w)
                else:
                    kept.append(w)
            q = self.by_part[part] = kept
            due = self.due[part] = min((w.deadline_ms for w in q), default=now)
        if not q:
            del self.by_part[part]
            self.due.pop(part, None)
            self.watch.forget(part)
            return
        self.watch.schedule(part, now, streams, due)

    def _forget(self, w: Waiter) -> None:
        """``w`` left its queue (answered, failed, or its deadline passed)."""
        self.total -= 1
        self.where.pop((w.request.identity, w.request.frame.request_id), None)

    def cancel(self, identity: bytes, request_id: int) -> bool:
        part = self.where.pop((identity, request_id), None)
        if part is None:
            return False
        q = self.by_part.get(part)
        if q is None:
            return False
        for w in q:
            if w.request.identity == identity and w.request.frame.request_id == request_id:
                q.remove(w)
                self._forget(w)
                self.watch.touch(part)  # (a partition left without waiters goes at its next look)
                w.request.reply({"m": []})
                return True
        return False

    def answer_all(self, part: PartKey) -> None:
        self.due.pop(part, None)
        self.watch.forget(part)
        for w in self.by_part.pop(part, deque()):
            self._forget(w)
            w.request.reply({"m": []})

    def fail_partition(self, part: PartKey, exc: ZmqueueError) -> None:
        self.due.pop(part, None)
        self.watch.forget(part)
        for w in self.by_part.pop(part, deque()):
            self._forget(w)
            w.request.fail(exc)
