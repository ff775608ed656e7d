"""The internal manager keeps a partition's records when its replicas change
(``internal_manager.bridged``), keeps failed replicas that nothing can
replace (``internal_manager.with_failed``), and the writer election never picks a replica
that lacks what a majority of the replicas hold (``writer_election.may_campaign``)."""

from __future__ import annotations

from zmqueue.config import QueueConfig
from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.discovery import HostInfo
from zmqueue.controlplane.internal_manager import bridged, plan_internal, with_failed
from zmqueue.controlplane.kvlayout import Position
from zmqueue.controlplane.queue_directory import Snapshot
from zmqueue.controlplane.writer_election import Candidacy
from zmqueue.controlplane.writer_election import may_campaign as _may_campaign

ALL = {n: True for n in "abcdefg"}


def at(**seqs: int) -> dict[str, dict[str, Position]]:
    """One stream ("s") with these nodes' positions (epoch 1)."""
    return {"s": {n: Position(1, q) for n, q in seqs.items()}}


def may_campaign(me: str, cand: Candidacy, passing: set[str], mine: int, others: dict[str, int]) -> bool:
    """``writer_election.may_campaign`` with every position in epoch 1."""
    return _may_campaign(me, cand, passing, Position(1, mine), {n: Position(1, q) for n, q in others.items()})


def test_a_partition_without_records_takes_the_set_placement_wants() -> None:
    assert bridged(("d", "e", "f"), ("a", "b", "c"), at(a=0, b=0, c=0), ALL) == ("d", "e", "f")


def test_one_replica_replaced_keeps_two_that_have_everything() -> None:
    assert bridged(("a", "b", "d"), ("a", "b", "c"), at(a=9, b=9, c=9), ALL) == ("a", "b", "d")


def test_all_replicas_drained_at_once_keep_a_majority_until_the_new_ones_catch_up() -> None:
    old = ("a", "b", "c")
    assert bridged(("d", "e", "f"), old, at(a=9, b=9, c=9), ALL) == ("a", "b", "d")
    # next round: d has caught up, so one more old replica may go
    assert bridged(("d", "e", "f"), ("a", "b", "d"), at(a=9, b=9, d=9, e=0), ALL) == ("a", "d", "e")
    # and d not caught up yet: nothing changes
    assert bridged(("d", "e", "f"), ("a", "b", "d"), at(a=9, b=9, d=3), ALL) is None


def test_replicas_that_failed_together_are_kept_until_they_return() -> None:
    down = {**ALL, "a": False, "b": False, "c": False}
    first = bridged(("d", "e", "f"), ("a", "b", "c"), at(a=9, b=9, c=9), down)
    assert first == ("a", "b", "d")  # two of them stay: a majority of the set has every record
    assert bridged(("d", "e", "f"), ("a", "b", "d"), at(a=9, b=9, c=9, d=0), down) is None


def test_a_lagging_replica_is_not_a_keeper_and_unread_positions_keep_everyone() -> None:
    # c lags: only a and b hold what a majority holds, and both must stay
    assert bridged(("c", "d", "e"), ("a", "b", "c"), at(a=9, b=9, c=5), ALL) is None
    assert bridged(("d", "e", "f"), ("a", "b", "c"), None, ALL) == ("a", "b", "d")


def test_an_empty_replica_may_not_take_over_from_replicas_that_are_only_down() -> None:
    fifo = Candidacy(("a", "b", "d"), None)
    # a and b (down) last published 200; d joined empty
    assert not may_campaign("d", fifo, {"d"}, 0, {"a": 200, "b": 200})
    assert may_campaign("a", fifo, {"a", "d"}, 200, {"b": 200, "d": 0})
    # the usual failover: the dead writer was ahead by records no majority had
    assert may_campaign("b", Candidacy(("a", "b", "c"), None), {"b", "c"}, 100, {"a": 105, "c": 100})


def test_a_preferred_writer_that_left_the_replicas_does_not_hold_its_stream_back() -> None:
    """A drained host stays healthy but is no longer a replica: its stream is taken over."""
    std = Candidacy(("b", "c", "d"), "a")
    assert may_campaign("b", std, {"a", "b", "c", "d"}, 50, {"a": 50, "c": 50, "d": 0})
    assert not may_campaign("b", Candidacy(("a", "b", "c"), "a"), {"a", "b", "c"}, 50, {"a": 50, "c": 50})


def test_a_single_replica_drained_is_joined_by_its_replacement_before_it_leaves() -> None:
    """R=1: the drained host's records exist nowhere else."""
    assert bridged(("b",), ("a",), at(a=9), ALL) == ("a", "b")
    assert bridged(("b",), ("a", "b"), at(a=9, b=4), ALL) is None  # b still catching up
    assert bridged(("b",), ("a", "b"), at(a=9, b=9), ALL) == ("b",)


