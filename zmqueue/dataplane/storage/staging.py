"""Records staged since the last commit: the next block, built by ``commit()``.

Every mutation of a store stages records here (new messages with their heap,
or reference records pointing at ring slots); ``take()`` hands the whole lot
over as one table + heap (group commit), with heap offsets already rebased.

The table is one preallocated, growable record array filled in place, so
staging costs O(rows written) and ``take()`` is a slice, not a concatenation
of many small structured tables (numpy re-checks structured dtypes on every
``np.concatenate``; that promotion was most of a commit after many single
deletes).  Three ways in:

- :meth:`stage_ref`: one reference record from Python scalars, one
  ``struct.pack_into`` (delete, change_visibility, purge);
- :meth:`stage_refs`: one reference record per ring row, whole-column writes
  on the u64 words of the rows (receive, dead-letter moves);
- :meth:`stage`: a ready table and its heap (appends, replicated chunks).
"""

from __future__ import annotations

import struct

import numpy as np
import numpy.typing as npt

from zmqueue.dataplane.storage.records import RECORD_DTYPE, RECORD_VERSION, RecordType, Table
from zmqueue.dataplane.storage.ring import MetaRows

WORDS = RECORD_DTYPE.itemsize // 8  # 11 u64 words per record
# the record layout of records.py as one struct (asserted against the dtype below)
RECORD_STRUCT = struct.Struct("<BBHIQQQ16sqqQIIII")
assert RECORD_STRUCT.size == RECORD_DTYPE.itemsize
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
KEEP_ROWS = 4096  # a buffer grown beyond this is dropped after the commit that needed it
_ZERO_ID = bytes(16)
_ARANGE = np.arange(1024, dtype=np.uint64)


class Staging:
    def __init__(self) -> None:
        self.n = 0  # rows staged
        self.heaps: list[bytes] = []
        self.heap_len = 0
        self._alloc(INITIAL_ROWS)

    def _alloc(self, rows: int) -> None:
        self._buf: Table = np.zeros(rows, RECORD_DTYPE)
        self._w64: npt.NDArray[np.uint64] = self._buf.view(np.uint64).reshape(rows, WORDS)
        self._i64: npt.NDArray[np.int64] = self._w64.view(np.int64)
        self._w32: npt.NDArray[np.uint32] = self._w64.view(np.uint32)
        self._ids = self._buf["message_id"]
        self._mem = self._buf.view(np.uint8).data  # writable memoryview for pack_into

    def _reserve(self, k: int) -> int:
        """Room for ``k`` more rows; return the first row index."""
        n = self.n
        if n + k > len(self._buf):
            old = self._buf
            self._alloc(max(n + k, 2 * len(old)))
            self._buf[:n] = old[:n]
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
        if table.flags.c_contiguous:  # copy as u64 words: a memcpy (structured copies are 5x slower)
            self._w64[n : n + k] = table.view(np.uint64).reshape(k, WORDS)
        else:
            self._buf[n : n + k] = table
        if heap:
            if self.heap_len:
                off = self._w32[n : n + k, _W32_DATA_OFF]
                is_msg = self._buf["type"][n : n + k] == RecordType.MESSAGE
                np.add(off, np.uint32(self.heap_len), out=off, where=is_msg)
            self.heaps.append(heap)
            self.heap_len += len(heap)

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
            self._mem,
            n * RECORD_STRUCT.size,
            rtype,
            RECORD_VERSION,
            0,
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
        w = self._w64[n : n + k]
        w[:] = 0
        w[:, 0] = int(rtype) | RECORD_VERSION << 8  # type, rec_version; flags, body_len 0
        if epoch:
            w[:, _W64_EPOCH] = epoch
        if k <= len(_ARANGE):
            np.add(_ARANGE[:k], np.uint64(first_seq), out=w[:, _W64_SEQ])
        else:
            w[:, _W64_SEQ] = np.arange(first_seq, first_seq + k, dtype=np.uint64)
        w[:, _W64_TARGET] = meta["seq"]
        self._ids[n : n + k] = meta["message_id"]
        times = self._i64[n : n + k]
        times[:, _W64_TIME] = now_ms
        if visible_at_ms:
            times[:, _W64_VISIBLE] = visible_at_ms
        w[:, _W64_COUNT] = meta["receive_count"]

    def take(self) -> tuple[Table, bytes]:
        """Everything staged as one (table, heap); staging is left empty.

        The table is a view of the staging buffer: valid until the next stage.
        """
        n, heaps = self.n, self.heaps
        table = self._buf[:n]
        self.n, self.heaps, self.heap_len = 0, [], 0
        if len(self._buf) > KEEP_ROWS:
            self._alloc(INITIAL_ROWS)
        heap = heaps[0] if len(heaps) == 1 else b"".join(heaps)
        return table, heap
