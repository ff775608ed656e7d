"""The preallocated staging buffer writes the same bytes as the reference builders."""

from __future__ import annotations

import numpy as np

from zmqueue.dataplane.storage.records import RECORD_DTYPE, RecordType, new_table, ref_table
from zmqueue.dataplane.storage.ring import META_DTYPE
from zmqueue.dataplane.storage.staging import INITIAL_ROWS, KEEP_ROWS, Staging


def _meta(seqs: list[int], counts: list[int]) -> np.ndarray:
    meta = np.zeros(len(seqs), META_DTYPE)
    meta["seq"] = seqs
    meta["receive_count"] = counts
    meta["message_id"] = [s.to_bytes(16, "little") for s in seqs]
    return meta


def _expected(rtype: RecordType, meta: np.ndarray, first: int, epoch: int, now: int, vis: int) -> np.ndarray:
    table = ref_table(rtype, meta["seq"], first, epoch, now).copy()
    table["message_id"] = meta["message_id"]
    table["receive_count"] = meta["receive_count"]
    table["visible_at_ms"] = vis
    return table


def test_refs_single_and_vectorised_match_ref_table_byte_for_byte() -> None:
    s = Staging()
    want = []
    first = 10
    for k in (1, 3, 1, 200, 2):  # 200 rows: the buffer grows past INITIAL_ROWS
        meta = _meta(list(range(first * 7, first * 7 + k)), [c % 5 + 1 for c in range(k)])
        s.stage_refs(RecordType.VISIBILITY, meta, first, 3, 1_700_000_000_000, 1_700_000_030_000)
        want.append(_expected(RecordType.VISIBILITY, meta, first, 3, 1_700_000_000_000, 1_700_000_030_000))
        first += k
    s.stage_ref(RecordType.DELETE, first, 77, (77).to_bytes(16, "little"), 4, 0, 5)
    want.append(_expected(RecordType.DELETE, _meta([77], [4]), first, 0, 5, 0))
    s.stage_ref(RecordType.PURGE, first + 1, first, b"", 0, 2, 6)
    want.append(ref_table(RecordType.PURGE, [first], first + 1, 2, 6))
    table, heap = s.take()
    assert heap == b"" and not s
    assert table.dtype == RECORD_DTYPE
    assert table.tobytes() == np.concatenate(want).tobytes()


def test_stage_rebases_only_message_rows_and_reuses_the_buffer() -> None:
    s = Staging()
    msgs = new_table(2)
    msgs["type"] = RecordType.MESSAGE
    msgs["seq"] = [1, 2]
    msgs["body_len"] = [3, 4]
    msgs["data_off"] = [0, 3]
    s.stage(msgs, b"abcdefg")
    mixed = new_table(3)
    mixed["type"] = [RecordType.MESSAGE, RecordType.DELETE, RecordType.MESSAGE]
    mixed["seq"] = [3, 4, 5]
    mixed["body_len"] = [2, 0, 1]
    mixed["data_off"] = [0, 0, 2]
    s.stage(mixed, b"xyz")
    table, heap = s.take()
    assert heap == b"abcdefgxyz"
    assert table["data_off"].tolist() == [0, 3, 7, 0, 9]  # the DELETE keeps data_off 0
    assert table["seq"].tolist() == [1, 2, 3, 4, 5]
    strided = new_table(4)
    strided["seq"] = [6, 60, 7, 70]
    s.stage(strided[::2], b"")  # not contiguous: the structured copy
    assert s.take()[0]["seq"].tolist() == [6, 7]
    big = new_table(KEEP_ROWS + 1)
    big["seq"] = np.arange(1, KEEP_ROWS + 2)
    s.stage(big, b"")
    table, _ = s.take()
    assert len(table) == KEEP_ROWS + 1 and int(table["seq"][-1]) == KEEP_ROWS + 1
    assert len(s._buf) == INITIAL_ROWS  # a huge commit does not pin a huge buffer


def test_every_record_a_store_writes_carries_its_flags_and_a_replica_keeps_the_writers(tmp_path) -> None:
    """Single and batched sends, receives (one and many), deletes, dead-letter moves, a purge
    and a takeover record all carry ``StorageConfig.record_flags``; a replica stores the
    writer's rows as they came (docs/SEGMENT_FORMAT.md, ``flags``)."""
    from zmqueue.dataplane.storage import NewMessage, PartitionStore, StorageConfig
    from zmqueue.dataplane.storage.records import FLAG_SEAL_KNOWN

    now = 1_700_000_000_000
    w = PartitionStore.open(tmp_path / "w", StorageConfig(fsync="never", record_flags=FLAG_SEAL_KNOWN),
                            now_ms=now)
    r = PartitionStore.open(tmp_path / "r", StorageConfig(fsync="never", record_flags=0), now_ms=now)
    try:
        w.append([NewMessage(b"\x01" * 16, b"one", b"")], now)
        w.append_batch([b"a", b"bb", b"ccc", b"dddd"], now)
        w.append_batch([b"e"] * 3, now, attributes=[b"", b"\x80", b""], delay_ms=[0, 5, 0])
        [one], _ = w.receive(1, now, 1000)
        w.delete(one.seq, one.receive_count, now)
        many, _ = w.receive(3, now, 1000)
        w.delete_many([(m.seq, m.receive_count) for m in many], now)
        w.receive(10, now, 0, max_receive_count=1)
        _, dead = w.receive(10, now + 1, 1000, max_receive_count=1)
        w.mark_dead_lettered([d.seq for d in dead], now + 1)
        w.epoch = 2
        w.mark_epoch(now + 2)
        w.purge(now + 2)
        w.commit()
        chunks = w.read_chunks(1, 1000)
        types = {int(t) for table, _ in chunks for t in table["type"]}
        assert types == {int(t) for t in RecordType}, "every record type was written"
        for table, _ in chunks:
            assert set(table["flags"].tolist()) == {FLAG_SEAL_KNOWN}
        for table, heap in chunks:
            r.apply_chunk(table, heap)
        r.commit()
        for table, _ in r.read_chunks(1, 1000):
            assert set(table["flags"].tolist()) == {FLAG_SEAL_KNOWN}
    finally:
        w.close()
        r.close()
