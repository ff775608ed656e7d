"""The hot window: a preallocated numpy ring of message metadata plus a byte arena.

Slots ``[0, n)`` hold messages in increasing seq order (so a seq is found by
binary search); payloads (body then attributes) sit in ``arena`` in the same
order.  Removing a message only flips its state; the holes are squeezed out by
:meth:`Ring.compact` when an insert needs room, which keeps both orders.

States: FREE (never used), AVAILABLE (visible once ``visible_at_ms <= now``,
i.e. VISIBLE or DELAYED), IN_FLIGHT (received; visible again once its deadline
passes), MOVING (picked as dead letter, waiting for ``mark_dead_lettered``),
DELETED.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np
import numpy.typing as npt

from zmqueue.dataplane.storage.records import Table

FREE, AVAILABLE, IN_FLIGHT, MOVING, DELETED = 0, 1, 2, 3, 4
NEVER = 1 << 62
IntArray = npt.NDArray[np.int64]
MetaRows = npt.NDArray[np.void]  # rows of META_DTYPE

META_DTYPE = np.dtype(
    [
        ("seq", "<u8"),
        ("off", "<u8"),
        ("body_len", "<u4"),
        ("attr_len", "<u4"),
        ("enqueue_ms", "<i8"),
        ("visible_at_ms", "<i8"),
        ("receive_count", "<u4"),
        ("state", "u1"),
        ("group_hash", "<u8"),
        ("message_id", "V16"),
    ]
)


def copy_ranges(
    dst: npt.NDArray[np.uint8], dst_start: int, src: npt.NDArray[np.uint8], offs: Any, lens: Any
) -> IntArray:
    """Copy ``src[offs[i]:offs[i]+lens[i]]`` back to back into ``dst`` from
    ``dst_start``, merging adjacent ranges into one memmove; return new offsets."""
    offs = np.asarray(offs, np.int64)
    lens = np.asarray(lens, np.int64)
    if len(offs) == 0:
        return np.zeros(0, np.int64)
    new = np.empty(len(offs), np.int64)
    new[0] = dst_start
    np.cumsum(lens[:-1], out=new[1:])
    new[1:] += dst_start
    ends = offs + lens
    brk = np.flatnonzero(offs[1:] != ends[:-1]) + 1
    starts = [0, *brk.tolist()]
    stops = [*brk.tolist(), len(offs)]
    for a, b in zip(starts, stops, strict=True):
        s0, s1, d0 = int(offs[a]), int(ends[b - 1]), int(new[a])
        dst[d0 : d0 + s1 - s0] = src[s0:s1]
    return new


class Ring:
    def __init__(self, slots: int, arena_bytes: int) -> None:
        self.meta = np.zeros(slots, META_DTYPE)
        self.arena = np.zeros(arena_bytes, np.uint8)
        self.slots, self.arena_bytes = slots, arena_bytes
        self.n = self.top = self.live = self.live_bytes = 0
        self.hint, self.hint_deadline = 0, NEVER
        # bumped by every change of a slot's state or deadline (and by insert,
        # remove, clear, compact): a cached has_visible answer is valid while
        # it is unchanged (see select.has_visible)
        self.version = 0
        self.probe: tuple[int, int, int, bool] = (-1, 0, 0, False)  # version, since, until, answer
        self._seq = self.meta["seq"]
        self.state = self._state = self.meta["state"]  # column views, cached
        self.visible_at = self._vis = self.meta["visible_at_ms"]
        self.receive_count = self.meta["receive_count"]
        self._blen, self._alen = self.meta["body_len"], self.meta["attr_len"]
        self._ids = self.meta["message_id"]

    # -- space -------------------------------------------------------------
    def fit_count(self, lens: IntArray) -> int:
        """How many of the next messages (payload ``lens``) fit, compacting if useful."""
        k = self._fit(lens)
        if k < len(lens) and self._worth_compacting():
            self.compact()
            k = self._fit(lens)
        return k

    def _fit(self, lens: IntArray) -> int:
        by_slots = self.slots - self.n
        free = self.arena_bytes - self.top
        by_bytes = int(np.searchsorted(np.cumsum(lens), free, side="right"))
        return min(len(lens), by_slots, by_bytes)

    def _worth_compacting(self) -> bool:
        dead_slots = self.n - self.live
        dead_bytes = self.top - self.live_bytes
        return dead_slots * 8 >= self.slots or dead_bytes * 8 >= self.arena_bytes

    def compact(self) -> None:
        """Squeeze out removed slots and their arena bytes (order preserved)."""
        n = self.n
        view = self.meta[:n]
        keep = (view["state"] >= AVAILABLE) & (view["state"] <= MOVING)
        kept = view[keep]
        lens = kept["body_len"].astype(np.int64) + kept["attr_len"]
        kept["off"] = copy_ranges(self.arena, 0, self.arena, kept["off"], lens)
        k = len(kept)
        self.meta[:k] = kept
        self.meta[k:n] = np.zeros(1, META_DTYPE)
        self.n, self.top = k, int(lens.sum())
        self.hint, self.hint_deadline = 0, NEVER
        self.version += 1

    def clear(self) -> None:
        self.meta[: self.n] = np.zeros(1, META_DTYPE)
        self.n = self.top = self.live = self.live_bytes = 0
        self.hint, self.hint_deadline = 0, NEVER
        self.version += 1

    # -- insert / lookup ---------------------------------------------------
    def insert(self, rows: Table, heap: npt.NDArray[np.uint8] | bytes, packed: bool = False) -> None:
        """Append MESSAGE records (all must fit: see :meth:`fit_count`).

        ``packed``: the rows' payloads lie back to back in ``heap`` from
        offset 0 (a fresh batch; ``data_off`` is not read); copied with one memmove.
        """
        k = len(rows)
        a, b = self.n, self.n + k
        lens = rows["body_len"].astype(np.int64) + rows["attr_len"]
        dst = self.meta[a:b]
        src = np.frombuffer(heap, np.uint8) if isinstance(heap, bytes) else heap
        if packed:
            total = int(lens.sum())
            self.arena[self.top : self.top + total] = src[:total]
            offs = dst["off"]
            offs[0] = self.top
            np.cumsum(lens[:-1], out=offs[1:])
            offs[1:] += self.top
        else:
            dst["off"] = copy_ranges(self.arena, self.top, src, rows["data_off"], lens)
        dst["seq"] = rows["seq"]
        dst["body_len"] = rows["body_len"]
        dst["attr_len"] = rows["attr_len"]
        dst["enqueue_ms"] = rows["time_ms"]
        dst["visible_at_ms"] = rows["visible_at_ms"]
        dst["receive_count"] = 0
        dst["state"] = AVAILABLE
        dst["group_hash"] = rows["group_hash"]
        dst["message_id"] = rows["message_id"]
        total = int(lens.sum())
        self.n, self.top = b, self.top + total
        self.live += k
        self.live_bytes += total
        self.version += 1

    def index_of(self, seq: int) -> int:
        """Slot of ``seq`` if it is in the ring (any state), else -1."""
        i = bisect.bisect_left(self._seq, seq, 0, self.n)
        return i if i < self.n and int(self._seq[i]) == seq else -1

    def remove(self, idx: IntArray | int) -> None:
        """Mark slots DELETED (they must be live).

        A single slot (``int``) costs a few scalar reads; an array of slots one
        gather and sum per length column (no per-call reduction over the ring).
        """
        self._state[idx] = DELETED
        self.version += 1
        if isinstance(idx, int):
            self.live -= 1
            self.live_bytes -= int(self._blen[idx]) + int(self._alen[idx])
            return
        self.live -= int(np.size(idx))
        self.live_bytes -= int(self._blen[idx].sum(dtype=np.int64)) + int(self._alen[idx].sum(dtype=np.int64))

    def message_id(self, i: int) -> bytes:
        """The 16-byte message id of slot ``i``."""
        mid: bytes = self._ids[i].tobytes()
        return mid

    def note_deadline(self, deadline: int) -> None:
        """A slot may become receivable at ``deadline``: keep the scan hint honest."""
        self.hint_deadline = min(self.hint_deadline, deadline)

    def payload(self, i: int) -> tuple[bytes, bytes]:
        row = self.meta[i]
        off, blen, alen = int(row["off"]), int(row["body_len"]), int(row["attr_len"])
        raw = self.arena[off : off + blen + alen].tobytes()
        return raw[:blen], raw[blen:]
