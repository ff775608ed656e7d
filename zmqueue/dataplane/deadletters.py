"""Moving dead letters to the dead-letter queue.

A message received more than ``max_receive_count`` times is taken out of
delivery by the store (state MOVING), copied to partition 0 of the DLQ
(locally when this host writes a DLQ stream, else forwarded to a host that
does), and only then marked moved in its source stream. A crash in between
redelivers it to the DLQ again later: a possible duplicate there, never a
loss. One move carries at most MAX_BATCH messages and
DEAD_LETTER_BATCH_BYTES_MAX bytes of them (at least one message:
:func:`split_batch`; a frame the DLQ's host takes), one move in flight per
stream, the rest kept in order for the next. A DLQ that is unknown, or of the
other type than its source (deleted and created again as the other type),
keeps the messages waiting in their source (counted as
``dead_letters_waiting`` in stats, not ``in_flight``), retried every second,
with a warning at most once a minute; each host's ``kv:`` check names the
source and its dead-letter queue meanwhile (``kvhealth.dead_letter_problems``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from zmqueue.dataplane.storage import Delivered
from zmqueue.dataplane.stream import Stream
from zmqueue.dataplane.topology import FIFO_ORIGIN, StreamKey
from zmqueue.errors import ZmqueueError
from zmqueue.protocol import DEAD_LETTER_BATCH_BYTES_MAX, MAX_BATCH, Command

if TYPE_CHECKING:
    from zmqueue.dataplane.service import QueueService

log = logging.getLogger(__name__)
RETRY_MS = 1000
WARN_EVERY_MS = 60_000
"""A stream's repeated retry warning is logged at most once a minute (the retry runs every second)."""
WARNINGS = ("unknown", "type", "open", "full", "forward")


def split_batch(dead: list[Delivered], max_n: int, max_bytes: int) -> tuple[list[Delivered], list[Delivered]]:
    """(the first messages of ``dead`` one move carries, the rest), in order:
    at most ``max_n`` messages and ``max_bytes`` of bodies plus attributes as
    stored (a sealed message is no smaller than it goes on the wire), but
    always the first message, whatever its size."""
    assert max_n >= 1 and max_bytes >= 1, (max_n, max_bytes)
    size = 0
    for i in range(min(len(dead), max_n)):
        size += len(dead[i].body) + len(dead[i].attributes)
        if size > max_bytes and i > 0:
            return dead[:i], dead[i:]
    return dead[:max_n], dead[max_n:]


