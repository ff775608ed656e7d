"""Replica placement: rendezvous hashing with zone spread and stickiness."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from zmqueue.controlplane.kvlayout import PartitionId
from zmqueue.controlplane.placement import Host, Move, place, plan_moves

PID = PartitionId("orders", 0)

node_names = st.lists(st.text("abcdefgh0123", min_size=1, max_size=4), min_size=1,
                      max_size=8, unique=True)
pids = st.builds(PartitionId, st.text("qrs", min_size=1, max_size=3), st.integers(0, 63))


def hosts_of(names, zones=None, **kw):
    return [Host(n, zone=(zones[i % len(zones)] if zones else ""), **kw)
            for i, n in enumerate(names)]


@given(pids, node_names, st.integers(1, 5))
def test_placement_returns_r_distinct_eligible_hosts_or_all_of_them(pid, names, r):
    result = place(pid, hosts_of(names), r)
    assert len(result) == min(r, len(names))
    assert len(set(result)) == len(result)
    assert set(result) <= set(names)


@given(pids, node_names, st.integers(1, 5), st.randoms(use_true_random=False))
def test_placement_is_deterministic_whatever_the_host_order(pid, names, r, rnd):
    shuffled = list(names)
    rnd.shuffle(shuffled)
    assert place(pid, hosts_of(names), r) == place(pid, hosts_of(shuffled), r)


@given(pids, node_names, st.integers(1, 5), st.data())
def test_when_one_host_leaves_only_its_replicas_move(pid, names, r, data):
    zones = data.draw(st.sampled_from([None, ["z1"], ["z1", "z2"], ["z1", "z2", "z3"]]))
    hosts = hosts_of(names, zones)
    gone = data.draw(st.sampled_from(names))
    before = set(place(pid, hosts, r))
    after = set(place(pid, [h for h in hosts if h.node != gone], r))
    assert before - {gone} <= after
    assert len(after - before) <= (1 if gone in before else 0)


@given(pids, node_names, st.integers(1, 5))
def test_when_a_host_joins_at_most_one_replica_moves_to_it(pid, names, r):
    before = set(place(pid, hosts_of(names[:-1]), r)) if len(names) > 1 else set()
    after = set(place(pid, hosts_of(names), r))
    assert after - before <= {names[-1]}
    assert len(before - after) <= 1


@given(pids, node_names, st.integers(1, 5))
def test_sticky_placement_moves_nothing_when_a_host_joins(pid, names, r):
    current = place(pid, hosts_of(names[:-1]), r) if len(names) > 1 else ()
    after = place(pid, hosts_of(names), r, current=current)
    assert after[: len(current)] == current
    if len(current) == r:
        assert after == current


@given(pids, st.lists(st.text("abcdef", min_size=1, max_size=3), min_size=3, max_size=9,
                      unique=True), st.integers(1, 3))
def test_replicas_spread_across_zones_when_possible(pid, names, r):
    hosts = hosts_of(names, ["z1", "z2", "z3"])
    zone = {h.node: h.zone for h in hosts}
    result = place(pid, hosts, r)
    assert len({zone[n] for n in result}) == min(r, 3)


def test_unhealthy_and_draining_hosts_get_no_replicas():
    hosts = [Host("a"), Host("b", healthy=False), Host("c", draining=True), Host("d")]
    assert set(place(PID, hosts, 3)) == {"a", "d"}


def test_sticky_placement_keeps_current_replicas_in_their_order():
    hosts = hosts_of(["a", "b", "c", "d", "e"])
    assert place(PID, hosts, 3, current=("e", "c", "a"))[:3] == ("e", "c", "a")


def test_a_drained_host_loses_its_replicas_and_only_those_move():
    pids = [PartitionId("q", p) for p in range(20)]
    hosts = hosts_of(["a", "b", "c", "d", "e"])
    old = {pid: place(pid, hosts, 3) for pid in pids}
    drained = [Host(h.node, draining=(h.node == "c")) for h in hosts]
    moves = plan_moves(old, drained, 3)
    assert moves, "some partition had a replica on c"
    for m in moves:
        assert isinstance(m, Move)
        assert m.remove == ("c",)
        assert len(m.add) == 1 and m.add[0] != "c"
        assert "c" not in m.replicas
    moved = {m.partition for m in moves}
    assert moved == {pid for pid, reps in old.items() if "c" in reps}


def test_plan_moves_is_empty_when_nothing_changed():
    hosts = hosts_of(["a", "b", "c"])
    old = {PartitionId("q", p): place(PartitionId("q", p), hosts, 2) for p in range(8)}
    assert plan_moves(old, hosts, {"q": 2}) == []


def test_plan_moves_grows_replica_sets_when_r_grows():
    hosts = hosts_of(["a", "b", "c"])
    old = {PID: ("a",)}
    (move,) = plan_moves(old, hosts, {"orders": 3})
    assert move.remove == () and set(move.replicas) == {"a", "b", "c"}
    assert move.replicas[0] == "a"
