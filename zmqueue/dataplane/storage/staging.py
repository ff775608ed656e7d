"""Records staged since the last commit: the next block, built by ``commit()``.

Every mutation of a store stages records here (new messages with their heap,
or reference records pointing at ring slots); ``take()`` hands the whole lot
over as one table + heap (group commit), with heap offsets already rebased.
"""

from __future__ import annotations

import numpy as np

from zmqueue.dataplane.storage.records import RecordType, Table, ref_table
from zmqueue.dataplane.storage.ring import MetaRows


class Staging:
    def __init__(self) -> None:
        self.tables: list[Table] = []
        self.heaps: list[bytes] = []
        self.heap_len = 0

    def __bool__(self) -> bool:
        return bool(self.tables)

    def stage(self, table: Table, heap: bytes) -> None:
        """Add records; MESSAGE ``data_off`` are relative to ``heap``, rebased here."""
        if heap:
            if self.heap_len:
                table["data_off"] += self.heap_len
            self.heaps.append(heap)
            self.heap_len += len(heap)
        self.tables.append(table)

    def stage_refs(self, rtype: RecordType, meta: MetaRows, first_seq: int, epoch: int, now_ms: int) -> Table:
        """Stage one ``rtype`` record per ring row (target, id and count copied)."""
        table = ref_table(rtype, meta["seq"], first_seq, epoch, now_ms)
        table["message_id"] = meta["message_id"]
        table["receive_count"] = meta["receive_count"]
        self.tables.append(table)
        return table

    def take(self) -> tuple[Table, bytes]:
        """Everything staged as one (table, heap); staging is left empty."""
        tables, heaps = self.tables, self.heaps
        self.tables, self.heaps, self.heap_len = [], [], 0
        table = tables[0] if len(tables) == 1 else np.concatenate(tables)
        heap = heaps[0] if len(heaps) == 1 else b"".join(heaps)
        return table, heap
