"""A change of a partition's voters goes through a joint set (Raft's joint
consensus): ``leaving`` replicas keep their copies, ``previous`` holds the
voters before the change, a sync ack and an election need a majority of both
until every stream's writer confirmed that a majority of the new voters holds
what it held when it saw the change (``Stream.confirmation``), and only then
does the internal manager drop the leaving replicas."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from zmqueue.config import QueueConfig
from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.discovery import HostInfo
from zmqueue.controlplane.internal_manager import changed, confirmed, plan_internal, stream_origins
from zmqueue.controlplane.queue_directory import Snapshot
from zmqueue.controlplane.writer_election import Candidacy, heard_enough, may_campaign
from zmqueue.dataplane.storage import StorageConfig
from zmqueue.dataplane.stream import Role
from zmqueue.dataplane.streamset import StreamSet
from zmqueue.dataplane.topology import Metadata, PartitionInfo

P = kv.Position
PID = kv.PartitionId("q", 0)
NOW = 1_000_000
KEY = ("q.fifo", 0, "fifo")


# --- the KV value -----------------------------------------------------------------------
def test_a_joint_assignment_round_trips_and_names_its_voters() -> None:
    a = kv.PartitionAssignment("c1", ("b", "c", "d", "a"), 7, {}, ("d",), ("a",), ("a", "b", "c"))
    back = kv.decode_assignment("k", kv.encode_assignment(a))
    assert back == a and back.leaving == ("a",) and back.previous == ("a", "b", "c")
    assert a.voters == ("b", "c") and a.target == ("b", "c", "d")
    plain = kv.PartitionAssignment("c1", ("a", "b"), 1)
    assert b"leaving" not in kv.encode_assignment(plain) and b"previous" not in kv.encode_assignment(plain)


@pytest.mark.parametrize("value, why", [
    (b'{"cluster":"c1","replicas":["a","b"],"version":1,"previous":["a","z"]}', "'previous' must be"),
    (b'{"cluster":"c1","replicas":["a","b"],"version":1,"leaving":["a"]}',
     "'leaving' must be a list of node ids among 'previous'"),
    (b'{"cluster":"c1","replicas":["a","b"],"version":1,"leaving":["a"],"previous":["a"],"joining":["a"]}',
     "both 'joining' and 'leaving'"),
])
def test_a_malformed_joint_assignment_is_reported(value: bytes, why: str) -> None:
    bad = kv.decode_assignment("zmqueue/queues/q/partitions/0", value)
    assert isinstance(bad, kv.Malformed) and why in bad.reason


def test_a_writer_confirmation_is_published_beside_its_position() -> None:
    raw = kv.encode_position(P(2, 40), seen=9, confirmed=7)
    items = [{"Key": f"{kv.POSITIONS_PREFIX}q/0/fifo/a", "Value": raw},
             {"Key": f"{kv.POSITIONS_PREFIX}q/0/fifo/b", "Value": kv.encode_position(P(2, 40))}]
    assert kv.decode_stream_confirmed(items) == {("q", 0, "fifo"): {"a": 7, "b": 0}}
    assert kv.decode_stream_positions(items)[("q", 0, "fifo")]["a"] == P(2, 40)


def test_an_opened_mark_is_published_beside_a_position_and_only_when_set() -> None:
    items = [{"Key": f"{kv.POSITIONS_PREFIX}q/0/a/a", "Value": kv.encode_position(P(1, 0), opened=True)},
             {"Key": f"{kv.POSITIONS_PREFIX}q/0/a/b", "Value": kv.encode_position(P(1, 0))}]
    assert b'"opened"' not in items[1]["Value"]
    assert kv.decode_stream_opened(items) == {("q", 0, "a"): {"a": 1, "b": 0}}
    assert kv.decode_stream_positions(items)[("q", 0, "a")] == {"a": P(1, 0), "b": P(1, 0)}


# --- the manager ------------------------------------------------------------------------
def test_a_change_of_the_voters_is_joint_and_a_change_of_joiners_is_not() -> None:
    old = kv.PartitionAssignment("c1", ("a", "b", "c"), 3)
    joint = changed(old, "c1", ("a", "c", "d"), ("d",))  # b replaced by d, which joins
    assert joint.replicas == ("a", "c", "d", "b") and joint.leaving == ("b",)
    assert joint.previous == ("a", "b", "c") and joint.voters == ("a", "c") and joint.version == 4
    grown = changed(old, "c1", ("a", "b", "c", "d"), ("d",))  # a joiner added: same voters
    assert not grown.previous and grown.joining == ("d",)
    promoted = changed(grown, "c1", grown.replicas, ())
    assert promoted.previous == ("a", "b", "c") and promoted.voters == ("a", "b", "c", "d")
    assert not promoted.leaving


def _snap(a: kv.PartitionAssignment, fifo: bool, held: tuple[str, ...] = ()) -> Snapshot:
    cfg = QueueConfig(name="q", fifo=fifo, replication_factor=len(a.target), sync_replication=True)
    state = kv.ClusterState(configs={"q": cfg}, assignments={PID: a})
    for o in held:
        state.stream_leaders[(PID, o)] = kv.LeaderRecord(o, "", 1)
    hosts = [HostInfo(n, "c1", "1", f"tcp://127.0.0.1:{i}", "passing") for i, n in enumerate("abcd")]
    return Snapshot(1, state, [], hosts)


def test_the_manager_ends_a_change_once_every_streams_writer_confirmed_it() -> None:
    joint = kv.PartitionAssignment("c1", ("b", "a"), 5, {}, (), ("a",), ("a",))  # an R=1 drain of a
    healthy = {n: True for n in "abcd"}
    pos = {"fifo": {"a": P(1, 9), "b": P(1, 9)}}
    snap = _snap(joint, fifo=True)
    unknown: dict[str, dict[str, int]] | None = None
    for conf in (unknown, {}, {"fifo": {"a": 4}}):  # unknown, none, an older change's
        assert plan_internal(snap, "c1", healthy, lambda pid: pos, lambda pid: conf) == []  # noqa: B023
    [w] = plan_internal(snap, "c1", healthy, lambda pid: pos, lambda pid: {"fifo": {"a": 5}})
    assert (w.assignment.replicas, w.assignment.leaving, w.assignment.previous) == (("b",), (), ())
    assert w.assignment.version == 6 and "confirmed" in w.reason


def test_every_stream_of_a_standard_partition_confirms() -> None:
    joint = kv.PartitionAssignment("c1", ("a", "b", "d", "c"), 5, {}, ("d",), ("c",), ("a", "b", "c"))
    assert stream_origins(joint, fifo=False, held=("x",)) == ["a", "b", "d", "c", "x"]
    assert stream_origins(joint, fifo=True, held=("x",)) == ["fifo"]
    some = {"a": {"a": 5}, "b": {"b": 5}, "d": {"d": 5}}
    assert not confirmed(joint, ["a", "b", "d", "c"], some)  # c's stream (taken over, say) not yet
    assert confirmed(joint, ["a", "b", "d", "c"], {**some, "c": {"a": 5}})


def test_a_former_replicas_stream_between_two_writers_confirms_too() -> None:
    """A stream of a host that left the set long ago is kept by every replica
    and written by one of them; between two of its writers no lock is held,
    and a change ended then without it (its records could be left on fewer
    than a majority of the new voters). The replicas' positions name it."""
    joint = kv.PartitionAssignment("c1", ("a", "b", "d", "c"), 5, {}, (), ("c",), ("a", "b", "c"))
    pos = {o: {"a": P(1, 7), "b": P(1, 7)} for o in "abdcx"}
    pos["y"] = {"a": P(0, 0)}  # no record: nothing to confirm
    pos["z"] = {"e": P(1, 3)}  # held only by a host that is no replica
    assert stream_origins(joint, fifo=False, held=(), pos=pos) == ["a", "b", "d", "c", "x"]
    healthy = {n: True for n in "abcd"}
    snap = _snap(joint, fifo=False, held=("a", "b", "d", "c"))
    writers = {o: {o: 5} for o in "abdc"}
    assert plan_internal(snap, "c1", healthy, lambda pid: pos, lambda pid: writers) == []
    [w] = plan_internal(snap, "c1", healthy, lambda pid: pos, lambda pid: {**writers, "x": {"b": 5}})
    assert w.assignment.leaving == () and "confirmed" in w.reason


