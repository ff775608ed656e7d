"""The internal cluster manager's round: bring every partition of one cluster
to the replica set that sticky rendezvous placement (``placement.py``) asks
for, given the cluster's healthy, non-draining hosts.

- a failed host (past the grace period) or a drained one loses its
  replicas; the slot goes to the next-ranked eligible host (zones first);
- a failed host leaves a replica set only for a replacement: while the
  cluster has no eligible host to take its slot, it stays in the set
  (registered, checks critical, not drained), so a sync send still needs a
  majority of R and the survivors of a 3-host cluster that lost two hosts
  refuse sends instead of acknowledging them on one host (as RabbitMQ
  quorum queues and NATS R=3 streams do). Drained hosts and hosts that
  deregistered (a clean stop, or Consul's 30 min reaping of a critical
  service) leave at once;
- a joining host takes nothing from placed partitions (sticky), but fills
  partitions that have fewer than R replicas;
- a partition is never left with no replica: when no host is eligible the
  assignment stays as it is;
- a partition that holds records keeps, in every stream, a majority of
  *keepers* of that stream: replicas that hold every record of it a
  majority of the current voters hold (from ``zmqueue-positions/``: every
  acknowledged sync send). Keepers are counted per stream (since the
  thirtieth session): in a standard partition each origin is ahead on its
  own stream, and a replica that had to lead in every stream at once was
  often none, which left nothing protected. A new
  replica starts empty and catches up from the ones it joins, so a change
  that would leave fewer keepers than a majority of the new set keeps
  enough current ones (healthy first, drained ones included) in place of
  the last new hosts, until the new ones have caught up; the writer
  election (``writer_election.may_campaign``) then never picks a replica that
  lacks what a majority holds. In an async queue's set of one or two a
  keeper holds what the most advanced holds, and a lone replica is joined by its replacement
  before it leaves (R=1 drains). Without this, draining all of a partition's
  hosts at once, or losing most of them in a larger cluster, gave it empty
  replicas, one of which became its writer, and its acknowledged messages
  were lost.
- a replica added to a partition that holds records is *joining* (the
  assignment's ``joining`` list) until, in every stream, it holds what the
  voters (the other replicas) need; so is every non-keeper of a new set in
  which fewer than a majority are keepers (``joining_of``). Joiners are
  never keepers, the writer election counts only voters
  (``writer_election.may_campaign``), and a sync ack needs a majority of the
  voters too (``Stream.replicated_seq``), so a
  set that grew (R raised, a queue created on a smaller cluster, an R=1
  drain) never elects a replica that joined empty while the replicas with
  the records are down. Each round drops the joiners that caught up.

- a change of the *voters* (a replica removed, or a joining one
  promoted) goes through a joint set first, as Raft's joint consensus does
  (``changed``): the removed voters stay in ``replicas`` as ``leaving``
  ones, and ``previous`` holds the voters before the change. Meanwhile a
  sync ack needs a majority of the new voters and of the previous ones, and
  so does an election. Each stream's writer confirms the change once a
  majority of the new voters holds every record it held when it saw the
  change (``Stream.confirmation``, published with its position); once every
  stream of the partition is confirmed, the next round drops the leaving
  replicas (``confirmed``). The positions this module reads are up to
  ~0.5 s old, so a host may hold records acknowledged after its last
  publication; without the joint step a change decided on them could leave
  an acknowledged record on fewer than a majority of the new voters (an R=1
  partition drained right after a send moved to an empty host). No other
  change is made to a partition while one is in flight.

Each change is a new version of the assignment, written by the caller with
check-and-set under the manager lock.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import replace

from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.election import majority, voters_hold
from zmqueue.controlplane.fleetview import AssignmentWrite, members, moved
from zmqueue.controlplane.placement import Move, plan_moves
from zmqueue.controlplane.queue_directory import Snapshot
from zmqueue.protocol import FIFO_ORIGIN

StreamPositions = Mapping[str, Mapping[str, kv.Position]]
"""A partition's positions: stream origin -> node -> position."""
StreamConfirmations = Mapping[str, Mapping[str, int]]
"""A partition's confirmations: stream origin -> node -> the assignment
version whose change of the voters that node confirmed as the stream's writer."""


