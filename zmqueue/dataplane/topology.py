"""What the control plane tells the data plane: plain values only (the data
plane never imports the control plane)."""

from __future__ import annotations

from dataclasses import dataclass, field

from zmqueue.config import QueueConfig
from zmqueue.errors import Unavailable
from zmqueue.protocol import FIFO_ORIGIN as FIFO_ORIGIN

PartKey = tuple[str, int]
StreamKey = tuple[str, int, str]


@dataclass(frozen=True)
class Peer:
    node: str
    client: str | None
    pub: str | None
    peer: str | None
    passing: bool


@dataclass(frozen=True)
class PartitionInfo:
    replicas: tuple[str, ...]
    writers: dict[str, str] = field(default_factory=dict)
    """origin -> node holding that stream's writer lock."""
    joining: tuple[str, ...] = ()
    """Replicas not caught up yet (``kvlayout.PartitionAssignment.joining``)."""
    leaving: tuple[str, ...] = ()
    previous: tuple[str, ...] = ()
    """A change of the voters in flight (``kvlayout.PartitionAssignment``)."""
    version: int = 0
    """The assignment's version (a writer confirms a change by it)."""


def config_unreadable(queue: str, why: str) -> Unavailable:
    """The answer about a queue in :attr:`Metadata.unreadable` (not "does not
    exist": an operator told so might create it anew). Unavailable: a client
    asks another host, which may still serve it with the last good value."""
    return Unavailable(f"queue {queue!r} cannot be served by this host: its config in Consul KV is not "
                       f"valid ({why}) and this host knows no earlier good value of it (it started since "
                       "the edit); fix the value in Consul", queue=queue)


@dataclass(frozen=True)
class Metadata:
    configs: dict[str, QueueConfig] = field(default_factory=dict)
    partitions: dict[PartKey, PartitionInfo] = field(default_factory=dict)
    peers: dict[str, Peer] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    """Queues whose config in Consul is malformed and of which this host knows
    no earlier good value (one started since the bad edit): what is wrong,
    to answer their requests with (not "does not exist")."""
    deleted: dict[str, int] = field(default_factory=dict)
    """queue -> the incarnation a DELETE_QUEUE deleted: only such a queue's
    data is removed (one that vanished otherwise keeps it on disk)."""

    def origins(self, key: PartKey) -> list[str]:
        """The streams of a partition: one for FIFO; otherwise one per replica,
        plus the streams of former replicas that still have a writer (their
        messages stay deliverable and get copied to new replicas)."""
        cfg = self.configs.get(key[0])
        info = self.partitions.get(key)
        if cfg is None or info is None:
            return []
        if cfg.fifo:
            return [FIFO_ORIGIN]
        return sorted(set(info.replicas) | {o for o in info.writers if o != FIFO_ORIGIN})

    def client_endpoint(self, node: str | None) -> str | None:
        peer = self.peers.get(node or "")
        return peer.client if peer is not None and peer.passing else None

    def peer_endpoint(self, node: str | None) -> str | None:
        peer = self.peers.get(node or "")
        return peer.peer if peer is not None else None

    def passing(self) -> set[str]:
        return {n for n, p in self.peers.items() if p.passing}

    def merged_with(self, older: Metadata) -> Metadata:
        """This state plus whatever ``older`` knew that this one lacks."""
        return Metadata({**older.configs, **self.configs}, {**older.partitions, **self.partitions},
                        {**older.peers, **self.peers}, self.unreadable, {**older.deleted, **self.deleted})
