"""Replica-set changes and writer elections under random schedules: no
acknowledged record is lost.

A seeded model of one partition (R=3, sync) on a cluster of four hosts,
driven through the real planning and election rules: the internal
manager's round (``internal_manager.plan_internal``: placement, failed
replicas kept without a replacement, keepers, joining replicas),
``writer_election.may_campaign`` and the hand-back rule (``preferred_serves``
and the positions). A FIFO partition has one stream; a standard one, one
per origin (here the three first replicas: each prefers its origin as
writer and is taken over while it is down, then handed back). Hosts die (or
stop cleanly and deregister), come back, are drained and undrained; an
operator changes R (1-3); writers append; replicas catch up with a
writer's log or receive its latest record alone (PUB/SUB: applied when it
extends the copy, a gap waits for a catch-up); a copy that diverged is cut
back to what it shares with the writer (``keep_after_divergence``, as a
resync does) and the rest follows; a host that
takes over a stream whose log is not empty appends a record of its epoch
(``RecordType.EPOCH``, no message; ``Handover._mark_epoch``); a record is
acknowledged once a majority of the partition's replicas hold it and, while
some are joining, a majority of the voters (``Stream.replicated_seq``).
The elections and the managers' rounds read the positions each host last
published (a ``publish`` step, as a host's leadership cycle does every 0.5
s; with the release of the lock it saw free, ``seen``), so a host that dies
keeps the position it published before its last records; a clean stop
publishes first. Each host acts on the assignment it last learned (a
``learn`` step, as its metadata watch does): a writer acknowledges by its
view's rule, and a change of the voters goes through a joint set that each
stream's writer confirms (published with its position) once a majority of
the new voters holds what it held when it learned the change
(``Stream.confirmation``); the manager ends the change when every stream is
confirmed. A new writer's recovery takes a reachable replica's log that
extends its own.

The property: a writer, once elected, holds every acknowledged record of
its stream, and after every host is back and the partition has settled, so
does every replica. Hypothesis prints a failing schedule, which replays it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zmqueue.config import QueueConfig
from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.discovery import HostInfo
from zmqueue.controlplane.internal_manager import plan_internal
from zmqueue.controlplane.queue_directory import Snapshot
from zmqueue.controlplane.writer_election import Candidacy, may_campaign, preferred_serves
from zmqueue.dataplane.replication import keep_after_divergence

NODES = ("a", "b", "c", "d")
PID = kv.PartitionId("q", 0)

Record = tuple[int, int]
"""(epoch, id)"""


@dataclass
class Stream:
    preferred: str | None
    logs: dict[str, list[Record]] = field(default_factory=lambda: {n: [] for n in NODES})
    published: dict[str, kv.Position] = field(default_factory=dict)
    """What each host's leadership cycle last published (the elections' and the managers' view)."""
    confirm: tuple[int, int] | None = None
    """The writer's (version, seq) to confirm (``Stream.confirmation``)."""
    confirmed: dict[str, int] = field(default_factory=dict)
    """The confirmations each host published as the stream's writer."""
    writer: str | None = None
    epoch: int = 0
    acked: set[int] = field(default_factory=set)
    released: int = 0
    """Consul's index when the lock was last released (0: never held)."""
    seen: dict[str, int] = field(default_factory=dict)
    """The release each host's last published position was taken after."""

    def position(self, node: str) -> kv.Position:
        log = self.logs[node]
        return kv.Position(log[-1][0], len(log)) if log else kv.ZERO


