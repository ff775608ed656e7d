"""External manager: queue-to-cluster assignment and rebalancing."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zmqueue.controlplane.assignment import (
    CannotPlace,
    ClusterInfo,
    Fleet,
    MovePartition,
    assign_queue,
    quorum,
    rebalance,
)
from zmqueue.controlplane.kvlayout import PartitionId
from zmqueue.errors import Unavailable


def fleet(*clusters, assignments=None, replication=None, partition_load=None):
    return Fleet({c.name: c for c in clusters}, assignments or {}, replication or {},
                 partition_load or {})


@given(st.integers(1, 6), st.lists(st.integers(1, 16), min_size=1, max_size=6))
def test_assignment_balances_within_one_partition_when_clusters_are_equal(n, queues):
    f = fleet(*[ClusterInfo(f"c{i}", healthy_hosts=3) for i in range(n)])
    assigned: dict[PartitionId, str] = {}
    for i, parts in enumerate(queues):
        assigned.update(assign_queue(f"q{i}", parts, 3, Fleet(f.clusters, assigned)))
    counts = Counter(assigned.values())
    loads = [counts.get(f"c{i}", 0) for i in range(n)]
    assert max(loads) - min(loads) <= 1


def test_partitions_of_one_queue_spread_over_clusters():
    f = fleet(ClusterInfo("a", 3), ClusterInfo("b", 3), ClusterInfo("c", 3))
    assert set(assign_queue("q", 3, 3, f).values()) == {"a", "b", "c"}


def test_assignment_is_deterministic_and_idempotent():
    f = fleet(ClusterInfo("a", 3), ClusterInfo("b", 3))
    first = assign_queue("q", 4, 3, f)
    assert assign_queue("q", 4, 3, f) == first
    assert assign_queue("q", 4, 3, Fleet(f.clusters, first)) == first


def test_new_partitions_avoid_clusters_short_of_r_healthy_hosts():
    f = fleet(ClusterInfo("small", 2), ClusterInfo("big", 3))
    assert set(assign_queue("q", 4, 3, f).values()) == {"big"}


def test_assignment_without_any_quorum_raises_unavailable():
    with pytest.raises(Unavailable):
        assign_queue("q", 1, 3, fleet(ClusterInfo("a", 1)))


def test_quorum_is_a_majority_of_r():
    assert [quorum(r) for r in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]


def test_partitions_leave_a_cluster_that_lost_quorum():
    pid = PartitionId("q", 0)
    f = fleet(ClusterInfo("a", 1), ClusterInfo("b", 3),
              assignments={pid: "a", PartitionId("r", 0): "b"}, replication={"q": 3, "r": 3})
    assert rebalance(f) == [MovePartition(pid, "a", "b", "quorum_lost")]


def test_a_partition_with_nowhere_to_go_is_reported():
    pid = PartitionId("q", 0)
    f = fleet(ClusterInfo("a", 0), assignments={pid: "a"}, replication={"q": 3})
    (action,) = rebalance(f)
    assert isinstance(action, CannotPlace) and action.partition == pid


def test_an_overheated_cluster_sheds_its_hottest_partition_to_the_coolest():
    hot = {PartitionId("q", p): "a" for p in range(4)}
    loads = {PartitionId("q", 2): 50.0, PartitionId("q", 1): 10.0}
    f = fleet(ClusterInfo("a", 3, load=300.0), ClusterInfo("b", 3, load=50.0),
              ClusterInfo("c", 3, load=100.0), assignments=hot, partition_load=loads)
    assert rebalance(f) == [MovePartition(PartitionId("q", 2), "a", "b", "overheated")]


def test_balanced_clusters_need_no_moves():
    f = fleet(ClusterInfo("a", 3, load=100.0), ClusterInfo("b", 3, load=110.0),
              assignments={PartitionId("q", 0): "a", PartitionId("q", 1): "b"})
    assert rebalance(f) == []


def test_a_move_that_would_overheat_the_target_is_skipped():
    pid = PartitionId("q", 0)
    f = fleet(ClusterInfo("a", 3, load=400.0), ClusterInfo("b", 3, load=10.0),
              ClusterInfo("c", 3, load=10.0),
              assignments={pid: "a"}, partition_load={pid: 400.0})
    assert rebalance(f) == []


def test_a_partition_that_holds_records_stays_on_a_cluster_that_lost_quorum():
    """A move gives new, empty replicas: the records would stay behind."""
    held, empty = PartitionId("q", 0), PartitionId("q", 1)
    f = Fleet({"a": ClusterInfo("a", 1), "b": ClusterInfo("b", 3)}, {held: "a", empty: "a"}, {"q": 3},
              holding=frozenset({held}))
    stay, move = rebalance(f)
    assert isinstance(stay, CannotPlace) and stay.partition == held
    assert "holds records" in stay.reason and "'a'" in stay.reason
    assert move == MovePartition(empty, "a", "b", "quorum_lost")


def test_an_overheated_cluster_keeps_its_partitions_that_hold_records():
    hot = {PartitionId("q", p): "a" for p in range(2)}
    loads = {PartitionId("q", 0): 50.0, PartitionId("q", 1): 10.0}
    clusters = {"a": ClusterInfo("a", 3, load=300.0), "b": ClusterInfo("b", 3, load=50.0),
                "c": ClusterInfo("c", 3, load=100.0)}
    f = Fleet(clusters, hot, {}, loads, holding=frozenset({PartitionId("q", 0)}))
    assert rebalance(f) == [MovePartition(PartitionId("q", 1), "a", "b", "overheated")]
