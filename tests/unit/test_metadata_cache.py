"""The host's metadata cache and its request loop: work another thread posts
makes the loop's wake pipe readable at once (the loop polls it beside its
sockets), the loop drains it before running what was posted, and a loop
that fell behind applies only the newest metadata snapshot."""

from __future__ import annotations

import select
import threading

from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.queue_directory import Snapshot
from zmqueue.host.metadata import MetadataCache


def readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def test_posting_wakes_the_loop_and_draining_resets_the_wake() -> None:
    cache = MetadataCache(("127.0.0.1:1",), 1.0, lambda snap, forward: None, lambda: None)
    try:
        assert not readable(cache.wake_fd)
        ran: list[int] = []
        posters = [threading.Thread(target=cache.post, args=(lambda i=i: ran.append(i),))
                   for i in range(50)]
        for t in posters:
            t.start()
        for t in posters:
            t.join()
        assert readable(cache.wake_fd)
        cache.drain_wake()
        assert not readable(cache.wake_fd)
        cache.run_posted()
        assert sorted(ran) == list(range(50))
        for _ in range(100_000):  # far more posts than the pipe holds: none blocks or fails
            cache.post(lambda: None)
        assert readable(cache.wake_fd)
        cache.drain_wake()
        assert not readable(cache.wake_fd)
    finally:
        cache.stop()


def test_a_loop_that_fell_behind_applies_only_the_newest_snapshot() -> None:
    applied: list[tuple[int, bool]] = []
    cache = MetadataCache(("127.0.0.1:1",), 1.0, lambda snap, fwd: applied.append((snap.index, fwd)),
                          lambda: None)
    try:
        for index in (5, 6, 7, 8):  # published while the loop was busy
            cache._publish(Snapshot(index, kv.ClusterState(), [], []))
        cache.run_posted()
        assert applied == [(8, True)]
        cache._publish(Snapshot(9, kv.ClusterState(), [], []))
        cache.run_posted()
        cache.run_posted()  # nothing new: nothing applied again
        assert applied == [(8, True), (9, True)]
    finally:
        cache.stop()
