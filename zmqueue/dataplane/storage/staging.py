"""Records staged since the last commit: the next block, built by ``commit()``.

Every mutation of a store stages records here (new messages with their heap,
or reference records pointing at ring slots); ``take_payload()`` hands the
whole lot over as one raw block payload (group commit), with heap offsets
already rebased.

The table is one preallocated, growable record array filled in place, so
staging costs O(rows written) and taking it is a slice, not a concatenation
of many small structured tables (numpy re-checks structured dtypes on every
``np.concatenate``; that promotion was most of a commit after many single
deletes).  Three ways in:

- :meth:`stage_ref`: one reference record from Python scalars, one
  ``struct.pack_into`` (delete, change_visibility, purge);
- :meth:`stage_refs`: one reference record per ring row, whole-column writes
  on the u64 words of the rows (receive, dead-letter moves);
- :meth:`stage_packed`: a batch of new messages, its MESSAGE rows written in
  place (:func:`batch.fill`), no intermediate table (appends);
- :meth:`stage`: a ready table and its heap (replicated chunks).

The rows sit at the front of a :class:`RecordBuffer`; :meth:`take_payload`
copies the heap in right behind them, so the block's raw payload is one
contiguous buffer that LZ4 compresses in place (no ``tobytes`` + join).  Two
buffers alternate: the one just taken stays intact until the next commit, so
the last committed block can be read back (replication) without copying it
on every commit (:meth:`last_chunk` copies on demand).
"""

from __future__ import annotations

import struct

import numpy as np

from zmqueue.dataplane.storage import batch
from zmqueue.dataplane.storage.records import (
    RECORD_BYTES,
    RECORD_DTYPE,
    RECORD_STRUCT,
    RECORD_VERSION,
    WORDS,
    RecordBuffer,
    RecordType,
    Table,
)
from zmqueue.dataplane.storage.ring import MetaRows

_U64 = struct.Struct("<Q")
assert RECORD_DTYPE.names is not None and len(RECORD_DTYPE.names) == 15
# u64 word / u32 half-word positions used by the column writes
_W64_EPOCH, _W64_SEQ, _W64_TARGET, _W64_TIME, _W64_VISIBLE, _W64_COUNT = 1, 2, 3, 6, 7, 9
_W32_DATA_OFF = 20
assert RECORD_DTYPE.fields is not None
for _name, _off in (
    ("epoch", _W64_EPOCH * 8),
    ("seq", _W64_SEQ * 8),
    ("target_seq", _W64_TARGET * 8),
    ("time_ms", _W64_TIME * 8),
    ("visible_at_ms", _W64_VISIBLE * 8),
    ("receive_count", _W64_COUNT * 8),  # u32; the high half (attr_len) stays 0
    ("data_off", _W32_DATA_OFF * 4),
):
    assert RECORD_DTYPE.fields[_name][1] == _off, _name

INITIAL_ROWS = 64
INITIAL_BYTES = 16 << 10
KEEP_ROWS = 4096  # a buffer grown beyond this (or KEEP_BYTES) is dropped after the commit that needed it
KEEP_BYTES = 1 << 20
_ZERO_ID = bytes(16)
_ARANGE = np.arange(1024, dtype=np.uint64)
SMALL = 8  # stage() copies tables of up to this many rows as bytes (fewer numpy calls)

Chunk = tuple[Table, bytes]


