"""Replica placement inside one cluster: pure rendezvous (HRW) hashing.

Rules (the internal cluster manager applies them; nothing here talks to Consul):

- **Eligible hosts** are the cluster's healthy hosts whose drain flag is off.
  A draining or unhealthy host gets no replicas and loses the ones it had.
- **Rank.** Every eligible host gets a score ``hrw_score(partition, node)``
  (a 64-bit BLAKE2b of queue, partition and node); higher ranks first. The
  rank of two hosts never depends on a third, which is what keeps movement
  small.
- **Zone spread.** When hosts carry a zone, replicas go to distinct zones
  first: the best-ranked host of each zone, zones taken in the order of
  their best host, until R replicas or the zones run out; remaining slots
  are filled by rank. Hosts with no zone share the zone ``""``, so with no
  zones at all this is plain HRW.
- **Fresh placement** (``current=None``) is a function of the eligible set
  only: deterministic, and when one host leaves only the replicas on that
  host move. When a host joins, a partition moves at most one replica, and
  only when HRW (with zone spread) now ranks the new host into its top R.
- **Sticky placement** (``current`` given, used by the internal manager)
  keeps every current replica that is still eligible, and fills the missing
  slots as fresh placement would, preferring zones not yet covered. A join
  then moves nothing; a leave or drain moves only the replicas of that host.
- If fewer than R hosts are eligible, every eligible host is a replica.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from zmqueue.controlplane.kvlayout import PartitionId


@dataclass(frozen=True)
class Host:
    """A cluster member as the service catalog and the drain flag show it."""

    node: str
    zone: str = ""
    healthy: bool = True
    draining: bool = False

    @property
    def eligible(self) -> bool:
        return self.healthy and not self.draining


@dataclass(frozen=True)
class Move:
    """A replica-set change for one partition: ``remove`` leave, ``add`` join,
    ``replicas`` is the new ordered set."""

    partition: PartitionId
    remove: tuple[str, ...]
    add: tuple[str, ...]
    replicas: tuple[str, ...]


def hrw_score(pid: PartitionId, node: str) -> int:
    """Rendezvous weight of ``node`` for ``pid``; stable across processes."""
    data = f"{pid.queue}\x00{pid.partition}\x00{node}".encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def _eligible(hosts: Iterable[Host]) -> dict[str, Host]:
    """Eligible hosts by node id (a node listed twice counts once; it is
    eligible only if every listing is)."""
    seen: dict[str, Host] = {}
    bad: set[str] = set()
    for h in hosts:
        if not h.eligible:
            bad.add(h.node)
        seen.setdefault(h.node, h)
    return {n: h for n, h in seen.items() if n not in bad}


def _ranked(pid: PartitionId, hosts: Iterable[Host]) -> list[Host]:
    return sorted(hosts, key=lambda h: (-hrw_score(pid, h.node), h.node))


def _fill(ranked: Sequence[Host], chosen: list[Host], r: int) -> list[Host]:
    """Add hosts from ``ranked`` to ``chosen`` until ``r``: first one per zone
    not yet covered (in rank order), then by rank."""
    out = list(chosen)
    zones = {h.zone for h in out}
    for h in ranked:
        if len(out) >= r:
            return out
        if h.zone not in zones and h not in out:
            out.append(h)
            zones.add(h.zone)
    for h in ranked:
        if len(out) >= r:
            break
        if h not in out:
            out.append(h)
    return out


def place(
    partition_id: PartitionId,
    hosts: Iterable[Host],
    r: int,
    current: Sequence[str] | None = None,
) -> tuple[str, ...]:
    """The ordered replica set of ``partition_id`` (see the module rules).

    ``r`` is the replication factor (>= 1). The result has ``min(r, number of
    eligible hosts)`` distinct eligible nodes. With ``current``, the kept
    replicas come first in their current order, then the new ones by rank.
    """
    assert r >= 1, f"replication factor must be >= 1, got {r}"
    eligible = _eligible(hosts)
    ranked = _ranked(partition_id, eligible.values())
    kept: list[Host] = []
    for node in current or ():
        host = eligible.get(node)
        if host is not None and host not in kept and len(kept) < r:
            kept.append(host)
    return tuple(h.node for h in _fill(ranked, kept, r))


def plan_moves(
    old_assignments: Mapping[PartitionId, Sequence[str]],
    new_hosts: Iterable[Host],
    replication: int | Mapping[str, int],
    *,
    sticky: bool = True,
) -> list[Move]:
    """The replica moves that bring every partition in line with ``new_hosts``.

    ``replication`` is one R for all, or R per queue name (default 1 for a
    queue not listed). Partitions whose replica set does not change yield no
    move. Sticky by default (the internal manager's mode). Moves are sorted by
    partition, so the plan is deterministic.
    """
    hosts = list(new_hosts)
    moves: list[Move] = []
    for pid in sorted(old_assignments):
        old = tuple(old_assignments[pid])
        r = replication if isinstance(replication, int) else replication.get(pid.queue, 1)
        new = place(pid, hosts, r, current=old if sticky else None)
        if new != old:
            remove = tuple(n for n in old if n not in new)
            add = tuple(n for n in new if n not in old)
            moves.append(Move(pid, remove, add, new))
    return moves
