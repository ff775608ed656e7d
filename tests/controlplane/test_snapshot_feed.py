"""The host's one watch of the KV tree, shared with its manager roles: a
reader gets the next snapshot, never a stale one after a failure."""

from __future__ import annotations

import threading

import pytest

from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.queue_directory import Snapshot
from zmqueue.controlplane.snapshot_feed import SnapshotFeed
from zmqueue.errors import ConsulUnavailable


def snap(index: int) -> Snapshot:
    return Snapshot(index, kv.ClusterState(), [], [])


def index(got: tuple[int, Snapshot | None]) -> int:
    assert got[1] is not None
    return got[1].index


def test_a_reader_gets_the_newest_snapshot_after_the_one_it_saw() -> None:
    feed = SnapshotFeed()
    feed.put(snap(1))
    got = feed.next(0, 1.0)
    assert index(got) == 1
    feed.put(snap(2))
    feed.put(snap(3))  # a slow reader skips to the newest
    got2 = feed.next(got[0], 1.0)
    assert index(got2) == 3 and got2[0] > got[0]


def test_a_reader_waits_for_the_next_snapshot() -> None:
    feed = SnapshotFeed()
    feed.put(snap(1))
    seq, _ = feed.next(0, 1.0)
    timer = threading.Timer(0.2, lambda: feed.put(snap(2)))
    timer.start()
    try:
        assert index(feed.next(seq, 10.0)) == 2
    finally:
        timer.cancel()


def test_a_failed_or_silent_watch_raises_instead_of_handing_out_the_old_snapshot() -> None:
    feed = SnapshotFeed()
    with pytest.raises(ConsulUnavailable, match="no metadata from the watch"):
        feed.next(0, 0.05)
    feed.put(snap(1))
    seq, _ = feed.next(0, 1.0)
    feed.fail("connection refused")
    with pytest.raises(ConsulUnavailable, match="connection refused"):
        feed.next(seq, 1.0)
    feed.put(snap(2))  # the watch is back
    assert index(feed.next(seq, 1.0)) == 2


def test_a_stopping_reader_is_woken_without_a_snapshot() -> None:
    """A host's manager roles wait for the next snapshot (the watch publishes
    one every 2 s); their stop wakes them at once instead."""
    feed = SnapshotFeed()
    feed.put(snap(1))
    seq, _ = feed.next(0, 1.0)
    stopped = threading.Event()
    out: list[tuple[int, Snapshot | None]] = []
    reader = threading.Thread(target=lambda: out.append(feed.next(seq, 30.0, stopped)))
    reader.start()
    stopped.set()
    feed.interrupt()
    reader.join(10.0)
    assert out == [(seq, None)]  # (a reader left waiting would time out after 30 s)
    feed.put(snap(2))
    assert index(feed.next(seq, 1.0, threading.Event())) == 2  # not stopping: the snapshot
