"""The hot window: a preallocated numpy ring of message metadata plus a byte arena.

Slots ``[0, n)`` hold messages in increasing seq order (so a seq is found by
binary search); payloads (body then attributes) sit in ``arena`` in the same
order.  Removing a message only flips its state; the holes are squeezed out by
:meth:`Ring.compact` when an insert needs room, which keeps both orders.

A receive that finds nothing it can take in the ring while messages wait on
disk (*starved*: the ring is full of in-flight or delayed ones) gets room at a
higher price (:meth:`Ring.fit_count`): the ring grows, up to ``grow_max``
times its configured size, and once it cannot, a compaction frees however
little is dead if that lets the next message in. A compaction that finds the
live messages fit half the configured size moves them back into a ring of
that size.

States: FREE (never used), AVAILABLE (visible once ``visible_at_ms <= now``,
i.e. VISIBLE or DELAYED), IN_FLIGHT (received; visible again once its deadline
passes), MOVING (picked as dead letter, waiting for ``mark_dead_lettered``),
DELETED.
"""

from __future__ import annotations

import bisect
import struct
from typing import Any

import numpy as np
import numpy.typing as npt

from zmqueue.dataplane.storage.batch import Packed, first_scalars
from zmqueue.dataplane.storage.records import RECORD_DTYPE, WORDS, Table

FREE, AVAILABLE, IN_FLIGHT, MOVING, DELETED = 0, 1, 2, 3, 4
NEVER = 1 << 62
COMPACT_WHEN_NEEDED = 8  # compact once 1/8 of the slots or arena is dead (see Ring.can_place)
COMPACT_AHEAD = 2  # ... or 1/2 when only paging ahead
GROW_FREE = 8  # a starved receive doubles a dimension that would have under 1/8 free (Ring.fit_count)
IntArray = npt.NDArray[np.int64]
MetaRows = npt.NDArray[np.void]  # rows of META_DTYPE

# aligned (72 bytes, 3 of padding after ``state``): every field is naturally
# aligned, so column copies and ufuncs on the ring take numpy's fast loops, and
# a row is 9 u64 words (see :meth:`Ring.insert_packed`)
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
    ],
    align=True,
)
META_WORDS = META_DTYPE.itemsize // 8
# u64 words of a row: seq, off, body_len | attr_len << 32, enqueue_ms, visible_at_ms,
# receive_count | state << 32, group_hash, message_id (2 words)
_M_SEQ, _M_OFF, _M_LENS, _M_ENQ, _M_VIS, _M_STATE, _M_GROUP = 0, 1, 2, 3, 4, 5, 6
assert META_DTYPE.itemsize == 72 and META_DTYPE.fields is not None
for _name, _off in (
    ("seq", _M_SEQ * 8),
    ("off", _M_OFF * 8),
    ("body_len", _M_LENS * 8),
    ("attr_len", _M_LENS * 8 + 4),
    ("enqueue_ms", _M_ENQ * 8),
    ("visible_at_ms", _M_VIS * 8),
    ("receive_count", _M_STATE * 8),
    ("state", _M_STATE * 8 + 4),
    ("group_hash", _M_GROUP * 8),
    ("message_id", (_M_GROUP + 1) * 8),
):
    assert META_DTYPE.fields[_name][1] == _off, _name
# u64 words of a record row (records.RECORD_DTYPE, 11 words) that insert() copies
_R_SEQ, _R_ID, _R_TIME, _R_VISIBLE, _R_GROUP = 2, 4, 6, 7, 8
assert RECORD_DTYPE.fields is not None
for _name, _off in (("seq", _R_SEQ * 8), ("message_id", _R_ID * 8), ("time_ms", _R_TIME * 8),
                    ("visible_at_ms", _R_VISIBLE * 8), ("group_hash", _R_GROUP * 8)):
    assert RECORD_DTYPE.fields[_name][1] == _off, _name
_ID16 = np.dtype("V16")
_LOW32, _HIGH32 = np.uint64(0xFFFFFFFF), np.uint64(32)
META_BYTES = META_DTYPE.itemsize
_META_STRUCT = struct.Struct("<QQIIqqIB3xQ16s")
"""One ring row as a struct (aligned layout: 3 pad bytes after ``state``)."""
assert _META_STRUCT.size == META_BYTES
_ARANGE = np.arange(4096, dtype=np.uint64)


