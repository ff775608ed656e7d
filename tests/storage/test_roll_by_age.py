"""A segment rolls by age as well as by size (``segment_roll_ms``, Kafka's
``segment.ms``), so the consumed or expired messages of a slow stream leave
the disk: compaction only removes closed segments, and before the
thirty-seventh session a stream writing less than 64 MiB kept every body it
ever stored, deleted or not, in its one active segment."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from zmqueue.dataplane.storage import PartitionStore, StorageConfig
from zmqueue.dataplane.storage.config import MIN_ROLL_MS
from zmqueue.dataplane.storage.segment import list_segments
from zmqueue.errors import ConfigError

T0 = 1_700_000_000_000
HOUR = 3_600_000
CONFIG = StorageConfig(ring_slots=64, arena_bytes=1 << 16, fsync="never", segment_roll_ms=HOUR)
BODY = b"secret body that must leave the disk"


def _bytes_on_disk(directory: Path) -> list[bytes]:
    """Every segment's records as written (LZ4 keeps long literals readable:
    read them back through the store's own reader instead)."""
    store = PartitionStore.open(directory, CONFIG, now_ms=T0)
    try:
        return [r.body for r in store.read_records(1, 10_000) if r.body]
    finally:
        store.close()


def _consume_all(store: PartitionStore, now: int) -> None:
    got, _ = store.receive(100, now, 30_000)
    assert got
    assert store.delete_many([(m.seq, m.receive_count) for m in got], now) == [None] * len(got)
    store.commit()


def test_a_consumed_segment_rolls_at_the_next_write_after_its_age_and_is_compacted(tmp_path: Path) -> None:
    store = PartitionStore.open(tmp_path, CONFIG, now_ms=T0)
    try:
        store.append_batch([BODY] * 5, T0)
        store.commit()
        _consume_all(store, T0 + 1000)
        store.append_batch([b"later"], T0 + HOUR - 1)  # not old enough yet: the same file
        store.commit()
        assert len(list_segments(tmp_path)) == 1
        _consume_all(store, T0 + HOUR - 1)
        store.append_batch([b"an hour on"], T0 + HOUR)
        store.commit()
        files = list_segments(tmp_path)
        assert [b for b, _ in files] == [1, store.last_seq]
        assert store.compact() == 1  # the first file holds no live message: it goes
        assert list_segments(tmp_path) == files[1:]
        assert store.first_seq == store.last_seq
    finally:
        store.close()
    assert _bytes_on_disk(tmp_path) == [b"an hour on"]


def test_a_live_message_keeps_its_rolled_segment(tmp_path: Path) -> None:
    store = PartitionStore.open(tmp_path, CONFIG, now_ms=T0)
    try:
        store.append_batch([BODY], T0)
        store.commit()
        store.append_batch([b"next"], T0 + HOUR)
        store.commit()
        assert len(list_segments(tmp_path)) == 2
        assert store.compact() == 0
        got, _ = store.receive(10, T0 + HOUR, 30_000)
        assert [m.body for m in got] == [BODY, b"next"]
    finally:
        store.close()


def test_the_age_survives_a_restart(tmp_path: Path) -> None:
    """A reopened store dates its active segment by its first record, not by
    the time it was opened: a host restarted every half hour still rolls."""
    store = PartitionStore.open(tmp_path, CONFIG, now_ms=T0)
    store.append_batch([BODY], T0)
    store.commit()
    store.close()
    store = PartitionStore.open(tmp_path, CONFIG, now_ms=T0 + HOUR)
    try:
        assert store.log.segments[-1].first_ms == T0
        _consume_all(store, T0 + HOUR)  # this block is written an hour on: it starts a new file
        assert len(list_segments(tmp_path)) == 2
        assert store.compact() == 1
        assert len(list_segments(tmp_path)) == 1
    finally:
        store.close()
    assert _bytes_on_disk(tmp_path) == []


def test_a_short_retention_rolls_sooner_but_not_under_a_minute(tmp_path: Path) -> None:
    assert StorageConfig(retention_ms=10 * 60_000).roll_after_ms == 10 * 60_000
    assert StorageConfig(retention_ms=1000).roll_after_ms == MIN_ROLL_MS
    assert StorageConfig(segment_roll_ms=5000, retention_ms=1000).roll_after_ms == 5000
    config = StorageConfig(ring_slots=64, arena_bytes=1 << 16, fsync="never", retention_ms=1000)
    store = PartitionStore.open(tmp_path, config, now_ms=T0)
    try:
        store.append_batch([BODY], T0)
        store.commit()
        store.append_batch([BODY], T0 + MIN_ROLL_MS - 1)
        store.commit()
        assert len(list_segments(tmp_path)) == 1
        store.append_batch([BODY], T0 + MIN_ROLL_MS)  # the first two expired meanwhile
        store.commit()
        assert len(list_segments(tmp_path)) == 2
        assert store.expire(T0 + MIN_ROLL_MS + 999) == 2  # (the third lives on)
        assert store.compact() == 1
    finally:
        store.close()


