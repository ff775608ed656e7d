"""The receive path: pick receivable slots, mark them, hand out :class:`Delivered`;
and the receipt checks of delete / change_visibility / dead-letter moves.

Per call the work is a few vectorised numpy operations over the picked slots
(never over the ring or the backlog) plus one :class:`Delivered` per message:
the metadata of all picked slots is gathered in one fancy index and turned
into Python values column by column, and the payloads are cut from a single
copy of the arena span they occupy (slots are in seq order, so a receive of
consecutive messages touches one contiguous span).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from zmqueue.dataplane.storage import replay, select
from zmqueue.dataplane.storage.model import Columns, Delivered
from zmqueue.dataplane.storage.records import RecordType
from zmqueue.dataplane.storage.ring import AVAILABLE, IN_FLIGHT, MOVING, IntArray, MetaRows, Ring
from zmqueue.errors import InvalidReceipt

SPAN_SLACK_BYTES = 64 << 10  # copy one span if it wastes at most this much
SMALL = 8  # receives of up to this many messages are marked and read on Python scalars
# fields of a ring row as ``MetaRows.tolist()`` gives it (ring.META_DTYPE order)
_SEQ, _OFF, _BODY_LEN, _ATTR_LEN, _ENQ, _VIS, _COUNT, _STATE, _GROUP, _ID = range(10)


def pick(ring: Ring, fifo: bool, now_ms: int, k: int, max_rc: int | None) -> tuple[IntArray, IntArray]:
    """(slots to deliver, slots of dead letters) for a receive of up to ``k``."""
    idx = select.pick_fifo(ring, now_ms, k) if fifo else select.pick_standard(ring, now_ms, k)
    return select.split_dead(ring, idx, max_rc)


def fit(ring: Ring, deliver: IntArray, room: int, at_least_one: bool) -> IntArray:
    """The longest prefix of ``deliver`` (slots in ascending order) whose
    payloads (body + attributes) add up to at most ``room`` bytes; its first
    slot even if larger when ``at_least_one``. Free for the usual receive: the
    bytes the arena holds (``top``), else the span the slots occupy in it
    (:meth:`Ring.span_bytes`), bound their sum; only a span above ``room`` is
    summed (one cumulative sum)."""
    n = len(deliver)
    if ring.top <= room or (n == 1 and at_least_one):
        return deliver
    if not n or ring.span_bytes(int(deliver[0]), int(deliver[-1])) <= room:
        return deliver
    total = np.cumsum(ring.payload_lens(deliver))
    k = int(np.searchsorted(total, room, side="right"))
    return deliver[: max(k, 1) if at_least_one else k]


def mark(ring: Ring, deliver: IntArray, dead: IntArray, deadline: int) -> None:
    """Delivered slots go IN_FLIGHT until ``deadline``; dead letters go MOVING."""
    meta = ring.meta
    ring.version += 1
    if len(dead):
        meta["state"][dead] = MOVING
        ring.leave_in_flight(dead)  # (an expired in-flight message may go)
    if 0 < len(deliver) <= SMALL:
        counts, vis, state = ring.receive_count, ring.visible_at, ring.state
        slots = deliver.tolist()
        for i in slots:
            counts[i] += 1
            vis[i] = deadline
            state[i] = IN_FLIGHT
        ring.note_deadline(deadline)
        ring.enter_in_flight(slots)
    elif len(deliver):
        meta["receive_count"][deliver] += 1
        meta["visible_at_ms"][deliver] = deadline
        meta["state"][deliver] = IN_FLIGHT
        ring.note_deadline(deadline)
        if ring.inflight is not None:  # (no list of the slots for a standard ring)
            ring.enter_in_flight(deliver.tolist())


def _payloads(ring: Ring, offs: list[int], ends: list[int]) -> list[bytes]:
    """The arena bytes ``[off, end)`` of each row, cut from one copy of the span
    they occupy when it wastes little (slots are in seq order)."""
    lo, hi = min(offs), max(ends)
    if hi - lo <= sum(ends) - sum(offs) + SPAN_SLACK_BYTES:
        span = ring.arena[lo:hi].tobytes()
        return [span[o - lo : e - lo] for o, e in zip(offs, ends, strict=True)]
    return [ring.arena[o:e].tobytes() for o, e in zip(offs, ends, strict=True)]


def columns(ring: Ring, rows: MetaRows, visible_at_ms: int) -> Columns | None:
    """The rows as :class:`Columns`; None when one has attributes or a group."""
    if len(rows) <= SMALL:
        return _columns_small(ring, rows.tolist(), visible_at_ms)
    if rows["attr_len"].any() or rows["group_hash"].any():
        return None
    offs = rows["off"].tolist()
    ends = (rows["off"] + rows["body_len"]).tolist()
    return Columns(rows["seq"].tolist(), rows["message_id"].tobytes(), _payloads(ring, offs, ends),
                   rows["receive_count"].tolist(), rows["enqueue_ms"].tolist(), visible_at_ms)


def _columns_small(ring: Ring, rows: list[tuple[Any, ...]], visible_at_ms: int) -> Columns | None:
    """:func:`columns` of a few rows (``MetaRows.tolist()``), on Python scalars."""
    if any(r[_ATTR_LEN] or r[_GROUP] for r in rows):
        return None
    arena = ring.arena
    return Columns([r[_SEQ] for r in rows], b"".join([r[_ID] for r in rows]),
                   [arena[r[_OFF] : r[_OFF] + r[_BODY_LEN]].tobytes() for r in rows],
                   [r[_COUNT] for r in rows], [r[_ENQ] for r in rows], visible_at_ms)


def delivered(ring: Ring, rows: MetaRows) -> list[Delivered]:
    """One :class:`Delivered` per ring row (``ring.meta[slots]``), in order."""
    if not len(rows):
        return []
    offs = rows["off"].tolist()
    blens = rows["body_len"].tolist()
    ends = (rows["off"] + rows["body_len"] + rows["attr_len"]).tolist()
    raws = _payloads(ring, offs, ends)
    return [
        Delivered(seq, mid, raw[:blen], raw[blen:], group, enq, count, vis)
        for seq, mid, raw, blen, group, enq, count, vis in zip(
            rows["seq"].tolist(),
            rows["message_id"].tolist(),
            raws,
            blens,
            rows["group_hash"].tolist(),
            rows["enqueue_ms"].tolist(),
            rows["receive_count"].tolist(),
            rows["visible_at_ms"].tolist(),
            strict=True,
        )
    ]


LogRefs = Callable[[RecordType, MetaRows, int, int], None]  # (type, rows, now_ms, visible_at_ms)


def receive(
    ring: Ring, fifo: bool, now_ms: int, k: int, visibility_ms: int, max_rc: int | None, log: LogRefs,
    as_columns: bool = False, room: int | None = None, at_least_one: bool = True,
) -> tuple[list[Delivered] | Columns, list[Delivered], bool]:
    """Pick, mark, log one VISIBILITY record per delivery (``log``), build the
    values: :class:`Columns` if ``as_columns`` and every message is plain,
    else :class:`Delivered` (dead letters always); and whether ``room`` (bytes
    of payloads, None: no bound) cut the messages picked (:func:`fit`). Only
    the messages returned are marked: those past the cut stay receivable, and
    a standard ring's scan hint goes back to the first of them. (Dead letters
    are not handed out: all those picked go.)"""
    deliver, dead = pick(ring, fifo, now_ms, k, max_rc)
    cut = False
    if room is not None and len(deliver):
        kept = fit(ring, deliver, room, at_least_one)
        if len(kept) < len(deliver):
            if not fifo:  # (a FIFO pick starts from the first live slot anyway)
                ring.hint = min(ring.hint, int(deliver[len(kept)]))
            deliver, cut = kept, True
    if not len(deliver) and not len(dead):
        return [], [], cut
    deadline = now_ms + visibility_ms
    mark(ring, deliver, dead, deadline)
    got: list[Delivered] | Columns = []
    if n := len(deliver):
        first = int(deliver[0])
        # consecutive slots (the usual pick): a view, no gather of 88-byte rows
        # (read before anything else changes the ring)
        rows = ring.meta[first : first + n] if int(deliver[-1]) - first == n - 1 else ring.meta[deliver]
        log(RecordType.VISIBILITY, rows, now_ms, deadline)
        got = (as_columns and columns(ring, rows, deadline)) or delivered(ring, rows)
    return got, delivered(ring, ring.meta[dead]) if len(dead) else [], cut


def receipt_slot(ring: Ring, seq: int, receive_count: int) -> int:
    """Slot of the in-flight message a receipt (seq, receive count) names; else InvalidReceipt."""
    i = ring.index_of(seq)
    state = int(ring.state[i]) if i >= 0 else -1
    if state not in (AVAILABLE, IN_FLIGHT, MOVING):
        raise InvalidReceipt(f"the message at seq {seq} is unknown or already deleted", seq=seq, gone=True)
    if state != IN_FLIGHT:
        raise InvalidReceipt(f"the message at seq {seq} is not in flight; the receipt is stale", seq=seq)
    current = int(ring.receive_count[i])
    if current != receive_count:
        since = (f"the message was received again since ({current} receives in all); use the "
                 "receipt of its latest receive" if current > receive_count else
                 f"the message has been received only {current} times (a receipt of another copy of "
                 "the stream?)")
        raise InvalidReceipt(
            f"stale receipt for the message at seq {seq}: it is from receive {receive_count}, {since}",
            seq=seq,
            receive_count=receive_count,
            current=current,
        )
    return i


def set_deadline(ring: Ring, i: int, visibility_ms: int, now_ms: int) -> int:
    """New visibility deadline of slot ``i`` (``visibility_ms <= 0``: visible now)."""
    deadline = 0 if visibility_ms <= 0 else now_ms + visibility_ms
    ring.visible_at[i] = deadline
    ring.version += 1
    ring.note_deadline(deadline)
    return deadline


def moving_slots(ring: Ring, seqs: Sequence[int]) -> IntArray:
    """Slots of those ``seqs`` that are MOVING (handed out as dead letters)."""
    slots = replay.lookup(ring, np.asarray(seqs, np.int64))
    slots = slots[slots >= 0]
    moving: IntArray = slots[ring.state[slots] == MOVING]
    return moving
