"""Applying decoded records to the in-memory state (ring + backlog).

Used by recovery (every verified block, in log order) and by ``append`` (the
placement of new messages), so a restart rebuilds exactly what was live:
deleted and DLQ-moved messages stay gone, receive counts and deadlines come
from the last VISIBILITY record, a PURGE drops everything before it.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from zmqueue.dataplane.storage.backlog import Backlog, U8Array, payload_lens
from zmqueue.dataplane.storage.batch import Packed
from zmqueue.dataplane.storage.records import RecordType, Table
from zmqueue.dataplane.storage.ring import AVAILABLE, IN_FLIGHT, MOVING, IntArray, Ring


def place(ring: Ring, backlog: Backlog, rows: Table, heap: U8Array | bytes) -> None:
    """New MESSAGE rows go to the ring while there is no backlog and they fit."""
    k = 0
    if backlog.cursor is None:
        lens = payload_lens(rows)
        if len(rows) <= ring.slots - ring.n and int(lens.sum()) <= ring.arena_bytes - ring.top:
            ring.insert(rows, heap, lens)  # the common case: all of them fit as they are
            return
        k = ring.fit_count(lens)
        if k:
            ring.insert(rows[:k] if k < len(rows) else rows, heap, lens[:k])
    if k < len(rows):
        backlog.add(rows[k:])


def place_fresh(ring: Ring, backlog: Backlog, rows: Table, packed: Packed, seq0: int, now_ms: int) -> None:
    """:func:`place` for a batch just appended (``rows``: its staged records,
    seqs ``seq0 ..``): the ring copies from the batch's columns."""
    n, size = packed.n, len(packed.heap)
    if backlog.cursor is None:
        if n <= ring.slots - ring.n and size <= ring.arena_bytes - ring.top:
            ring.insert_packed(n, packed, seq0, now_ms, size)
            return
        lens = payload_lens(rows)
        k = ring.fit_count(lens)
        if k:
            ring.insert_packed(k, packed, seq0, now_ms, int(lens[:k].sum()))
        if k == n:
            return
        if k:
            backlog.add(rows[k:])
            return
    backlog.add_fresh(rows, n, size)


def lookup(ring: Ring, targets: IntArray) -> IntArray:
    """Slots holding ``targets`` (live or not), -1 where absent."""
    seqs = ring.meta["seq"]
    n = ring.n
    if len(targets) <= 16:
        pos = np.array([bisect.bisect_left(seqs, int(t), 0, n) for t in targets], np.int64)
    else:
        # searchsorted copies its (strided) haystack: search only the slots
        # between the smallest and the largest target, not the whole ring
        lo = bisect.bisect_left(seqs, int(targets.min()), 0, n)
        hi = bisect.bisect_right(seqs, int(targets.max()), lo, n)
        pos = np.searchsorted(seqs[lo:hi], targets).astype(np.int64) + lo
    found = pos < n
    found[found] = seqs[pos[found]] == targets[found]
    return np.where(found, pos, -1)


def live_mask(ring: Ring, slots: IntArray) -> np.ndarray[tuple[int], np.dtype[np.bool_]]:
    states = ring.meta["state"][np.maximum(slots, 0)]
    return (slots >= 0) & (states >= AVAILABLE) & (states <= MOVING)


SMALL_CHUNK = 8
"""Tables of at most this many records are applied record by record with
Python scalars (:func:`apply_records`): a replica applying one send, receive
or delete at a time paid ~100 µs for the array path's masks and gathers."""

# fields of a record row as ``Table.tolist()`` gives it (records.RECORD_DTYPE order)
(F_TYPE, _F_VERSION, _F_FLAGS, F_BODY_LEN, F_EPOCH, F_SEQ, F_TARGET, F_ID, F_TIME, F_VISIBLE, F_GROUP,
 F_COUNT, F_ATTR_LEN, F_DATA_OFF, _F_RESERVED) = range(15)
_MESSAGE, _VISIBILITY, _PURGE = int(RecordType.MESSAGE), int(RecordType.VISIBILITY), int(RecordType.PURGE)
_DELETE, _DLQ_MOVE = int(RecordType.DELETE), int(RecordType.DLQ_MOVE)


def apply_block(ring: Ring, backlog: Backlog, table: Table, heap: U8Array | bytes) -> None:
    """Apply one block's records in order (split at PURGE records)."""
    if len(table) <= SMALL_CHUNK:
        apply_records(ring, backlog, table, table.tolist(), heap)
        return
    types = table["type"]
    start = 0
    for p in [*np.flatnonzero(types == RecordType.PURGE).tolist(), len(table)]:
        if p > start:
            _apply_chunk(ring, backlog, table[start:p], heap)
        if p < len(table):
            ring.clear()
            backlog.reset()
        start = p + 1


