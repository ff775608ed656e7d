"""StreamSet keeps its streams indexed by partition in step with the streams
themselves, through reconcile (open and close) and wipe."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from zmqueue.config import QueueConfig
from zmqueue.dataplane.storage import NewMessage, PartitionStore, StorageConfig
from zmqueue.dataplane.streamset import StreamSet
from zmqueue.dataplane.topology import Metadata, PartitionInfo
from zmqueue.errors import Unavailable

NOW = 1_000_000


def meta(queues: dict[str, int], replicas: tuple[str, ...] = ("h1", "h2"),
         deleted: tuple[str, ...] = ()) -> Metadata:
    """``deleted``: queues DELETE_QUEUE deleted (tombstones naming incarnation 0, any)."""
    return Metadata(configs={q: QueueConfig(name=q, partitions=n) for q, n in queues.items()},
                    partitions={(q, p): PartitionInfo(replicas) for q, n in queues.items() for p in range(n)},
                    deleted=dict.fromkeys(deleted, 0))


def by_scan(ss: StreamSet, part: tuple[str, int]) -> list[tuple[str, int, str]]:
    return [k for k in ss.streams if (k[0], k[1]) == part]


def test_partition_streams_follow_reconcile_and_wipe(tmp_path: Path) -> None:
    ss = StreamSet("h1", tmp_path, StorageConfig(fsync="never"))
    try:
        ss.reconcile(meta({"a": 2, "b": 1}), NOW)
        parts = [("a", 0), ("a", 1), ("b", 0), ("c", 0)]
        for part in parts:
            assert [st.key for st in ss.partition_streams(part)] == by_scan(ss, part)
        assert sorted(st.key for st in ss.partition_streams(("a", 1))) == [("a", 1, "h1"), ("a", 1, "h2")]
        ss.wipe(("a", 1, "h1"), NOW)  # closed and opened again: still listed once
        assert sorted(st.key for st in ss.partition_streams(("a", 1))) == [("a", 1, "h1"), ("a", 1, "h2")]
        closed = ss.reconcile(meta({"a": 1}), NOW)  # b deleted, a shrank to one partition
        assert sorted(closed) == [("a", 1, "h1"), ("a", 1, "h2"), ("b", 0, "h1"), ("b", 0, "h2")]
        for part in parts:
            assert [st.key for st in ss.partition_streams(part)] == by_scan(ss, part)
        assert ss.partition_streams(("b", 0)) == [] and ss.partition_streams(("a", 1)) == []
        assert all(ss.partition_streams(("a", 0)))
    finally:
        ss.close()
    assert ss.partition_streams(("a", 0)) == []


def keys(ss: StreamSet) -> list[tuple[str, int, str]]:
    return sorted(ss.streams)


def test_streams_kept_on_disk_are_reopened_and_removed_ones_are_not(tmp_path: Path) -> None:
    """Origins on disk are listed once per partition and then tracked in
    memory: what reconcile opens must match what is on disk throughout."""
    first = StreamSet("h1", tmp_path, StorageConfig(fsync="never"))
    first.reconcile(meta({"a": 1}, ("h1", "h9")), NOW)
    first.close()
    ss = StreamSet("h1", tmp_path, StorageConfig(fsync="never"))
    try:
        # h9 left the replica set; its stream's directory is still on disk: kept
        ss.reconcile(meta({"a": 1}), NOW)
        assert keys(ss) == [("a", 0, "h1"), ("a", 0, "h2"), ("a", 0, "h9")]
        ss.reconcile(meta({}, deleted=("a",)), NOW)  # queue deleted: every stream and directory removed
        assert keys(ss) == []
        assert not any((tmp_path / "a" / "0" / o).exists() for o in ("h1", "h2", "h9"))
        ss.reconcile(meta({"a": 1}), NOW)  # created again: h9's old directory is gone
        assert keys(ss) == [("a", 0, "h1"), ("a", 0, "h2")]
        ss.reconcile(meta({"a": 1}, ("h2", "h3")), NOW)  # this host left: closed, kept on disk
        assert keys(ss) == []
        ss.reconcile(meta({"a": 1}, ("h1", "h3")), NOW)  # back: h2's kept copy reopens too
        assert keys(ss) == [("a", 0, "h1"), ("a", 0, "h2"), ("a", 0, "h3")]
        assert {p.name for p in (tmp_path / "a" / "0").iterdir()} == {"h1", "h2", "h3"}
    finally:
        ss.close()


def test_a_removed_stream_leaves_its_place_at_once_and_the_trash_empties(tmp_path: Path) -> None:
    """Deleting a queue renames its streams' directories into the trash (the
    request loop does not wait for the files' deletion) and a background
    thread deletes them; what a stopped host left in the trash is deleted
    after its next start."""
    root, trash = tmp_path / "queues", tmp_path / "trash"
    ss = StreamSet("h1", root, StorageConfig(fsync="never"), trash=trash)
    try:
        ss.reconcile(meta({"a": 1}), NOW)
        st = ss.streams[("a", 0, "h1")]
        st.store.append_batch([b"x" * 100] * 50, NOW)
        st.store.commit()
        assert any((root / "a" / "0" / "h1").glob("*.seg"))
        ss.reconcile(meta({"a": 1, "b": 2}), NOW)
        ss.reconcile(meta({"b": 2}, deleted=("a",)), NOW)  # the queue is deleted
        assert not (root / "a" / "0" / "h1").exists() and not (root / "a" / "0" / "h2").exists()
        assert not (root / "a").exists(), "its partition's and queue's directories go too"
        assert (root / "b" / "0").is_dir() and (root / "b" / "1").is_dir()
        ss.reconcile(meta({}, deleted=("b",)), NOW)
        assert list(root.iterdir()) == []
        assert ss.trash.idle(10)
        assert list(trash.iterdir()) == []
    finally:
        ss.close()
    left = trash / "left-by-a-stopped-host"
    (left / "a" / "0").mkdir(parents=True)
    (left / "a" / "0" / "00000000000000000001.seg").write_bytes(b"x" * 4096)
    again = StreamSet("h1", root, StorageConfig(fsync="never"), trash=trash)
    try:
        assert again.trash.idle(10)
        assert not left.exists()
    finally:
        again.close()


def test_a_directory_that_cannot_be_moved_is_deleted_in_place(tmp_path: Path) -> None:
    from zmqueue.dataplane.trash import Trash

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the trash directory should be")
    victim = tmp_path / "stream"
    victim.mkdir()
    (victim / "00000000000000000001.seg").write_bytes(b"x")
    trash = Trash(blocker)  # mkdir fails: the directory goes at once, inline
    trash.discard(victim)
    assert not victim.exists() and trash.idle(1)
    trash.discard(tmp_path / "never-existed")  # nothing to do, no error


def test_a_hosts_stores_flag_every_record_with_whether_the_queue_seals_payloads(tmp_path: Path) -> None:
    """Readers (Spark) cannot tell a sealed payload from a plain one starting with its
    magic byte; the host's records say it (docs/SEGMENT_FORMAT.md, record flags)."""
    from zmqueue.dataplane.storage import NewMessage, PartitionStore, StorageConfig
    from zmqueue.dataplane.storage.records import FLAG_SEAL_KNOWN, FLAG_SEALED
    from zmqueue.dataplane.storage.segment import ScannedBlock, scan_segment
    from zmqueue.dataplane.streamset import storage_config

    for encrypted, want in ((False, FLAG_SEAL_KNOWN), (True, FLAG_SEAL_KNOWN | FLAG_SEALED)):
        cfg = storage_config(QueueConfig("q", encrypted=encrypted), StorageConfig(fsync="never"))
        assert cfg.record_flags == want
        d = tmp_path / str(encrypted)
        store = PartitionStore.open(d, cfg, now_ms=1000)
        store.append([NewMessage(b"m" * 16, b"body", b"")], 1000)
        store.commit()
        store.delete_many([(1, 0)], 1000)
        store.commit()
        store.close()
        flags = [int(f) for seg in sorted(d.glob("*.seg")) for block in scan_segment(seg, 0)
                 if isinstance(block, ScannedBlock) for f in block.table["flags"]]
        assert flags and set(flags) == {want}


