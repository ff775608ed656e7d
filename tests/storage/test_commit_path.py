"""The append + commit fast path: rows written in place, payload compressed in
place, header and payload in one pwritev, the last block read back lazily."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from zmqueue.dataplane.storage import NewMessage, PartitionStore, StorageConfig
from zmqueue.dataplane.storage.batch import columns_of, message_table, pack
from zmqueue.dataplane.storage.records import RECORD_DTYPE, RecordType, new_table
from zmqueue.dataplane.storage.segment import scan_segment

CONFIG = StorageConfig(ring_slots=64, arena_bytes=8192, fsync="never")


def _reference(bodies: list[bytes], ids: bytes, seq0: int, epoch: int, now: int, base: int = 0) -> np.ndarray:
    table = new_table(len(bodies))
    off = base
    for i, body in enumerate(bodies):
        row = table[i : i + 1]
        row["type"] = RecordType.MESSAGE
        row["epoch"], row["seq"], row["time_ms"], row["visible_at_ms"] = epoch, seq0 + i, now, now
        row["message_id"] = np.frombuffer(ids[16 * i : 16 * i + 16], "V16")
        row["body_len"], row["data_off"] = len(body), off
        off += len(body)
    return table


@pytest.mark.parametrize("size", [0, 1, 100, 4000])
def test_uniform_batches_use_the_cached_template_and_match_the_reference(size: int) -> None:
    for n in (1, 3, 300, 2):  # 300 grows the template; 2 reuses the large one
        bodies = [bytes([i % 256]) * size for i in range(n)]
        ids = b"".join(i.to_bytes(16, "little") for i in range(n))
        got = message_table(pack(bodies, ids, None, None, 0), 7, 2, 1_700_000_000_000)
        assert got.tobytes() == _reference(bodies, ids, 7, 2, 1_700_000_000_000).tobytes()


def test_mixed_lengths_and_empty_attributes_take_the_general_path() -> None:
    bodies = [b"a" * (i % 5) for i in range(37)]
    ids = bytes(16 * 37)
    packed = pack(bodies, ids, [b""] * 37, None, 0)
    assert not isinstance(packed.body_len, int)
    got = message_table(packed, 1, 0, 5)
    assert got.tobytes() == _reference(bodies, ids, 1, 0, 5).tobytes()


def _blocks(directory: Path) -> list[tuple[np.ndarray, bytes]]:
    out = []
    for seg in sorted(directory.glob("*.seg")):
        for block in scan_segment(seg, 1):
            assert not isinstance(block, Exception)
            out.append((block.table, block.heap))
    return out


def test_several_batches_in_one_block_rebase_data_off_and_round_trip(tmp_path: Path) -> None:
    batches = [[b"x" * 10] * 4, [b"yy" * 3, b"z"], [b"w" * 10] * 3, [b"q" * 7] * 2]
    with PartitionStore.open(tmp_path, CONFIG, now_ms=1) as store:
        for bodies in batches:
            store.append_batch(bodies, 3, message_ids=bytes(16 * len(bodies)))
        store.commit()
        ((table, heap),) = _blocks(tmp_path)
        all_bodies = [b for bodies in batches for b in bodies]
        want = _reference(all_bodies, bytes(16 * len(all_bodies)), 1, 0, 3)
        assert table.tobytes() == want.tobytes()
        assert heap == b"".join(all_bodies)
        got, _ = store.receive(20, 3, 1000)
        assert [d.body for d in got] == all_bodies


def test_last_block_is_the_block_on_disk_until_the_next_commit(tmp_path: Path) -> None:
    with PartitionStore.open(tmp_path, CONFIG, now_ms=1) as store:
        assert store.last_block is None
        store.append_batch([b"a" * 5, b"b" * 5], 1)
        store.commit()
        first = store.last_block
        assert first is not None
        # staging more (into the other buffer) leaves the committed block intact
        store.append_batch([b"c" * 9] * 3, 1, attributes=[b"", b"at", b""])
        store.commit()
        got, _ = store.receive(1, 1, 1000)
        store.delete(got[0].seq, got[0].receive_count, 1)
        second = store.last_block
        assert second is not None
        store.commit()
        third = store.last_block
        assert third is not None
        store.append_batch([b"d"], 1)  # staged, not committed: last_block unchanged
        assert store.last_block is third
        on_disk = _blocks(tmp_path)
        for (table, heap), (disk_table, disk_heap) in zip((first, second, third), on_disk, strict=True):
            assert table.dtype == RECORD_DTYPE
            assert table.tobytes() == disk_table.tobytes()
            assert heap == disk_heap
        assert store.read_chunks(int(third[0]["seq"][0]), 10) == [third]


def test_object_api_and_columns_write_the_same_uniform_rows() -> None:
    messages = [NewMessage(i.to_bytes(16, "little"), b"m" * 20) for i in range(50)]
    a = message_table(columns_of(messages), 1, 0, 9)
    b = message_table(
        pack([m.body for m in messages], b"".join(m.message_id for m in messages), None, None, 0), 1, 0, 9
    )
    assert a.tobytes() == b.tobytes()


def test_a_big_commit_does_not_pin_big_buffers(tmp_path: Path) -> None:
    config = StorageConfig(ring_slots=64, arena_bytes=8192, fsync="never")
    with PartitionStore.open(tmp_path, config, now_ms=1) as store:
        store.append_batch([b"k" * 1000] * 3000, 1)  # 3 MB heap, 3000 rows
        store.commit()
        store.append_batch([b"s"], 1)
        store.commit()  # the big buffer was the last one taken; now it is dropped
        store.append_batch([b"t"], 1)
        staged = store.staged
        assert len(staged._buf) <= 4096 and len(staged._b.raw) <= 1 << 20
        store.commit()
        assert store.stats(1)["total"] == 3002


@pytest.mark.parametrize("shape", ["uniform", "mixed", "attrs", "groups+delays"])
def test_insert_packed_fills_the_ring_like_insert_of_the_rows(shape: str) -> None:
    from zmqueue.dataplane.storage.ring import Ring

    n = 40
    bodies = [b"b" * (10 if shape == "uniform" else i % 7) for i in range(n)]
    attrs = [b"a" * (i % 3) for i in range(n)] if shape == "attrs" else None
    groups = np.arange(n, dtype=np.uint64) % 4 if shape == "groups+delays" else None
    delays = np.arange(n) * 3 if shape == "groups+delays" else 0
    packed = pack(bodies, None, attrs, groups, delays)
    rows = message_table(packed, 11, 0, 1000)
    for k in (n, 25, 1):  # whole batch, the first k when the ring is short, one (the scalar path)
        by_rows, by_columns = Ring(64, 4096), Ring(64, 4096)
        by_rows.insert(rows[:1], packed.heap)  # both start at a non-zero top
        by_columns.insert(rows[:1], packed.heap)
        total = int(rows["data_off"][k]) if k < n else len(packed.heap)
        by_rows.insert(rows[:k], packed.heap)
        by_columns.insert_packed(k, packed, 11, 1000, total)
        assert by_columns.meta.tobytes() == by_rows.meta.tobytes()
        assert by_columns.arena.tobytes() == by_rows.arena.tobytes()
        assert (by_columns.n, by_columns.top, by_columns.live, by_columns.live_bytes) == (
            by_rows.n,
            by_rows.top,
            by_rows.live,
            by_rows.live_bytes,
        )


def test_insert_packed_of_a_batch_larger_than_the_cached_offsets() -> None:
    from zmqueue.dataplane.storage.ring import Ring

    n = 5000  # past the 4096 rows of cached (seq, off) pairs
    packed = pack([b"u" * 3] * n, None, None, None, 0)
    rows = message_table(packed, 1, 0, 7)
    by_rows, by_columns = Ring(n + 1, 1 << 16), Ring(n + 1, 1 << 16)
    by_rows.insert(rows, packed.heap)
    by_columns.insert_packed(n, packed, 1, 7, len(packed.heap))
    assert by_columns.meta.tobytes() == by_rows.meta.tobytes()


def test_read_chunks_stops_at_a_byte_budget_but_returns_at_least_one_block(tmp_path: Path) -> None:
    """(A replication or catch-up frame took up to 2000 records whatever their
    size: 64 MiB and more with large messages, past what a peer takes.)"""
    config = StorageConfig(ring_slots=64, arena_bytes=1 << 16, fsync="never")
    with PartitionStore.open(tmp_path, config, now_ms=1) as store:
        for i in range(4):  # blocks of 3 x 300 kB
            store.append_batch([bytes([i]) * 300_000] * 3, 1)
            assert store.staged_bytes == 900_000
            store.commit()
            assert store.staged_bytes == 0
        store.append_batch([b"x"], 1)
        store.commit()  # (the last block: read_chunks' fast path answers it alone)

        def sizes(max_bytes: int) -> list[int]:
            chunks = store.read_chunks(1, 2000, max_bytes)
            assert int(chunks[0][0]["seq"][0]) == 1
            return [len(t) for t, _ in chunks]

        assert sizes(1 << 30) == [3, 3, 3, 3, 1]
        assert sizes(2_000_000) == [3, 3]
        assert sizes(1_000_000) == [3]
        assert sizes(1) == [3], "always one block, however large"
        assert [len(t) for t, _ in store.read_chunks(4, 2000, 1)] == [3]
