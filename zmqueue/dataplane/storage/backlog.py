"""The part of the queue that lives only in the log: a paging cursor and counters.

Invariant: every live message with ``seq < cursor`` is in the ring; messages
with ``seq >= cursor`` are only in the log (or in the pending block).  When the
ring has room, :meth:`Backlog.page_in` reads blocks forward from the cursor and
loads the next messages, skipping expired ones and the few that are known to be
gone (``gone``: deletes replayed (at recovery, or by a replica) for messages
beyond the cursor; ``receive_counts`` and ``deadlines``: their last receive
counts and visibility deadlines: such a message comes in IN_FLIGHT until its
deadline, unless a restart released it).  They are bounded by the
delete/visibility records themselves and emptied as the cursor passes them.
Memory is O(1) in the backlog size otherwise.

Paging reads a few blocks at a time (:data:`GROUP_RECORDS` records or
:data:`GROUP_BYTES` of heap, whole blocks) and filters and inserts their
rows together: the numpy calls per block, not the rows, were most of a
page-in's cost when commits are small (a host's blocks of ~100 messages
beside their receives' and deletes' records). The group read last is kept
until the cursor passes it, so a partly loaded group is not read again.

The size of the message at the cursor is kept when it is known (the first
message to go to the backlog, or the one a page-in stopped at for lack of
room): a page-in that could not place it returns without reading a block,
and :meth:`PartitionStore.stats` tells a backlog no receive can reach now
(``blocked_on_disk``) from one a receive would page in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zmqueue.dataplane.storage.records import RECORD_DTYPE, RecordType, Table
from zmqueue.dataplane.storage.ring import IN_FLIGHT, IntArray, Ring
from zmqueue.dataplane.storage.segment import BlockIndex, BlockReader

U8Array = np.ndarray[tuple[int], np.dtype[np.uint8]]
PAGE_IN_MAX = 1024  # messages one page-in call loads at most (more than one receive takes)
GROUP_RECORDS = 4096  # records of the blocks read together (whole blocks: a little more)
GROUP_BYTES = 1 << 20  # or this much heap (at least one block, however large); kept per partition


def payload_lens(rows: Table) -> IntArray:
    lens: IntArray = rows["body_len"].astype(np.int64) + rows["attr_len"]
    return lens


@dataclass(frozen=True)
class _Group:
    """Consecutive blocks read together: their rows (heap offsets rebased
    onto ``heap``, the blocks' heaps back to back) and a contiguous copy of
    the rows' seqs for lookups."""

    table: Table
    heap: U8Array
    seqs: IntArray

    @property
    def last(self) -> int:
        return int(self.seqs[-1])

    def holds(self, seq: int) -> bool:
        return int(self.seqs[0]) <= seq <= self.last


class Backlog:
    def __init__(self) -> None:
        self.cursor: int | None = None
        self.count = 0  # messages with seq >= cursor, including the ones in `gone`
        self.bytes = 0
        self.gone: set[int] = set()
        self.receive_counts: dict[int, int] = {}
        self.deadlines: dict[int, int] = {}  # (keys: those of receive_counts not released by a restart)
        self._cache: _Group | None = None
        # (seq, payload bytes, enqueue ms) of the message at the cursor, if known
        self._next: tuple[int, int, int] | None = None

    def add(self, rows: Table) -> None:
        """Messages that do not go to the ring (rows in seq order)."""
        if self.cursor is None:
            self._start(rows)
        self.count += len(rows)
        self.bytes += int(payload_lens(rows).sum())

    def add_fresh(self, rows: Table, count: int, nbytes: int) -> None:
        """:meth:`add` for ``count`` new messages, ``nbytes`` of payload, the
        first of them ``rows[0]`` (the rest of ``rows`` is not read)."""
        if self.cursor is None:
            self._start(rows)
        self.count += count
        self.bytes += nbytes

    def _start(self, rows: Table) -> None:
        first = rows[0]
        self.cursor = int(first["seq"])
        self._next = (self.cursor, int(first["body_len"]) + int(first["attr_len"]), int(first["time_ms"]))

    def reset(self) -> None:
        self.cursor = None
        self.count = self.bytes = 0
        self.gone.clear()
        self.receive_counts.clear()
        self.deadlines.clear()
        self._cache = None
        self._next = None

    def forget(self, seq: int) -> None:
        """Message ``seq`` beyond the cursor was deleted (or moved to a DLQ)."""
        self.gone.add(seq)
        self.receive_counts.pop(seq, None)
        self.deadlines.pop(seq, None)

    def next_bytes(self, expired_at: int) -> int | None:
        """Payload bytes of the message the next page-in would place first,
        if known (None: unknown, or that message is gone or expired)."""
        nxt = self._next
        if nxt is None or nxt[0] != self.cursor or nxt[2] <= expired_at or nxt[0] in self.gone:
            return None
        return nxt[1]

    def beyond(self, seq: int) -> bool:
        return self.cursor is not None and seq >= self.cursor

    def page_in(
        self, ring: Ring, reader: BlockReader, index: BlockIndex, last_written: int, expired_at: int,
        needed: bool = True, starved: bool = False,
    ) -> int:
        """Load what fits, :data:`PAGE_IN_MAX` messages at most (the rest in
        later calls, so no single request waits for a long page-in: filling
        the 8,192 slots a compaction frees took ~5 ms); return how many
        expired messages were skipped.

        ``needed=False`` pages ahead of the consumers: the ring compacts only
        once half of it is dead (see :meth:`Ring.can_place`). ``starved``: the
        receive asking found nothing to take in the ring; until this call has
        loaded a message, the ring may grow or compact for as little as the
        next message (see :meth:`Ring.fit_count`)."""
        expired = 0
        start = ring.live
        while self.cursor is not None and self.cursor <= last_written:
            urgent = starved and ring.live == start
            slots = ring.max_slots if urgent else ring.slots
            if ring.live >= slots:
                break
            nxt = self.next_bytes(expired_at)
            if not (ring.can_place(needed, urgent) if nxt is None else ring.room_for(nxt, needed, urgent)):
                break  # (a consumer's deletes free slots long before compacting pays: no block read)
            room = min(slots - ring.live, PAGE_IN_MAX - (ring.live - start))
            if room <= 0:
                break
            # rows, not messages: a host's blocks also hold receives' and
            # deletes' records; too few only means another turn of this loop
            table, heap = self._rows(reader, index, self.cursor, 2 * room + 64)
            if not len(table):
                break  # (nothing written at or past the cursor: not reached while cursor <= last_written)
            rows = table[table["type"] == RecordType.MESSAGE]
            fresh = rows["time_ms"] > expired_at
            keep, old = fresh, ~fresh
            if self.gone:  # (a deleted message is not counted as expired)
                alive = ~np.isin(rows["seq"], np.fromiter(self.gone, np.uint64))
                keep, old = keep & alive, old & alive
            kept = rows[keep]
            lens = payload_lens(kept)
            k = ring.fit_count(lens, needed, urgent)
            full = k < len(kept)
            stop = int(kept["seq"][k]) if full else int(table["seq"][-1]) + 1
            if k:
                ring.insert(kept[:k], heap, lens[:k])
                self._restore_counts(ring, kept[:k])
            done = rows["seq"] < stop
            expired += int(np.count_nonzero(done & old))
            self._passed(rows[done])
            self.cursor = stop if self.count else None
            if full:
                self._next = (stop, int(lens[k]), int(kept["time_ms"][k]))
                break
        if self.cursor is None:
            self.reset()
        elif self._cache is not None and self.cursor > self._cache.last:
            self._cache = None  # passed: not kept while the consumers are idle
        return expired

    def _passed(self, rows: Table) -> None:
        self.count -= len(rows)
        self.bytes -= int(payload_lens(rows).sum())
        if self.gone or self.receive_counts:
            for seq in rows["seq"].tolist():
                self.gone.discard(seq)
                self.receive_counts.pop(seq, None)
                self.deadlines.pop(seq, None)

    def _restore_counts(self, ring: Ring, loaded: Table) -> None:
        """The receive counts of the messages just loaded (the last slots),
        and the deadline of those in flight: a replica's copy or a rebuilt
        ring (a rollback, a cut) holds fewer messages than the writer's did,
        so a message in flight may come from disk; it stays hidden until its
        deadline, as in the writer's ring."""
        if not self.receive_counts:
            return
        first = ring.n - len(loaded)
        held = False
        for j, seq in enumerate(loaded["seq"].tolist()):
            count = self.receive_counts.get(seq)
            if count is not None:
                ring.receive_count[first + j] = count
                deadline = self.deadlines.get(seq)
                if deadline is not None:
                    ring.visible_at[first + j] = deadline
                    ring.state[first + j] = IN_FLIGHT
                    held = True
        if held:
            ring.forget_picks()  # (slots changed state outside receive: every pick hint restarts)

    def _rows(self, reader: BlockReader, index: BlockIndex, seq: int, limit: int) -> tuple[Table, U8Array]:
        """At most ``limit`` rows from ``seq`` on (fewer at the end of a group)
        and the heap their offsets point into."""
        group = self._cache
        if group is None or not group.holds(seq):
            group = self._cache = _read_group(reader, index, seq)
            if group is None:
                return np.zeros(0, RECORD_DTYPE), np.zeros(0, np.uint8)
        pos = int(np.searchsorted(group.seqs, seq))
        return group.table[pos : pos + limit], group.heap


def _read_group(reader: BlockReader, index: BlockIndex, seq: int) -> _Group | None:
    """The blocks from the one holding ``seq`` (blocks wholly before it are
    skipped), until :data:`GROUP_RECORDS` records or :data:`GROUP_BYTES` of
    heap or the last block written; None if no block holds ``seq`` or later."""
    tables: list[Table] = []
    heaps: list[bytes] = []
    records = nbytes = 0
    i = index.find(seq)
    while i < index.count and records < GROUP_RECORDS and nbytes < GROUP_BYTES:
        _, base, offset = index.entry(i)
        i += 1
        _, table, heap = reader.read(base, offset)
        if int(table["seq"][-1]) < seq:
            continue
        tables.append(table)
        heaps.append(heap)
        records += len(table)
        nbytes += len(heap)
    if not tables:
        return None
    if len(tables) == 1:
        table = tables[0]
    else:
        # (as bytes: np.concatenate of structured arrays costs ~20 us per array)
        table = np.concatenate([t.view(np.uint8) for t in tables]).view(RECORD_DTYPE)
        starts = np.cumsum([0, *map(len, heaps[:-1])], dtype=np.int64)
        table["data_off"] += np.repeat(starts, [len(t) for t in tables]).astype(np.uint32)
    joined: U8Array = np.frombuffer(b"".join(heaps) if len(heaps) > 1 else heaps[0], np.uint8)
    return _Group(table, joined, table["seq"].astype(np.int64))