# --- the election -----------------------------------------------------------------------
def test_an_election_during_a_change_needs_the_previous_voters_too() -> None:
    # a (leaving, the previous lone voter) is down; b, the new voter, lacks what a acknowledged
    cand = Candidacy(("b", "a"), None, (), True, ("a",), ("a",))
    assert cand.voters == ("b",) and cand.voter_sets() == [("b",), ("a",)]
    assert not heard_enough("b", cand, {"b"}, P(0, 0), {}, confirmed=set())
    assert not may_campaign("b", cand, {"b"}, P(0, 0), {"a": P(1, 2)}, confirmed=set())
    plain = Candidacy(("b",), None)  # (once the change is confirmed, b alone decides)
    assert heard_enough("b", plain, {"b"}, P(0, 0), {}, confirmed=set())
    # a heard since the release and not ahead: b may take it
    assert heard_enough("b", cand, {"b", "a"}, P(1, 2), {"a": P(1, 2)}, confirmed={"a"})


# --- the writer -------------------------------------------------------------------------
@pytest.fixture
def streams(tmp_path: Path) -> Iterator[StreamSet]:
    ss = StreamSet("a", tmp_path, StorageConfig(fsync="never"))
    yield ss
    ss.close()


def placed(streams: StreamSet, info: PartitionInfo) -> None:
    cfg = QueueConfig(name="q.fifo", fifo=True, replication_factor=3, sync_replication=True)
    streams.reconcile(Metadata({"q.fifo": cfg}, {("q.fifo", 0): info}), NOW)


