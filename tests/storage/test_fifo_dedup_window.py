"""A FIFO partition's log keeps its dedup window: compaction leaves every
closed segment holding a message of the last ``WINDOW_MS`` on disk,
consumed or expired, because that is where a host reads the window back from
after a restart (``Stream.rebuild_dedup``, ``PartitionStore.recent_messages``).
Until the forty-fifth session a closed segment went as soon as none of its
messages was live, so a writer's takeover record (which rolls the segment)
followed by a restart forgot every dedup id of the consumed messages, and a
retried send was stored and delivered twice. Standard queues are unchanged."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from zmqueue.dataplane.storage import PartitionStore, StorageConfig
from zmqueue.dataplane.storage.segment import list_segments

WINDOW_MS = 5 * 60 * 1000
"""The FIFO dedup window the docs promise (SQS's 5 minutes)."""
T0 = 1_700_000_000_000
FIFO = StorageConfig(ring_slots=64, arena_bytes=1 << 16, fsync="never", fifo=True)
STANDARD = replace(FIFO, fifo=False)


def _send_consume_roll(store: PartitionStore, at: int, n: int = 5) -> None:
    """``n`` messages sent at ``at``, received and deleted a second later, then
    the stream's segment rolled by an EPOCH record (a takeover, or the idle roll)."""
    store.append_batch([f"m{i}".encode() for i in range(n)], at, 1, group_hashes=[7] * n)
    store.commit()
    got, _ = store.receive(n, at + 1000, 30_000)
    assert len(got) == n
    assert store.delete_many([(m.seq, m.receive_count) for m in got], at + 1000) == [None] * n
    store.mark_epoch(at + 2000)
    store.commit()


def _compact_at(store: PartitionStore, now: int) -> int:
    """What a host's housekeeping does at ``now``: expire, then compact."""
    store.expire(now)
    return store.compact()


def test_fifo_compaction_keeps_consumed_messages_younger_than_the_dedup_window(tmp_path: Path) -> None:
    store = PartitionStore.open(tmp_path, FIFO, now_ms=T0)
    try:
        _send_consume_roll(store, T0)
        assert len(list_segments(tmp_path)) == 2  # the consumed messages, and the takeover record
        assert _compact_at(store, T0 + 10_000) == 0, "consumed, but their dedup ids are in the window"
        assert _compact_at(store, T0 + WINDOW_MS - 1) == 0
        assert store.first_seq == 1
        assert [len(rows) for rows, _ in store.recent_messages(T0 - 1)] == [5]
        assert _compact_at(store, T0 + WINDOW_MS) == 1, "older than the window: it goes"
        assert len(list_segments(tmp_path)) == 1
        assert list(store.recent_messages(0)) == []
    finally:
        store.close()


def test_the_newest_message_of_each_segment_is_read_back_on_open(tmp_path: Path) -> None:
    """The rule survives a restart (the recovery scan finds each segment's
    newest message), and compaction stops at the first segment that stays:
    an older one goes, a younger one after it stays."""
    store = PartitionStore.open(tmp_path, FIFO, now_ms=T0)
    _send_consume_roll(store, T0)
    _send_consume_roll(store, T0 + 120_000)
    store.close()
    store = PartitionStore.open(tmp_path, FIFO, now_ms=T0 + 130_000)
    try:
        assert len(list_segments(tmp_path)) == 3
        assert _compact_at(store, T0 + 130_000) == 0
        assert _compact_at(store, T0 + WINDOW_MS + 1000) == 1  # the first batch's segment
        assert [len(rows) for rows, _ in store.recent_messages(T0 + WINDOW_MS + 1000 - WINDOW_MS)] \
            == [5]
        assert _compact_at(store, T0 + 120_000 + WINDOW_MS) == 1
    finally:
        store.close()


def test_expired_fifo_messages_stay_on_disk_for_the_dedup_window_too(tmp_path: Path) -> None:
    """Retention (down to a minute) expires messages, but SQS keeps a dedup id
    for 5 minutes whatever the retention: their segment stays that long."""
    store = PartitionStore.open(tmp_path, replace(FIFO, retention_ms=60_000), now_ms=T0)
    try:
        store.append_batch([b"expires"] * 3, T0, 1, group_hashes=[7] * 3)
        store.commit()
        store.mark_epoch(T0 + 1000)
        store.commit()
        assert _compact_at(store, T0 + 61_000) == 0
        assert store.stats(T0 + 61_000)["total"] == 0, "expired"
        assert _compact_at(store, T0 + WINDOW_MS) == 1
    finally:
        store.close()


def test_standard_compaction_is_unchanged(tmp_path: Path) -> None:
    store = PartitionStore.open(tmp_path, STANDARD, now_ms=T0)
    try:
        _send_consume_roll(store, T0)
        assert _compact_at(store, T0 + 3000) == 1, "consumed: a standard queue's segment goes at once"
    finally:
        store.close()


def test_a_replica_keeps_the_window_too(tmp_path: Path) -> None:
    """A replica's copy (records applied as the writer's chunks, a few at a
    time or a batch) keeps the same segments: the message times are the
    writer's, read off the records it applies."""
    writer = PartitionStore.open(tmp_path / "w", FIFO, now_ms=T0)
    replica = PartitionStore.open(tmp_path / "r", FIFO, now_ms=T0)
    try:
        writer.append_batch([b"one"], T0, 1, group_hashes=[7])  # a small chunk
        writer.commit()
        writer.append_batch([b"m"] * 40, T0 + 10, 1, group_hashes=[7] * 40)  # a batch
        writer.commit()
        got, _ = writer.receive(41, T0 + 1000, 30_000)
        writer.delete_many([(m.seq, m.receive_count) for m in got], T0 + 1000)
        writer.commit()
        writer.mark_epoch(T0 + 2000)
        writer.commit()
        while replica.last_seq < writer.last_seq:  # block by block, as published
            [(table, heap)] = writer.read_chunks(replica.last_seq + 1, 1000, 1)
            replica.apply_chunk(table, heap)
            replica.commit()
        assert len(list_segments(tmp_path / "r")) == 2
        assert _compact_at(replica, T0 + 10_000) == 0
        assert _compact_at(replica, T0 + 10 + WINDOW_MS - 1) == 0, "the batch's time counts"
        assert _compact_at(replica, T0 + 10 + WINDOW_MS) == 1
    finally:
        writer.close()
        replica.close()