def test_a_queue_gone_from_kv_without_a_deletion_keeps_its_data(tmp_path: Path) -> None:
    """(A queue's config key deleted by hand, or Consul restarted without its
    state, looked like DELETE_QUEUE: every host removed the queue's streams,
    acknowledged messages included.) Only a tombstone naming the queue's
    incarnation removes data."""
    ss = StreamSet("h1", tmp_path, StorageConfig(fsync="never"))
    try:
        first = replace(meta({"a": 1}), configs={"a": QueueConfig(name="a", incarnation=7)})
        ss.reconcile(first, NOW)
        st = ss.streams[("a", 0, "h1")]
        st.store.append_batch([b"kept"] * 5, NOW)
        st.store.commit()
        ss.reconcile(meta({}), NOW)  # gone, no tombstone: closed, data kept
        assert keys(ss) == []
        ss.reconcile(replace(meta({}), deleted={"a": 6}), NOW)  # an older incarnation's deletion
        again = replace(meta({"a": 1}), configs={"a": QueueConfig(name="a", incarnation=9)})
        ss.reconcile(again, NOW)  # created again (Consul lost its state): the data is back
        assert ss.streams[("a", 0, "h1")].store.stats(NOW)["visible"] == 5
        ss.reconcile(replace(meta({}), deleted={"a": 9}), NOW)  # deleted: removed
        assert keys(ss) == [] and not (tmp_path / "a" / "0" / "h1").exists()
    finally:
        ss.close()


