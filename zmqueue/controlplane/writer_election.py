"""The stream writer election rules the hosts run, and the events their
leadership thread posts: pure functions and values, no I/O, no clock.

Every replicated stream (one per FIFO partition, one per origin host of a
standard partition) has exactly one writer: the holder of the lock
``zmqueue/leaders/<queue>/<p>/<origin>`` (:func:`lock_key`). Its epoch is the
lock's LockIndex, which grows with every acquisition, so records written in
an older term carry a smaller epoch and are refused by replicas.

A host campaigns for a free stream lock under the rules of
:func:`may_campaign`: the preferred writer first; otherwise only a replica
at least as far along as every healthy replica, and holding what a majority
of the voters hold. After a writer's lock was released, a synchronous
stream's candidate also needs to have heard enough voters since the release
(:func:`heard_enough`; :func:`waiting_note` says what it waits for). A
stream goes back to its preferred writer once that host serves it again
(:func:`preferred_serves`) and is caught up.

:mod:`zmqueue.controlplane.leadership` runs these rules against Consul and
posts the events below (:data:`Event`) to the request loop.
:mod:`zmqueue.controlplane.election` is a different, stricter rule set that
the hosts do not run (docs/CONSUL_KV.md says where the two differ).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from zmqueue.config import acks_needed
from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.election import voters_hold
from zmqueue.numbers import digits

StreamKey = tuple[str, int, str]
"""(queue, partition, origin); origin is ``fifo`` for a FIFO partition."""


@dataclass(frozen=True)
class Candidacy:
    replicas: tuple[str, ...]
    preferred: str | None
    """Node that should write when healthy (a standard stream's origin), or None."""
    joining: tuple[str, ...] = ()
    """Replicas that joined and have not caught up yet (not voters:
    ``kvlayout.PartitionAssignment.joining``)."""
    sync: bool = True
    """Synchronous replication: a majority of the voters held every
    acknowledged record (the rule of :func:`heard_enough` applies)."""
    leaving: tuple[str, ...] = ()
    previous: tuple[str, ...] = ()
    """A change of the voters in flight (``kvlayout.PartitionAssignment``):
    the replicas it removes, and the voters before it. Until it is
    confirmed, the election needs what it needs of the new voters and of the
    previous ones alike (joint consensus)."""
    sync_quorum: str = "majority"
    """``all``: every voter held each acknowledged record (``QueueConfig.sync_quorum``),
    so any one of them may take over (one heard is enough)."""
    opened: int = 0
    """Which opening of the stream on this host (``Stream.opened``): when it
    changes while this host holds the lock, the stream was closed and opened
    again (the host left the replicas and came back between two cycles), and
    the new one never heard it was elected: the lock is released and the
    election runs again."""
    incarnation: int = 0
    """The incarnation of the stream's queue (its config key's CreateIndex; 0:
    not known): writes of the queue's keys are fenced by its deletion
    (:mod:`zmqueue.controlplane.kvguard`)."""

    @property
    def quorum(self) -> str:
        """The ack quorum this stream's records were acknowledged on."""
        return self.sync_quorum if self.sync else "majority"

    @property
    def voters(self) -> tuple[str, ...]:
        """The voters (of the new set while a change is in flight)."""
        return kv.voters_of(self.replicas, (*self.joining, *self.leaving))

    def voter_sets(self) -> list[tuple[str, ...]]:
        """Every set of voters whose majority held each acknowledged record:
        the voters, and while a change is in flight the previous ones too."""
        return [self.voters, self.previous] if self.previous else [self.voters]


@dataclass(frozen=True)
class Elected:
    stream: StreamKey
    epoch: int


@dataclass(frozen=True)
class Deposed:
    stream: StreamKey


@dataclass(frozen=True)
class Confirmed:
    """These streams' locks were held by this host's session at ``at``
    (time.monotonic() when the confirming read was sent). ``by_consul``
    False: Consul did not answer, and the host keeps its streams through
    the outage grace; another host may have been elected meanwhile (this
    host alone may be cut off from Consul), so until Consul confirms again
    every write of these streams, an asynchronous one too, is acknowledged
    only once a majority of the replicas holds it (replicas that follow a
    newer writer report nothing to this one)."""

    streams: frozenset[StreamKey]
    at: float
    by_consul: bool = True


@dataclass(frozen=True)
class Opened:
    """This host's position of ``stream``, marked opened (or past seq 0), is
    in Consul: its writer may acknowledge the stream's first records."""

    stream: StreamKey


@dataclass(frozen=True)
class ConsulOutage:
    """Consul has not answered the leadership thread since ``since``
    (time.monotonic()); None: it answers again. The host's writers stop
    ``grace_s`` into an outage, and its refusals say why
    (:mod:`zmqueue.dataplane.nowriter`)."""

    since: float | None
    grace_s: float


@dataclass(frozen=True)
class Waiting:
    """``stream`` has no writer and its election here waits for its voters:
    ``note`` says for what, as a client's refusal can say it (None: no
    longer waiting, or taken)."""

    stream: StreamKey
    note: str | None


Event = Elected | Deposed | Confirmed | Opened | ConsulOutage | Waiting


def lock_key(s: StreamKey) -> str:
    return kv.stream_leader_key(kv.PartitionId(s[0], s[1]), s[2])


def parse_lock_key(key: str) -> StreamKey | None:
    parts = key[len(kv.PREFIX):].split("/")
    n = digits(parts[2]) if len(parts) == 4 and parts[0] == "leaders" else None
    if n is None:
        return None
    return parts[1], n, parts[3]


def preferred_serves(cand: Candidacy, passing: set[str]) -> bool:
    """The stream's preferred writer is healthy and still one of its replicas.
    A host drained or moved off the partition is no longer: its stream is
    taken over by a replica for good (it used to wait for a host that would
    never take it, and its messages were not delivered)."""
    return (cand.preferred is not None and cand.preferred in passing and cand.preferred in cand.replicas
            and cand.preferred not in cand.joining and cand.preferred not in cand.leaving)


def heard_needed(voters: int, sync_quorum: str = "majority") -> int:
    """How many voters must be heard to meet every ack quorum (a majority of
    them): n - floor(n/2), so 2 of 3, 1 of 2, 2 of 4, 3 of 5; with
    ``sync_quorum="all"`` (every voter holds each acknowledged record), 1."""
    return voters - acks_needed(voters, sync_quorum) + 1


def waiting_note(cand: Candidacy, passing: Collection[str]) -> str:
    """What the election of a stream that :func:`heard_enough` holds back
    waits for, for a client: how many voters it needs to hear and how many
    are up."""
    voters = sorted(set().union(*cand.voter_sets()))
    down = [n for n in voters if n not in passing]
    needs = " and ".join(f"{heard_needed(len(v), cand.quorum)} of {len(v)}" for v in cand.voter_sets() if v)
    if not down:
        return (f"its election waits for {needs} voting replicas to report their positions (all "
                f"{len(voters)} are up): retry in a moment")
    change = " (a change of the replica set is being confirmed)" if cand.previous else ""
    return (f"its election waits for a majority of its voting replicas ({needs}) to hold every "
            f"acknowledged record, and only {len(voters) - len(down)} of {len(voters)} are up "
            f"(down: {', '.join(down)}){change}: bring a down host back (OPERATOR_GUIDE 'When a cluster "
            "loses quorum')")


def heard_enough(me: str, cand: Candidacy, passing: Collection[str], mine: kv.Position,
                 positions: Mapping[str, kv.Position], confirmed: Collection[str]) -> bool:
    """After a writer's lock was released, whether ``me`` heard from enough
    voters to know it holds every acknowledged record, as a Raft candidate
    needs a majority's votes.

    A position published before the release may lack what its host
    acknowledged since (positions go out every 0.5 s), and a host that died
    meanwhile never publishes again: with two of three voters killed right
    after an acknowledgement, the survivor saw their old positions, held as
    much, and was elected without the record. So only positions published
    since the release count (``confirmed``: their hosts saw the lock free
    before publishing, see :meth:`leadership.Leadership._publish_positions`): with
    ``me`` they must be enough voters to meet every ack quorum (a majority of
    the voters holds each acknowledged record, so with n voters and quorum
    q, n - q + 1 of them: 2 of 3, 1 of 2, 2 of 4, 3 of 5), and none that is
    down may be ahead of ``me`` (a new writer fetches from the live ones
    ahead before it writes). One of them then holds each acknowledged
    record, in its position. A stream of three voters stays without a
    writer while two are down, as a RabbitMQ quorum queue or a NATS R=3
    stream does. While a change of the voters is in flight, this holds of
    the new voters and of the previous ones alike."""
    for voters in cand.voter_sets():
        if not voters:
            continue  # every replica joining: nobody acknowledged (voters_hold's rule decides)
        heard = [n for n in voters if n == me or n in confirmed]
        if len(heard) < heard_needed(len(voters), cand.quorum):
            return False
        if any(positions.get(n, kv.ZERO) > mine for n in heard if n != me and n not in passing):
            return False
    return True


def may_campaign(me: str, cand: Candidacy, passing: set[str], mine: kv.Position,
                 positions: Mapping[str, kv.Position], confirmed: Collection[str] | None = None,
                 acked: int = 0) -> bool:
    """Whether ``me`` may try to take a free stream lock.

    The preferred writer may whenever it holds what a majority of the
    voters hold (a new stream: at once; a copy that fell behind while
    another host wrote its stream: once it has caught up). Anyone else only
    while the preferred writer is not a passing replica holding that, only if
    no healthy replica is known to be further along (so a new writer has
    every committed record; it also fetches what its peers have before it
    writes, see replication), and only if it holds what a majority of the
    voters hold, those that are down included (``positions``: their last
    published ones): a replica that joined empty must not take over from
    replicas that are only down, whose records (every acknowledged sync
    send among them) would be cut when they return. A *joining* replica
    (not caught up yet) is no voter.
    Positions compare as ``(epoch of the last record, seq)``, as Raft
    compares logs: a copy whose last record is of a later term is ahead of
    a longer copy of an earlier one (a former writer's unacknowledged tail
    must not win over records a later writer had acknowledged).

    ``confirmed``: after a writer's lock was released, the replicas whose
    positions were published since (None: the lock was never held, or the
    stream is asynchronous); see :func:`heard_enough`.

    ``acked``: with ``sync_quorum="all"``, the highest seq a writer of the
    stream published that every voter held (``kvlayout.stream_acked_key``);
    ``me`` must hold it: a voter that came back without its disk holds
    nothing, and while every other voter is down it must not lead and cut
    what they hold when they return.
    """
    if (confirmed is not None and cand.sync
            and not heard_enough(me, cand, passing, mine, positions, confirmed)):
        return False
    if cand.quorum == "all" and mine.seq < acked:
        return False
    held = {n: mine if n == me else positions.get(n, kv.ZERO) for n in cand.replicas}
    needed = max(voters_hold(held, voters, (), sync_quorum=cand.quorum) if voters
                 else voters_hold(held, cand.replicas, cand.replicas) for voters in cand.voter_sets())
    if cand.preferred == me:
        return mine >= needed
    pref = cand.preferred
    if (pref is not None and pref in passing and pref in cand.replicas
            and positions.get(pref, kv.ZERO) >= needed):
        return False  # the origin holds what the voters hold: it writes its own stream
    best = max((positions.get(n, kv.ZERO) for n in cand.replicas if n in passing and n != me),
               default=kv.ZERO)
    return mine >= best and mine >= needed