@dataclass
class World:
    fifo: bool
    assignment: kv.PartitionAssignment = field(
        default_factory=lambda: kv.PartitionAssignment("c1", ("a", "b", "c"), 1))
    streams: dict[str, Stream] = field(default_factory=dict)
    alive: set[str] = field(default_factory=lambda: set(NODES))
    registered: set[str] = field(default_factory=lambda: set(NODES))
    """A clean stop deregisters a host (it is gone at once); a kill leaves it registered."""
    drained: set[str] = field(default_factory=set)
    r: int = 3
    next_id: int = 0
    index: int = 0
    """Consul's raft index: every release of a lock moves it."""
    history: list[str] = field(default_factory=list)
    views: dict[str, kv.PartitionAssignment] = field(default_factory=dict)
    """The assignment each host last learned."""

    def __post_init__(self) -> None:
        origins = ["fifo"] if self.fifo else list(self.assignment.replicas)
        self.streams = {o: Stream(None if self.fifo else o) for o in origins}
        self.views = {n: self.assignment for n in NODES}
        for n in NODES:
            self.publish(n)
        for o, s in self.streams.items():
            self.campaign(o, s.preferred or "a")

    def stream_for(self, node: str) -> tuple[str, Stream]:
        origin = "fifo" if self.fifo else ("abc"[NODES.index(node) % 3])
        return origin, self.streams[origin]

    # --- the rules under test ---------------------------------------------------------
    def manager_round(self) -> None:
        cfg = QueueConfig(name="q", fifo=self.fifo, replication_factor=self.r, sync_replication=True)
        state = kv.ClusterState(configs={"q": cfg}, assignments={PID: self.assignment},
                                drains={n: True for n in self.drained})
        hosts = [HostInfo(n, "c1", "1", f"tcp://127.0.0.1:{i}", "passing" if n in self.alive else "critical")
                 for i, n in enumerate(NODES) if n in self.registered]
        healthy = {n: n in self.alive for n in NODES}
        pos = {o: dict(s.published) for o, s in self.streams.items()}
        conf = {o: dict(s.confirmed) for o, s in self.streams.items()}
        for o, s in self.streams.items():  # (the leader keys: a held lock)
            if s.writer is not None:
                state.stream_leaders[(PID, o)] = kv.LeaderRecord(s.writer, "", s.epoch)
        for w in plan_internal(Snapshot(1, state, [], hosts), "c1", healthy, lambda pid: pos,
                               lambda pid: conf):
            a = w.assignment
            self.history.append(f"assignment {a.replicas} joining {a.joining} leaving {a.leaving} "
                                f"previous {a.previous}")
            self.assignment = a

    def learn(self, node: str) -> None:
        """``node``'s metadata watch delivers the current assignment."""
        a = self.assignment
        if node not in self.alive or self.views[node] == a:
            return
        self.views[node] = a
        for s in self.streams.values():
            if s.writer == node:
                if node not in a.replicas:
                    self.release(s)  # a host that left the set closes the stream: the lock is released
                elif a.previous:
                    s.confirm = (a.version, len(s.logs[node]))

    def candidacy(self, s: Stream, node: str) -> Candidacy:
        a = self.views[node]
        return Candidacy(a.replicas, s.preferred, a.joining, True, a.leaving, a.previous)

    def campaign(self, origin: str, node: str) -> None:
        s = self.streams[origin]
        a = self.views[node]
        if s.writer is not None or node not in self.alive or node not in a.replicas:
            return
        passing = self.alive & set(a.replicas)
        others = {n: p for n, p in s.published.items() if n != node}
        confirmed = {n for n, i in s.seen.items() if i >= s.released} if s.released else None
        if not may_campaign(node, self.candidacy(s, node), passing, s.position(node), others, confirmed):
            return
        # recovery: fetch what a reachable replica holds beyond this host's log (a
        # copy that extends it: catch-up checks the previous record's epoch)
        mine = s.logs[node]
        for n in a.replicas:
            theirs = s.logs[n]
            if n in self.alive and len(theirs) > len(mine) and theirs[:len(mine)] == mine:
                mine = list(theirs)
        s.logs[node] = mine
        s.writer, s.epoch = node, s.epoch + 1
        if mine and mine[-1][0] < s.epoch:  # the takeover record (RecordType.EPOCH), no message
            mine.append((s.epoch, 0))
        s.confirm = (a.version, len(mine)) if a.previous else None
        self.history.append(f"{node} writes {origin} at epoch {s.epoch} holding {len(mine)}")
        lacking = s.acked - {i for _, i in mine}
        assert not lacking, f"{node} elected without acknowledged records {sorted(lacking)}: {self.history}"

    def hand_back(self, origin: str) -> None:
        """The holder releases a stream whose origin is back, a voter, and caught up."""
        s = self.streams[origin]
        w, pref = s.writer, s.preferred
        if w is None or pref is None or w == pref or w not in self.alive:
            return
        caught_up = s.published.get(pref, kv.ZERO) >= s.position(w)
        if preferred_serves(self.candidacy(s, w), self.alive) and caught_up:
            self.history.append(f"{w} hands {origin} back")
            self.release(s)

    # --- the world ---------------------------------------------------------------------
    def send(self, node: str) -> None:
        _, s = self.stream_for(node)
        if s.writer is None or s.writer not in self.alive:
            return
        self.next_id += 1
        s.logs[s.writer].append((s.epoch, self.next_id))

    def replicate(self, node: str) -> None:
        """A catch-up from the writer: it extends a copy that is a prefix of the writer's
        log; a diverged copy is cut back to what it shares with the writer (``resync``
        with ``keep``) and the rest follows."""
        for s in self._copies(node):
            self._resync(s, node)
            s.logs[node] += s.logs[s.writer][len(s.logs[node]):]  # type: ignore[index]

    def tail(self, node: str) -> None:
        """The writer's latest record reaches a replica by PUB/SUB, with ``prev``: applied
        when it extends the copy; a gap (an empty copy included) waits for a catch-up; a
        copy whose last record the block or ``prev`` contradicts is cut back (resync)."""
        for s in self._copies(node):
            mine, theirs = s.logs[node], s.logs[s.writer]  # type: ignore[index]
            seq, last = len(theirs), len(mine)  # the block's seq; the copy's last seq
            if last and seq in (last, last + 1) and theirs[last - 1][0] != mine[-1][0]:
                self._resync(s, node)  # prev, or the block itself, contradicts it: a catch-up
            elif seq == last + 1:
                mine.append(theirs[-1])

    def _copies(self, node: str) -> list[Stream]:
        return [s for s in self.streams.values() if s.writer is not None and s.writer != node
                and node in self.alive and node in self.views[node].replicas]

    def _resync(self, s: Stream, node: str) -> None:
        """The catch-up's ``prev`` check, as the writer answers it (``keep_after_divergence``):
        cut the copy back until its last record is of the epoch of the writer's at that seq."""
        mine, theirs = s.logs[node], s.logs[s.writer]  # type: ignore[index]
        while mine and (len(mine) > len(theirs) or theirs[len(mine) - 1][0] != mine[-1][0]):
            epoch_at = {seq: r[0] for seq, r in enumerate(theirs, 1)}.get
            keep = keep_after_divergence(mine[-1][0], len(mine), len(theirs), 1, epoch_at)
            self.history.append(f"{node} resyncs, keeping {keep} of {len(mine)}")
            del mine[keep:]

    def kill(self, node: str) -> None:
        self.alive.discard(node)
        for s in self.streams.values():
            if s.writer == node:
                self.release(s)

    def release(self, s: Stream) -> None:
        self.index += 1
        s.writer, s.released = None, self.index

    def settle_acks(self) -> None:
        """A writer acknowledges by its view: a majority of the replicas (the
        leaving ones aside), of the voters, and while a change is in flight,
        of the previous voters."""
        for s in self.streams.values():
            if s.writer is None:
                continue
            mine = {i for _, i in s.logs[s.writer]}
            a = self.views[s.writer]
            for group in (a.target, a.voters, a.previous):
                if not group:
                    continue
                held: dict[int, int] = {}
                for n in group:
                    for _, i in s.logs[n]:
                        held[i] = held.get(i, 0) + 1
                mine &= {i for i, k in held.items() if k >= len(group) // 2 + 1}
            s.acked |= mine - {0}

    def publish(self, node: str) -> None:
        """``node``'s leadership cycle publishes its positions; a stream whose lock it
        sees free is published with that release (``seen``)."""
        if node not in self.alive:
            return
        for s in self.streams.values():
            s.published[node] = s.position(node)
            if s.writer is None:
                s.seen[node] = s.released
            a = self.views[node]
            if s.writer == node and s.confirm is not None and s.confirm[0] == a.version:
                held = sorted((len(s.logs[n]) for n in a.voters or a.replicas), reverse=True)
                if held[len(held) // 2] >= s.confirm[1]:
                    s.confirmed[node] = a.version

    def apply(self, op: str, node: str) -> None:
        self.history.append(f"{op} {node}")
        if op == "send":
            self.send(node)
        elif op == "replicate":
            self.replicate(node)
        elif op == "tail":
            self.tail(node)
        elif op == "kill":
            self.kill(node)
        elif op == "restart":  # (a host reads the assignment as it starts)
            self.alive.add(node)
            self.registered.add(node)
            self.views[node] = self.assignment
        elif op == "stop":  # a clean stop: the host publishes its positions and deregisters
            self.publish(node)
            self.kill(node)
            self.registered.discard(node)
        elif op == "r":  # an operator edits the replication factor in KV: 1, 2 or 3
            self.r = 1 + NODES.index(node) % 3
        elif op == "drain":
            self.drained.add(node)
        elif op == "undrain":
            self.drained.discard(node)
        elif op == "round":
            self.manager_round()
        elif op == "campaign":
            for o in self.streams:
                self.campaign(o, node)
        elif op == "hand_back":
            for o in self.streams:
                self.hand_back(o)
        elif op == "publish":
            self.publish(node)
        elif op == "learn":
            self.learn(node)
        self.settle_acks()

    def settle(self) -> None:
        """Every host back, no drains; rounds, replication, elections, hand-backs until calm."""
        self.alive, self.registered, self.drained, self.r = set(NODES), set(NODES), set(), 3
        for _ in range(12):
            for n in NODES:
                self.learn(n)
            for n in NODES:
                self.publish(n)
            self.manager_round()
            for n in NODES:
                self.learn(n)
            for o in self.streams:
                self.hand_back(o)
                for n in NODES:
                    self.campaign(o, n)
            for n in NODES:
                self.replicate(n)
            self.settle_acks()


OPS = ("send", "send", "send", "replicate", "replicate", "tail", "tail", "kill", "restart", "restart",
       "drain", "undrain", "round", "round", "campaign", "campaign", "hand_back", "stop", "r",
       "publish", "publish", "publish", "learn", "learn")

schedules = st.lists(st.tuples(st.sampled_from(OPS), st.sampled_from(NODES)), min_size=20, max_size=120)


def check(world: World, schedule: list[tuple[str, str]]) -> None:
    for op, node in schedule:
        world.apply(op, node)
    world.settle()
    for origin, s in world.streams.items():
        assert s.writer is not None, (origin, world.history)
        for n in world.assignment.replicas:
            lacking = s.acked - {i for _, i in s.logs[n]}
            assert not lacking, f"{n} lacks acknowledged {sorted(lacking)} of {origin}: {world.history}"


# derandomize: the same schedules in every run, so CI says the same thing each time (a random
# run found the schedule below; 30,000 FIFO and 20,000 standard random schedules passed after
# the fix in the thirty-fifth session)
@settings(max_examples=2000, suppress_health_check=[HealthCheck.too_slow], deadline=None,
          derandomize=True)
@given(schedules)
def test_no_acknowledged_record_is_lost_across_replica_changes_and_elections_fifo(schedule):
    check(World(fifo=True), schedule)


TAKEOVER_WITHOUT_RECORD = [("send", "a")] * 12 + [
    ("stop", "a"), ("campaign", "b"), ("send", "a"), ("restart", "a"),
    ("r", "a"), ("round", "a"), ("campaign", "a"), ("kill", "a")]
"""Found by a random run of the FIFO property in the thirty-fourth session's CI: a writes 12
records that no majority holds and stops; b is elected (epoch 2) and writes one record; R goes
to 1 with a the only replica, a is elected (epoch 3) and its 12 records count as acknowledged
(held by the whole set of one; a resent FIFO send is answered by dedup); a dies, R goes back
to 3 with b and c joining, and b's copy, whose last record is of epoch 2, compares as ahead of
a's, whose last record is of epoch 1, so b was elected without them. Positions compare by the
epoch of the last *record*, and a writer that took over wrote none of its own epoch; since the
thirty-fifth session it does (RecordType.EPOCH, Raft's no-op entry), so a's log ends with a
record of epoch 3 and outranks b's."""


def test_a_writer_that_took_over_is_not_outranked_by_an_older_writers_copy():
    world = World(fifo=True)
    check(world, TAKEOVER_WITHOUT_RECORD)
    assert set(range(1, 13)) <= world.streams["fifo"].acked  # the schedule acknowledged a's 12


RESYNC_WIPED_ACKNOWLEDGED = [("send", "a"), ("tail", "c")] * 5 + [
    ("send", "a"), ("kill", "a"), ("publish", "b"), ("campaign", "c"), ("restart", "a"), ("tail", "a"),
    ("kill", "c"), ("publish", "b"), ("campaign", "a")]
"""Found once replicas in the model could receive the writer's latest block alone
(the ``tail`` op, thirty-sixth session): a writes 6 records, c holds the first 5
(acknowledged: a and c are a majority) and b none; a dies, c takes over (its
takeover record is seq 6, of epoch 2); a comes back with its sixth record, of epoch
1, hears c's block whose ``prev`` contradicts it and resynced by dropping its whole
copy; c dies before a fetched it again, and a, elected with an empty copy, lacked
records 1-5. A diverged copy is now cut back to what it shares with the writer
(``keep_after_divergence``): a keeps 5 and is elected with them. (Since the
thirty-seventh session b publishes its position before each election: a candidate
needs enough voters' positions published since the lock's release.)"""


def test_a_resync_keeps_the_acknowledged_records_the_copy_shares_with_its_writer():
    world = World(fifo=True)
    check(world, RESYNC_WIPED_ACKNOWLEDGED)
    assert world.streams["fifo"].acked >= {1, 2, 3, 4, 5}
    assert "a resyncs, keeping 5 of 6" in world.history


TWO_OF_THREE_KILLED_AFTER_AN_ACK = [("send", "a"), ("tail", "b"), ("kill", "a"), ("kill", "b"),
                                    ("publish", "c"), ("campaign", "c")]
"""a writes record 1 and b receives it (acknowledged: a and b are a majority);
both die before either published a position holding it. c, the survivor, saw
positions that held nothing, held as much, and was elected without the record
(the ~0.5 s staleness of published positions, a gap documented until the
thirty-seventh session). Now a candidate counts only positions published since
the lock's release, which with itself must meet every ack quorum (2 of 3), as a
Raft candidate needs a majority's votes: c waits until a or b is back."""


def test_a_survivor_is_not_elected_on_positions_its_dead_peers_published_before_an_ack():
    world = World(fifo=True)
    check(world, TWO_OF_THREE_KILLED_AFTER_AN_ACK)
    s = world.streams["fifo"]
    assert s.acked == {1}
    assert "c writes fifo at epoch 2 holding 0" not in world.history


def test_the_takeover_record_is_of_the_new_writers_epoch_and_only_on_a_log_that_is_not_empty():
    world = World(fifo=True)  # a was elected on an empty log: no record
    s = world.streams["fifo"]
    assert s.logs["a"] == []
    for op, node in [("send", "a"), ("replicate", "b"), ("kill", "a"), ("publish", "c"), ("campaign", "b")]:
        world.apply(op, node)
    assert s.writer == "b" and s.logs["b"] == [(1, 1), (2, 0)]


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow], deadline=None,
          derandomize=True)