def _snapshot(replicas: tuple[str, ...], status: dict[str, str], r: int = 3,
              drains: tuple[str, ...] = ()) -> Snapshot:
    pid = kv.PartitionId("q", 0)
    state = kv.ClusterState(configs={"q": QueueConfig(name="q", replication_factor=r, sync_replication=True)},
                            assignments={pid: kv.PartitionAssignment("c1", replicas, 1)},
                            drains={n: True for n in drains})
    hosts = [HostInfo(n, "c1", "1", f"tcp://127.0.0.1:{i}", s) for i, (n, s) in enumerate(status.items())]
    return Snapshot(1, state, [], hosts)


def _plan(snap: Snapshot) -> list[tuple[str, ...]]:
    healthy = {h.node: h.passing for h in snap.hosts}
    full = {"s": {n: Position(1, 9) for n in "abcd"}}
    return [w.assignment.target for w in plan_internal(snap, "c1", healthy, lambda pid: full)]


def test_failed_replicas_stay_in_the_set_while_no_host_can_replace_them() -> None:
    """Three hosts, R=3, two killed: the survivor must not become a set of
    one (it would acknowledge sync sends alone)."""
    snap = _snapshot(("a", "b", "c"), {"a": "passing", "b": "critical", "c": "critical"})
    assert _plan(snap) == []
    assert with_failed(("a",), ("a", "b", "c"), 3, {"b", "c"}) == ("a", "b", "c")


def test_a_failed_replica_leaves_for_a_replacement_and_a_drained_or_deregistered_one_at_once() -> None:
    four = {"a": "passing", "b": "critical", "c": "passing", "d": "passing"}
    assert _plan(_snapshot(("a", "b", "c"), four)) == [("a", "c", "d")]  # (b leaving until confirmed)
    # drained: the operator asked for it to go, replacement or not
    drained = _snapshot(("a", "b", "c"), {"a": "passing", "b": "passing", "c": "passing"}, drains=("b",))
    assert _plan(drained) == [("a", "c")]
    # failed and then drained by an operator (dead for good, no spare host): given up
    dead = _snapshot(("a", "b", "c"), {"a": "passing", "b": "critical", "c": "passing"}, drains=("b",))
    assert _plan(dead) == [("a", "c")]
    # deregistered (a clean stop): gone
    assert _plan(_snapshot(("a", "b", "c"), {"a": "passing", "c": "passing"})) == [("a", "c")]
    # two failed, one spare: the spare takes one slot, one failed replica stays
    assert with_failed(("a", "d"), ("a", "b", "c"), 3, {"b", "c"}) == ("a", "b", "d")
    # a set already smaller than R is not grown with failed hosts
    assert with_failed(("a",), ("a", "b"), 3, {"b"}) == ("a", "b")
    assert with_failed(("a",), ("a",), 3, set()) == ("a",)


def _grown(joining: tuple[str, ...], pos: dict[str, dict[str, Position]] | None,
           status: dict[str, str], drains: tuple[str, ...] = ()) -> list[kv.PartitionAssignment]:
    """Plan for a partition placed on (a, b, c) with ``joining`` among them."""
    pid = kv.PartitionId("q", 0)
    state = kv.ClusterState(configs={"q": QueueConfig(name="q", replication_factor=3, sync_replication=True)},
                            assignments={pid: kv.PartitionAssignment("c1", ("a", "b", "c"), 1, {}, joining)},
                            drains={n: True for n in drains})
    hosts = [HostInfo(n, "c1", "1", f"tcp://127.0.0.1:{i}", s) for i, (n, s) in enumerate(status.items())]
    healthy = {h.node: h.passing for h in hosts}
    return [w.assignment for w in plan_internal(Snapshot(1, state, [], hosts), "c1", healthy, lambda p: pos)]


UP = {n: "passing" for n in "abcd"}


def test_replicas_added_to_a_partition_with_records_join_and_become_voters_once_caught_up() -> None:
    pid = kv.PartitionId("q", 0)
    state = kv.ClusterState(configs={"q": QueueConfig(name="q", replication_factor=3)},
                            assignments={pid: kv.PartitionAssignment("c1", ("a",), 1)})
    hosts = [HostInfo(n, "c1", "1", f"tcp://127.0.0.1:{i}", "passing") for i, n in enumerate("abc")]
    snap = Snapshot(1, state, [], hosts)
    healthy = {n: True for n in "abc"}
    # R raised from 1 to 3: b and c join; a holds records, so they are not voters yet
    [grown] = [w.assignment for w in plan_internal(snap, "c1", healthy, lambda p: at(a=9))]
    assert grown.replicas == ("a", "b", "c") and grown.joining == ("b", "c") and grown.voters == ("a",)
    # no records: nothing to catch up, every replica votes at once
    [fresh] = [w.assignment for w in plan_internal(snap, "c1", healthy, lambda p: at(a=0))]
    assert fresh.joining == ()
    # b has caught up, c not yet; then both
    assert [a.joining for a in _grown(("b", "c"), at(a=9, b=9, c=4), UP)] == [("c",)]
    assert [a.joining for a in _grown(("b", "c"), at(a=9, b=9, c=9), UP)] == [()]
    assert _grown(("b", "c"), None, UP) == []  # positions unknown: they stay joining


