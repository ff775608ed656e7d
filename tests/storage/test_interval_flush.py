"""fsync=interval: one thread per process syncs every log written since its
last sync, however many logs are open (a thread per log woke 20 times a
second each, written or not)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from zmqueue.dataplane.storage import NewMessage, PartitionStore, StorageConfig
from zmqueue.dataplane.storage.logwriter import IntervalFlusher


def fsync_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "zmq-fsync")


def write(store: PartitionStore, n: int = 1) -> None:
    store.append([NewMessage(b"i" * 16, b"body", b"", 0, 0) for _ in range(n)], 1)
    store.commit()


def test_one_thread_syncs_each_written_log_once_per_interval(tmp_path: Path) -> None:
    hour = 3_600_000  # the shared thread never ticks during the test: sync_marked() stands in
    cfg = StorageConfig(fsync="interval", fsync_interval_ms=hour)
    IntervalFlusher.shared(hour)
    before = fsync_threads()
    stores = [PartitionStore.open(tmp_path / str(i), cfg, now_ms=1) for i in range(40)]
    try:
        assert fsync_threads() == before  # 40 logs, no thread of their own
        for st in stores[::2]:
            write(st)
        assert [st.log.unsynced for st in stores] == [i % 2 == 0 for i in range(40)]
        IntervalFlusher.shared(hour).sync_marked()
        assert not any(st.log.unsynced for st in stores)
        write(stores[1], 3)  # written after the sync: marked again, and synced at the next tick
        assert stores[1].log.unsynced
        IntervalFlusher.shared(hour).sync_marked()
        assert not stores[1].log.unsynced
        write(stores[3])
        stores[3].close()  # synced by close, and no longer marked
        write(stores[5])
        IntervalFlusher.shared(hour).sync_marked()  # a closed log is dropped, the others synced
        assert not stores[5].log.unsynced
    finally:
        for st in stores:
            st.close()


def test_the_interval_thread_syncs_on_its_own(tmp_path: Path) -> None:
    cfg = StorageConfig(fsync="interval", fsync_interval_ms=5)
    stores = [PartitionStore.open(tmp_path / str(i), cfg, now_ms=1) for i in range(5)]
    try:
        for st in stores:
            write(st)
        deadline = time.monotonic() + 10
        while any(st.log.unsynced for st in stores):
            assert time.monotonic() < deadline, "the interval thread did not sync within 10 s"
            time.sleep(0.005)
    finally:
        for st in stores:
            st.close()


class FailingLog:
    """Stands in for a LogWriter whose fdatasync fails until ``ok`` is set."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ok = False
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        if not self.ok:
            raise OSError(24, "Too many open files")


def test_a_log_whose_sync_keeps_failing_is_retried_every_interval_and_reported_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    hour = 3_600_000
    flusher = IntervalFlusher.shared(hour)
    bad = FailingLog(tmp_path / "bad.log")
    caplog.set_level(logging.WARNING, logger="zmqueue.dataplane.storage.logwriter")
    flusher.mark(bad)  # type: ignore[arg-type]
    try:
        for _ in range(5):
            flusher.sync_marked()
        assert bad.flushes == 5  # kept marked: retried at every tick
        failed = [r for r in caplog.records if "failed" in r.getMessage()]
        assert len(failed) == 1 and str(bad.path) in failed[0].getMessage()
        bad.ok = True
        flusher.sync_marked()
        flusher.sync_marked()  # synced: no longer marked
        assert bad.flushes == 6
        assert sum("works again" in r.getMessage() for r in caplog.records) == 1
    finally:
        flusher.unmark(bad)  # type: ignore[arg-type]


def test_a_changed_durability_policy_applies_to_an_open_log(tmp_path: Path) -> None:
    """A queue's fsync setting changed while its store is open (set_attributes,
    an edit in Consul KV): what was written under "never" is synced once the
    policy is "interval" (it was never marked) or at once when "always"."""
    hour = 3_600_000
    never = StorageConfig(fsync="never", fsync_interval_ms=hour)
    store = PartitionStore.open(tmp_path / "a", never, now_ms=1)
    other = PartitionStore.open(tmp_path / "b", never, now_ms=1)
    try:
        write(store)
        write(other)
        IntervalFlusher.shared(hour).sync_marked()
        assert store.log.unsynced and other.log.unsynced, "never: nothing syncs them"
        store.reconfigure(StorageConfig(fsync="interval", fsync_interval_ms=hour))
        IntervalFlusher.shared(hour).sync_marked()
        assert not store.log.unsynced, "interval: synced at the next tick"
        other.reconfigure(StorageConfig(fsync="always", fsync_interval_ms=hour))
        assert not other.log.unsynced, "always: what came before is synced at the switch"
        write(other)
        assert not other.log.unsynced
        assert store.config.fsync == "interval" and other.config.fsync == "always"
        store.reconfigure(StorageConfig(fsync="interval", fifo=True, ring_slots=1024))
        assert not store.config.fifo and store.config.ring_slots == never.ring_slots, \
            "the type and the ring's size stay as opened (a raw KV edit may name them)"
    finally:
        store.close()
        other.close()


def test_changed_retention_applies_to_stored_messages(tmp_path: Path) -> None:
    store = PartitionStore.open(tmp_path / "r", StorageConfig(retention_ms=3_600_000), now_ms=1_000)
    try:
        store.append([NewMessage(b"i" * 16, b"old", b"", 0, 0)], 1_000)
        store.commit()
        assert store.expire(10_000) == 0, "an hour's retention keeps it"
        store.reconfigure(StorageConfig(retention_ms=5_000))
        assert store.expire(10_000) == 1, "5 s: a message of 9 s ago goes"
    finally:
        store.close()
