"""The external cluster manager's round: assign unassigned partitions to
clusters and move partitions off clusters that lost quorum or overheat.

The decisions are ``assignment.py``'s; this module builds its ``Fleet`` from
a snapshot and turns actions into assignment writes. A partition that is
assigned or moved gets its initial replicas by placement on the target
cluster; the target's internal manager keeps them right from then on.

Effective replication: a cluster smaller than a queue's R holds all of its
hosts as replicas, so "quorum lost" is judged against
``min(R, registered hosts of the partition's cluster)``. Cluster load is not
reported by hosts yet, so overheat moves need a load source (none today).

Partitions that hold records never move (``assignment.py``'s rules): the
adapter (``managers.py``) passes ``holding``, which is asked about the
partitions on a cluster short of quorum only and reads whether any of their
streams has a position past 0 in ``zmqueue-positions/``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.assignment import (
    CannotPlace,
    ClusterInfo,
    Fleet,
    assign_queue,
    below_quorum,
    rebalance,
)
from zmqueue.controlplane.fleetview import AssignmentWrite, members, moved
from zmqueue.controlplane.placement import place
from zmqueue.controlplane.queue_directory import Snapshot
from zmqueue.errors import Unavailable


def build_fleet(snap: Snapshot, healthy: dict[str, bool]) -> Fleet:
    state = snap.state
    registered = Counter(h.cluster for h in snap.hosts)
    up = Counter(h.cluster for h in snap.hosts
                 if healthy.get(h.node) and not state.drains.get(h.node, False))
    assigned = {pid: a.cluster for pid, a in state.assignments.items() if pid.queue in state.configs}
    replication: dict[str, int] = {}
    for pid, cluster in assigned.items():
        r = max(1, min(state.configs[pid.queue].replication_factor, registered[cluster]))
        replication[pid.queue] = min(replication.get(pid.queue, r), r)
    clusters = {c: ClusterInfo(c, up[c]) for c in registered}
    return Fleet(clusters, assigned, replication)


def _new_partitions(snap: Snapshot, healthy: dict[str, bool], fleet: Fleet,
                    notes: list[str]) -> list[AssignmentWrite]:
    state = snap.state
    sizes = Counter(h.cluster for h in snap.hosts)
    assigned = dict(fleet.assignments)
    writes = []
    for q, cfg in sorted(state.configs.items()):
        if all(kv.PartitionId(q, p) in state.assignments for p in range(cfg.partitions)):
            continue
        r = min(cfg.replication_factor, max(sizes.values(), default=1))
        try:
            chosen = assign_queue(q, cfg.partitions, r, Fleet(fleet.clusters, assigned))
        except Unavailable as exc:
            notes.append(str(exc))
            continue
        for pid, cluster in sorted(chosen.items()):
            if pid in state.assignments:
                continue
            replicas = place(pid, members(snap, cluster, healthy), cfg.replication_factor)
            cfg_key = kv.queue_config_key(q)
            writes.append(AssignmentWrite(kv.partition_key(pid),
                                          kv.PartitionAssignment(cluster, replicas, 1), 0,
                                          f"new partition -> cluster {cluster}",
                                          cfg_key, state.modify_index.get(cfg_key, 0)))
            assigned[pid] = cluster
    return writes


Holding = Callable[[list[kv.PartitionId]], frozenset[kv.PartitionId]]
"""Which of the given partitions hold records (they never move)."""


def plan_external(snap: Snapshot, healthy: dict[str, bool], holding: Holding = lambda pids: frozenset()
                  ) -> tuple[list[AssignmentWrite], list[str]]:
    """Writes for this round, and notes on what could not be done;
    ``holding`` is asked about the partitions below quorum only."""
    state = snap.state
    fleet = build_fleet(snap, healthy)
    fleet = replace(fleet, holding=holding(below_quorum(fleet)))
    notes: list[str] = []
    writes = _new_partitions(snap, healthy, fleet, notes)
    for action in rebalance(fleet):
        if isinstance(action, CannotPlace):
            notes.append(f"{action.partition.queue}/{action.partition.partition}: {action.reason}")
            continue
        pid = action.partition
        key = kv.partition_key(pid)
        old = state.assignments[pid]
        replicas = place(pid, members(snap, action.target, healthy),
                         state.configs[pid.queue].replication_factor)
        writes.append(AssignmentWrite(key, moved(old, action.target, replicas),
                                      state.modify_index.get(key, 0),
                                      f"{action.reason}: cluster {action.source} -> {action.target}"))
    return writes, notes
