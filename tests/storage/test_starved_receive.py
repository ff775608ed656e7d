"""A receive that finds nothing it can take in the ring while visible messages
wait on disk (the ring full of messages in flight) still gets them: the ring
grows up to ``ring_grow_max`` times its configured size, and at that cap a
delete that frees room for the next message lets the next receive page it in
(a compaction for as little as one message, never one that gains nothing).
Past the cap the messages on disk are reported ``blocked_on_disk``, not visible.

Scaled down from the report (1 MB messages, a 32 MiB arena: 33 held in
flight blocked the queue, and only the 5th delete brought anything back):
1,000-byte messages in a 32 KiB arena, 32 of which fill it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from zmqueue.dataplane.storage import PartitionStore, StorageConfig
from zmqueue.dataplane.storage.model import Delivered

NOW = 1_000
HOLD_MS = 600_000  # consumers keep what they receive (10 min)
ARENA = 32 * 1024
BODY = 1000  # 32 fill the arena; 1/8 of it is 4 KiB: the old rule waited for 5 deletes


def open_store(tmp_path: Path, **config: Any) -> PartitionStore:
    return PartitionStore.open(tmp_path / "p", StorageConfig(fsync="never", **config), now_ms=NOW)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[PartitionStore]:
    s = open_store(tmp_path, ring_slots=1024, arena_bytes=ARENA, ring_grow_max=1)
    yield s
    s.close()


def send(s: PartitionStore, bodies: list[bytes]) -> None:
    s.append_batch(bodies, NOW)
    s.commit()


def receive_one_at_a_time(s: PartitionStore, limit: int = 1000) -> list[Delivered]:
    """What consumers that each take one message and keep it get, until a receive comes back empty."""
    held: list[Delivered] = []
    for _ in range(limit):
        got, _ = s.receive(1, NOW, HOLD_MS)
        s.commit()
        if not got:
            break
        held += got
    return held


def bodies(n: int, size: int = BODY, first: int = 0) -> list[bytes]:
    return [b"%06d" % (first + i) + b"x" * (size - 6) for i in range(n)]


def test_a_delete_that_frees_room_for_the_next_message_lets_the_next_receive_take_it(
    store: PartitionStore,
) -> None:
    sent = bodies(40)
    send(store, sent)
    held = receive_one_at_a_time(store)
    assert [m.body for m in held] == sent[:32]  # the arena is full of messages in flight
    stats = store.stats(NOW)
    assert (stats["in_flight"], stats["backlog_on_disk"]) == (32, 8)
    assert not store.has_visible(NOW)
    for i in range(8):  # each delete frees one message's room: each receive gets the next
        store.delete(held[i].seq, held[i].receive_count, NOW)
        store.commit()
        assert store.has_visible(NOW)
        got, _ = store.receive(10, NOW, HOLD_MS)
        store.commit()
        assert [m.body for m in got] == [sent[32 + i]], i
    assert store.stats(NOW)["total"] == 32
    assert store.ring.slots == 1024 and store.ring.arena_bytes == ARENA  # (ring_grow_max=1: never grew)


def test_a_starved_receive_compacts_only_when_that_lets_the_next_message_in(store: PartitionStore) -> None:
    send(store, bodies(32))  # 32,000 bytes: 768 left at the tail
    send(store, bodies(1, size=2 * BODY, first=32))  # the next message needs 2,000
    held = receive_one_at_a_time(store)
    assert len(held) == 32
    ring = store.ring
    compactions: list[int] = []
    compact = ring.compact

    def counted(slots: int | None = None, arena_bytes: int | None = None) -> None:
        compactions.append(ring.live)
        compact(slots, arena_bytes)

    ring.compact = counted  # type: ignore[method-assign]
    store.delete(held[0].seq, held[0].receive_count, NOW)  # 1,768 free after a compaction: not enough
    for _ in range(3):
        assert store.receive(1, NOW, HOLD_MS)[0] == []
        assert not store.has_visible(NOW)
    assert compactions == []  # nothing to gain: no compaction, however often asked
    assert store.stats(NOW)["blocked_on_disk"] == 1
    store.delete(held[1].seq, held[1].receive_count, NOW)  # 2,768: now it fits
    assert store.stats(NOW)["blocked_on_disk"] == 0 and store.stats(NOW)["visible"] == 1
    got, _ = store.receive(1, NOW, HOLD_MS)
    assert [m.seq for m in got] == [33]
    assert compactions == [30]  # one compaction, of the 30 messages still held


def test_messages_in_flight_that_fill_the_ring_do_not_hide_the_visible_backlog(tmp_path: Path) -> None:
    s = open_store(tmp_path, ring_slots=1024, arena_bytes=ARENA)  # the default: grows up to 4x
    try:
        sent = bodies(100)
        send(s, sent)
        assert s.stats(NOW)["backlog_on_disk"] == 68
        held = receive_one_at_a_time(s)
        assert [m.body for m in held] == sent  # 100 KB in flight in a 32 KiB ring
        assert s.stats(NOW)["in_flight"] == 100
        ring = s.ring
        assert ARENA < ring.arena_bytes <= 4 * ARENA
        s.delete_many([(m.seq, m.receive_count) for m in held], NOW)
        s.commit()
        s.compact()  # the host's once-a-second housekeeping: the ring goes back to its size
        assert (ring.slots, ring.arena_bytes, ring.n) == (1024, ARENA, 0)
        send(s, bodies(5, first=100))
        assert [m.body for m in s.receive(10, NOW, HOLD_MS)[0]] == bodies(5, first=100)
    finally:
        s.close()


def test_past_the_cap_the_messages_on_disk_are_blocked_until_a_delete_frees_room(tmp_path: Path) -> None:
    s = open_store(tmp_path, ring_slots=1024, arena_bytes=ARENA, ring_grow_max=2)
    try:
        sent = bodies(100)
        send(s, sent)
        held = receive_one_at_a_time(s)
        assert [m.body for m in held] == sent[:65]  # 65,000 bytes of the 64 KiB cap
        assert s.ring.arena_bytes == 2 * ARENA
        stats = s.stats(NOW)
        assert (stats["visible"], stats["blocked_on_disk"], stats["backlog_on_disk"]) == (0, 35, 35)
        assert not s.has_visible(NOW)
        s.delete(held[7].seq, held[7].receive_count, NOW)
        got, _ = s.receive(10, NOW, HOLD_MS)
        assert [m.body for m in got] == [sent[65]]
    finally:
        s.close()


def test_the_slots_grow_too_when_many_small_messages_are_in_flight(tmp_path: Path) -> None:
    s = open_store(tmp_path, ring_slots=8, arena_bytes=1 << 16, ring_grow_max=4)
    try:
        send(s, bodies(40, size=10))
        held = receive_one_at_a_time(s)
        assert len(held) == 32 and s.ring.slots == 32  # 4 x 8 slots, every one in flight
        assert s.stats(NOW)["blocked_on_disk"] == 8
        s.delete(held[0].seq, held[0].receive_count, NOW)
        assert [m.seq for m in s.receive(5, NOW, HOLD_MS)[0]] == [33]
    finally:
        s.close()


def test_a_fifo_group_waiting_behind_another_groups_message_in_flight_is_still_served(tmp_path: Path) -> None:
    """The ring holds only group 1, whose first message is in flight: group
    2's messages on disk are receivable (SQS serves other groups meanwhile)."""
    s = open_store(tmp_path, ring_slots=8, arena_bytes=1 << 16, fifo=True)
    try:
        s.append_batch(bodies(8, size=10), NOW, group_hashes=[1] * 8)
        s.append_batch(bodies(4, size=10, first=8), NOW, group_hashes=[2] * 4)
        s.commit()
        first, _ = s.receive(1, NOW, HOLD_MS)
        assert [m.seq for m in first] == [1]
        assert s.has_visible(NOW)
        got, _ = s.receive(10, NOW, HOLD_MS)
        assert [m.seq for m in got] == [9, 10, 11, 12] and {m.group_hash for m in got} == {2}
    finally:
        s.close()


