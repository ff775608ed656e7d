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
