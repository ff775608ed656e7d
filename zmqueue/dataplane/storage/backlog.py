"""The part of the queue that lives only in the log: a paging cursor and counters.

Invariant: every live message with ``seq < cursor`` is in the ring; messages
with ``seq >= cursor`` are only in the log (or in the pending block).  When the
ring has room, :meth:`Backlog.page_in` reads blocks forward from the cursor and
loads the next messages, skipping expired ones and the few that are known to be
gone (``gone``: deletes replayed at recovery for messages beyond the cursor;
``receive_counts``: their last receive counts).  Both are bounded by the
delete/visibility records themselves and emptied as the cursor passes them.
Memory is O(1) in the backlog size otherwise.
"""

from __future__ import annotations

import numpy as np

from zmqueue.dataplane.storage.records import RecordType, Table
from zmqueue.dataplane.storage.ring import IntArray, Ring
from zmqueue.dataplane.storage.segment import BlockIndex, BlockReader

U8Array = np.ndarray[tuple[int], np.dtype[np.uint8]]
PAGE_AHEAD_MAX = 4096  # messages one page-ahead call loads at most (whole blocks: a little more)


def payload_lens(rows: Table) -> IntArray:
    lens: IntArray = rows["body_len"].astype(np.int64) + rows["attr_len"]
    return lens


class Backlog:
    def __init__(self) -> None:
        self.cursor: int | None = None
        self.count = 0  # messages with seq >= cursor, including the ones in `gone`
        self.bytes = 0
        self.gone: set[int] = set()
        self.receive_counts: dict[int, int] = {}
        self._cache: tuple[tuple[int, int], Table, U8Array] | None = None

    def add(self, rows: Table) -> None:
        """Messages that do not go to the ring (rows in seq order)."""
        if self.cursor is None:
            self.cursor = int(rows["seq"][0])
        self.count += len(rows)
        self.bytes += int(payload_lens(rows).sum())

    def add_fresh(self, first_seq: int, count: int, nbytes: int) -> None:
        """:meth:`add` for ``count`` new messages from ``first_seq``, ``nbytes`` of payload."""
        if self.cursor is None:
            self.cursor = first_seq
        self.count += count
        self.bytes += nbytes

    def reset(self) -> None:
        self.cursor = None
        self.count = self.bytes = 0
        self.gone.clear()
        self.receive_counts.clear()
        self._cache = None

    def beyond(self, seq: int) -> bool:
        return self.cursor is not None and seq >= self.cursor

    def page_in(
        self, ring: Ring, reader: BlockReader, index: BlockIndex, last_written: int, expired_at: int,
        needed: bool = True,
    ) -> int:
        """Load what fits; return how many expired messages were skipped.

        ``needed=False`` pages ahead of the consumers: the ring compacts only
        once half of it is dead (see :meth:`Ring.can_place`) and one call loads
        about :data:`PAGE_AHEAD_MAX` messages at most (the rest in later calls),
        so no single request waits for a long page-in."""
        expired = 0
        start = ring.live
        while self.cursor is not None and self.cursor <= last_written and ring.live < ring.slots:
            if not ring.can_place(needed):
                break  # (a consumer's deletes free slots long before compacting pays: no block read)
            if not needed and ring.live - start >= PAGE_AHEAD_MAX:
                break
            table, heap = self._block(reader, index, self.cursor)
            is_msg = (table["type"] == RecordType.MESSAGE) & (table["seq"] >= self.cursor)
            rows = table[is_msg]
            fresh = rows["time_ms"] > expired_at
            keep = fresh
            if self.gone:
                keep = keep & ~np.isin(rows["seq"], np.fromiter(self.gone, np.uint64))
            kept = rows[keep]
            k = ring.fit_count(payload_lens(kept), needed)
            full = k < len(kept)
            stop = int(kept["seq"][k]) if full else int(table["seq"][-1]) + 1
            if k:
                ring.insert(kept[:k], heap)
                self._restore_counts(ring, kept[:k])
            done = rows["seq"] < stop
            expired += int(np.count_nonzero(done & ~fresh))
            self._passed(rows[done])
            self.cursor = stop if self.count else None
            if full:
                break
        if self.cursor is None:
            self.reset()
        return expired

    def _passed(self, rows: Table) -> None:
        self.count -= len(rows)
        self.bytes -= int(payload_lens(rows).sum())
        if self.gone or self.receive_counts:
            for seq in rows["seq"].tolist():
                self.gone.discard(seq)
                self.receive_counts.pop(seq, None)

    def _restore_counts(self, ring: Ring, loaded: Table) -> None:
        if not self.receive_counts:
            return
        first = ring.n - len(loaded)
        for j, seq in enumerate(loaded["seq"].tolist()):
            count = self.receive_counts.get(seq)
            if count is not None:
                ring.meta["receive_count"][first + j] = count

    def _block(self, reader: BlockReader, index: BlockIndex, seq: int) -> tuple[Table, U8Array]:
        i = index.find(seq)
        _, base, offset = index.entry(i)
        if self._cache is not None and self._cache[0] == (base, offset):
            table, heap = self._cache[1], self._cache[2]
        else:
            _, table, raw_heap = reader.read(base, offset)
            heap = np.frombuffer(raw_heap, np.uint8)
            self._cache = ((base, offset), table, heap)
        if int(table["seq"][-1]) < seq and i + 1 < index.count:
            self._cache = None
            return self._block(reader, index, index.entry(i + 1)[0])
        return table, heap
