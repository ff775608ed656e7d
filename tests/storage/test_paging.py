"""Paging a backlog larger than the ring: compaction waits while the ring has
enough to hand out, and a receive the ring cannot fill pages in at once."""

from __future__ import annotations

from pathlib import Path

from zmqueue.dataplane.storage import PartitionStore, StorageConfig

NOW = 1_000


def test_paging_ahead_compacts_only_once_half_the_ring_is_dead(tmp_path: Path) -> None:
    store = PartitionStore.open(tmp_path / "p", StorageConfig(ring_slots=16, arena_bytes=1 << 16), now_ms=NOW)
    store.append_batch([b"x" * 10] * 16, NOW)
    store.commit()
    ring = store.ring
    assert not ring.can_place(needed=True) and not ring.can_place(needed=False)
    ring.remove(2)  # 1/16 dead: nobody compacts yet
    ring.remove(3)  # 1/8 dead: worth it when the messages are needed
    assert ring.can_place(needed=True)
    assert not ring.can_place(needed=False)
    for i in range(4, 10):  # 1/2 dead: worth it for paging ahead too
        ring.remove(i)
    assert ring.can_place(needed=False)
    store.close()


def test_a_receive_the_ring_cannot_fill_pages_in_and_takes_the_rest(tmp_path: Path) -> None:
    store = PartitionStore.open(tmp_path / "p", StorageConfig(ring_slots=8, arena_bytes=1 << 16), now_ms=NOW)
    try:
        store.append_batch([b"m%d" % i for i in range(20)], NOW)
        store.commit()
        first, _ = store.receive(8, NOW, 60_000)  # the whole ring, now in flight
        assert len(first) == 8
        store.delete(first[0].seq, first[0].receive_count, NOW)  # 1/8 of the ring dead
        got, _ = store.receive(4, NOW, 60_000)
        # the ring held nothing visible: the receive paged in (compacting at 1/8)
        assert len(got) == 1
        assert got[0].seq == max(d.seq for d in first) + 1
        assert store.stats(NOW)["in_flight"] == 8
    finally:
        store.close()