@given(schedules)
def test_no_acknowledged_record_is_lost_across_replica_changes_and_elections_standard(schedule):
    check(World(fifo=False), schedule)


def test_the_model_acknowledges_and_fails_over_in_a_calm_run():
    world = World(fifo=True)
    for op, node in [("send", "a"), ("replicate", "b"), ("send", "a"), ("kill", "a"),
                     ("publish", "b"), ("publish", "c"), ("campaign", "c"), ("campaign", "b")]:
        world.apply(op, node)
    assert world.streams["fifo"].acked == {1} and world.streams["fifo"].writer == "b"


def test_the_model_hands_a_standard_stream_back_to_its_origin():
    world = World(fifo=False)
    assert {o: s.writer for o, s in world.streams.items()} == {"a": "a", "b": "b", "c": "c"}
    for op, node in [("send", "a"), ("replicate", "b"), ("kill", "a"), ("publish", "c"), ("campaign", "b"),
                     ("send", "a"), ("replicate", "c"), ("restart", "a"), ("replicate", "a"),
                     ("publish", "a"), ("hand_back", "a"), ("publish", "b"), ("campaign", "a")]:
        world.apply(op, node)
    s = world.streams["a"]
    assert s.writer == "a" and s.acked == {1, 2} and s.epoch == 3