class _SeqOff:
    """(i, i * body_len) for i < 4096, for the last body length seen: the seq and
    off words of a uniform batch are then one add of (seq0, top).  Shared by
    every ring; one attribute holding a tuple, so a rebuild is atomic."""

    cache: tuple[int, npt.NDArray[np.uint64]] = (-1, np.zeros((0, 2), np.uint64))

    @classmethod
    def take(cls, body_len: int) -> npt.NDArray[np.uint64]:
        length, pairs = cls.cache
        if length != body_len:
            pairs = np.empty((len(_ARANGE), 2), np.uint64)
            pairs[:, 0] = _ARANGE
            np.multiply(_ARANGE, body_len, out=pairs[:, 1])
            cls.cache = (body_len, pairs)
        return pairs


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
    new[0] = 0
    np.cumsum(lens[:-1], out=new[1:])
    s0 = int(offs[0])
    if ((offs - s0) == new).all():  # back to back already (a writer's batch): one memmove
        total = int(new[-1]) + int(lens[-1])
        dst[dst_start : dst_start + total] = src[s0 : s0 + total]
        new += dst_start
        return new
    new += dst_start
    ends = offs + lens
    brk = np.flatnonzero(offs[1:] != ends[:-1]) + 1
    starts = [0, *brk.tolist()]
    stops = [*brk.tolist(), len(offs)]
    for a, b in zip(starts, stops, strict=True):
        s0, s1, d0 = int(offs[a]), int(ends[b - 1]), int(new[a])
        dst[d0 : d0 + s1 - s0] = src[s0:s1]
    return new


def _grown(size: int, used: int, most: int) -> int:
    """A dimension's size for ``used`` of it: kept while 1/:data:`GROW_FREE`
    or more stays free, else doubled (at least ``used``, at most ``most``)."""
    if (size - used) * GROW_FREE >= size:
        return size
    return max(size, min(most, max(2 * size, used)))


