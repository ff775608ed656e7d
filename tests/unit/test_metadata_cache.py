"""The host's metadata cache and its request loop: work another thread posts
makes the loop's wake pipe readable at once (the loop polls it beside its
sockets), the loop drains it before running what was posted, and a loop
that fell behind applies only the newest metadata snapshot."""

from __future__ import annotations

import logging
import select
import threading

import pytest

from zmqueue.config import QueueConfig
from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.queue_directory import Snapshot
from zmqueue.host.kv_index import WARN_AFTER_S, KvIndexWatch
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


def _state(queues: int) -> kv.ClusterState:
    return kv.ClusterState(configs={f"q{i}": QueueConfig(name=f"q{i}") for i in range(queues)})


def test_a_kv_index_that_went_back_is_logged_once_and_once_when_it_is_past_again(
        caplog: pytest.LogCaptureFixture) -> None:
    """(After a Consul dev agent restart every host logged the warning on every
    snapshot: over 1,000 lines per host in 6 minutes.)"""
    applied: list[tuple[int, bool]] = []
    cache = MetadataCache(("127.0.0.1:1",), 1.0, lambda snap, fwd: applied.append((snap.index, fwd)),
                          lambda: None)
    try:
        with caplog.at_level(logging.DEBUG, logger="zmqueue.host.metadata"):
            cache._publish(Snapshot(7822, _state(2), [], []), always=False)
            cache.run_posted()
            for index in range(5, 305):  # the restarted agent's index climbs; a queue comes back
                cache._publish(Snapshot(index, _state(1 if index < 200 else 2), [], []), always=False)
                cache.run_posted()
            cache._publish(Snapshot(6000, _state(2), [], []))  # a refresh (always), still behind
            cache.run_posted()
            for index in (7822, 7823, 7900):
                cache._publish(Snapshot(index, _state(2), [], []), always=False)
                cache.run_posted()
        back = [r for r in caplog.records if "went back" in r.getMessage()]
        past = [r for r in caplog.records if "past 7822 again" in r.getMessage()]
        assert len(back) == 1 and back[0].levelno == logging.DEBUG  # (brief: a WARNING after WARN_AFTER_S)
        assert "from 7822 to 5" in back[0].getMessage()
        assert len(past) == 1 and "it had gone back to 5" in past[0].getMessage()
        # applied: the first snapshot behind, the change at 200 and the refresh (all without
        # removals), then the first one forward again; unchanged ones are not applied again
        assert applied == [(7822, True), (5, False), (200, False), (6000, False), (7822, True)]
    finally:
        cache.stop()


def test_a_second_episode_is_logged_again() -> None:
    watch = KvIndexWatch()
    assert watch.observe(10, 0.0) == (True, None, logging.DEBUG)
    forward, note, _ = watch.observe(3, 1.0)
    assert not forward and note is not None and "from 10 to 3" in note
    assert watch.observe(4, 2.0) == (False, None, logging.DEBUG)
    forward, note, _ = watch.observe(10, 3.0)
    assert forward and note is not None and "past 10 again" in note
    assert watch.observe(11, 4.0) == (True, None, logging.DEBUG)
    forward, note, _ = watch.observe(2, 5.0)
    assert not forward and note is not None and "from 11 to 2" in note


def test_a_brief_episode_is_debug_and_a_long_one_one_warning() -> None:
    """(Every DELETE_QUEUE lowers the index for a moment: each was a WARNING
    saying the agent may have lost its state.)"""
    watch = KvIndexWatch()
    watch.observe(100, 0.0)
    assert watch.observe(90, 1.0)[2] == logging.DEBUG  # a queue's keys deleted
    assert watch.observe(101, 1.3)[2] == logging.DEBUG  # the next write: past again
    assert watch.observe(50, 2.0)[2] == logging.DEBUG
    assert watch.observe(51, 2.0 + WARN_AFTER_S / 2) == (False, None, logging.DEBUG)
    forward, note, level = watch.observe(52, 2.0 + WARN_AFTER_S)
    assert (forward, level) == (False, logging.WARNING) and note is not None and "lost its state?" in note
    assert watch.observe(53, 3.0 + WARN_AFTER_S) == (False, None, logging.DEBUG), "once per episode"
    forward, note, level = watch.observe(101, 4.0 + WARN_AFTER_S)
    assert (forward, level) == (True, logging.WARNING) and note is not None and "past 101 again" in note
