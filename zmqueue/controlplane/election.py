"""FIFO partition leader election: a pure state machine, one per (host, partition).

**The hosts do not run this module**: they run :mod:`zmqueue.controlplane.writer_election`
(from :mod:`zmqueue.controlplane.leadership`), whose campaign rule is simpler
(positions as (epoch, seq) too; the preferred writer, or a replica at least
as far along as every healthy one, and after a synchronous stream's release
one that heard enough voters' positions published since; no majority support
asked of an asynchronous stream's candidate). This is the stricter rule set below, kept with
its simulation tests (``tests/controlplane/test_election*.py``) as the
reference a future writer_election.py should move to; docs/CONSUL_KV.md says
where the two differ.

``step(state, event) -> (state, actions)``. The Consul adapter turns lock
watches, session renewals and peer position reports into events, and carries
out the actions (acquire or release the lock, tell the data plane to lead,
follow or fence). Nothing here does I/O or reads a clock.

Rules:

- **Epoch** = the partition lock's Consul ``LockIndex``; it only grows. An
  event about an older epoch than the one known is stale and ignored.
- **Positions** are (epoch, seq), compared lexicographically (the last
  record's epoch first, as Raft compares logs).
- **Committed position.** The leader counts a position committed when a
  majority of the replicas are at that position or past it *within the
  current epoch*: only a replica whose position carries the leader's epoch
  holds the leader's log (only the leader writes records of its epoch); a
  replica at another epoch counts as zero, and one at a newer epoch deposes
  the leader. So a leader never commits an older term's records by counting;
  it first writes a record of its own epoch. Followers learn the committed
  position from the leader (``CommitAdvanced``).
- **Campaign.** A replica may try to take the lock only when the lock is
  free, its position is at or past the committed position
  (:func:`may_campaign`) and at or past the positions of a majority of the
  replicas it has fresh reports from (:func:`has_majority_support`, Raft's
  vote rule: any committed record is on a majority, so such a candidate has
  it). The adapter feeds fresh positions (asked of peers on the catch-up
  channel) before acting on ``Campaign``.
- **Acquired while behind.** If the lock is acquired anyway (a race with a
  commit), the node does not lead: it releases the lock at once. Same when
  the acquisition is seen only after its lease would already be over.
- **Lease.** A leader leads until ``lease deadline = time the last
  acquire/renew request was sent + lease_ms``; ``lease_ms`` is chosen a
  margin below the session's check TTL, so the leader stops before Consul
  could hand the lock to anyone else. Past the deadline it steps down and
  releases. The data plane also checks :func:`can_write` before each write.
- **Fencing.** A record of an epoch older than the current one is refused
  (:func:`is_stale`); a record of a newer epoch reveals a newer leader, so a
  leader steps down and everyone fences at the newer epoch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

from zmqueue.config import acks_needed
from zmqueue.controlplane.kvlayout import ZERO, Position, voters_of


class Role(Enum):
    FOLLOWER = "follower"
    LEADER = "leader"


@dataclass(frozen=True)
class ElectionState:
    """One host's view of one partition's leadership. Never mutated."""

    me: str
    replicas: tuple[str, ...]
    lease_ms: int
    role: Role = Role.FOLLOWER
    leader: str | None = None
    epoch: int = 0
    positions: Mapping[str, Position] = field(default_factory=dict)
    committed: Position = ZERO
    now_ms: int = 0
    lease_deadline_ms: int = 0


# ---- events -------------------------------------------------------------------


@dataclass(frozen=True)
class LockAcquired:
    """``node`` took the lock; ``lock_index`` is its LockIndex. ``at_ms``: when
    the acquire request was sent (only meaningful when ``node`` is me)."""

    node: str
    lock_index: int
    at_ms: int = 0


@dataclass(frozen=True)
class LockLost:
    """The lock of term ``epoch`` is free now (released or session gone)."""

    epoch: int


@dataclass(frozen=True)
class SessionExpired:
    """My own Consul session is gone: I hold no lock."""


@dataclass(frozen=True)
class SessionRenewed:
    """A renewal sent at ``at_ms`` of the session that took the lock at
    ``epoch`` succeeded; extends the lease of that term only (a renewal of a
    newer session must not revive an older term)."""

    at_ms: int
    epoch: int


@dataclass(frozen=True)
class PositionReported:
    node: str
    epoch: int
    seq: int


@dataclass(frozen=True)
class CommitAdvanced:
    """The leader says records up to (epoch, seq) are committed."""

    epoch: int
    seq: int


@dataclass(frozen=True)
class RecordArrived:
    """A replication record of ``epoch`` arrived from ``node``."""

    node: str
    epoch: int


@dataclass(frozen=True)
class Tick:
    now_ms: int


Event = (LockAcquired | LockLost | SessionExpired | SessionRenewed | PositionReported
         | CommitAdvanced | RecordArrived | Tick)


# ---- actions ------------------------------------------------------------------


@dataclass(frozen=True)
class BecomeLeader:
    epoch: int


@dataclass(frozen=True)
class StepDown:
    epoch: int
    reason: str


@dataclass(frozen=True)
class Fence:
    """Refuse every record of an epoch below ``epoch`` from now on."""

    epoch: int


@dataclass(frozen=True)
class Follow:
    leader: str
    epoch: int


@dataclass(frozen=True)
class Campaign:
    """Try to acquire the lock (the adapter's ``kv.put(acquire=session)``)."""


@dataclass(frozen=True)
class ReleaseLock:
    reason: str


@dataclass(frozen=True)
class RefuseWrite:
    record_epoch: int
    current_epoch: int


@dataclass(frozen=True)
class Commit:
    """Leader only: records up to ``position`` are committed; ack them."""

    position: Position


Action = BecomeLeader | StepDown | Fence | Follow | Campaign | ReleaseLock | RefuseWrite | Commit


# ---- rules --------------------------------------------------------------------


def is_stale(record_epoch: int, current_epoch: int) -> bool:
    """A record from an older leadership term must be refused."""
    return record_epoch < current_epoch


def may_campaign(my_pos: Position, committed_pos: Position) -> bool:
    """Only a replica that has every committed record may lead."""
    return my_pos >= committed_pos


def majority(n: int) -> int:
    return acks_needed(n, "majority")


def quorum_position(positions: Mapping[str, Position], replicas: Iterable[str],
                    sync_quorum: str = "majority") -> Position:
    """The highest position a majority of ``replicas`` (all of them with
    ``sync_quorum="all"``) has reached (unknown = 0)."""
    reps = list(dict.fromkeys(replicas))
    if not reps:
        return ZERO
    ranked = sorted((positions.get(r, ZERO) for r in reps), reverse=True)
    return ranked[acks_needed(len(reps), sync_quorum) - 1]


def voters_hold(positions: Mapping[str, Position], replicas: Iterable[str], joining: Iterable[str] = (),
                sync: bool = True, sync_quorum: str = "majority") -> Position:
    """What a replica must hold of one stream to be safe to lead it or to
    keep in its replica set: what a majority of the *voters* (``replicas``
    not ``joining``) has reached, down ones by their last published
    positions; when every replica is joining, what the most advanced holds.
    ``sync=False`` (an async ack is the writer's alone): of one or two
    voters, what the most advanced holds too. ``sync_quorum="all"`` (every
    voter held each acknowledged record): what all of them have reached."""
    reps = list(dict.fromkeys(replicas))
    voters = voters_of(reps, joining)
    if not voters or (not sync and len(voters) <= 2):
        return max((positions.get(r, ZERO) for r in voters or reps), default=ZERO)
    return quorum_position(positions, voters, sync_quorum if sync else "majority")


def has_majority_support(me: str, positions: Mapping[str, Position],
                         replicas: Iterable[str]) -> bool:
    """``me`` is at or past a majority of the replicas (itself included);
    replicas with no report do not count."""
    reps = list(dict.fromkeys(replicas))
    mine = positions.get(me)
    if mine is None or me not in reps:
        return False
    behind = sum(1 for r in reps if r in positions and positions[r] <= mine)
    return behind >= majority(len(reps))


def can_write(state: ElectionState, now_ms: int) -> bool:
    """The data plane's check before every write: leader with a live lease."""
    return state.role is Role.LEADER and now_ms < state.lease_deadline_ms


def eligible(state: ElectionState) -> bool:
    """This node may campaign now (lock believed free, rules above)."""
    mine = state.positions.get(state.me, ZERO)
    return (state.leader is None and state.me in state.replicas
            and may_campaign(mine, state.committed)
            and has_majority_support(state.me, state.positions, state.replicas))


# ---- transitions --------------------------------------------------------------

Result = tuple[ElectionState, list[Action]]


def _step_down(state: ElectionState, reason: str) -> Result:
    """Leader -> follower with no known leader; followers are unchanged."""
    if state.role is not Role.LEADER:
        return replace(state, leader=None), []
    down = replace(state, role=Role.FOLLOWER, leader=None, lease_deadline_ms=0)
    return down, [StepDown(state.epoch, reason)]


def _on_acquired(state: ElectionState, ev: LockAcquired) -> Result:
    if ev.lock_index <= state.epoch:
        return state, []  # stale or duplicate notification
    state, actions = _step_down(state, f"superseded by epoch {ev.lock_index}")
    state = replace(state, epoch=ev.lock_index)
    actions.append(Fence(ev.lock_index))
    if ev.node != state.me:
        return replace(state, leader=ev.node), [*actions, Follow(ev.node, ev.lock_index)]
    if not may_campaign(state.positions.get(state.me, ZERO), state.committed):
        return state, [*actions, ReleaseLock("behind the committed position")]
    if ev.at_ms + state.lease_ms <= state.now_ms:
        return state, [*actions, ReleaseLock("lease over before the lock was seen")]
    leader = replace(state, role=Role.LEADER, leader=state.me,
                     lease_deadline_ms=ev.at_ms + state.lease_ms)
    return leader, [*actions, BecomeLeader(ev.lock_index)]


def _maybe_campaign(result: Result) -> Result:
    state, actions = result
    return (state, [*actions, Campaign()]) if eligible(state) else result


def _on_position(state: ElectionState, ev: PositionReported) -> Result:
    """Reports are authoritative (a replica's position goes down when it
    truncates an uncommitted tail); the committed position never goes down."""
    pos = Position(ev.epoch, ev.seq)
    if state.positions.get(ev.node) == pos:
        return state, []
    state = replace(state, positions={**state.positions, ev.node: pos})
    if state.role is not Role.LEADER:
        return state, []
    if pos.epoch > state.epoch:
        down, actions = _step_down(state, f"a replica is at epoch {pos.epoch}")
        return replace(down, epoch=pos.epoch), [*actions, Fence(pos.epoch)]
    # Only replicas at my epoch hold my log (I alone write records of my
    # epoch); a position of another epoch says nothing about my records.
    mine = {n: p for n, p in state.positions.items() if p.epoch == state.epoch}
    q = quorum_position(mine, state.replicas)
    if q.epoch != state.epoch or q <= state.committed:
        return state, []
    return replace(state, committed=q), [Commit(q)]


def _on_record(state: ElectionState, ev: RecordArrived) -> Result:
    if is_stale(ev.epoch, state.epoch):
        return state, [RefuseWrite(ev.epoch, state.epoch)]
    if ev.epoch == state.epoch:
        if state.leader is None and ev.node != state.me:
            return replace(state, leader=ev.node), [Follow(ev.node, ev.epoch)]
        return state, []
    state, actions = _step_down(state, f"saw a record of epoch {ev.epoch}")
    state = replace(state, epoch=ev.epoch, leader=ev.node)
    return state, [*actions, Fence(ev.epoch), Follow(ev.node, ev.epoch)]


def _on_tick(state: ElectionState, ev: Tick) -> Result:
    state = replace(state, now_ms=max(state.now_ms, ev.now_ms))
    if state.role is Role.LEADER and state.now_ms >= state.lease_deadline_ms:
        down, actions = _step_down(state, "lease expired")
        return down, [*actions, ReleaseLock("lease expired")]
    return _maybe_campaign((state, []))


def step(state: ElectionState, event: Event) -> Result:
    """Apply one event; returns the new state and the actions to carry out."""
    match event:
        case LockAcquired():
            return _on_acquired(state, event)
        case LockLost(epoch=epoch):
            if epoch < state.epoch:
                return state, []
            fence: list[Action] = [Fence(epoch)] if epoch > state.epoch else []
            down, actions = _step_down(replace(state, epoch=epoch), "lock lost")
            return _maybe_campaign((down, [*actions, *fence]))
        case SessionExpired():
            return _step_down(state, "session expired")
        case SessionRenewed(at_ms=at, epoch=epoch):
            if state.role is Role.LEADER and epoch == state.epoch:
                deadline = max(state.lease_deadline_ms, at + state.lease_ms)
                return replace(state, lease_deadline_ms=deadline), []
            return state, []
        case PositionReported():
            return _on_position(state, event)
        case CommitAdvanced(epoch=e, seq=s):
            return replace(state, committed=max(state.committed, Position(e, s))), []
        case RecordArrived():
            return _on_record(state, event)
        case Tick():
            return _on_tick(state, event)
    raise AssertionError(f"unknown event {event!r}")