DRAINED_RIGHT_AFTER_AN_ACK = [("r", "a"), ("round", "a"), ("learn", "a"), ("publish", "a"), ("round", "a"),
                              ("learn", "a"), ("send", "a"), ("send", "a"), ("drain", "a"), ("round", "a"),
                              ("learn", "b"), ("learn", "a"), ("campaign", "b")]
"""R goes to 1 (a alone) and a acknowledges two sends alone; its position was
last published before them, so the manager, asked to drain a, read a
partition without records and moved it to b at once; a closed the stream,
and b, elected with an empty copy, lacked both (the ~0.5 s staleness of
published positions, a gap documented until the thirty-eighth session). Now
a change of the voters goes through a joint set (b a voter, a leaving,
``previous`` = (a,)): a stays the writer and confirms once b holds what it
held when it learned the change; only then does the manager drop a."""


def test_a_drain_right_after_an_ack_keeps_the_record_through_a_joint_set():
    world = World(fifo=True)
    check(world, DRAINED_RIGHT_AFTER_AN_ACK)
    s = world.streams["fifo"]
    assert s.acked == {1, 2}
    assert "assignment ('b', 'a') joining () leaving ('a',) previous ('a',)" in world.history
    assert "assignment ('b',) joining () leaving () previous ()" in world.history  # confirmed, a left
    assert "b writes fifo at epoch 2 holding 3" in world.history  # both records and its takeover record