class DeadLetterMover:
    def __init__(self, svc: QueueService) -> None:
        self.svc = svc
        self.pending: dict[StreamKey, list[Delivered]] = {}
        self.in_flight: set[StreamKey] = set()
        self.next_try_ms: dict[StreamKey, int] = {}
        self.moved: dict[str, int] = {}
        """Messages moved to a DLQ, by source queue (metrics)."""
        self.warned_ms: dict[tuple[StreamKey, str], int] = {}
        """When each stream last logged each kind of retry warning."""
        self.quiet: dict[tuple[StreamKey, str], int] = {}
        """Warnings of that kind held back since then (told with the next one)."""

    def _warn(self, key: StreamKey, kind: str, now: int, msg: str, *args: object) -> None:
        """Log a retry warning, at most once a minute per stream and kind, with a count of the held-back."""
        last = self.warned_ms.get((key, kind))
        if last is not None and now - last < WARN_EVERY_MS:
            self.quiet[(key, kind)] = self.quiet.get((key, kind), 0) + 1
            return
        held = self.quiet.pop((key, kind), 0)
        self.warned_ms[(key, kind)] = now
        log.warning(msg + (f" ({held} like it in the last minute not logged)" if held else ""), *args)

    def _moved(self, key: StreamKey, queue: str, n: int) -> None:
        self.moved[queue] = self.moved.get(queue, 0) + n
        for kind in WARNINGS:  # a later failure is news again
            self.warned_ms.pop((key, kind), None)
            self.quiet.pop((key, kind), None)

    def add(self, st: Stream, dead: list[Delivered]) -> None:
        self.pending.setdefault(st.key, []).extend(dead)

    def move(self, now: int) -> None:
        if not self.pending:
            return
        for key in list(self.pending):
            if key in self.in_flight or self.next_try_ms.get(key, 0) > now:
                continue
            st = self.svc.set.streams.get(key)
            if st is None:
                self.pending.pop(key)
                continue
            # (a frame the DLQ's host takes, a block its replicas take: the rest
            # go in the next passes, one batch in flight)
            dead, rest = split_batch(self.pending.pop(key), MAX_BATCH, DEAD_LETTER_BATCH_BYTES_MAX)
            if rest:
                self.pending[key] = rest
            self._move(st, dead, now)

    def _retry(self, key: StreamKey, dead: list[Delivered], now: int) -> None:
        """Keep ``dead`` for a try after RETRY_MS, ahead of what is pending after it (in order)."""
        self.pending[key] = dead + self.pending.get(key, [])
        self.next_try_ms[key] = now + RETRY_MS

    def _move(self, st: Stream, dead: list[Delivered], now: int) -> None:
        svc = self.svc
        dlq = st.config.dead_letter_queue
        dcfg = svc.meta.configs.get(dlq or "")
        info = svc.meta.partitions.get((dlq or "", 0))
        if dlq is None or dcfg is None or info is None:
            self._warn(st.key, "unknown", now, "dead-letter queue %r of %s is unknown; keeping %d messages",
                       dlq, st.queue, len(dead))
            svc.request_refresh()
            self._retry(st.key, dead, now)
            return
        if dcfg.fifo != st.config.fifo:  # deleted and created again as the other type (create refuses it)
            kinds = {True: "a FIFO", False: "a standard"}
            self._warn(st.key, "type", now, "dead-letter queue %s of %s is %s queue, the source %s one; "
                       "keeping %d messages until the source names a dead-letter queue of its type "
                       "(set_attributes dead_letter_queue) or %s is created again as one",
                       dlq, st.queue, kinds[dcfg.fifo], kinds[st.config.fifo], len(dead), dlq)
            self._retry(st.key, dead, now)
            return
        try:
            items = [(d.message_id, *st.open(d.message_id, d.body, d.attributes), d.receive_count, st.queue)
                     for d in dead]
        except ZmqueueError as exc:  # sealed with a key id this host no longer holds
            self._warn(st.key, "open", now, "cannot move %d dead letters of %s: %s; retrying every %d ms",
                       len(dead), st.queue, exc, RETRY_MS)
            self._retry(st.key, dead, now)
            return
        origin = FIFO_ORIGIN if dcfg.fifo else svc.node
        local = svc.set.streams.get((dlq, 0, origin))
        if local is not None and local.writable:
            try:
                local.append_dead_letters(items, now)
            except ZmqueueError as exc:  # QueueLimitReached, DiskFull (the reserve), a full block
                self._warn(st.key, "full", now, "dead-letter queue %s cannot take %d messages of %s now: "
                           "%s; retrying every %d ms", dlq, len(dead), st.queue, exc, RETRY_MS)
                self._retry(st.key, dead, now)
                return
            st.store.mark_dead_lettered([d.seq for d in dead], now)
            self._moved(st.key, st.queue, len(dead))
            svc.dirty.update({st.key, local.key})
            svc.dlq_targets.add(local.key)
            svc.commit_if_big(local)  # (several sources' moves in one pass: a block its replicas take)
            return
        target = info.writers.get(FIFO_ORIGIN) if dcfg.fifo else next(
            (n for n in info.replicas if info.writers.get(n) == n), None)
        endpoint = svc.meta.peer_endpoint(target) if target in svc.meta.passing() else None
        if endpoint is None:
            self._retry(st.key, dead, now)
            return
        wire = [[m.hex(), b, blob, rc, src] for m, b, blob, rc, src in items]
        key = st.key
        self.in_flight.add(key)

        def done(result: Any, err: ZmqueueError | None) -> None:
            from zmqueue.dataplane.dispatch import now_ms

            self.in_flight.discard(key)
            cur = svc.set.streams.get(key)
            if err is not None or cur is None:
                t = now_ms()
                self._warn(key, "forward", t, "moving %d dead letters to %s failed: %s", len(dead), dlq, err)
                self._retry(key, dead, t)
                return
            cur.store.mark_dead_lettered([d.seq for d in dead], now_ms())
            self._moved(key, cur.queue, len(dead))
            svc.dirty.add(key)

        svc.forwarder.request(endpoint, Command.SEND, {"q": dlq, "p": 0, "dl": wire}, done, now)
