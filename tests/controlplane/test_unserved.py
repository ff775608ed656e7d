"""A host that does not serve a queue (it started while the queue's config in
Consul KV was bad, and knows no good value of it) marks the queue's
partitions unserved (``kvlayout.unserved_key``): the internal manager does
not count it caught up in them, and the writer election treats it as down for
their streams (``Leadership._cycle``: no hand-back to it, no waiting for it).

(QA: such a host, restarted while its streams were empty, was put back as a
voter at once; the replica writing its stream handed it back to it, and
nobody wrote the stream again while the config stayed bad.)"""

from __future__ import annotations

from zmqueue.config import QueueConfig
from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.discovery import HostInfo
from zmqueue.controlplane.internal_manager import plan_internal
from zmqueue.controlplane.kvlayout import Position
from zmqueue.controlplane.queue_directory import Snapshot
from zmqueue.controlplane.writer_election import Candidacy, may_campaign

PID = kv.PartitionId("q", 0)


def item(key: str, value: bytes) -> dict[str, object]:
    """A listing's item as python-consul hands it over (the value decoded)."""
    return {"Key": key, "Value": value}


def test_markers_are_read_beside_the_positions_and_are_no_stream() -> None:
    items = [item(kv.stream_position_key(PID, "a", "a"), kv.encode_position(Position(1, 3), opened=True)),
             item(kv.unserved_key(PID, "c"), kv.encode_unserved()),
             item(kv.unserved_key(kv.PartitionId("q", 1), "c"), kv.encode_unserved())]
    assert kv.decode_stream_positions(items) == {("q", 0, "a"): {"a": Position(1, 3)}}
    assert kv.decode_stream_opened(items) == {("q", 0, "a"): {"a": 1}}
    assert kv.decode_unserved(items) == {("q", 0): {"c"}, ("q", 1): {"c"}}
    assert kv.unserved_key(PID, "c") == "zmqueue-positions/q/0/~unserved/c"


def plan(replicas: tuple[str, ...], joining: tuple[str, ...], seqs: dict[str, int],
         unserved: set[str]) -> list[kv.PartitionAssignment]:
    state = kv.ClusterState(configs={"q": QueueConfig(name="q", replication_factor=3)},
                            assignments={PID: kv.PartitionAssignment("c1", replicas, 1, {}, joining)})
    hosts = [HostInfo(n, "c1", "1", f"tcp://127.0.0.1:{i}", "passing") for i, n in enumerate("abc")]
    pos = {o: {n: Position(1, q) for n, q in seqs.items()} for o in "abc"}
    return [w.assignment for w in plan_internal(Snapshot(1, state, [], hosts), "c1", {n: True for n in "abc"},
                                                lambda pid: pos, lambda pid: None, lambda pid: unserved)]


def test_a_host_that_does_not_serve_the_queue_joins_and_is_not_caught_up_until_it_does() -> None:
    # c is back (it left on a clean stop): with no records it used to vote at once
    [added] = plan(("a", "b"), (), {"a": 0, "b": 0, "c": 0}, {"c"})
    assert added.replicas == ("a", "b", "c") and added.joining == ("c",)
    assert plan(("a", "b"), (), {"a": 0, "b": 0, "c": 0}, set())[0].joining == ()
    # records, and c's last positions (published before its restart) equal the others'
    assert plan(("a", "b", "c"), ("c",), {"a": 9, "b": 9, "c": 9}, {"c"}) == []
    assert plan(("a", "b", "c"), ("c",), {"a": 0, "b": 0, "c": 0}, {"c"}) == []
    # the config fixed: c serves the queue, and is a voter once caught up
    [voter] = plan(("a", "b", "c"), ("c",), {"a": 9, "b": 9, "c": 9}, set())
    assert voter.joining == () and voter.previous == ("a", "b")


def test_the_election_waits_for_a_preferred_writer_only_while_it_keeps_its_stream() -> None:
    """What ``Leadership._cycle`` does with a marker: the marking host is left
    out of the passing hosts for the queue's streams."""
    std = Candidacy(("a", "b", "c"), "c")
    positions = {"a": Position(0, 0), "c": Position(0, 0)}
    assert not may_campaign("b", std, {"a", "b", "c"}, Position(0, 0), positions)
    assert may_campaign("b", std, {"a", "b", "c"} - {"c"}, Position(0, 0), positions)