def test_a_copy_with_a_smaller_ring_than_the_writers_keeps_messages_in_flight_hidden(tmp_path: Path) -> None:
    """A writer's grown ring holds more messages in flight than a replica's
    copy of the stream (its ring never grows), so the copy keeps some on
    disk: paged in later, they must come in flight until their deadline, not
    visible (a new writer on that copy handed them out again at once)."""
    writer = open_store(tmp_path / "w", ring_slots=32, arena_bytes=1 << 16)  # (as a grown ring of 8)
    copy = open_store(tmp_path / "r", ring_slots=8, arena_bytes=1 << 16, ring_grow_max=1)
    try:
        send(writer, bodies(20, size=10))
        held = receive_one_at_a_time(writer)
        assert len(held) == 20  # every message in flight
        for table, heap in writer.read_chunks(1, 1 << 20):
            copy.apply_chunk(table, heap)
            copy.commit()
        assert copy.ring.live == 8 and copy.stats(NOW)["backlog_on_disk"] == 12
        assert copy.stats(NOW)["in_flight"] == 8
        assert copy.receive(10, NOW + 1, HOLD_MS)[0] == []  # (the copy as a new writer, before the deadline)
        copy.delete_many([(m.seq, m.receive_count) for m in held[:8]], NOW + 1)
        got, _ = copy.receive(10, NOW + 1, HOLD_MS)  # the next 8 come in from disk
        stats = copy.stats(NOW + 1)
        assert got == [] and (stats["in_flight"], stats["backlog_on_disk"]) == (8, 4)  # still in flight
        later, _ = copy.receive(10, NOW + HOLD_MS, HOLD_MS)  # past their deadline: received a 2nd time
        assert [(m.seq, m.receive_count) for m in later] == [(m.seq, 2) for m in held[8:16]]
    finally:
        writer.close()
        copy.close()
