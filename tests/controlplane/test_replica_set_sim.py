"""Replica-set changes and writer elections under random schedules: no
acknowledged record is lost.

A seeded model of one FIFO partition (R=3, sync) on a cluster of five
hosts, driven through the real planning and election rules: the internal
manager's round (``internal_manager.plan_internal``: placement, failed
replicas kept without a replacement, keepers, joining replicas) and
``leadership.may_campaign``. Hosts die, come back, are drained and
undrained; the writer appends; replicas copy the writer's log (a copy cuts
a diverged tail, as a resync does); a record is acknowledged once a
majority of the partition's current replicas hold it. Positions are those
each host published: alive hosts publish after every step, a dead host's
stay as they were when it died (the model leaves out the ~0.5 s staleness
of real positions, a documented gap). A new writer's recovery takes the
longest log among the replicas it can reach.

The property: the writer, once elected, holds every acknowledged record,
and after every host is back and the partition has settled, so does every
replica. Hypothesis prints a failing schedule, which replays it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zmqueue.config import QueueConfig
from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.discovery import HostInfo
from zmqueue.controlplane.internal_manager import plan_internal
from zmqueue.controlplane.leadership import Candidacy, may_campaign
from zmqueue.controlplane.queue_directory import Snapshot

NODES = ("a", "b", "c", "d")
PID = kv.PartitionId("q", 0)
CONFIG = QueueConfig(name="q", fifo=True, replication_factor=3, sync_replication=True)

Record = tuple[int, int]
"""(epoch, id)"""


@dataclass
class World:
    assignment: kv.PartitionAssignment = field(
        default_factory=lambda: kv.PartitionAssignment("c1", ("a", "b", "c"), 1))
    logs: dict[str, list[Record]] = field(default_factory=lambda: {n: [] for n in NODES})
    published: dict[str, kv.Position] = field(default_factory=dict)
    alive: set[str] = field(default_factory=lambda: set(NODES))
    drained: set[str] = field(default_factory=set)
    writer: str | None = None
    epoch: int = 0
    next_id: int = 0
    acked: set[int] = field(default_factory=set)
    history: list[str] = field(default_factory=list)

    # --- the rules under test ---------------------------------------------------------
    def manager_round(self) -> None:
        state = kv.ClusterState(configs={"q": CONFIG}, assignments={PID: self.assignment},
                                drains={n: True for n in self.drained})
        hosts = [HostInfo(n, "c1", "1", f"tcp://127.0.0.1:{i}", "passing" if n in self.alive else "critical")
                 for i, n in enumerate(NODES)]
        healthy = {n: n in self.alive for n in NODES}
        pos = {"fifo": dict(self.published)}
        for w in plan_internal(Snapshot(1, state, [], hosts), "c1", healthy, lambda pid: pos):
            self.history.append(f"assignment {w.assignment.replicas} joining {w.assignment.joining}")
            self.assignment = w.assignment
        if self.writer is not None and self.writer not in self.assignment.replicas:
            self.writer = None  # a host that left the set closes the stream: the lock is released

    def campaign(self, node: str) -> None:
        a = self.assignment
        if self.writer is not None or node not in self.alive or node not in a.replicas:
            return
        passing = self.alive & set(a.replicas)
        others = {n: p for n, p in self.published.items() if n != node}
        cand = Candidacy(a.replicas, None, a.joining)
        if not may_campaign(node, cand, passing, self.position(node), others):
            return
        # recovery: fetch what a reachable replica holds beyond this host's log (a
        # copy that extends it: catch-up checks the previous record's epoch)
        mine = self.logs[node]
        for n in a.replicas:
            theirs = self.logs[n]
            if n in self.alive and len(theirs) > len(mine) and theirs[:len(mine)] == mine:
                mine = list(theirs)
        self.logs[node] = mine
        self.writer, self.epoch = node, self.epoch + 1
        self.history.append(f"{node} writes at epoch {self.epoch} holding {len(self.logs[node])}")
        lacking = self.acked - {i for _, i in self.logs[node]}
        assert not lacking, f"{node} elected without acknowledged records {sorted(lacking)}: {self.history}"

    # --- the world ---------------------------------------------------------------------
    def send(self) -> None:
        if self.writer is None or self.writer not in self.alive:
            return
        self.next_id += 1
        self.logs[self.writer].append((self.epoch, self.next_id))

    def replicate(self, node: str) -> None:
        w = self.writer
        if w is None or w == node or node not in self.alive or node not in self.assignment.replicas:
            return
        self.logs[node] = list(self.logs[w])  # catch-up, or a resync of a diverged copy

    def kill(self, node: str) -> None:
        self.alive.discard(node)
        if self.writer == node:
            self.writer = None

    def settle_acks(self) -> None:
        """A writer acknowledges what a majority of the replicas hold and,
        while some are joining, a majority of the voters (``Stream.replicated_seq``)."""
        if self.writer is None:
            return
        mine = {i for _, i in self.logs[self.writer]}
        for group in (self.assignment.replicas, self.assignment.voters):
            held: dict[int, int] = {}
            for n in group:
                for _, i in self.logs[n]:
                    held[i] = held.get(i, 0) + 1
            mine &= {i for i, k in held.items() if k >= len(group) // 2 + 1}
        self.acked |= mine

    def position(self, node: str) -> kv.Position:
        log = self.logs[node]
        return kv.Position(log[-1][0], len(log)) if log else kv.ZERO

    def publish(self) -> None:
        for n in self.alive:
            self.published[n] = self.position(n)

    def apply(self, op: str, node: str) -> None:
        self.history.append(f"{op} {node}")
        if op == "send":
            self.send()
        elif op == "replicate":
            self.replicate(node)
        elif op == "kill":
            self.kill(node)
        elif op == "restart":
            self.alive.add(node)
        elif op == "drain":
            self.drained.add(node)
        elif op == "undrain":
            self.drained.discard(node)
        elif op == "round":
            self.manager_round()
        elif op == "campaign":
            self.campaign(node)
        self.settle_acks()
        self.publish()

    def settle(self) -> None:
        """Every host back, no drains; rounds, replication and elections until calm."""
        self.alive, self.drained = set(NODES), set()
        self.publish()
        for _ in range(12):
            self.manager_round()
            for n in NODES:
                self.campaign(n)
            for n in NODES:
                self.replicate(n)
            self.settle_acks()
            self.publish()


OPS = ("send", "send", "send", "replicate", "replicate", "replicate", "kill", "restart", "restart",
       "drain", "undrain", "round", "round", "campaign", "campaign")

schedules = st.lists(st.tuples(st.sampled_from(OPS), st.sampled_from(NODES)), min_size=20, max_size=120)


@settings(max_examples=3000, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(schedules)
def test_no_acknowledged_record_is_lost_across_replica_changes_and_elections(schedule):
    world = World()
    world.publish()
    world.campaign("a")
    for op, node in schedule:
        world.apply(op, node)
    world.settle()
    assert world.writer is not None, world.history
    for n in world.assignment.replicas:
        lacking = world.acked - {i for _, i in world.logs[n]}
        assert not lacking, f"{n} lacks acknowledged records {sorted(lacking)}: {world.history}"


def test_the_model_acknowledges_and_fails_over_in_a_calm_run():
    world = World()
    world.publish()
    world.campaign("a")
    for op, node in [("send", "a"), ("replicate", "b"), ("send", "a"), ("kill", "a"),
                     ("campaign", "c"), ("campaign", "b")]:
        world.apply(op, node)
    assert world.acked == {1} and world.writer == "b"