def test_a_stream_that_cannot_open_is_noted_the_others_open_and_it_opens_once_the_cause_is_gone(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A stray file where queue ``b``'s directory goes (on a real disk): the
    open's OSError used to leave reconcile and end the host. Now ``a`` opens,
    ``b`` is kept in ``failed`` with an error naming the file and what to do,
    logged once per cause, and the next reconcile after the file is moved
    opens it."""
    root = tmp_path / "queues"
    root.mkdir()
    stray = root / "b"
    stray.write_text("not a directory")
    ss = StreamSet("h1", root, StorageConfig(fsync="never"))
    try:
        with caplog.at_level(logging.ERROR, logger="zmqueue.dataplane.streamset"):
            ss.reconcile(meta({"a": 1, "b": 1}), NOW)
            ss.reconcile(meta({"a": 1, "b": 1}), NOW + 2000)  # a retry: same cause, not logged again
        assert keys(ss) == [("a", 0, "h1"), ("a", 0, "h2")]
        assert sorted(ss.failed) == [("b", 0, "h1"), ("b", 0, "h2")]
        failure = ss.failed[("b", 0, "h1")]
        assert isinstance(failure.error, Unavailable) and failure.attempts == 2
        text = str(failure.error)
        assert f"{stray} is a file where the host needs a directory" in text, text
        assert "move that file out of the data directory" in text, text
        assert failure.error.details["stray"] == str(stray)
        logged = [r.getMessage() for r in caplog.records if "cannot open stream b/0/h1" in r.getMessage()]
        assert len(logged) == 1, logged
        stray.unlink()
        ss.reconcile(meta({"a": 1, "b": 1}), NOW + 4000)
        assert keys(ss) == [("a", 0, "h1"), ("a", 0, "h2"), ("b", 0, "h1"), ("b", 0, "h2")]
        assert ss.failed == {}
    finally:
        ss.close()


def test_a_failed_open_of_a_queue_deleted_meanwhile_is_forgotten(tmp_path: Path) -> None:
    root = tmp_path / "queues"
    root.mkdir()
    (root / "b").write_text("in the way")
    ss = StreamSet("h1", root, StorageConfig(fsync="never"))
    try:
        ss.reconcile(meta({"b": 1}), NOW)
        assert len(ss.failed) == 2
        ss.reconcile(meta({}), NOW)
        assert ss.failed == {}
    finally:
        ss.close()


def _log_of_blocks(path: Path, blocks: int) -> None:
    """A stream's log of ``blocks`` blocks of 2 messages each."""
    store = PartitionStore.open(path, StorageConfig(fsync="never"), now_ms=NOW)
    for i in range(blocks):
        store.append([NewMessage(bytes([i % 256]) * 16, b"body %d" % i) for _ in range(2)], NOW)
        store.commit()
    store.close()


@pytest.mark.parametrize("replicas", [("h1",), ("h1", "h2")])
def test_a_corrupt_block_found_at_open_is_a_warning_and_counted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, replicas: tuple[str, ...]) -> None:
    """Bit rot in the middle of a segment: recovery cuts the log there (the
    block and every record after it). That used to be said only at INFO, in
    the RecoveryReport of "opened stream"; on an R=1 queue acknowledged
    messages were gone without a sign."""
    root = tmp_path / "queues"
    seg_dir = root / "q" / "0" / "h1"
    _log_of_blocks(seg_dir, 40)
    [seg] = sorted(seg_dir.glob("*.seg"))
    data = bytearray(seg.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 16] = bytes(b ^ 0xFF for b in data[middle:middle + 16])
    seg.write_bytes(bytes(data))
    ss = StreamSet("h1", root, StorageConfig(fsync="never"))
    try:
        with caplog.at_level(logging.WARNING, logger="zmqueue.dataplane.streamset"):
            ss.reconcile(meta({"q": 1}, replicas), NOW)
        st = ss.streams[("q", 0, "h1")]
        report = st.store.recovery_report
        assert len(report.corrupt_blocks) == 1 and report.truncated_bytes > 0
        assert 0 < st.store.last_seq < 80
        assert (ss.recovered.corrupt_blocks, ss.recovered.truncated_bytes) == (1, report.truncated_bytes)
        [warning] = [r for r in caplog.records if r.levelno == logging.WARNING and "q/0/h1" in r.getMessage()]
        text = warning.getMessage()
        assert f"cut {report.truncated_bytes} bytes" in text, text
        assert f"{seg.name} at offset {report.corrupt_blocks[0].offset}" in text, text
        assert f"every record after seq {st.store.last_seq}" in text, text
        assert ("(R=1)" in text) == (len(replicas) == 1), text
        assert ("its replicas hold the records" in text) == (len(replicas) > 1), text
    finally:
        ss.close()