class Ring:
    def __init__(self, slots: int, arena_bytes: int, grow_max: int = 1) -> None:
        self.base_slots, self.base_arena_bytes = slots, arena_bytes  # the configured size
        self.max_slots, self.max_arena_bytes = slots * grow_max, arena_bytes * grow_max
        self._allocate(slots, arena_bytes)
        self.n = self.top = self.live = self.live_bytes = 0
        self.hint, self.hint_deadline = 0, NEVER
        # FIFO picks (select.pick_fifo): the slots IN_FLIGHT, a superset of
        # the groups of the live slots (None: not kept; rebuilt from the
        # states by the next FIFO pick: standard rings never keep them), and a
        # slot before which none is AVAILABLE or IN_FLIGHT
        self.inflight: set[int] | None = None
        self.groups: set[int] | None = None
        self.live_from = 0
        # bumped by every change of a slot's state or deadline (and by insert,
        # remove, clear, compact): a cached has_visible or next_wakeup answer
        # is valid while it is unchanged (see select.has_visible, next_wakeup)
        self.version = 0
        self.probe: tuple[int, int, int, bool] = (-1, 0, 0, False)  # version, since, until, answer
        self.wake: tuple[int, int, int | None] = (-1, 0, None)  # version, since, answer (select.next_wakeup)
        # for the once-a-second housekeeping of a stream with a full ring
        # (select.remove_enqueued_by, lowest_live_seq): no live slot lies
        # before ``head`` (slots never come back to life; inserts go at the
        # tail; compaction resets it), and every live slot's enqueue time is
        # at least ``enqueued_floor`` (inserts lower it, a scan sets it)
        self.head = 0
        self.enqueued_floor = NEVER

    def _allocate(self, slots: int, arena_bytes: int) -> None:
        """Fresh zeroed arrays of this size, and the column views kept of them
        (nothing else may keep a view of the ring's arrays across a call that
        can page in: a starved page-in replaces them)."""
        self.meta = np.zeros(slots, META_DTYPE)
        self.arena = np.zeros(arena_bytes, np.uint8)
        self.slots, self.arena_bytes = slots, arena_bytes
        self._seq = self.meta["seq"]
        self.state = self._state = self.meta["state"]  # column views, cached
        self.visible_at = self._vis = self.meta["visible_at_ms"]
        self.receive_count = self.meta["receive_count"]
        self.group_hash = self.meta["group_hash"]
        self._blen, self._alen = self.meta["body_len"], self.meta["attr_len"]
        self._off = self.meta["off"]
        self._ids = self.meta["message_id"]
        self._words: npt.NDArray[np.uint64] = self.meta.view(np.uint64).reshape(slots, META_WORDS)
        self._meta_bytes = self.meta.view(np.uint8).data  # writable byte views (struct.pack_into)
        self._arena_bytes = self.arena.data

    # -- space -------------------------------------------------------------
    def fit_count(self, lens: IntArray, needed: bool = True, starved: bool = False) -> int:
        """How many of the next messages (payload ``lens``) fit, compacting if
        useful (``needed``: see :meth:`can_place`).

        ``starved``: the receive asking has nothing it can take in the ring
        (every live slot is in flight, delayed or a dead letter). If even the
        first message does not fit, the ring then makes room for it at a higher
        price (:meth:`_starved_size`): it grows, compacting into the larger
        arrays; at its cap it compacts in place when what is dead lets the
        message in, however little that is. Nothing is done when neither
        would place it (a starved receive at the cap costs no compaction).
        """
        k = self._fit(lens)
        if k < len(lens) and self._worth_compacting(needed):
            self.compact()
            k = self._fit(lens)
        if k == 0 and starved and len(lens):
            size = self._starved_size(int(lens[0]))
            if size is not None:
                self.compact(*size)
                k = self._fit(lens)
        return k

    def _fit(self, lens: IntArray) -> int:
        by_slots = self.slots - self.n
        free = self.arena_bytes - self.top
        by_bytes = int(np.searchsorted(np.cumsum(lens), free, side="right"))
        return min(len(lens), by_slots, by_bytes)

    def can_place(self, needed: bool = True, starved: bool = False) -> bool:
        """False when :meth:`fit_count` would place nothing whatever comes:
        no slot is left at the tail and compacting is not worth it yet (nor,
        for a ``starved`` receive, growing or compacting what little is dead).

        Compacting moves every live slot, so it waits until enough is dead:
        1/8 of the slots or arena when the messages are ``needed`` (a receive
        found too few, a new message), 1/2 when merely paging ahead of the
        consumers (moving the live half then costs one row copy per freed slot,
        not seven: a consumer draining a backlog larger than the ring paid
        for a quarter of the host's time in compactions)."""
        if self.n < self.slots or self._worth_compacting(needed):
            return True
        return starved and self._starved_size(0) is not None

    def room_for(self, nbytes: int, needed: bool = True, starved: bool = False) -> bool:
        """Whether :meth:`fit_count` would place a message of ``nbytes``
        payload bytes (without changing anything)."""
        if self.n < self.slots and self.top + nbytes <= self.arena_bytes:
            return True
        if self._worth_compacting(needed) and self.live < self.slots and (
                self.live_bytes + nbytes <= self.arena_bytes):
            return True
        return starved and self._starved_size(nbytes) is not None

    def _worth_compacting(self, needed: bool = True) -> bool:
        share = COMPACT_WHEN_NEEDED if needed else COMPACT_AHEAD
        dead_slots = self.n - self.live
        dead_bytes = self.top - self.live_bytes
        return dead_slots * share >= self.slots or dead_bytes * share >= self.arena_bytes

    def _starved_size(self, nbytes: int) -> tuple[int, int] | None:
        """(slots, arena bytes) to compact into so that a message of ``nbytes``
        that does not fit at the tail fits behind the live messages, for a
        starved receive; None if no size up to the cap lets it in (then
        nothing is gained: no compaction).

        A dimension that would keep under 1/:data:`GROW_FREE` free doubles
        (capped): growing, not compacting, is what keeps the cost amortized,
        since a compaction moves every live slot and a starved receive may
        come after every single delete. Only at the cap does a compaction free
        as little as one message's room (the message did not fit at the tail:
        what lets it in is dead space).
        """
        slots = _grown(self.slots, self.live + 1, self.max_slots)
        arena = _grown(self.arena_bytes, self.live_bytes + nbytes, self.max_arena_bytes)
        if self.live + 1 > slots or self.live_bytes + nbytes > arena:
            return None
        return slots, arena

    @property
    def grown(self) -> bool:
        """Whether the ring is larger than its configured size."""
        return self.slots > self.base_slots or self.arena_bytes > self.base_arena_bytes

    @property
    def shrinkable(self) -> bool:
        """Whether the ring has grown and its live messages fit half its
        configured size (a compaction then moves them back into that size;
        half, so that a ring near the size does not grow and shrink by turns)."""
        return (self.grown and self.live * 2 <= self.base_slots
                and self.live_bytes * 2 <= self.base_arena_bytes)

    def compact(self, slots: int | None = None, arena_bytes: int | None = None) -> None:
        """Squeeze out removed slots and their arena bytes (order preserved),
        into new arrays of ``slots`` and ``arena_bytes`` if given and not the
        current size; a grown ring whose live messages fit half its configured
        size goes back to that size."""
        if slots is None or arena_bytes is None:
            shrink = self.shrinkable
            slots = self.base_slots if shrink else self.slots
            arena_bytes = self.base_arena_bytes if shrink else self.arena_bytes
        # (rows moved as u64 words: the structured-array copies were most of its time)
        n = self.n
        state = self._state[:n]
        kept = self._words[:n][(state >= AVAILABLE) & (state <= MOVING)]
        lens = (kept[:, _M_LENS] & _LOW32) + (kept[:, _M_LENS] >> _HIGH32)  # body_len + attr_len
        k = len(kept)
        if (slots, arena_bytes) == (self.slots, self.arena_bytes):
            kept[:, _M_OFF] = copy_ranges(self.arena, 0, self.arena, kept[:, _M_OFF], lens)
            self._words[:k] = kept
            self._words[k:n] = 0
        else:  # (the slots past k of fresh arrays are zero, as insert_packed needs)
            old = self.arena
            self._allocate(slots, arena_bytes)
            kept[:, _M_OFF] = copy_ranges(self.arena, 0, old, kept[:, _M_OFF], lens)
            self._words[:k] = kept
        self.n, self.top = k, int(lens.sum())
        self.hint, self.hint_deadline = 0, NEVER
        self.inflight, self.groups, self.live_from = None, None, 0  # slots moved
        self.head = 0
        self.version += 1

    def clear(self) -> None:
        if self.grown:
            self._allocate(self.base_slots, self.base_arena_bytes)
        else:
            self.meta[: self.n] = np.zeros(1, META_DTYPE)
        self.n = self.top = self.live = self.live_bytes = self.head = 0
        self.enqueued_floor = NEVER
        self.hint, self.hint_deadline = 0, NEVER
        self.inflight = None if self.inflight is None else set()
        self.groups = None if self.groups is None else set()
        self.live_from = 0
        self.version += 1

    # -- insert / lookup ---------------------------------------------------
    def insert(self, rows: Table, heap: npt.NDArray[np.uint8] | bytes, lens: IntArray | None = None) -> None:
        """Append MESSAGE records (all must fit: see :meth:`fit_count`); ``lens``:
        their payload lengths if the caller has them."""
        k = len(rows)
        a, b = self.n, self.n + k
        if lens is None:
            lens = rows["body_len"].astype(np.int64) + rows["attr_len"]
        src = np.frombuffer(heap, np.uint8) if isinstance(heap, bytes) else heap
        offs = copy_ranges(self.arena, self.top, src, rows["data_off"], lens)
        # columns copied as u64 words of the 88-byte rows (callers pass
        # contiguous rows: slices and boolean selections of a table)
        rw = np.ascontiguousarray(rows).view(np.uint64).reshape(k, WORDS)
        w = self._words[a:b]
        w[:, _M_SEQ] = rw[:, _R_SEQ]
        w[:, _M_OFF] = offs
        w[:, _M_ENQ : _M_VIS + 1] = rw[:, _R_TIME : _R_VISIBLE + 1]
        self.enqueued_floor = min(self.enqueued_floor, int(w[:, _M_ENQ].view(np.int64).min()))
        w[:, _M_STATE] = AVAILABLE << 32  # receive_count 0
        w[:, _M_GROUP] = rw[:, _R_GROUP]
        w[:, _M_GROUP + 1 :] = rw[:, _R_ID : _R_ID + 2]
        self._blen[a:b] = rows["body_len"]
        self._alen[a:b] = rows["attr_len"]
        if self.groups is not None:
            self.groups.update(np.unique(rows["group_hash"]).tolist())
        total = int(lens.sum())
        self.n, self.top = b, self.top + total
        self.live += k
        self.live_bytes += total
        self.version += 1

    def insert_record(self, seq: int, message_id: bytes, enqueue_ms: int, visible_at_ms: int, group: int,
                      body_len: int, attr_len: int, heap: npt.NDArray[np.uint8] | bytes, data_off: int
                      ) -> None:
        """:meth:`insert` of one MESSAGE record given as scalars (it must fit):
        two buffer writes."""
        a, top = self.n, self.top
        total = body_len + attr_len
        src = heap if isinstance(heap, bytes) else heap.data
        self._arena_bytes[top : top + total] = src[data_off : data_off + total]
        _META_STRUCT.pack_into(self._meta_bytes, a * META_BYTES, seq, top, body_len, attr_len, enqueue_ms,
                               visible_at_ms, 0, AVAILABLE, group, message_id)
        self.n, self.top = a + 1, top + total
        self.live += 1
        self.live_bytes += total
        self.version += 1
        if enqueue_ms < self.enqueued_floor:
            self.enqueued_floor = enqueue_ms
        if self.groups is not None:
            self.groups.add(group)

    def insert_packed(self, k: int, batch: Packed, seq0: int, now_ms: int, total: int) -> None:
        """Append the first ``k`` messages of a batch just appended (seqs from
        ``seq0``; their payloads, ``total`` bytes, lie back to back at the
        start of ``batch.heap``): one memmove and a few column writes on the
        rows' u64 words, from the batch's columns and scalars.

        Slots past ``n`` are all zero (clear and compact zero them), so the
        receive count and, when the batch has none, attributes and group
        hashes are not written.
        """
        a, b = self.n, self.n + k
        top = self.top
        if k == 1:  # a single send: two buffer writes instead of ~8 numpy calls
            blen, alen, group, dly = first_scalars(batch)
            self.insert_record(seq0, batch.message_ids[:16], now_ms, now_ms + dly, group, blen, alen,
                               batch.heap, 0)
            return
        self._insert_columns(a, b, k, batch, seq0, now_ms, top, total)
        if now_ms < self.enqueued_floor:
            self.enqueued_floor = now_ms
        self.n, self.top = b, top + total
        self.live += k
        self.live_bytes += total
        self.version += 1

    def _insert_columns(self, a: int, b: int, k: int, batch: Packed, seq0: int, now_ms: int, top: int,
                        total: int) -> None:
        self.arena[top : top + total] = np.frombuffer(batch.heap, np.uint8, total)
        w = self._words[a:b]
        body_len = batch.body_len
        delay = batch.delay_ms
        if isinstance(body_len, int) and k <= len(_ARANGE):  # seq, off in one add
            np.add(
                _SeqOff.take(body_len)[:k], np.array((seq0, top), np.uint64), out=w[:, _M_SEQ : _M_OFF + 1]
            )
        elif isinstance(body_len, int):  # uniform lengths, attr_len 0
            arange = np.arange(k, dtype=np.uint64)
            np.add(arange, seq0, out=w[:, _M_SEQ])
            np.multiply(arange, body_len, out=w[:, _M_OFF])
            w[:, _M_OFF] += np.uint64(top)
        else:
            arange = _ARANGE[:k] if k <= len(_ARANGE) else np.arange(k, dtype=np.uint64)
            np.add(arange, seq0, out=w[:, _M_SEQ])
            lens = body_len[:k].astype(np.uint64)
            self._blen[a:b] = body_len[:k]
            if batch.attr_len is not None:
                self._alen[a:b] = batch.attr_len[:k]
                lens += batch.attr_len[:k]
            offs = w[:, _M_OFF]
            offs[0] = top
            if k > 1:
                np.add.accumulate(lens[:-1], out=offs[1:])
                offs[1:] += np.uint64(top)
        if isinstance(delay, int):  # lengths (if uniform), times, state: one broadcast row
            # (receive_count 0, state AVAILABLE); int64 first so negative times keep their bits
            if isinstance(body_len, int):
                const = np.array((body_len, now_ms, now_ms + delay, AVAILABLE << 32), np.int64)
                w[:, _M_LENS : _M_STATE + 1] = const.view(np.uint64)
            else:
                const = np.array((now_ms, now_ms + delay, AVAILABLE << 32), np.int64)
                w[:, _M_ENQ : _M_STATE + 1] = const.view(np.uint64)
        else:
            times = w.view(np.int64)
            times[:, _M_ENQ] = now_ms
            times[:, _M_VIS] = delay[:k] + now_ms
            w[:, _M_STATE] = AVAILABLE << 32
            if isinstance(body_len, int):
                w[:, _M_LENS] = body_len
        if batch.group_hashes is not None:
            w[:, _M_GROUP] = batch.group_hashes[:k]
        if self.groups is not None:
            self.groups.update(np.unique(batch.group_hashes[:k]).tolist() if batch.group_hashes is not None
                               else (0,))
        self._ids[a:b] = np.frombuffer(batch.message_ids, _ID16, k)

    def index_of(self, seq: int) -> int:
        """Slot of ``seq`` if it is in the ring (any state), else -1."""
        i = bisect.bisect_left(self._seq, seq, 0, self.n)
        return i if i < self.n and int(self._seq[i]) == seq else -1

    def remove(self, idx: IntArray | int | slice) -> None:
        """Mark slots DELETED (they must be live).

        A single slot (``int``) costs a few scalar reads; an array of slots one
        gather and sum per length column, a slice (a run of slots) no gather
        (no per-call reduction over the ring either way).
        """
        self._state[idx] = DELETED
        self.version += 1
        if self.inflight:
            self.leave_in_flight(idx)
        if isinstance(idx, int):
            self.live -= 1
            self.live_bytes -= int(self._blen[idx]) + int(self._alen[idx])
            return
        self.live -= len(range(*idx.indices(self.slots))) if isinstance(idx, slice) else int(np.size(idx))
        self.live_bytes -= int(self._blen[idx].sum(dtype=np.int64)) + int(self._alen[idx].sum(dtype=np.int64))

    def enter_in_flight(self, slots: list[int]) -> None:
        """Slots just marked IN_FLIGHT: add them to :attr:`inflight` (if kept)."""
        if self.inflight is not None:
            self.inflight.update(slots)

    def leave_in_flight(self, idx: IntArray | int | slice) -> None:
        """Slots ``idx`` are no longer IN_FLIGHT: drop them from :attr:`inflight`."""
        fl = self.inflight
        if fl is None:
            return
        if isinstance(idx, int):
            fl.discard(idx)
        elif isinstance(idx, slice):
            fl.difference_update(range(*idx.indices(self.slots)))
        else:
            fl.difference_update(idx.tolist())

    def forget_picks(self) -> None:
        """Slots changed state outside receive and remove (replay of records,
        a restart's release): every pick hint restarts from slot 0 and the
        in-flight index and the groups are rebuilt by the next FIFO pick."""
        self.hint, self.hint_deadline = 0, -1
        self.inflight, self.groups, self.live_from = None, None, 0
        self.version += 1

    def span_bytes(self, first: int, last: int) -> int:
        """Arena bytes from slot ``first``'s payload to the end of slot
        ``last``'s (``first <= last``): at least the payload bytes of the
        slots between them, which the arena holds in slot order (inserts go
        at its top, a compaction keeps the order)."""
        end = int(self._off[last]) + int(self._blen[last]) + int(self._alen[last])
        return end - int(self._off[first])

    def payload_lens(self, slots: IntArray) -> IntArray:
        """Payload bytes (body + attributes) of each of ``slots``."""
        lens: IntArray = self._blen[slots].astype(np.int64) + self._alen[slots]
        return lens

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