def _moves(snap: Snapshot, cluster: str, healthy: dict[str, bool]) -> list[Move]:
    state = snap.state
    hosts = members(snap, cluster, healthy)
    if not any(h.eligible for h in hosts):
        return []
    current = {pid: a.replicas for pid, a in state.assignments.items()
               if a.cluster == cluster and pid.queue in state.configs and not a.previous}
    replication = {q: cfg.replication_factor for q, cfg in state.configs.items()}
    failed = {h.node for h in hosts if not h.healthy and not h.draining}
    moves = []
    for mv in plan_moves(current, hosts, replication):
        old = current[mv.partition]
        new = with_failed(mv.replicas, old, replication[mv.partition.queue], failed)
        if new and new != old:
            moves.append(Move(mv.partition, tuple(n for n in old if n not in new),
                              tuple(n for n in new if n not in old), new))
    return moves


def with_failed(replicas: tuple[str, ...], old: tuple[str, ...], r: int,
                failed: set[str]) -> tuple[str, ...]:
    """``replicas``, the set placement wants in place of ``old``, with the
    failed replicas of ``old`` kept in the slots no eligible host could take
    (up to ``min(r, len(old))`` replicas), in their old order: a failed host
    leaves a set only for a replacement (module doc)."""
    short = min(r, len(old)) - len(replicas)
    keep = [n for n in old if n in failed and n not in replicas][:max(0, short)]
    if not keep:
        return replicas
    return (*(n for n in old if n in replicas or n in keep), *(n for n in replicas if n not in old))


def has_records(pos: StreamPositions) -> bool:
    """Some stream of the partition has a record (a position past 0)."""
    return any(p.seq > 0 for by_node in pos.values() for p in by_node.values())


def _stream_keepers(replicas: tuple[str, ...], joining: tuple[str, ...], pos: StreamPositions | None,
                    among: tuple[str, ...], sync: bool) -> dict[str, list[str]]:
    """Per stream, the nodes of ``among`` that hold what the voters of
    ``replicas`` need of it (``election.voters_hold``; ``pos`` None: every
    voter, for one stand-in stream). Keepers are per stream: in a standard
    partition every origin writes its own, and under traffic no replica may
    hold the most of all of them at once."""
    if pos is None:
        voters = kv.voters_of(replicas, joining) or replicas
        return {"": [n for n in among if n in voters]}
    keepers = {}
    for s, by_node in pos.items():
        need = voters_hold(by_node, replicas, joining, sync)
        keepers[s] = [n for n in among if by_node.get(n, kv.ZERO) >= need]
    return keepers


def bridged(replicas: tuple[str, ...], old: tuple[str, ...], pos: StreamPositions | None,
            healthy: dict[str, bool], joining: tuple[str, ...] = (), sync: bool = False
            ) -> tuple[str, ...] | None:
    """``replicas``, the set placement wants in place of ``old``, with enough
    keepers kept in every stream (module doc); None: keep ``old`` as it is.
    ``pos`` None: the positions could not be read, so every current voter is
    a keeper. ``joining``: the replicas of ``old`` that are not voters yet
    (never keepers)."""
    if pos is not None and not has_records(pos):
        return replicas  # no records: nothing to carry
    candidates = kv.voters_of(old, joining) or old
    chosen: list[str] = []
    for keepers in _stream_keepers(old, joining, pos, candidates, sync).values():
        need = min(majority(len(replicas)), len(keepers))
        ranked = sorted(keepers, key=lambda n: (n not in chosen, n not in replicas,
                                                not healthy.get(n, False), old.index(n)))
        chosen += [n for n in ranked[:need] if n not in chosen]
    if all(n in replicas for n in chosen):
        return replicas
    # one slot for a new replica even when the keepers fill the set (R=1: the
    # drained host and its replacement, until the replacement has caught up)
    added = [n for n in replicas if n not in chosen][:max(1, len(replicas) - len(chosen))]
    new = (*sorted(chosen, key=old.index), *added)
    return new if set(new) != set(old) else None


