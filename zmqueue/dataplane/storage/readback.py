"""Reading committed records back as values (replication catch-up, tools)."""

from __future__ import annotations

from zmqueue.dataplane.storage.model import Record
from zmqueue.dataplane.storage.records import Table
from zmqueue.dataplane.storage.segment import BlockIndex, BlockReader


def read_records(reader: BlockReader, index: BlockIndex, from_seq: int, max_records: int) -> list[Record]:
    """Committed records with seq >= ``from_seq``, in order, at most ``max_records``."""
    out: list[Record] = []
    i = index.find(from_seq)
    while i < index.count and len(out) < max_records:
        _, base, offset = index.entry(i)
        _, table, heap = reader.read(base, offset)
        out.extend(_records(table[table["seq"] >= from_seq][: max_records - len(out)], heap))
        i += 1
    return out


def _records(rows: Table, heap: bytes) -> list[Record]:
    out = []
    for row in rows:
        off, blen = int(row["data_off"]), int(row["body_len"])
        out.append(
            Record(
                type=int(row["type"]),
                epoch=int(row["epoch"]),
                seq=int(row["seq"]),
                target_seq=int(row["target_seq"]),
                message_id=bytes(row["message_id"]),
                time_ms=int(row["time_ms"]),
                visible_at_ms=int(row["visible_at_ms"]),
                group_hash=int(row["group_hash"]),
                receive_count=int(row["receive_count"]),
                body=heap[off : off + blen],
                attributes=heap[off + blen : off + blen + int(row["attr_len"])],
            )
        )
    return out
