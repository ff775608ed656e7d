"""A queue's replication mode edited in KV reaches the election: the stream
set's version moves, so the host rebuilds its candidacies (which carry
``sync``: after a release, a sync stream's candidate needs its voters'
positions published since, ``writer_election.heard_enough``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from zmqueue.config import QueueConfig
from zmqueue.dataplane.storage import StorageConfig
from zmqueue.dataplane.streamset import StreamSet
from zmqueue.dataplane.topology import Metadata, PartitionInfo

SYNC = QueueConfig(name="q.fifo", fifo=True, replication_factor=3, sync_replication=True)


def _meta(cfg: QueueConfig) -> Metadata:
    return Metadata({"q.fifo": cfg}, {("q.fifo", 0): PartitionInfo(("a", "b", "c"), {}, ())})


def test_a_replication_mode_edit_moves_the_stream_set_s_version(tmp_path: Path) -> None:
    ss = StreamSet("a", tmp_path, StorageConfig(fsync="never"))
    try:
        ss.reconcile(_meta(SYNC), 1_000)
        key = ("q.fifo", 0, "fifo")
        assert ss.streams[key].config.sync_replication
        before = ss.version
        ss.reconcile(_meta(dataclasses.replace(SYNC, visibility_timeout_s=60)), 2_000)
        assert ss.version == before  # (another edit: the candidacies need no rebuild)
        ss.reconcile(_meta(dataclasses.replace(SYNC, sync_replication=False)), 3_000)
        assert ss.version > before and not ss.streams[key].config.sync_replication
    finally:
        for k in list(ss.streams):
            ss.close_stream(k, remove=False)