def test_a_writer_acks_by_both_majorities_and_confirms_once_the_new_voters_hold_its_log(
        streams: StreamSet) -> None:
    placed(streams, PartitionInfo(("a", "b", "c"), version=3))
    st = streams.streams[KEY]
    st.role = Role.WRITER
    st.store.append_batch([b"m"] * 10, NOW)
    st.store.commit()
    st.follower_pos = {"b": 10, "c": 4}
    assert st.replicated_seq() == 10 and st.confirmation() == 0
    # c is replaced by d (joining) and b by e: voters a, e; before: a, b, c
    version = streams.version
    placed(streams, PartitionInfo(("a", "d", "e", "b", "c"), joining=("d",), leaving=("b", "c"),
                                  previous=("a", "b", "c"), version=4))
    assert streams.version > version  # (the election's candidacy carries the change)
    st.follower_pos = {"b": 10, "c": 4, "d": 10, "e": 2}
    assert st.replicated_seq() == 2  # the new voters (a, e): e holds 2
    assert st.confirmation() == 0  # e lacks what a held when it saw the change (10)
    st.store.append_batch([b"m"] * 5, NOW)  # 11-15
    st.store.commit()
    st.follower_pos = {"b": 4, "c": 4, "d": 15, "e": 15}
    assert st.replicated_seq() == 4  # the previous voters' majority (a and b or c) holds only 4
    assert st.confirmation() == 4  # e holds 10: the change is confirmed
    assert "a majority of ['a', 'b', 'c']" in st.needs()
    placed(streams, PartitionInfo(("a", "d", "e"), joining=("d",), version=5))  # the change ended
    assert st.replicated_seq() == 15 and st.confirmation() == 4
    st.role = Role.REPLICA
    assert st.confirmation() == 0


def test_a_leaving_writer_of_an_async_stream_takes_no_more_writes_and_confirms_its_whole_log(
        tmp_path: Path) -> None:
    ss = StreamSet("a", tmp_path, StorageConfig(fsync="never"))
    try:
        cfg = QueueConfig(name="q.fifo", fifo=True, replication_factor=1, sync_replication=False)
        ss.reconcile(Metadata({"q.fifo": cfg}, {("q.fifo", 0): PartitionInfo(("a",), version=2)}), NOW)
        st = ss.streams[KEY]
        st.role, st.lease_until = Role.WRITER, float("inf")
        st.store.append_batch([b"m"] * 10, NOW)
        st.store.commit()
        assert st.writable and st.replicated_seq() == 10  # async: the writer's own commit
        joint = PartitionInfo(("b", "a"), leaving=("a",), previous=("a",), version=3)  # a drained
        ss.reconcile(Metadata({"q.fifo": cfg}, {("q.fifo", 0): joint}), NOW)
        assert st.handing_over and not st.writable  # sends go to the new writer once it takes over
        st.follower_pos = {"b": 9}
        assert st.confirmation() == 0  # b lacks the last record a acknowledged alone
        st.follower_pos = {"b": 10}
        assert st.confirmation() == 3
        sync = QueueConfig(name="q.fifo", fifo=True, replication_factor=1, sync_replication=True)
        ss.reconcile(Metadata({"q.fifo": sync}, {("q.fifo", 0): joint}), NOW)
        assert not st.handing_over and st.writable  # a sync ack needs b anyway: a keeps writing
    finally:
        ss.close()


def test_a_dead_leaving_replica_and_a_joiner_far_behind_do_not_hold_up_sends(streams: StreamSet) -> None:
    """c died and d replaces it: the quorum counts the set without c (2 of a,
    b, d), so a and b acknowledge while d catches up, as before the change."""
    placed(streams, PartitionInfo(("a", "b", "d", "c"), joining=("d",), leaving=("c",),
                                  previous=("a", "b", "c"), version=4))
    st = streams.streams[KEY]
    st.role = Role.WRITER
    st.store.append_batch([b"m"] * 10, NOW)
    st.store.commit()
    st.follower_pos = {"b": 10}
    assert st.quorum() == 2 and st.replicated_seq() == 10
    st.writer_since, st.follower_seen = 0.0, {"b": 100.0}  # c and d silent; d passing in Consul
    assert st.out_of_reach(lambda: {"a", "b", "d"}, now=100.0) == []  # c is gone: still in reach
    assert st.needs().startswith("2 of 3")