def test_a_clean_open_warns_of_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "queues"
    _log_of_blocks(root / "q" / "0" / "h1", 3)
    ss = StreamSet("h1", root, StorageConfig(fsync="never"))
    try:
        with caplog.at_level(logging.WARNING, logger="zmqueue.dataplane.streamset"):
            ss.reconcile(meta({"q": 1}), NOW)
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
        assert (ss.recovered.corrupt_blocks, ss.recovered.truncated_bytes) == (0, 0)
    finally:
        ss.close()


def test_a_queue_deleted_and_created_again_before_a_host_saw_it_gone_starts_empty(tmp_path: Path) -> None:
    """(A host that saw the new queue's config before it saw the old one gone kept
    the deleted queue's messages, and served them in the new queue.) A new
    incarnation without a tombstone for the old one keeps the data (the queue
    created again after Consul lost its state)."""
    ss = StreamSet("h1", tmp_path, StorageConfig(fsync="never"))
    try:
        def at(incarnation: int, deleted: dict[str, int] | None = None) -> Metadata:
            return replace(meta({"a": 1}), configs={"a": QueueConfig(name="a", incarnation=incarnation)},
                           deleted=deleted or {})

        ss.reconcile(at(7), NOW)
        st = ss.streams[("a", 0, "h1")]
        st.store.append_batch([b"old"] * 5, NOW)
        st.store.commit()
        assert ss.reconcile(at(9), NOW) == []  # no tombstone: kept
        assert ss.streams[("a", 0, "h1")].store.stats(NOW)["visible"] == 5
        closed = ss.reconcile(at(11, {"a": 9}), NOW)  # incarnation 9 was deleted, 11 is new
        assert ("a", 0, "h1") in closed
        fresh = ss.streams[("a", 0, "h1")]
        assert fresh.config.incarnation == 11 and fresh.store.stats(NOW)["total"] == 0
    finally:
        ss.close()


def test_a_queue_created_again_before_its_partitions_are_assigned_drops_the_deleted_ones_data(
        tmp_path: Path) -> None:
    """(CREATE_QUEUE writes the config, then the partitions: a host that saw
    the new config, without partitions yet, and the deleted queue's tombstone
    closed the old streams keeping their data, and opened them again from disk
    in the new queue once its partitions came: the deleted messages were
    served under the new incarnation.)"""
    ss = StreamSet("h1", tmp_path, StorageConfig(fsync="never"))
    try:
        def at(incarnation: int, assigned: bool = True, deleted: dict[str, int] | None = None) -> Metadata:
            m = meta({"a": 1})
            return replace(m, configs={"a": QueueConfig(name="a", incarnation=incarnation)},
                           partitions=m.partitions if assigned else {}, deleted=deleted or {})

        ss.reconcile(at(7), NOW)
        st = ss.streams[("a", 0, "h1")]
        st.store.append_batch([b"old"] * 5, NOW)
        st.store.commit()
        assert ss.reconcile(at(7, assigned=True, deleted={"a": 7}), NOW) == []  # a deletion under way
        assert ss.reconcile(at(9, assigned=False, deleted={"a": 7}), NOW)  # 7 deleted, 9 not placed yet
        assert not (tmp_path / "a" / "0" / "h1").exists()
        ss.reconcile(at(9, deleted={"a": 7}), NOW)
        assert ss.streams[("a", 0, "h1")].store.stats(NOW)["total"] == 0
    finally:
        ss.close()