def joining_of(replicas: tuple[str, ...], old: kv.PartitionAssignment, pos: StreamPositions | None,
               sync: bool = False, unserved: Collection[str] = ()) -> tuple[str, ...]:
    """The joining replicas of ``replicas``, the new set of ``old``'s
    partition: those still joining, the new ones (they start empty), and,
    for every stream of which fewer than a majority of the new set are
    keepers (a set that shrank to a keeper and laggards, or grew from one or
    two), its non-keepers: the election counts only voters, so it never
    picks one. No records: none, but for the new or joining replicas that
    do not serve the queue (``unserved``: they marked it, ``kvlayout.unserved_key``;
    they keep none of its streams, and join once they do)."""
    off = {n for n in replicas if n in unserved and (n in old.joining or n not in old.replicas)}
    if pos is not None and not has_records(pos):
        return tuple(n for n in replicas if n in off)
    joining = {n for n in replicas if n in old.joining or n not in old.replicas}
    if pos is not None:
        for keepers in _stream_keepers(old.replicas, old.joining, pos, replicas, sync).values():
            if sum(1 for n in keepers if n not in joining) < majority(len(replicas)):
                joining |= {n for n in replicas if n not in keepers}
    return tuple(n for n in replicas if n in joining)


def caught_up(joining: tuple[str, ...], replicas: tuple[str, ...], pos: StreamPositions | None,
              sync: bool = False) -> tuple[str, ...]:
    """The replicas of ``joining`` that still lack what the voters of
    ``replicas`` hold (``pos`` None: not known, all of them)."""
    if pos is None:
        return joining
    keepers = _stream_keepers(replicas, joining, pos, joining, sync).values()
    return tuple(n for n in joining if not all(n in k for k in keepers))


def changed(old: kv.PartitionAssignment, cluster: str, replicas: tuple[str, ...],
            joining: tuple[str, ...]) -> kv.PartitionAssignment:
    """The next version of ``old`` (no change in flight) with ``replicas``
    and ``joining``; a change of the voters as a joint set (module doc)."""
    new = moved(old, cluster, replicas, joining)
    if not old.voters or set(new.voters) == set(old.voters):
        return new
    leaving = tuple(n for n in old.voters if n not in replicas)
    return replace(new, replicas=(*new.replicas, *leaving), leaving=leaving, previous=old.voters)


def stream_origins(a: kv.PartitionAssignment, fifo: bool, held: Collection[str],
                   pos: StreamPositions | None = None) -> list[str]:
    """The streams of a partition whose writers confirm a change: a FIFO
    partition's one; a standard one's per replica, any other stream with a
    writer (``held``: the origins whose writer lock is held), and any other
    stream a replica holds records of (``pos``; a former replica's stream
    between two writers: its next writer confirms, until the fortieth session
    the change ended without it)."""
    if fifo:
        return [FIFO_ORIGIN]
    kept = [o for o, by_node in (pos or {}).items()
            if any(n in a.replicas and p.seq > 0 for n, p in by_node.items())]
    return list(dict.fromkeys([*a.replicas, *held, *kept]))


def confirmed(a: kv.PartitionAssignment, origins: Collection[str],
              confirmations: StreamConfirmations | None) -> bool:
    """Every stream of ``origins`` has a writer that confirmed ``a``'s change
    (None: the confirmations could not be read)."""
    if confirmations is None:
        return False
    return all(max(confirmations.get(o, {}).values(), default=0) >= a.version for o in origins)


