"""The receive path: pick receivable slots, mark them, hand out :class:`Delivered`.

Per call the work is a few vectorised numpy operations over the picked slots
(never over the ring or the backlog) plus one :class:`Delivered` per message:
the metadata of all picked slots is gathered in one fancy index and turned
into Python values column by column, and the payloads are cut from a single
copy of the arena span they occupy (slots are in seq order, so a receive of
consecutive messages touches one contiguous span).
"""

from __future__ import annotations

from zmqueue.dataplane.storage import select
from zmqueue.dataplane.storage.model import Delivered
from zmqueue.dataplane.storage.ring import IN_FLIGHT, MOVING, IntArray, MetaRows, Ring

SPAN_SLACK_BYTES = 64 << 10  # copy one span if it wastes at most this much


def pick(ring: Ring, fifo: bool, now_ms: int, k: int, max_rc: int | None) -> tuple[IntArray, IntArray]:
    """(slots to deliver, slots of dead letters) for a receive of up to ``k``."""
    idx = select.pick_fifo(ring, now_ms, k) if fifo else select.pick_standard(ring, now_ms, k)
    return select.split_dead(ring, idx, max_rc)


def mark(ring: Ring, deliver: IntArray, dead: IntArray, deadline: int) -> None:
    """Delivered slots go IN_FLIGHT until ``deadline``; dead letters go MOVING."""
    meta = ring.meta
    if len(dead):
        meta["state"][dead] = MOVING
    if len(deliver):
        meta["receive_count"][deliver] += 1
        meta["visible_at_ms"][deliver] = deadline
        meta["state"][deliver] = IN_FLIGHT
        ring.note_deadline(deadline)


def delivered(ring: Ring, rows: MetaRows) -> list[Delivered]:
    """One :class:`Delivered` per ring row (``ring.meta[slots]``), in order."""
    if not len(rows):
        return []
    offs = rows["off"].tolist()
    blens = rows["body_len"].tolist()
    ends = (rows["off"] + rows["body_len"] + rows["attr_len"]).tolist()
    lo, hi = min(offs), max(ends)
    if hi - lo <= sum(ends) - sum(offs) + SPAN_SLACK_BYTES:
        span = ring.arena[lo:hi].tobytes()
        raws = [span[o - lo : e - lo] for o, e in zip(offs, ends, strict=True)]
    else:
        raws = [ring.arena[o:e].tobytes() for o, e in zip(offs, ends, strict=True)]
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
