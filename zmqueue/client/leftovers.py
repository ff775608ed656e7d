"""Messages a receive took beyond what was asked, kept in the ``Queue`` handle.

A long poll parks a RECEIVE on every (partition, host) at once; when several
answer with messages before the others are cancelled, the receive has more
than ``max_messages``. The rest are in flight for this handle (their
visibility timeout runs), so they are kept and handed out first by its next
receives, but only while they are still this handle's to hand out:

- **time**: a kept message is handed out only while more than a margin of
  its visibility timeout is left: at most half the timeout after it was
  taken, and never in its last :data:`MARGIN_S` (the caller needs time to
  handle and delete it before another consumer may receive it). ``taken_at``
  is when its receive was sent (a sweep) or when the long poll's first
  answer with messages arrived (hosts take a parked poll's messages at most
  a network delay before their answer arrives, far inside the margin).
- **incarnation**: a message of a queue that was deleted since (the handle
  reads another incarnation of the queue) is dropped.
- **FIFO groups**: handing out a message of group G releases (visibility 0)
  every kept message of G: the caller may fail on the one it got, and the
  host never hands a group's next message out while an earlier one is in
  flight, so neither does the handle. Released, they come back behind it.
- **visibility timeout**: each kept message remembers the timeout it was
  taken with; :meth:`Leftovers.take_for` names those handed out now that a
  receive asking for another one must re-time (CHANGE_VISIBILITY to its
  timeout, from now) before returning them. Taken with the timeout asked
  for now, a kept message keeps its deadline, counted from when it was taken.

A dropped message is not lost: it comes back through the queue once its
visibility timeout runs out (the incarnation rule: its queue is gone). Pure
logic, no sockets: the caller releases what :meth:`Leftovers.take` returns.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from zmqueue.client.models import Message, column_ref
from zmqueue.errors import ZmqueueError
from zmqueue.protocol import Receipt

MARGIN_S = 1.0
"""A kept message is never handed out in the last second of its visibility timeout."""
KEEP_FRACTION = 0.5
"""... nor after half its visibility timeout ran."""


def keep_for(visibility_s: float) -> float:
    """How long after it was taken a message may still be handed out (<= 0: not at all)."""
    return min(visibility_s * KEEP_FRACTION, visibility_s - MARGIN_S)


def incarnation_of(m: Message) -> int | None:
    """The queue incarnation a received message came from (None: not known)."""
    ref = column_ref(m)
    if ref is not None:
        return ref[0].incarnation
    try:
        return Receipt.decode(m.receipt).incarnation
    except ZmqueueError:
        return None


@dataclass(slots=True)
class _Kept:
    message: Message
    until: float
    """``time.monotonic()`` after which it is not handed out."""
    incarnation: int | None
    visibility_s: float
    """The visibility timeout it was taken with."""


class Leftovers:
    """The kept messages of one handle, oldest first (see the module doc)."""

    def __init__(self, fifo: bool) -> None:
        self.fifo = fifo
        self._kept: deque[_Kept] = deque()
        self._lock = threading.Lock()
        """A handle used from several threads: each kept message is handed out once."""

    def __len__(self) -> int:
        return len(self._kept)

    def __bool__(self) -> bool:
        return bool(self._kept)

    def messages(self) -> list[Message]:
        with self._lock:
            return [k.message for k in self._kept]

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()

    def split(self, msgs: list[Message], max_n: int, taken_at: float, visibility_s: float
              ) -> tuple[list[Message], list[Message]]:
        """The first ``max_n`` of a receive's ``msgs`` to hand out now; the
        rest are kept if they may be. Returns (handed out, to release): FIFO
        messages of a group handed out now."""
        out, rest = msgs[:max_n], msgs[max_n:]
        if not rest:
            return out, []
        groups = self._groups(out)
        release = [m for m in rest if m.group_id in groups] if groups else []
        if release:
            rest = [m for m in rest if m.group_id not in groups]
        until = taken_at + keep_for(visibility_s)
        if until > taken_at:
            kept = [_Kept(m, until, incarnation_of(m), visibility_s) for m in rest]
            with self._lock:
                self._kept.extend(kept)
        return out, release

    def prune(self, now: float, incarnation: int | None) -> None:
        """Drop what may not be handed out any more: past its time, or of
        another incarnation of the queue than ``incarnation`` (None: unknown)."""
        with self._lock:
            self._prune(now, incarnation)

    def _prune(self, now: float, incarnation: int | None) -> None:
        if any(k.until <= now or _other(k.incarnation, incarnation) for k in self._kept):
            self._kept = deque(k for k in self._kept
                               if k.until > now and not _other(k.incarnation, incarnation))

    def take(self, max_n: int, now: float, incarnation: int | None) -> tuple[list[Message], list[Message]]:
        """Up to ``max_n`` kept messages to hand out (after :meth:`prune`), and
        the kept FIFO messages of their groups, to release."""
        out, release, _ = self.take_for(max_n, now, incarnation, None)
        return out, release

    def take_for(self, max_n: int, now: float, incarnation: int | None, visibility_s: float | None
                 ) -> tuple[list[Message], list[Message], list[Message]]:
        """:meth:`take`, and which of the messages handed out were taken with
        another visibility timeout than ``visibility_s`` (the one the receive
        asks for now; None: none are named), to re-time before returning them."""
        with self._lock:
            self._prune(now, incarnation)
            taken: list[_Kept] = []
            while self._kept and len(taken) < max_n:
                taken.append(self._kept.popleft())
            out = [k.message for k in taken]
            groups = self._groups(out)
            release = [k.message for k in self._kept if k.message.group_id in groups] if groups else []
            if release:
                self._kept = deque(k for k in self._kept if k.message.group_id not in groups)
        retime = ([] if visibility_s is None
                  else [k.message for k in taken if k.visibility_s != visibility_s])
        return out, release, retime

    def _groups(self, out: Iterable[Message]) -> set[str]:
        """FIFO: the groups of the messages handed out (their kept messages are released)."""
        return {m.group_id for m in out if m.group_id is not None} if self.fifo else set()


def _other(a: int | None, b: int | None) -> bool:
    """Whether incarnations ``a`` and ``b`` are known (not None, not 0) and differ."""
    return bool(a) and bool(b) and a != b