def test_a_stream_closed_with_its_data_kept_goes_when_its_queue_is_deleted(tmp_path: Path) -> None:
    """A host that left a partition's replica set keeps the stream on disk;
    the queue deleted meanwhile (and created again) must not find it there."""
    ss = StreamSet("h1", tmp_path, StorageConfig(fsync="never"))
    try:
        def at(incarnation: int, replicas: tuple[str, ...],
               deleted: dict[str, int] | None = None) -> Metadata:
            return replace(meta({"a": 1}, replicas), deleted=deleted or {},
                           configs={"a": QueueConfig(name="a", incarnation=incarnation)})

        ss.reconcile(at(7, ("h1", "h2")), NOW)
        st = ss.streams[("a", 0, "h1")]
        st.store.append_batch([b"old"] * 5, NOW)
        st.store.commit()
        ss.reconcile(at(7, ("h2", "h3")), NOW)  # this host left: closed, kept on disk
        assert keys(ss) == [] and (tmp_path / "a" / "0" / "h1").exists()
        ss.reconcile(at(7, ("h2", "h3"), {"a": 7}), NOW)  # tombstone written, config still there
        assert (tmp_path / "a" / "0" / "h1").exists()
        ss.reconcile(at(9, ("h2", "h3"), {"a": 7}), NOW)  # deleted and created again
        assert not (tmp_path / "a" / "0" / "h1").exists()
        ss.reconcile(at(9, ("h1", "h2"), {"a": 7}), NOW)  # placed here again: starts empty
        assert ss.streams[("a", 0, "h1")].store.stats(NOW)["total"] == 0
        ss.reconcile(at(9, ("h2", "h3"), {"a": 7}), NOW)  # left again: kept (no tombstone names 9)
        assert (tmp_path / "a" / "0" / "h1").exists()
    finally:
        ss.close()


def test_a_restarted_host_drops_its_copies_of_a_queue_deleted_while_it_was_down(tmp_path: Path) -> None:
    """(A host knew its streams' incarnation only while it ran: down while a
    queue was deleted and created again, it opened its copies of the deleted
    queue in the new one and served their messages.) A stream's directory
    records its incarnation; a started host removes the copies a deletion's
    tombstone names, opened here or not, and keeps the others."""
    def at(inc: int, replicas: tuple[str, ...] = ("h1", "h2"), deleted: int | None = None) -> Metadata:
        return Metadata(configs={q: QueueConfig(name=q, incarnation=inc) for q in ("a", "b")},
                        partitions={(q, 0): PartitionInfo(replicas if q == "a" else ("h2", "h3"))
                                    for q in ("a", "b")},
                        deleted={} if deleted is None else {"a": deleted, "b": deleted})

    first = StreamSet("h1", tmp_path, StorageConfig(fsync="never"))
    try:
        first.reconcile(at(5, ("h1", "h2", "h3")), NOW)
        for st in first.streams.values():
            st.store.append_batch([b"old"] * 3, NOW)
            st.store.commit()
        first.reconcile(at(5, ("h1", "h2")), NOW)  # h3 left a's set: its copy stays, closed
        assert (tmp_path / "a" / "0" / "h3" / "incarnation").read_text() == "5\n"
    finally:
        first.close()
    (tmp_path / "b" / "0" / "h2").mkdir(parents=True)  # a copy of a partition not placed here
    (tmp_path / "b" / "0" / "h2" / "incarnation").write_text("5\n")

    # Consul lost its state and the queue was created again by hand: no tombstone, the data is kept
    kept = StreamSet("h1", tmp_path, StorageConfig(fsync="never"))
    try:
        kept.reconcile(at(7), NOW)
        assert keys(kept) == [("a", 0, "h1"), ("a", 0, "h2"), ("a", 0, "h3")]
        assert all(st.store.last_seq == 3 for st in kept.streams.values())
        assert (tmp_path / "a" / "0" / "h1" / "incarnation").read_text() == "7\n"
        assert (tmp_path / "b" / "0" / "h2").is_dir()
    finally:
        kept.close()

    # deleted (the tombstone names incarnation 7) and created again (9) while this host was down
    ss = StreamSet("h1", tmp_path, StorageConfig(fsync="never"))
    try:
        ss.reconcile(at(9, deleted=7), NOW)
        assert keys(ss) == [("a", 0, "h1"), ("a", 0, "h2")]  # (h3's copy was of the deleted queue)
        assert all(st.store.last_seq == 0 for st in ss.streams.values())
        assert not (tmp_path / "a" / "0" / "h3").exists()
        assert (tmp_path / "b" / "0" / "h2").is_dir(), "b's copy: incarnation 5, no tombstone names it"
        ss.reconcile(at(9, deleted=5), NOW)
        assert not (tmp_path / "b" / "0" / "h2").exists()
    finally:
        ss.close()
