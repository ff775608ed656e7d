"""The external cluster manager's decisions: which cluster holds which partition.

Pure functions over a :class:`Fleet` snapshot; the Consul adapter builds the
snapshot (service catalog + KV) and writes the resulting assignments with
check-and-set. Rules:

- **Can host.** A cluster can host a partition of replication factor R when
  it has at least R healthy, non-draining hosts. New partitions go only to
  such clusters; when none exists, to clusters that still have a quorum
  (a majority of R, ``R // 2 + 1``); when none has a quorum either,
  :class:`~zmqueue.errors.Unavailable` is raised.
- **New queue.** Partitions are assigned one by one to the least loaded
  eligible cluster by partition count (counting the ones just assigned), so
  the partitions of one queue spread over clusters and equal clusters end
  within one partition of each other. Ties are broken by a rendezvous hash
  of (queue, partition, cluster), then by name: deterministic, yet not always
  the same cluster.
- **Quorum lost.** A partition whose cluster has fewer healthy hosts than a
  majority of its R moves to the best cluster that can host it, unless it
  holds records (``Fleet.holding``): a move gives it new, empty replicas on
  the target, and the records stay on the hosts it leaves, so its
  acknowledged messages would be left behind. Such a partition stays on the
  hosts that are left (the internal manager shrinks its replica set to
  them) until the others are back; it is reported (:class:`CannotPlace`).
  An operator who gives the records up moves it by editing its assignment
  in the Consul KV editor.
- **Overheated.** A cluster whose load metric is above ``overheat_factor``
  times the mean load (over clusters that report one) sheds at most
  ``moves_per_cluster`` partitions per round (its hottest by partition load,
  then highest id) to the coolest cluster below the mean; a move is skipped
  when it would overheat the target. Bounded moves per round avoid thrashing.
  Partitions that hold records do not move for heat either (as above).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from zmqueue.config import acks_needed
from zmqueue.controlplane.kvlayout import PartitionId
from zmqueue.controlplane.placement import hrw_score
from zmqueue.errors import Unavailable


@dataclass(frozen=True)
class ClusterInfo:
    """A cluster as the external manager sees it."""

    name: str
    healthy_hosts: int
    load: float = 0.0
    """Load metric reported by the cluster (e.g. bytes/s in + out); 0 = none."""


@dataclass(frozen=True)
class Fleet:
    """Everything the external manager decides on."""

    clusters: Mapping[str, ClusterInfo]
    assignments: Mapping[PartitionId, str]
    """partition -> cluster name."""
    replication: Mapping[str, int] = field(default_factory=dict)
    """queue -> R (1 when absent)."""
    partition_load: Mapping[PartitionId, float] = field(default_factory=dict)
    holding: frozenset[PartitionId] = frozenset()
    """Partitions whose streams hold records: they never move (module rules)."""


@dataclass(frozen=True)
class MovePartition:
    """Move ``partition`` from ``source`` to ``target``; ``reason`` is
    ``"quorum_lost"`` or ``"overheated"``."""

    partition: PartitionId
    source: str
    target: str
    reason: str


@dataclass(frozen=True)
class CannotPlace:
    """No cluster can take ``partition`` now; the manager reports it."""

    partition: PartitionId
    reason: str


Action = MovePartition | CannotPlace


def quorum(r: int) -> int:
    """Majority of R replicas."""
    return acks_needed(r, "majority")


def _choose(
    pid: PartitionId, clusters: Sequence[ClusterInfo], counts: Counter[str], r: int
) -> ClusterInfo | None:
    full = [c for c in clusters if c.healthy_hosts >= r]
    pool = full or [c for c in clusters if c.healthy_hosts >= quorum(r)]
    if not pool:
        return None
    return min(pool, key=lambda c: (counts[c.name], -hrw_score(pid, c.name), c.name))


def assign_queue(
    queue: str, partitions: int, r: int, fleet: Fleet
) -> dict[PartitionId, str]:
    """Clusters for partitions ``0..partitions-1`` of a new ``queue``.

    Partitions already assigned in ``fleet`` keep their cluster (so a retried
    create is idempotent). Raises :class:`Unavailable` when no cluster has a
    quorum of healthy hosts for R.
    """
    counts = Counter(fleet.assignments.values())
    clusters = sorted(fleet.clusters.values(), key=lambda c: c.name)
    out: dict[PartitionId, str] = {}
    for p in range(partitions):
        pid = PartitionId(queue, p)
        if pid in fleet.assignments:
            out[pid] = fleet.assignments[pid]
            continue
        chosen = _choose(pid, clusters, counts, r)
        if chosen is None:
            raise Unavailable(f"no cluster has {quorum(r)} healthy hosts for queue {queue!r}",
                              queue=queue, replication_factor=r)
        out[pid] = chosen.name
        counts[chosen.name] += 1
    return out


def below_quorum(fleet: Fleet) -> list[PartitionId]:
    """The partitions whose cluster has fewer healthy hosts than a majority of their R."""
    out = []
    for pid in sorted(fleet.assignments):
        info = fleet.clusters.get(fleet.assignments[pid])
        if info is None or info.healthy_hosts < quorum(fleet.replication.get(pid.queue, 1)):
            out.append(pid)
    return out


def _quorum_moves(fleet: Fleet, counts: Counter[str]) -> list[Action]:
    actions: list[Action] = []
    clusters = sorted(fleet.clusters.values(), key=lambda c: c.name)
    for pid in below_quorum(fleet):
        source = fleet.assignments[pid]
        r = fleet.replication.get(pid.queue, 1)
        if pid in fleet.holding:
            actions.append(CannotPlace(pid, f"cluster {source!r} lost quorum (too few of its hosts are "
                                            "passing and not drained); the partition holds records, "
                                            "so it stays there until a quorum of its hosts is back (or "
                                            "undrained; a move would leave its acknowledged messages "
                                            "behind)"))
            continue
        candidates = [c for c in clusters if c.name != source]
        target = _choose(pid, candidates, counts, r)
        if target is None:
            actions.append(CannotPlace(pid, f"cluster {source!r} lost quorum; no cluster can host"))
            continue
        actions.append(MovePartition(pid, source, target.name, "quorum_lost"))
        counts[source] -= 1
        counts[target.name] += 1
    return actions


def _heat_moves(
    fleet: Fleet, moved: set[PartitionId], factor: float, per_cluster: int
) -> list[Action]:
    loads = {n: c.load for n, c in fleet.clusters.items() if c.load > 0}
    if len(loads) < 2:
        return []
    mean = sum(loads.values()) / len(loads)
    actions: list[Action] = []
    for hot in sorted(n for n, v in loads.items() if v > factor * mean):
        mine = [p for p, c in fleet.assignments.items()
                if c == hot and p not in moved and p not in fleet.holding]
        mine.sort(key=lambda p: (fleet.partition_load.get(p, 0.0), p), reverse=True)
        for pid in mine[:per_cluster]:
            r = fleet.replication.get(pid.queue, 1)
            cool = [n for n, v in loads.items()
                    if v < mean and fleet.clusters[n].healthy_hosts >= r]
            if not cool:
                break
            target = min(cool, key=lambda n: (loads[n], n))
            share = fleet.partition_load.get(pid, 0.0)
            if loads[target] + share > factor * mean:
                continue
            actions.append(MovePartition(pid, hot, target, "overheated"))
            loads[target] += share
            loads[hot] -= share
    return actions


def rebalance(
    fleet: Fleet, *, overheat_factor: float = 1.5, moves_per_cluster: int = 1
) -> list[Action]:
    """Moves for partitions on clusters that lost quorum, then for overheated
    clusters (see the module rules). Deterministic for a given fleet."""
    assert overheat_factor > 1.0, "overheat_factor must exceed 1"
    counts = Counter(fleet.assignments.values())
    actions = _quorum_moves(fleet, counts)
    moved = {a.partition for a in actions}
    return actions + _heat_moves(fleet, moved, overheat_factor, moves_per_cluster)
