"""Election safety under random schedules: a seeded model of the Consul lock.

The model: three replicas, each running the pure election machine; one lock
(LockIndex grows on every acquisition, the session expires only after its TTL
passes without renewal); lock notifications are delivered to each node late
but in order; any node may grab a free lock (even one the machine did not
ask for, as a racing adapter could); a node writes and replicates only when
``can_write`` says so; replication copies the leader's log (Raft style,
truncating a divergent tail) unless the follower refuses the record's epoch;
position reports reach every machine at once (the adapter asks peers fresh).
Hypothesis prints the failing schedule, which replays it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zmqueue.controlplane import election as el
from zmqueue.controlplane.kvlayout import ZERO, Position

NODES = ("a", "b", "c")
LEASE_MS = 600
TTL_MS = 1000


def position(log: list[int]) -> Position:
    return Position(log[-1], len(log)) if log else ZERO


@dataclass
class World:
    machines: dict[str, el.ElectionState]
    logs: dict[str, list[int]] = field(default_factory=lambda: {n: [] for n in NODES})
    pending: dict[str, list[el.Event]] = field(default_factory=lambda: {n: [] for n in NODES})
    holder: str | None = None
    lock_index: int = 0
    session_deadline: int = 0
    now: int = 0
    leader_of_epoch: dict[int, str] = field(default_factory=dict)
    committed: list[tuple[int, ...]] = field(default_factory=list)
    committed_before: dict[int, list[tuple[int, ...]]] = field(default_factory=dict)
    """Commits made before the lock of each epoch was taken: that leader must
    hold them (later commits are the later leaders' business)."""

    @classmethod
    def start(cls) -> World:
        w = cls({n: el.ElectionState(n, NODES, LEASE_MS) for n in NODES})
        for n in NODES:
            w.report(n)
        return w

    def step(self, node: str, event: el.Event) -> None:
        self.machines[node], actions = el.step(self.machines[node], event)
        for action in actions:
            self.carry_out(node, action)

    def carry_out(self, node: str, action: el.Action) -> None:
        match action:
            case el.BecomeLeader(epoch=e):
                assert self.leader_of_epoch.setdefault(e, node) == node, "two leaders, one epoch"
                for prefix in self.committed_before[e]:
                    assert tuple(self.logs[node][: len(prefix)]) == prefix, "leader lacks commits"
            case el.Commit(position=pos):
                log = self.logs[node]
                assert pos.seq <= len(log) and log[pos.seq - 1] == pos.epoch
                self.committed.append(tuple(log[: pos.seq]))
                for other in NODES:
                    if other != node:
                        self.pending[other].append(el.CommitAdvanced(pos.epoch, pos.seq))
            case el.ReleaseLock():
                if self.holder == node:
                    self.free_lock()

    def free_lock(self) -> None:
        self.holder = None
        for n in NODES:
            self.pending[n].append(el.LockLost(self.lock_index))

    def report(self, node: str) -> None:
        pos = position(self.logs[node])
        for n in NODES:
            self.step(n, el.PositionReported(node, pos.epoch, pos.seq))

    def apply(self, op: int, k: str, j: str, dt: int) -> None:
        if op == 0:
            self.now += dt
            self.step(k, el.Tick(self.now))
        elif op == 1 and self.holder is None:
            self.lock_index += 1
            self.holder, self.session_deadline = k, self.now + TTL_MS
            self.committed_before[self.lock_index] = list(self.committed)
            for n in NODES:
                self.pending[n].append(el.LockAcquired(k, self.lock_index, at_ms=self.now))
        elif op == 2 and self.pending[k]:
            self.step(k, self.pending[k].pop(0))
        elif op == 3 and self.holder is not None:
            self.session_deadline = self.now + TTL_MS
            self.step(self.holder, el.SessionRenewed(self.now, self.lock_index))
        elif op == 4 and self.holder is not None and self.now >= self.session_deadline:
            self.pending[self.holder].append(el.SessionExpired())
            self.free_lock()
        elif op == 5 and el.can_write(self.machines[k], self.now):
            self.logs[k].append(self.machines[k].epoch)
            self.report(k)
        elif op == 6 and k != j and el.can_write(self.machines[k], self.now):
            self.replicate(k, j)
        elif op == 7:
            self.deliver_all()
        elif op == 8 and self.holder is not None:
            self.now = max(self.now, self.session_deadline)
            self.apply(4, k, j, 0)

    def deliver_all(self) -> None:
        while any(self.pending.values()):
            for n in NODES:
                if self.pending[n]:
                    self.step(n, self.pending[n].pop(0))

    def replicate(self, leader: str, follower: str) -> None:
        before = self.machines[follower]
        self.machines[follower], actions = el.step(
            before, el.RecordArrived(leader, self.machines[leader].epoch))
        for action in actions:
            self.carry_out(follower, action)
        if not any(isinstance(a, el.RefuseWrite) for a in actions):
            self.logs[follower] = list(self.logs[leader])
            self.report(follower)

    def check(self) -> None:
        writers = [n for n in NODES if el.can_write(self.machines[n], self.now)]
        assert len(writers) <= 1, f"two nodes may write at once: {writers}"


OPS = (0, 0, 1, 2, 2, 3, 4, 5, 5, 6, 6, 6, 7, 8)
"""Op codes, weighted: tick, acquire, deliver one, renew, expire, append,
replicate, deliver all, jump past the session TTL and expire."""

schedules = st.lists(
    st.tuples(st.sampled_from(OPS), st.sampled_from(NODES), st.sampled_from(NODES),
              st.integers(0, 500)),
    min_size=40,
    max_size=200,
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(schedules)
def test_no_two_leaders_share_an_epoch_and_no_leader_lacks_a_committed_record(schedule):
    world = World.start()
    for op, k, j, dt in schedule:
        world.apply(op, k, j, dt)
        world.check()


def test_the_model_elects_a_leader_and_commits_in_a_calm_run():
    world = World.start()
    world.apply(0, "a", "a", 10)  # a campaigns
    world.apply(1, "a", "a", 0)   # and takes the lock
    for n in NODES:
        world.apply(2, n, n, 0)
    world.apply(5, "a", "a", 0)
    world.apply(6, "a", "b", 0)
    assert world.leader_of_epoch == {1: "a"}
    assert world.committed == [(1,)]
