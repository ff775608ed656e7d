"""A replica's copy cut back after seq ``keep`` (``PartitionStore.truncate_after``:
a copy that diverged from its writer's log keeps what it shares with it) is
the copy that applied only the first ``keep`` records: same records, same
ring and backlog, before and after a restart; later segments are gone and the
block holding ``keep`` is written again up to it."""

from __future__ import annotations

import random
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.storage.test_scalar_paths import state
from zmqueue.dataplane.storage import PartitionStore, StorageConfig
from zmqueue.dataplane.storage.segment import list_segments

NOW = 1_000_000
CONFIG = StorageConfig(ring_slots=40, arena_bytes=4096, segment_bytes_max=4096, fsync="never")
"""Backlogs past 40 messages or 4 KiB, and a segment file per ~4 KiB of blocks."""
FIFO = replace(CONFIG, fifo=True)


def writer_log(d: Path, ops: list[tuple[Any, ...]], config: StorageConfig = CONFIG) -> PartitionStore:
    """A writer's log from sends, receives, deletes and takeovers, a block per op
    (bodies of random bytes: LZ4 cannot shrink them, so the files roll)."""
    w = PartitionStore.open(d / "writer", config, now_ms=NOW)
    now, ids, held = NOW, 0, []
    for op in ops:
        if op[0] == "send":
            _, n, size = op
            mids = b"".join((ids + i).to_bytes(16, "big") for i in range(n))
            w.append_batch([random.Random(ids + i).randbytes(size) for i in range(n)], now, message_ids=mids,
                           group_hashes=[(ids + i) % 3 + 1 for i in range(n)])
            ids += n
        elif op[0] == "recv":
            got, _ = w.receive(op[1], now, 30)
            held += [(m.seq, m.receive_count) for m in got]
        elif op[0] == "delete":
            w.delete_many(held[: op[1]], now)
            held = held[op[1]:]
        elif op[0] == "takeover":
            w.epoch += 1
            w.mark_epoch(now)
        now += 7
        w.commit()
    return w


def replica(path: Path, chunks: list[tuple[Any, bytes]], upto: int,
            config: StorageConfig = CONFIG) -> PartitionStore:
    """A replica that applied the writer's blocks (one commit each) up to seq ``upto``."""
    r = PartitionStore.open(path, config, now_ms=NOW)
    for table, heap in chunks:
        rows = table[table["seq"] <= upto]
        if len(rows):
            r.apply_chunk(rows, heap)
            r.commit()
    return r


def everything(s: PartitionStore) -> list[Any]:
    return s.read_records(1, 1 << 20)


OPS = st.one_of(
    st.tuples(st.just("send"), st.integers(1, 15), st.integers(0, 300)),
    st.tuples(st.just("recv"), st.integers(1, 10)),
    st.tuples(st.just("delete"), st.integers(1, 10)),
    st.tuples(st.just("takeover"),),
)


@settings(max_examples=80, deadline=None)
@example(ops=[("send", 10, 200)] * 6 + [("recv", 5), ("delete", 3), ("takeover",), ("send", 3, 10)],
         cut=0.5, fifo=False)
@example(ops=[("send", 10, 200)] * 6 + [("recv", 5), ("delete", 3), ("takeover",), ("send", 3, 10)],
         cut=0.5, fifo=True)
@example(ops=[("send", 1, 10)] * 3, cut=0.0, fifo=False)
# 14 x 293 bytes overflow the 4 KiB ring: a copy rebuilt from its log keeps the
# 14th on disk, in flight until its deadline (its receive paged it in on the writer)
@example(ops=[("send", 14, 293), ("recv", 8), ("delete", 7), ("recv", 6), ("send", 12, 0)],
         cut=0.75, fifo=False)
