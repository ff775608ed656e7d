"""Unit tests: config bounds, block codec, ring operations, selection."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from zmqueue.dataplane.storage import NewMessage, PartitionStore, StorageConfig
from zmqueue.dataplane.storage.records import (
    HEADER_BYTES,
    RecordType,
    decode_header,
    decode_payload,
    encode_block,
    new_table,
    ref_table,
)
from zmqueue.dataplane.storage.ring import AVAILABLE, DELETED, IN_FLIGHT, Ring
from zmqueue.dataplane.storage.segment import BlockIndex
from zmqueue.dataplane.storage.select import pick_fifo, pick_standard
from zmqueue.dataplane.trash import Trash
from zmqueue.errors import ConfigError, CorruptSegment, DiskFull, InvalidReceipt, QueueLimitReached


def _messages(seqs: list[int], body: bytes = b"hello", group: int = 0) -> tuple[np.ndarray, np.ndarray]:
    table = new_table(len(seqs))
    table["type"] = RecordType.MESSAGE
    table["seq"] = seqs
    table["body_len"] = len(body)
    table["data_off"] = np.arange(len(seqs)) * len(body)
    table["group_hash"] = group
    return table, np.frombuffer(body * len(seqs), np.uint8)


def test_config_validate_names_the_field_and_the_bound():
    with pytest.raises(ConfigError, match="ring_slots must be an integer in"):
        StorageConfig(ring_slots=1).validate()
    with pytest.raises(ConfigError, match="fsync must be one of"):
        StorageConfig(fsync="sometimes").validate()
    with pytest.raises(ConfigError, match="ring_grow_max must be an integer in"):
        StorageConfig(ring_grow_max=0).validate()
    with pytest.raises(ConfigError, match=r"ring_slots \* ring_grow_max must be an integer in \[2, "):
        StorageConfig(ring_slots=1 << 25).validate()  # (the cap the ring may grow to is bounded too)
    assert StorageConfig().validate().fsync == "interval"


def test_a_block_round_trips_through_encode_and_decode():
    table, heap = _messages([5, 6, 7])
    refs = ref_table(RecordType.DELETE, [5], 8, epoch=3, now_ms=99)
    block = encode_block(np.concatenate([table, refs]), heap.tobytes())
    header = decode_header(block[:HEADER_BYTES])
    assert (header.record_count, header.first_seq, header.last_seq) == (4, 5, 8)
    got, got_heap = decode_payload(header, block[HEADER_BYTES:])
    assert got["seq"].tolist() == [5, 6, 7, 8]
    assert got["type"].tolist() == [1, 1, 1, 2]
    assert int(got["epoch"][3]) == 3 and int(got["target_seq"][3]) == 5
    assert got_heap == b"hello" * 3


@pytest.mark.parametrize("position", [0, 10, 39, 40, 50, -1])
def test_a_flipped_byte_anywhere_in_a_block_is_detected(position):
    table, heap = _messages([1, 2])
    block = bytearray(encode_block(table, heap.tobytes()))
    block[position] ^= 0x40
    with pytest.raises(CorruptSegment):
        header = decode_header(bytes(block[:HEADER_BYTES]))
        decode_payload(header, bytes(block[HEADER_BYTES:]))


def test_ring_inserts_finds_and_compacts_in_seq_order():
    ring = Ring(4, 64)
    table, heap = _messages([1, 2, 3, 4], b"abcdefgh")
    assert ring.fit_count(np.full(4, 8, np.int64)) == 4
    ring.insert(table, heap)
    assert ring.index_of(3) == 2 and ring.index_of(9) == -1
    ring.remove(np.array([0, 2]))
    more, more_heap = _messages([5, 6], b"ABCDEFGH")
    assert ring.fit_count(np.full(2, 8, np.int64)) == 2  # compacts the two holes
    ring.insert(more, more_heap)
    assert ring.meta["seq"][: ring.n].tolist() == [2, 4, 5, 6]
    assert [ring.payload(i)[0] for i in range(4)] == [b"abcdefgh"] * 2 + [b"ABCDEFGH"] * 2
    assert ring.live == 4 and ring.live_bytes == 32


def test_standard_pick_takes_the_oldest_visible_and_skips_in_flight():
    ring = Ring(8, 256)
    table, heap = _messages([1, 2, 3, 4])
    table["visible_at_ms"] = [0, 0, 50, 0]
    ring.insert(table, heap)
    ring.meta["state"][0] = IN_FLIGHT
    ring.meta["visible_at_ms"][0] = 100
    assert pick_standard(ring, 10, 5).tolist() == [1, 3]
    ring.meta["state"][[1, 3]] = IN_FLIGHT
    ring.meta["visible_at_ms"][[1, 3]] = 1000
    assert pick_standard(ring, 60, 5).tolist() == [2]
    ring.meta["state"][2] = DELETED
    assert pick_standard(ring, 100, 5).tolist() == [0]


def test_fifo_pick_blocks_a_group_while_one_of_its_messages_is_in_flight():
    ring = Ring(8, 256)
    a, heap = _messages([1, 2, 3], group=7)
    b, heap_b = _messages([4, 5], group=9)
    ring.insert(a, heap)
    ring.insert(b, heap_b)
    assert pick_fifo(ring, 0, 10).tolist() == [0, 1, 2, 3, 4]
    ring.meta["state"][0] = IN_FLIGHT
    ring.meta["visible_at_ms"][0] = 100
    assert pick_fifo(ring, 0, 10).tolist() == [3, 4]
    ring.meta["state"][0] = AVAILABLE
    ring.meta["visible_at_ms"][0] = 0
    ring.meta["visible_at_ms"][1] = 50  # a delayed message stops its group
    assert pick_fifo(ring, 0, 10).tolist() == [0, 3, 4]


def test_a_stale_receipt_is_refused_with_a_clear_message(tmp_path):
    with PartitionStore.open(tmp_path, StorageConfig(), now_ms=0) as store:
        (seq,) = store.append([NewMessage(b"i" * 16, b"x")], 0)
        (first,), _ = store.receive(1, 0, 10)
        (second,), _ = store.receive(1, 20, 10)
        with pytest.raises(InvalidReceipt, match=r"from receive 1, the message was received again since "
                           r"\(2 receives in all\); use the receipt of its latest receive"):
            store.delete(seq, first.receive_count, 25)
        with pytest.raises(InvalidReceipt, match="received only 2 times"):
            store.delete(seq, 3, 25)  # a count the ring never reached
        store.delete(seq, second.receive_count, 25)
        with pytest.raises(InvalidReceipt, match="unknown or already deleted"):
            store.delete(seq, second.receive_count, 25)


def test_queue_limits_refuse_new_messages_naming_the_limit(tmp_path):
    config = StorageConfig(max_messages=2, max_bytes=10)
    with PartitionStore.open(tmp_path, config, now_ms=0) as store:
        store.append([NewMessage(b"i" * 16, b"12345")], 0)
        with pytest.raises(QueueLimitReached, match="max_bytes=10"):
            store.append([NewMessage(b"j" * 16, b"123456")], 0)
        store.append([NewMessage(b"j" * 16, b"1")], 0)
        with pytest.raises(QueueLimitReached, match="max_messages=2") as info:
            store.append([NewMessage(b"k" * 16, b"")], 0)
        assert info.value.details == {"limit": "max_messages", "value": 2}


def test_dead_letters_are_handed_out_once_and_removed_when_marked(tmp_path):
    with PartitionStore.open(tmp_path, StorageConfig(), now_ms=0) as store:
        (seq,) = store.append([NewMessage(b"i" * 16, b"x")], 0)
        store.receive(1, 0, 10, max_receive_count=1)
        got, dead = store.receive(1, 20, 10, max_receive_count=1)
        assert got == [] and [d.seq for d in dead] == [seq]
        assert store.receive(1, 40, 10, max_receive_count=1) == ([], [])
        store.mark_dead_lettered([seq], 40)
        assert store.stats(40)["total"] == 0
    with PartitionStore.open(tmp_path, StorageConfig(), now_ms=50) as store:
        assert store.stats(50)["total"] == 0


@pytest.mark.parametrize("through_trash", [False, True], ids=["unlink", "trash"])
def test_compaction_removes_fully_consumed_segments_but_never_the_active_one(tmp_path, through_trash):
    """Inline, or (a host's housekeeping) handing the files to a trash that
    deletes them in the background."""
    config = StorageConfig(segment_bytes_max=4096)
    trash = Trash(tmp_path / "trash") if through_trash else None
    log_dir = tmp_path / "log"
    bodies = [os.urandom(400) for _ in range(20)]
    with PartitionStore.open(log_dir, config, now_ms=0) as store:
        for i in range(20):
            store.append([NewMessage(i.to_bytes(16, "big"), bodies[i])], 0)
            store.commit()
        files = len(list(log_dir.glob("*.seg")))
        got, _ = store.receive(15, 0, 1000)
        for d in got:
            store.delete(d.seq, d.receive_count, 0)
        store.commit()
        removed = store.compact(discard=trash.discard if trash else None)
        assert 0 < removed < files
        assert len(list(log_dir.glob("*.seg"))) == files - removed
        assert store.stats(0)["total"] == 5
        rest, _ = store.receive(10, 2000, 1000)  # the first 15 are in flight until 1000
        assert [d.body for d in rest] == bodies[15:]
    if trash is not None:
        assert trash.idle(10) and list(trash.path.iterdir()) == []
    with PartitionStore.open(log_dir, config, now_ms=0) as store:
        assert store.stats(0)["total"] == 5
        assert len(store.read_records(1, 1000)) > 0


def test_the_block_index_drops_one_segment_s_entries_and_still_finds_the_rest():
    index = BlockIndex()
    for base, firsts in ((1, [1, 5, 9]), (12, [12, 20]), (30, [30, 31, 40])):
        for first in firsts:
            index.add(first, base, first * 100)
    index.drop_segment(12)
    assert [index.entry(i) for i in range(index.count)] == [
        (1, 1, 100), (5, 1, 500), (9, 1, 900), (30, 30, 3000), (31, 30, 3100), (40, 30, 4000)]
    index.drop_segment(1)
    index.drop_segment(99)  # not there: nothing changes
    assert index.count == 3 and index.entry(index.find(35)) == (31, 30, 3100)


def test_next_wakeup_reports_the_earliest_delay_or_visibility_deadline(tmp_path):
    with PartitionStore.open(tmp_path, StorageConfig(), now_ms=0) as store:
        store.append([NewMessage(b"a" * 16, b"", delay_ms=500)], 0)
        store.append([NewMessage(b"b" * 16, b"")], 0)
        assert not store.has_visible(0) or store.receive(1, 0, 200)[0]
        assert store.next_wakeup_ms(0) == 200
        assert store.has_visible(600)


def test_next_wakeup_is_cached_while_the_ring_is_unchanged_and_follows_every_change(tmp_path):
    with PartitionStore.open(tmp_path, StorageConfig(), now_ms=0) as store:
        store.append_batch([b"m"] * 50, 0)
        got, _ = store.receive(50, 0, 1000)  # everything in flight until 1000
        assert len(got) == 50
        assert store.next_wakeup_ms(10) == 1000
        assert store.ring.wake[2] == 1000 and store.ring.wake[0] == store.ring.version
        store.ring.wake = (store.ring.version, 10, 777)  # a planted answer: served while unchanged
        assert store.next_wakeup_ms(20) == 777
        assert store.next_wakeup_ms(5) == 1000  # earlier than the cached scan: scanned again
        store.change_visibility(got[7].seq, got[7].receive_count, 300, 20)  # a change: scanned again
        assert store.next_wakeup_ms(20) == 320
        store.delete(got[7].seq, got[7].receive_count, 30)
        assert store.next_wakeup_ms(30) == 1000
        assert store.next_wakeup_ms(1000) is None  # the deadline passed: nothing waits any more
        store.append([NewMessage(b"d" * 16, b"", delay_ms=500)], 1000)
        assert store.next_wakeup_ms(1000) == 1500


def test_min_free_bytes_refuses_new_messages_but_not_receives_deletes_or_commits(tmp_path):
    """The disk reserve: with less free space than ``min_free_bytes`` an append
    raises DiskFull saying how much is free, what is kept and what still works;
    the messages already stored can still be received and deleted (their
    records are written), and nothing is staged by the refused append."""
    with pytest.raises(ConfigError, match="min_free_bytes must be an integer in"):
        StorageConfig(min_free_bytes=-1).validate()
    with PartitionStore.open(tmp_path / "p", StorageConfig(), now_ms=1) as store:
        seqs = store.append_batch([b"a", b"b", b"c"], 1)
        store.commit()
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    short = StorageConfig(min_free_bytes=free + (1 << 30))  # more than the disk has free
    with PartitionStore.open(tmp_path / "p", short, now_ms=2) as store:
        last = store.last_seq
        with pytest.raises(DiskFull, match=r"MiB free, less than the .* MiB kept free") as info:
            store.append_batch([b"d"], 3)
        assert "consumers can still receive and delete" in str(info.value)
        assert info.value.details["min_free_bytes"] == free + (1 << 30)
        assert info.value.details["path"] == str(tmp_path / "p")
        assert store.commit() == last  # the refused message was not staged
        got, _ = store.receive(10, 4, 30_000)
        assert [d.seq for d in got] == list(seqs)
        store.delete(got[0].seq, got[0].receive_count, 5)
        assert store.commit() > last  # the VISIBILITY and DELETE records were written
        assert store.stats(6)["total"] == 2
    # a reserve the disk has room for admits as before
    with PartitionStore.open(tmp_path / "p", StorageConfig(min_free_bytes=1), now_ms=7) as store:
        assert len(store.append_batch([b"e"], 8)) == 1
        store.commit()
        assert store.stats(9)["total"] == 3


def test_a_receive_given_back_spends_no_receive_count_also_after_a_restart(tmp_path):
    """(A message a host could not open, sealed with a key id it no longer
    holds, spent a receive each time: it reached max_receive_count unseen.)"""
    with PartitionStore.open(tmp_path, StorageConfig(), now_ms=0) as store:
        (seq,) = store.append([NewMessage(b"i" * 16, b"x")], 0)
        for now in (10, 20, 30):
            (d,), _ = store.receive(1, now, 60_000)
            assert d.receive_count == 1, "every try is the first receive"
            store.give_back(seq, d.receive_count, now)
        store.commit()
        assert store.stats(40)["visible"] == 1
    with PartitionStore.open(tmp_path, StorageConfig(), now_ms=50) as store:
        (d,), _ = store.receive(1, 50, 60_000)
        assert d.receive_count == 1, "the give-backs were logged and replayed"


def test_a_send_refused_only_for_its_size_says_what_it_would_leave(tmp_path: Path) -> None:
    """(A 1 MB send on a disk 64.5 MiB free with a 64 MiB reserve was refused
    saying the disk "has 64.5 MiB free, less than the 64.0 MiB kept free",
    and the host's disk: check stayed away.)"""
    from types import SimpleNamespace

    from zmqueue.dataplane.storage.limits import FreeSpace
    from zmqueue.host.host import Host

    space = FreeSpace(tmp_path, min_free=64 << 20)
    space.free, space._read_at = (64 << 20) + (512 << 10), float("inf")  # (the reading stands)
    with pytest.raises(DiskFull, match=r"storing these 1048576 bytes would leave 63.5 MiB free on the disk "
                                       r"holding .*, less than the 64.0 MiB kept free") as info:
        space.admit(1 << 20)
    assert info.value.details["size_bytes"] == 1 << 20
    space.admit(1000)  # a small one fits
    space.free = 60 << 20
    with pytest.raises(DiskFull, match=r"has 60.0 MiB free, less than the 64.0 MiB kept free"):
        space.admit(1)

    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    def note(reserve: int) -> str:
        return Host.disk_note(SimpleNamespace(config=SimpleNamespace(min_free_bytes=reserve),  # type: ignore[arg-type]
                                              data_dir=tmp_path))
    # (other writers may move the free space by a few MiB meanwhile: the margins are wide)
    assert note(free * 7 // 10) == "", "more than a quarter of the reserve above it"
    reserve = free * 9 // 10
    assert f"within {reserve // 4 >> 20} MiB of this host's {reserve >> 20} MiB reserve" in note(reserve)
    assert "below this host's" in note(free + (64 << 20))