def apply_records(ring: Ring, backlog: Backlog, table: Table, recs: list[tuple[Any, ...]],
                  heap: U8Array | bytes) -> None:
    """:func:`apply_block` of a few records (``recs``: ``table.tolist()``), one
    at a time: the same outcome as the array path, which applies a chunk's
    messages, then its visibility changes, then its removals (records of one
    chunk never target a message of a later record)."""
    for j, r in enumerate(recs):
        kind = r[F_TYPE]
        if kind == _MESSAGE:
            total = r[F_BODY_LEN] + r[F_ATTR_LEN]
            if (backlog.cursor is not None or ring.n >= ring.slots
                    or ring.top + total > ring.arena_bytes):
                place(ring, backlog, table[j : j + 1], heap)  # compaction or the backlog
            else:
                ring.insert_record(r[F_SEQ], r[F_ID], r[F_TIME], r[F_VISIBLE], r[F_GROUP],
                                   r[F_BODY_LEN], r[F_ATTR_LEN], heap, r[F_DATA_OFF])
        elif kind == _VISIBILITY:
            target = r[F_TARGET]
            i = ring.index_of(target)
            if i >= 0 and AVAILABLE <= int(ring.state[i]) <= MOVING:
                ring.receive_count[i] = r[F_COUNT]
                ring.visible_at[i] = r[F_VISIBLE]
                ring.state[i] = IN_FLIGHT
            elif backlog.beyond(target):
                backlog.receive_counts[target] = r[F_COUNT]
                backlog.deadlines[target] = r[F_VISIBLE]
            ring.forget_picks()
        elif kind in (_DELETE, _DLQ_MOVE):
            target = r[F_TARGET]
            i = ring.index_of(target)
            if i >= 0 and AVAILABLE <= int(ring.state[i]) <= MOVING:
                ring.remove(i)
            elif backlog.beyond(target):
                backlog.forget(target)
        elif kind == _PURGE:
            ring.clear()
            backlog.reset()


def _apply_chunk(ring: Ring, backlog: Backlog, chunk: Table, heap: U8Array | bytes) -> None:
    types = chunk["type"]
    msgs = chunk[types == RecordType.MESSAGE]
    if len(msgs):
        place(ring, backlog, msgs, heap)
    vis = chunk[types == RecordType.VISIBILITY]
    if len(vis):
        _apply_visibility(ring, backlog, vis)
    gone = chunk[(types == RecordType.DELETE) | (types == RecordType.DLQ_MOVE)]
    if len(gone):
        _apply_removal(ring, backlog, gone["target_seq"].astype(np.int64))


def _apply_visibility(ring: Ring, backlog: Backlog, rows: Table) -> None:
    targets = rows["target_seq"].astype(np.int64)
    _, last = np.unique(targets[::-1], return_index=True)
    rows = rows[len(rows) - 1 - last]
    targets = targets[len(targets) - 1 - last]
    slots = lookup(ring, targets)
    live = live_mask(ring, slots)
    hit = slots[live]
    ring.meta["receive_count"][hit] = rows["receive_count"][live]
    ring.meta["visible_at_ms"][hit] = rows["visible_at_ms"][live]
    ring.meta["state"][hit] = IN_FLIGHT
    ring.forget_picks()
    for seq, count, deadline in zip(targets[~live].tolist(), rows["receive_count"][~live].tolist(),
                                    rows["visible_at_ms"][~live].tolist(), strict=True):
        if backlog.beyond(seq):
            backlog.receive_counts[seq] = count
            backlog.deadlines[seq] = deadline


def _apply_removal(ring: Ring, backlog: Backlog, targets: IntArray) -> None:
    slots = lookup(ring, targets)
    live = live_mask(ring, slots)
    if live.any():
        ring.remove(slots[live])
    for seq in targets[~live].tolist():
        if backlog.beyond(seq):
            backlog.forget(seq)


def release_in_flight(ring: Ring, backlog: Backlog) -> None:
    """After a restart every in-flight or moving message is visible again
    (those beyond the backlog's cursor too: they keep their receive counts)."""
    backlog.deadlines.clear()
    state = ring.meta["state"][: ring.n]
    held = (state == IN_FLIGHT) | (state == MOVING)
    state[held] = AVAILABLE
    ring.meta["visible_at_ms"][: ring.n][held] = 0
    ring.forget_picks()
