"""When a writer acknowledges a sync write (``Stream.replicated_seq``): a
majority of the replicas hold it, and while some replicas are joining (not
caught up, not voters in the writer election), a majority of the voters
too; only the current replicas count. The stream set hands each stream its
joining replicas."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from tests.unit.test_restart_epoch import replicator
from zmqueue.config import QueueConfig
from zmqueue.dataplane.storage import StorageConfig
from zmqueue.dataplane.stream import Role
from zmqueue.dataplane.streamset import StreamSet
from zmqueue.dataplane.topology import Metadata, PartitionInfo

NOW = 1_000_000
KEY = ("q.fifo", 0, "fifo")


@pytest.fixture
def streams(tmp_path: Path) -> Iterator[StreamSet]:
    ss = StreamSet("a", tmp_path, StorageConfig(fsync="never"))
    yield ss
    ss.close()


def placed(streams: StreamSet, replicas: tuple[str, ...], joining: tuple[str, ...]) -> None:
    cfg = QueueConfig(name="q.fifo", fifo=True, replication_factor=3, sync_replication=True)
    streams.reconcile(Metadata({"q.fifo": cfg}, {("q.fifo", 0): PartitionInfo(replicas, {}, joining)}), NOW)


def test_a_write_needs_a_majority_of_the_voters_while_replicas_join(streams: StreamSet) -> None:
    placed(streams, ("a", "b", "c"), ())
    st = streams.streams[KEY]
    st.store.append_batch([b"m"] * 10, NOW)  # the writer's own log: seqs 1-10
    st.store.commit()
    st.follower_pos = {"b": 10, "c": 4}
    assert st.replicated_seq() == 10  # a and b
    version = streams.version
    placed(streams, ("a", "b", "c"), ("b",))  # b joined: the voters are a and c
    assert st.joining == ("b",) and streams.version > version  # (the leadership's candidacies follow)
    assert st.replicated_seq() == 4  # a majority of the voters (a, c) hold 4
    st.follower_pos["c"] = 10
    assert st.replicated_seq() == 10
    # the writer itself joining (a new host's own stream): its copy is no voter's
    placed(streams, ("a", "b", "c"), ("a",))
    st.follower_pos = {"b": 10, "c": 6}
    assert st.replicated_seq() == 6


def test_only_the_current_replicas_count_toward_an_ack(streams: StreamSet) -> None:
    placed(streams, ("a", "b", "c"), ())
    st = streams.streams[KEY]
    st.store.append_batch([b"m"] * 10, NOW)
    st.store.commit()
    st.role, st.epoch = Role.WRITER, 3
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    rep = replicator(ctx, streams)
    rep._note(st, "c", 3, 10)
    rep._note(st, "b", 3, 4)
    assert st.replicated_seq() == 10
    placed(streams, ("a", "b", "d"), ("d",))  # c left the set (d joins)
    assert st.replicated_seq() == 4
    rep._note(st, "c", 3, 10)  # c had not heard yet: its report is not counted
    rep._note(st, "x", 3, 10)
    assert st.follower_pos == {"b": 4} and st.replicated_seq() == 4
    assert set(st.follower_seen) == {"b", "c"}  # when each current replica last reported
    rep.close()
    ctx.destroy(linger=0)


def test_a_sync_write_is_out_of_reach_only_when_silent_and_not_passing_replicas_break_the_quorum(
        streams: StreamSet) -> None:
    placed(streams, ("a", "b", "c"), ())
    st = streams.streams[KEY]
    st.local, st.writer_since = "a", 100.0
    everyone = {"a", "b", "c"}
    # within the grace after the writer started, nobody is out of reach
    assert st.out_of_reach(lambda: set(), 102.9) == []
    st.follower_seen = {"b": 104.0, "c": 104.0}
    # one replica silent and not passing: the other two still make a quorum
    assert st.out_of_reach(lambda: {"a", "b"}, 107.5) == []
    # both silent, but Consul still calls them passing: the ack timeout decides
    assert st.out_of_reach(lambda: everyone, 107.5) == []
    # both silent and not passing: refused, naming them
    assert st.out_of_reach(lambda: {"a"}, 107.5) == ["b", "c"]
    # one of them reported recently: a quorum may still acknowledge
    st.follower_seen["b"] = 107.0
    assert st.out_of_reach(lambda: {"a"}, 107.5) == []
    # while b is joining, a voter majority (a and c) is needed too: c gone leaves a alone
    placed(streams, ("a", "b", "c"), ("b",))
    assert st.out_of_reach(lambda: {"a", "b"}, 107.5) == ["c"]
    # async queues and single replicas never wait for others
    for cfg in (QueueConfig(name="q.fifo", fifo=True, replication_factor=3, sync_replication=False),
                QueueConfig(name="q.fifo", fifo=True, replication_factor=1, sync_replication=True)):
        st.config = cfg
        st.replicas = ("a",) if cfg.replication_factor == 1 else ("a", "b", "c")
        assert st.out_of_reach(lambda: {"a"}, 200.0) == []


def test_an_async_write_needs_a_majority_while_consul_does_not_confirm_the_writer(
        streams: StreamSet) -> None:
    """An asynchronous stream's writer acknowledges alone while Consul
    confirms its lock; once its lease was extended through an outage (this
    host alone may be cut off, another elected), a majority must hold the
    write, and replicas that follow a newer writer report nothing here."""
    cfg = QueueConfig(name="q.fifo", fifo=True, replication_factor=3, sync_replication=False)
    streams.reconcile(Metadata({"q.fifo": cfg}, {("q.fifo", 0): PartitionInfo(("a", "b", "c"), {})}), NOW)
    st = streams.streams[KEY]
    st.store.append_batch([b"m"] * 10, NOW)
    st.store.commit()
    assert st.replicated_seq() == 10  # async: its own copy
    st.unconfirmed = True
    assert st.replicated_seq() == 0 and st.quorum() == 2  # nobody reported: no ack
    st.follower_pos = {"b": 7}
    assert st.replicated_seq() == 7
    st.unconfirmed = False
    assert st.replicated_seq() == 10


def _placed_all(streams: StreamSet, replicas: tuple[str, ...], joining: tuple[str, ...] = (),
                leaving: tuple[str, ...] = (), previous: tuple[str, ...] = ()) -> None:
    cfg = QueueConfig(name="q.fifo", fifo=True, replication_factor=3, sync_replication=True,
                      sync_quorum="all")
    info = PartitionInfo(replicas, {}, joining, leaving, previous)
    streams.reconcile(Metadata({"q.fifo": cfg}, {("q.fifo", 0): info}), NOW)


def test_with_sync_quorum_all_a_write_waits_for_every_voter_but_not_for_joining_ones(
        streams: StreamSet) -> None:
    _placed_all(streams, ("a", "b", "c"))
    st = streams.streams[KEY]
    st.local = "a"
    st.store.append_batch([b"m"] * 10, NOW)
    st.store.commit()
    st.follower_pos = {"b": 10, "c": 4}
    assert st.quorum() == 3 and st.replicated_seq() == 4  # (a majority would say 10)
    st.follower_pos["c"] = 10
    assert st.replicated_seq() == 10
    assert "all 3 voting replicas" in st.needs()
    # a joining replica (catching up) is no voter: every voter is enough
    _placed_all(streams, ("a", "b", "c", "d"), joining=("d",))
    st.follower_pos["d"] = 0
    assert st.quorum() == 3 and st.replicated_seq() == 10
    # while a change of the voters is in flight, every voter before it too
    _placed_all(streams, ("a", "b", "d", "c"), leaving=("c",), previous=("a", "b", "c"))
    st.follower_pos = {"b": 10, "c": 6, "d": 10}
    assert st.replicated_seq() == 6
    st.follower_pos["c"] = 10
    assert st.replicated_seq() == 10


def test_with_sync_quorum_all_any_voter_gone_puts_a_write_out_of_reach(streams: StreamSet) -> None:
    _placed_all(streams, ("a", "b", "c"))
    st = streams.streams[KEY]
    st.local, st.writer_since = "a", 100.0
    st.follower_seen = {"b": 104.0, "c": 104.0}
    assert st.out_of_reach(lambda: {"a", "b", "c"}, 107.5) == []  # silent but passing: the timeout decides
    assert st.out_of_reach(lambda: {"a", "b"}, 107.5) == ["c"]  # (a majority would still acknowledge)
    st.follower_seen["c"] = 107.0
    assert st.out_of_reach(lambda: {"a", "b"}, 107.5) == []


def test_with_sync_quorum_all_a_change_is_confirmed_once_every_new_voter_holds_the_records(
        streams: StreamSet) -> None:
    _placed_all(streams, ("a", "b", "c"))
    st = streams.streams[KEY]
    st.local, st.role = "a", Role.WRITER
    st.store.append_batch([b"m"] * 10, NOW)
    st.store.commit()
    _placed_all(streams, ("a", "b", "d", "c"), leaving=("c",), previous=("a", "b", "c"))
    st.version = 7
    st.follower_pos = {"b": 10, "d": 3}
    assert st.confirmation() == 0  # a majority of (a, b, d) holds 10, not all of them
    st.follower_pos["d"] = 10
    assert st.confirmation() == 7
