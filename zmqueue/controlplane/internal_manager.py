"""The internal cluster manager's round: bring every partition of one cluster
to the replica set that sticky rendezvous placement (``placement.py``) asks
for, given the cluster's healthy, non-draining hosts.

- a failed host (past the grace period) or a drained one loses its
  replicas; the slot goes to the next-ranked eligible host (zones first);
- a joining host takes nothing from placed partitions (sticky), but fills
  partitions that have fewer than R replicas;
- a partition is never left with no replica: when no host is eligible the
  assignment stays as it is.

Each change is a new version of the assignment, written by the caller with
check-and-set under the manager lock.
"""

from __future__ import annotations

from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.fleetview import AssignmentWrite, members, moved
from zmqueue.controlplane.placement import plan_moves
from zmqueue.controlplane.queue_directory import Snapshot


def plan_internal(snap: Snapshot, cluster: str, healthy: dict[str, bool]) -> list[AssignmentWrite]:
    state = snap.state
    hosts = members(snap, cluster, healthy)
    if not any(h.eligible for h in hosts):
        return []
    current = {pid: a.replicas for pid, a in state.assignments.items()
               if a.cluster == cluster and pid.queue in state.configs}
    replication = {q: cfg.replication_factor for q, cfg in state.configs.items()}
    writes = []
    for mv in plan_moves(current, hosts, replication):
        if not mv.replicas:
            continue
        key = kv.partition_key(mv.partition)
        old = state.assignments[mv.partition]
        reason = (f"replicas {list(old.replicas)} -> {list(mv.replicas)} "
                  f"(removed {list(mv.remove)}, added {list(mv.add)})")
        writes.append(AssignmentWrite(key, moved(old, cluster, mv.replicas),
                                      state.modify_index.get(key, 0), reason))
    return writes
