"""The counters a store reports are exactly STATS_KEYS (the host answers
QUEUE_STATS with them as zeros for a partition it has no stream of yet)."""

from __future__ import annotations

from pathlib import Path

from zmqueue.dataplane.storage import StorageConfig
from zmqueue.dataplane.storage.store import STATS_KEYS, PartitionStore


def test_a_store_reports_exactly_the_stats_keys(tmp_path: Path) -> None:
    store = PartitionStore.open(tmp_path / "p", StorageConfig(), now_ms=1_000)
    try:
        assert set(store.stats(1_000)) == set(STATS_KEYS)
        store.append_batch([b"a", b"bc"], 1_000)
        store.commit()
        stats = store.stats(1_000)
        assert set(stats) == set(STATS_KEYS)
        assert stats["total"] == 2 and stats["visible"] == 2
    finally:
        store.close()


def test_dead_letters_waiting_to_move_are_counted_as_such_not_in_flight(tmp_path: Path) -> None:
    """(Dead letters held while their dead-letter queue was missing or of the
    other type were counted in ``in_flight`` for good, with no other sign in
    the stats.)"""
    store = PartitionStore.open(tmp_path / "p", StorageConfig(), now_ms=1_000)
    try:
        store.append_batch([b"a", b"b", b"c"], 1_000)
        store.commit()
        store.receive(3, 1_000, 0, max_receive_count=1)  # received once, visible again at once
        got, dead = store.receive(10, 1_001, 30_000, max_receive_count=1)  # over the count: dead letters
        assert (len(got), len(dead)) == (0, 3)
        stats = store.stats(1_001)
        assert (stats["dead_letters_waiting"], stats["in_flight"], stats["visible"]) == (3, 0, 0)
        assert stats["total"] == 3
        store.mark_dead_lettered([d.seq for d in dead[:2]], 1_002)
        stats = store.stats(1_002)
        assert (stats["dead_letters_waiting"], stats["in_flight"], stats["total"]) == (1, 0, 1)
    finally:
        store.close()