def test_a_drain_right_after_r_was_raised_keeps_the_only_replica_with_the_records() -> None:
    """(a, b, c) where b and c joined empty: draining a must not leave them alone."""
    assert bridged(("b", "c", "d"), ("a", "b", "c"), at(a=9, b=0, c=0), ALL, ("b", "c")) is None
    # without the joining mark, b and c (at 0) looked like a majority holding everything
    assert bridged(("b", "c", "d"), ("a", "b", "c"), at(a=9, b=0, c=0), ALL) == ("b", "c", "d")
    # and through a manager round: a stays, d is not let in at a's expense
    assert _grown(("b", "c"), at(a=9, b=0, c=0), UP, drains=("a",)) == []


def test_a_joining_replica_is_no_voter_in_the_writer_election() -> None:
    grown = Candidacy(("a", "b", "c"), None, ("b", "c"))
    # a (down) holds 9; b and c joined empty: they would be a majority of three at 0
    assert not may_campaign("b", grown, {"b", "c"}, 0, {"a": 9, "c": 0})
    assert may_campaign("b", Candidacy(("a", "b", "c"), None), {"b", "c"}, 0, {"a": 9, "c": 0})
    assert may_campaign("b", grown, {"b", "c"}, 9, {"a": 9, "c": 0})  # caught up, not yet a voter


def test_a_joining_host_writes_its_own_new_stream_but_not_a_stale_copy_of_it() -> None:
    """Standard partition: b's own stream, b joining."""
    new = Candidacy(("a", "b"), "b", ("b",))
    assert may_campaign("b", new, {"a", "b"}, 0, {"a": 0})
    assert not may_campaign("a", new, {"a", "b"}, 0, {"b": 0})  # a leaves b's new stream to b
    # b rejoined with a stale copy of its stream, which a wrote meanwhile (its writer died)
    stale = Candidacy(("a", "b", "c"), "b", ("b",))
    assert not may_campaign("b", stale, {"b", "c"}, 3, {"a": 7, "c": 7})
    assert may_campaign("c", stale, {"b", "c"}, 7, {"a": 7, "b": 3})


def test_a_longer_copy_of_an_earlier_term_does_not_win_over_a_later_terms_records() -> None:
    """a wrote 15 records at epoch 1 that nobody else got, and died; b was
    elected (epoch 2), wrote one record that c also took (acknowledged), and
    died. a is back: its copy is longer, but c's last record is of a later
    term. Compared by seq alone, a was elected, and c's copy, acknowledged
    record included, was cut by the resync that followed."""
    fifo = Candidacy(("a", "b", "c"), None)
    later = {"b": Position(2, 1), "c": Position(2, 1)}
    assert not _may_campaign("a", fifo, {"a", "c"}, Position(1, 15), later)
    assert _may_campaign("c", fifo, {"a", "c"}, Position(2, 1), {"a": Position(1, 15), "b": Position(2, 1)})


def test_an_origin_back_with_a_stale_copy_of_its_stream_does_not_take_it_before_catching_up() -> None:
    """Standard stream of origin a: b wrote it (epoch 2) while a was down, c
    holds b's records; b dies before handing it back. a used to take its
    stream at once, whatever it held: with c down too it wrote on from its
    stale copy, and the resync that followed cut the acknowledged records."""
    stream_a = Candidacy(("a", "b", "c"), "a")
    later = {"b": Position(2, 9), "c": Position(2, 9)}
    assert not _may_campaign("a", stream_a, {"a"}, Position(1, 5), later)
    # c, alive, takes it over (a is then handed it back once it has caught up)
    others = {"a": Position(1, 5), "b": Position(2, 9)}
    assert _may_campaign("c", stream_a, {"a", "c"}, Position(2, 9), others)
    # an origin that holds what the others hold takes its stream at once, and they leave it
    assert _may_campaign("a", stream_a, {"a", "b", "c"}, Position(2, 9), later)
    assert not _may_campaign("c", stream_a, {"a", "c"}, Position(2, 9), {"a": Position(2, 9)})


def test_keepers_are_counted_per_stream() -> None:
    """Standard partition: a is ahead on its own stream, b on its own, as under
    traffic. No replica holds the most of both, which used to mean no keepers
    at all: both could be drained (or fail) away at once and take the only
    copies of their streams' newest records along."""
    pos = {"a": {"a": Position(1, 12), "b": Position(1, 11)}, "b": {"a": Position(1, 0), "b": Position(1, 1)}}
    assert bridged(("d",), ("a", "b"), pos, ALL) == ("a", "b", "d")
    three = {"a": {"a": Position(1, 9), "b": Position(1, 8), "c": Position(1, 9)},
             "b": {"a": Position(1, 4), "b": Position(1, 5), "c": Position(1, 5)}}
    # c holds what a majority holds in both; a and b only in one each
    assert bridged(("c", "d", "e"), ("a", "b", "c"), three, ALL) == ("a", "b", "c", "d")
