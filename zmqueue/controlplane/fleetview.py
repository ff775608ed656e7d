"""What both managers see of the fleet: hosts per cluster, with a grace period
before a failing host counts as gone, and the assignment writes they plan.

A host whose checks fail for less than ``grace_s`` still counts as healthy,
so a short blip (a slow heartbeat on a loaded machine) does not move
replicas; a host that deregistered (a clean stop) is gone at once. A drain
flag acts at once too.
"""

from __future__ import annotations

from dataclasses import dataclass

from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.placement import Host
from zmqueue.controlplane.queue_directory import Snapshot

FAILOVER_GRACE_S = 3.0


@dataclass(frozen=True)
class AssignmentWrite:
    """Write ``assignment`` at ``key`` if the key's ModifyIndex is still
    ``index`` (0: only if the key is absent), and, when ``config_key`` is
    given, only if that key's ModifyIndex is still ``config_index``: a new
    partition's queue config as the plan read it (a queue deleted since
    gets no partition key back)."""

    key: str
    assignment: kv.PartitionAssignment
    index: int
    reason: str
    config_key: str = ""
    config_index: int = 0


class HealthGrace:
    """Turns check status into "counts as healthy", with a grace period."""

    def __init__(self, grace_s: float = FAILOVER_GRACE_S) -> None:
        self.grace_s = grace_s
        self.failing_since: dict[str, float] = {}

    def view(self, snap: Snapshot, now: float) -> dict[str, bool]:
        """node -> counts as healthy, for every registered host."""
        out: dict[str, bool] = {}
        for h in snap.hosts:
            if h.passing:
                self.failing_since.pop(h.node, None)
                out[h.node] = True
            else:
                since = self.failing_since.setdefault(h.node, now)
                out[h.node] = now - since < self.grace_s
        return out


def members(snap: Snapshot, cluster: str, healthy: dict[str, bool]) -> list[Host]:
    """The registered hosts of ``cluster`` as placement sees them."""
    return [Host(h.node, h.meta.get("zone", ""), healthy.get(h.node, False),
                 snap.state.drains.get(h.node, False))
            for h in snap.hosts if h.cluster == cluster]


def moved(old: kv.PartitionAssignment, cluster: str, replicas: tuple[str, ...],
          joining: tuple[str, ...] = ()) -> kv.PartitionAssignment:
    """The next version of ``old`` with a new cluster and replica set."""
    return kv.PartitionAssignment(cluster, replicas, old.version + 1, old.extra,
                                  tuple(n for n in joining if n in replicas))