# (a CI failure) 5 x 244 bytes after 15 x 192 overflow the 4 KiB ring: seq 27 waits on
# disk; the copy that commits each block pages it in at the commit that leaves half
# the arena dead (11 deletes: compacted out), so the next delete (12) leaves a dead
# slot; a copy rebuilt from its log pages in at the same commits, not once at the end
@example(ops=[("send", 15, 192)] + [("recv", 1)] * 5 + [("recv", 2), ("send", 5, 244), ("recv", 8),
                                                       ("delete", 4), ("delete", 10), ("delete", 1),
                                                       ("recv", 1), ("send", 15, 0)],
         cut=0.75, fifo=False)
@given(ops=st.lists(OPS, min_size=1, max_size=30), cut=st.floats(0, 1), fifo=st.booleans())
def test_a_copy_cut_after_keep_is_the_copy_that_applied_only_that_far(
        ops: list[tuple[Any, ...]], cut: float, fifo: bool) -> None:
    config = FIFO if fifo else CONFIG  # (a FIFO store keeps its groups' order beside the ring)
    with tempfile.TemporaryDirectory() as d:
        base = Path(d)
        w = writer_log(base, ops, config)
        chunks = w.read_chunks(1, 1 << 20)
        keep = int(cut * w.last_seq)
        full = replica(base / "full", chunks, w.last_seq, config)
        ref = replica(base / "ref", chunks, keep, config)
        try:
            gone = full.truncate_after(keep, NOW + 10_000)
            assert gone == w.last_seq - keep
            assert full.last_seq == keep and everything(full) == everything(ref)
            assert state(full) == state(ref)
            # the segments after the cut are gone: every file starts at or below keep + 1
            assert all(b <= keep + 1 for b, _ in list_segments(base / "full"))
            full.close()
            ref.close()
            full = PartitionStore.open(base / "full", config, now_ms=NOW + 20_000)
            ref = PartitionStore.open(base / "ref", config, now_ms=NOW + 20_000)
            assert full.recovery_report.corrupt_blocks == []
            assert everything(full) == everything(ref) and state(full) == state(ref)
            # and it takes the writer's records after keep again, as a catch-up brings them
            for table, heap in chunks:
                rows = table[table["seq"] > keep]
                if len(rows):
                    full.apply_chunk(rows, heap)
            full.commit()
            assert everything(full) == everything(w)
        finally:
            for s in (w, full, ref):
                s.close()


def test_a_cut_at_or_past_the_last_seq_changes_nothing(tmp_path: Path) -> None:
    w = writer_log(tmp_path, [("send", 5, 20), ("send", 5, 20)])
    try:
        before = everything(w)
        assert w.truncate_after(10, NOW) == 0 and w.truncate_after(99, NOW) == 0
        assert everything(w) == before and w.last_seq == 10
    finally:
        w.close()


def test_a_cut_to_nothing_leaves_an_empty_copy_that_starts_again_at_seq_1(tmp_path: Path) -> None:
    w = writer_log(tmp_path, [("send", 8, 300)] * 4)  # several segment files
    chunks = w.read_chunks(1, 1 << 20)
    r = replica(tmp_path / "r", chunks, w.last_seq)
    try:
        assert len(list_segments(tmp_path / "r")) > 1
        assert r.truncate_after(0, NOW) == 32
        assert r.last_seq == 0 and r.last_epoch == 0 and list_segments(tmp_path / "r") == []
        for table, heap in chunks:
            r.apply_chunk(table, heap)
        r.commit()
        assert everything(r) == everything(w)
    finally:
        w.close()
        r.close()


def test_first_seq_is_the_first_record_left_after_compaction(tmp_path: Path) -> None:
    """What a writer compares a diverged copy from (``keep_after_divergence``)."""
    w = writer_log(tmp_path, [("send", 8, 300)] * 4 + [("recv", 20), ("delete", 20)])
    try:
        assert w.first_seq == 1
        assert w.compact() > 0  # whole segments of deleted messages go
        assert w.first_seq == w.read_records(1, 1)[0].seq > 1
        assert w.first_seq == list_segments(tmp_path / "writer")[0][0]
    finally:
        w.close()
    empty = PartitionStore.open(tmp_path / "empty", CONFIG, now_ms=NOW)
    try:
        assert empty.first_seq == 1
    finally:
        empty.close()