class Staging:
    def __init__(self, record_flags: int = 0) -> None:
        self.record_flags = record_flags
        """The ``flags`` of every record this store writes (set as each row is
        written: an OR over the rows at each commit cost ~5 us a commit on a
        busy host). Rows staged from a writer's chunk (:meth:`stage`) keep
        the writer's flags."""
        self.n = 0  # rows staged
        self.heaps: list[bytes] = []
        self.heap_len = 0
        self._b = RecordBuffer(INITIAL_ROWS, INITIAL_BYTES)
        # the buffer of the last take_payload(): rows, end of table, end of heap
        self._last: tuple[RecordBuffer, int, int, int] | None = None
        self._last_chunk: Chunk | None = None

    @property
    def _buf(self) -> Table:
        """The record rows of the current buffer (all of them, staged or not)."""
        return self._b.table

    def _reserve(self, k: int) -> int:
        """Room for ``k`` more rows; return the first row index.  May replace
        ``self._b``: read the buffer after reserving."""
        n = self.n
        if n + k > self._b.rows:
            old = self._b
            self._b = RecordBuffer(max(n + k, 2 * old.rows), len(old.raw))
            self._b.raw[: n * RECORD_BYTES] = old.raw[: n * RECORD_BYTES]
        self.n = n + k
        return n

    def __bool__(self) -> bool:
        return self.n > 0

    def __len__(self) -> int:
        return self.n

    def stage(self, table: Table, heap: bytes) -> None:
        """Add records; MESSAGE ``data_off`` are relative to ``heap``, rebased here."""
        k = len(table)
        if not k:
            return
        n = self._reserve(k)
        b = self._b
        if k <= SMALL and table.flags.c_contiguous:  # a replica's usual chunk: one buffer write
            b.mem[n * RECORD_BYTES : (n + k) * RECORD_BYTES] = table.tobytes()
        elif table.flags.c_contiguous:  # copy as u64 words: a memcpy (structured copies are 5x slower)
            b.w64[n : n + k] = table.view(np.uint64).reshape(k, WORDS)
        else:
            b.table[n : n + k] = table
        if heap:
            if self.heap_len:
                off = b.w32[n : n + k, _W32_DATA_OFF]
                is_msg = b.table["type"][n : n + k] == RecordType.MESSAGE
                np.add(off, np.uint32(self.heap_len), out=off, where=is_msg)
            self.heaps.append(heap)
            self.heap_len += len(heap)

    def stage_packed(self, packed: batch.Packed, seq0: int, epoch: int, now_ms: int) -> Table:
        """Stage a batch of new messages (seqs from ``seq0``); return their rows
        (a view of the buffer, valid until the next stage; ``data_off`` rebased)."""
        k = packed.n
        n = self._reserve(k)
        b = self._b
        batch.fill(b, n, packed, seq0, epoch, now_ms, self.heap_len, self.record_flags)
        heap = packed.heap
        if heap:
            self.heaps.append(heap)
            self.heap_len += len(heap)
        return b.table[n : n + k]

    def stage_ref(
        self,
        rtype: RecordType,
        seq: int,
        target_seq: int,
        message_id: bytes,
        receive_count: int,
        epoch: int,
        now_ms: int,
        visible_at_ms: int = 0,
    ) -> None:
        """Stage one non-message record from scalars (``message_id``: 16 bytes or b"")."""
        n = self._reserve(1)
        RECORD_STRUCT.pack_into(
            self._b.mem,
            n * RECORD_BYTES,
            rtype,
            RECORD_VERSION,
            self.record_flags,
            0,
            epoch,
            seq,
            target_seq,
            message_id or _ZERO_ID,
            now_ms,
            visible_at_ms,
            0,
            receive_count,
            0,
            0,
            0,
        )

    def stage_refs(
        self,
        rtype: RecordType,
        meta: MetaRows,
        first_seq: int,
        epoch: int,
        now_ms: int,
        visible_at_ms: int = 0,
    ) -> None:
        """Stage one ``rtype`` record per ring row (target, id and count copied)."""
        k = len(meta)
        if k == 1:
            row = meta[0]
            self.stage_ref(
                rtype,
                first_seq,
                int(row["seq"]),
                row["message_id"].tobytes(),
                int(row["receive_count"]),
                epoch,
                now_ms,
                visible_at_ms,
            )
            return
        if not k:
            return
        n = self._reserve(k)
        b = self._b
        w = b.w64[n : n + k]
        w[:] = 0
        w[:, 0] = int(rtype) | RECORD_VERSION << 8 | self.record_flags << 16  # (body_len 0)
        if epoch:
            w[:, _W64_EPOCH] = epoch
        if k <= len(_ARANGE):
            np.add(_ARANGE[:k], np.uint64(first_seq), out=w[:, _W64_SEQ])
        else:
            w[:, _W64_SEQ] = np.arange(first_seq, first_seq + k, dtype=np.uint64)
        w[:, _W64_TARGET] = meta["seq"]
        b.ids[n : n + k] = meta["message_id"]
        times = b.i64[n : n + k]
        times[:, _W64_TIME] = now_ms
        if visible_at_ms:
            times[:, _W64_VISIBLE] = visible_at_ms
        w[:, _W64_COUNT] = meta["receive_count"]

    def take_payload(self) -> tuple[memoryview, int, int, int]:
        """Everything staged as one raw block payload (record table, then heap,
        contiguous): (payload, record count, first seq, last seq).  Staging is
        left empty; the payload stays valid until the next take_payload()."""
        n, b = self.n, self._b
        table_end = n * RECORD_BYTES
        end = table_end + self.heap_len
        if end > len(b.raw):
            grown = RecordBuffer(b.rows, max(end, 2 * len(b.raw)))
            grown.raw[:table_end] = b.raw[:table_end]
            b = grown
        mem = b.mem
        pos = table_end
        for heap in self.heaps:
            nxt = pos + len(heap)
            mem[pos:nxt] = heap
            pos = nxt
        (first,) = _U64.unpack_from(mem, _W64_SEQ * 8)
        (last,) = _U64.unpack_from(mem, table_end - RECORD_BYTES + _W64_SEQ * 8)
        previous = self._last
        self._last, self._last_chunk = (b, n, table_end, end), None
        self.n, self.heaps, self.heap_len = 0, [], 0
        # stage into the other buffer; this one stays readable until the next take
        spare = previous[0] if previous is not None else None
        if spare is None or spare.rows > KEEP_ROWS or len(spare.raw) > KEEP_BYTES:
            spare = RecordBuffer(INITIAL_ROWS, INITIAL_BYTES)
        self._b = spare
        return mem[:end], n, first, last

    def take(self) -> Chunk:
        """Everything staged as one (table, heap); staging is left empty.

        The table is a view, valid until the next take.
        """
        self.take_payload()
        assert self._last is not None
        b, n, table_end, end = self._last
        return b.table[:n], bytes(b.mem[table_end:end])

    def last_chunk(self) -> Chunk | None:
        """(table, heap) of the last block taken, copied out once; None if none."""
        if self._last is None:
            return None
        if self._last_chunk is None:
            b, _, table_end, end = self._last
            # the rows as one memcpy of their bytes (a structured copy is ~5x slower);
            # read-only, like every chunk the replication code passes around
            rows = np.frombuffer(bytes(b.mem[:table_end]), RECORD_DTYPE)
            self._last_chunk = (rows, bytes(b.mem[table_end:end]))
        return self._last_chunk
