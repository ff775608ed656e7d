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


def test_blocks_paged_in_together_keep_each_body_and_the_order(tmp_path: Path) -> None:
    """Many small blocks (each with receive and delete records beside its
    messages, as a host's commits have) are read a few at a time and their
    heaps joined: every body must still be its own, in seq order, also when
    the arena fills in the middle of such a group and the rest comes later."""
    config = StorageConfig(ring_slots=128, arena_bytes=4096)
    store = PartitionStore.open(tmp_path / "p", config, now_ms=NOW)
    try:
        bodies = [b"%04d:" % i + b"y" * (i % 97) for i in range(600)]
        for i in range(0, 600, 3):
            store.append_batch(bodies[i : i + 3], NOW)
            got, _ = store.receive(1, NOW, 0)  # a VISIBILITY record in this block (visible again at once)
            assert got
            store.commit()
        assert store.backlog.cursor is not None  # most of it lives only in the log
        seen: list[bytes] = []
        for _ in range(2000):
            got, _ = store.receive(7, NOW, 60_000)
            if not got:
                break
            seen.extend(m.body for m in got)
            store.delete_many([(m.seq, m.receive_count) for m in got], NOW)
            store.commit()
        assert seen == bodies
        assert store.stats(NOW)["total"] == 0
    finally:
        store.close()


def test_expiry_does_not_count_a_deleted_message_on_disk_as_expired(tmp_path: Path) -> None:
    """A message deleted while in the ring lies beyond the cursor after a
    restart (the ring refills in seq order): paging past it skips it as gone,
    and expire() reports only the messages the retention took."""
    config = StorageConfig(ring_slots=4, arena_bytes=4096, fsync="never", retention_ms=10_000)
    store = PartitionStore.open(tmp_path / "p", config, now_ms=NOW)
    store.append_batch([b""] * 5, NOW)
    store.commit()
    first, _ = store.receive(4, NOW, 50)
    store.delete(first[0].seq, first[0].receive_count, NOW)
    store.commit()
    fifth, _ = store.receive(1, NOW, 50)
    assert [m.seq for m in fifth] == [5]
    store.delete(5, fifth[0].receive_count, NOW)
    store.close()
    store = PartitionStore.open(tmp_path / "p", config, now_ms=NOW)
    try:
        assert store.backlog.gone == {5} and store.stats(NOW)["total"] == 3
        assert store.expire(NOW + 10_000) == 3
    finally:
        store.close()