def plan_internal(snap: Snapshot, cluster: str, healthy: dict[str, bool],
                  positions: Callable[[kv.PartitionId], StreamPositions | None] = lambda pid: None,
                  confirmations: Callable[[kv.PartitionId], StreamConfirmations | None] = lambda pid: None,
                  unserved: Callable[[kv.PartitionId], Collection[str]] = lambda pid: ()
                  ) -> list[AssignmentWrite]:
    """``positions``: asked only for the partitions a change would take
    replicas from or add replicas to, and those with joining replicas (None:
    not known, every current voter counts as needed and every new replica
    joins), and for standard partitions with a change in flight (the streams
    whose writers must confirm it, :func:`stream_origins`). ``confirmations``:
    asked for the partitions with a change in flight (None: not known, the
    change stays in flight). ``unserved``: the replicas that marked the
    partition's queue unserved (they keep none of its streams: a new one
    joins, and a joining one is not caught up, until it serves the queue);
    asked when ``positions`` is."""
    state = snap.state
    writes = []
    changed_pids = set()
    for pid, a in sorted(state.assignments.items()):
        if a.cluster != cluster or not a.previous or pid.queue not in state.configs:
            continue
        changed_pids.add(pid)
        held = [o for (p, o) in state.stream_leaders if p == pid]
        fifo = state.configs[pid.queue].fifo
        if confirmed(a, stream_origins(a, fifo, held, None if fifo else positions(pid)), confirmations(pid)):
            key = kv.partition_key(pid)
            done = moved(a, a.cluster, a.target, a.joining)
            writes.append(AssignmentWrite(
                key, done, state.modify_index.get(key, 0),
                f"change confirmed by every stream's writer: voters now {list(done.voters)}"
                + (f", {list(a.leaving)} left" if a.leaving else "")))
    for mv in _moves(snap, cluster, healthy):
        old = state.assignments[mv.partition]
        pos = positions(mv.partition)
        sync = state.configs[mv.partition.queue].sync_replication
        if mv.remove:
            kept = bridged(mv.replicas, old.replicas, pos, healthy, old.joining, sync)
            if kept is None:
                continue
            mv = Move(mv.partition, tuple(n for n in old.replicas if n not in kept),
                      tuple(n for n in kept if n not in old.replicas), kept)
        joining = joining_of(mv.replicas, old, pos, sync, unserved(mv.partition))
        key = kv.partition_key(mv.partition)
        reason = (f"replicas {list(old.replicas)} -> {list(mv.replicas)} "
                  f"(removed {list(mv.remove)}, added {list(mv.add)}"
                  + (f", joining {[n for n in joining if n in mv.replicas]})" if joining else ")"))
        new = changed(old, cluster, mv.replicas, joining)
        if new.previous:
            reason += f"; confirming: voters {list(new.voters)}, before {list(new.previous)}"
        writes.append(AssignmentWrite(key, new, state.modify_index.get(key, 0), reason))
        changed_pids.add(mv.partition)
    for pid, a in sorted(state.assignments.items()):
        if a.cluster != cluster or not a.joining or pid in changed_pids or pid.queue not in state.configs:
            continue
        pos = positions(pid)
        sync = state.configs[pid.queue].sync_replication
        still = caught_up(a.joining, a.replicas, pos, sync) if pos is None or has_records(pos) else ()
        off = unserved(pid)
        still = tuple(n for n in a.joining if n in still or n in off)
        if still != a.joining:
            key = kv.partition_key(pid)
            new = changed(a, cluster, a.replicas, still)
            writes.append(AssignmentWrite(
                key, new, state.modify_index.get(key, 0),
                f"{[n for n in a.joining if n not in still]} caught up: voters "
                f"{[n for n in a.replicas if n not in still]}"
                + (f" once confirmed (before {list(new.previous)})" if new.previous else "")))
    return writes