def test_a_retention_edit_changes_the_roll_age(tmp_path: Path) -> None:
    store = PartitionStore.open(tmp_path, CONFIG, now_ms=T0)
    try:
        store.append_batch([BODY], T0)
        store.commit()
        store.reconfigure(replace(CONFIG, retention_ms=MIN_ROLL_MS))
        store.append_batch([BODY], T0 + MIN_ROLL_MS)
        store.commit()
        assert len(list_segments(tmp_path)) == 2
    finally:
        store.close()


@pytest.mark.parametrize("bad", [0, 999, -1, True, 1.5])
def test_a_bad_roll_age_is_refused_by_name(bad: object) -> None:
    with pytest.raises(ConfigError, match="segment_roll_ms must be an integer in"):
        StorageConfig(segment_roll_ms=bad).validate()  # type: ignore[arg-type]


# --- an idle stream: its writer rolls it with a record of its own ----------------------------


def _writer(directory: Path) -> PartitionStore:
    store = PartitionStore.open(directory, CONFIG, now_ms=T0)
    store.epoch = 3
    return store


def test_an_idle_consumed_segment_is_due_a_roll_once_old_and_a_lone_epoch_record_rolls_it(
        tmp_path: Path) -> None:
    store = _writer(tmp_path)
    try:
        store.append_batch([BODY] * 3, T0)
        store.commit()
        assert not store.roll_due(T0 + HOUR)  # live messages: a roll would not free the file
        _consume_all(store, T0 + 1000)
        assert not store.roll_due(T0 + HOUR - 1)  # not old enough
        assert store.roll_due(T0 + HOUR)
        seq = store.mark_epoch(T0 + HOUR)
        assert not store.roll_due(T0 + HOUR)  # (staged, not committed yet: not staged twice)
        store.commit()
        assert [b for b, _ in list_segments(tmp_path)] == [1, seq]
        assert store.compact() == 1
        assert [b for b, _ in list_segments(tmp_path)] == [seq]
        assert not store.roll_due(T0 + 10 * HOUR)  # the lone record of the roll: not rolled again
        last = (store.last_seq, store.last_epoch)
    finally:
        store.close()
    assert _bytes_on_disk(tmp_path) == []
    store = PartitionStore.open(tmp_path, CONFIG, now_ms=T0 + 10 * HOUR)
    try:
        assert (store.last_seq, store.last_epoch) == last  # the file left keeps the stream's place
        assert not store.roll_due(T0 + 10 * HOUR)  # (after a restart too: the record is read)
        store.append_batch([b"after"], T0 + 10 * HOUR)
        store.commit()
        got, _ = store.receive(10, T0 + 10 * HOUR, 30_000)
        assert [(m.seq, m.body) for m in got] == [(last[0] + 1, b"after")]
    finally:
        store.close()


def test_a_lone_expired_message_is_rolled_away_too(tmp_path: Path) -> None:
    store = PartitionStore.open(tmp_path, StorageConfig(ring_slots=64, arena_bytes=1 << 16, fsync="never",
                                                        retention_ms=HOUR), now_ms=T0)
    try:
        store.append_batch([BODY], T0)
        store.commit()
        assert store.expire(T0 + HOUR) == 1
        assert store.roll_due(T0 + HOUR)  # one record, a message's: not the roll's own
        store.mark_epoch(T0 + HOUR)
        store.commit()
        assert store.compact() == 1
    finally:
        store.close()
    assert _bytes_on_disk(tmp_path) == []


def test_a_replica_rolls_at_the_writer_s_lone_epoch_record(tmp_path: Path) -> None:
    """The record reaches every copy as a block of its own: each starts a
    new segment with it, whatever the age of its own active segment (a
    replica that caught up later dates its file later than the writer)."""
    writer, replica = _writer(tmp_path / "w"), PartitionStore.open(tmp_path / "r", CONFIG, now_ms=T0)
    try:
        def ship() -> None:
            block = writer.last_block
            assert block is not None
            replica.apply_chunk(*block)
            replica.commit()

        writer.append_batch([BODY] * 2, T0)
        writer.commit()
        ship()
        got, _ = writer.receive(10, T0 + 1000, 30_000)
        writer.delete_many([(m.seq, m.receive_count) for m in got], T0 + 1000)
        writer.commit()
        ship()
        assert writer.roll_due(T0 + HOUR)
        writer.mark_epoch(T0 + HOUR)
        writer.commit()
        ship()
        assert replica.compact() == 1 and writer.compact() == 1
        assert [b for b, _ in list_segments(tmp_path / "r")] == [b for b, _ in list_segments(tmp_path / "w")]
        assert (replica.last_seq, replica.last_epoch) == (writer.last_seq, writer.last_epoch) == (7, 3)
    finally:
        writer.close()
        replica.close()
