"""Stream writer election on Consul locks, with leases and fencing epochs.

Every replicated stream has exactly one writer, the holder of its Consul
lock; the election rules and the events this thread posts are in
:mod:`zmqueue.controlplane.writer_election`.

One thread per host:

- holds one Consul session tied to the host's health checks (a dead or
  frozen host loses its locks within the TTL check's 3 s), renewed well
  within its TTL;
- campaigns for the streams the host is a candidate for, under the rules of
  :func:`writer_election.may_campaign`;
- confirms, every cycle, which locks it still holds, and hands the request
  loop a lease (:class:`Confirmed`): the loop serves as writer only until the
  lease runs out, so a host that was frozen stops writing on its own before
  another writer can be elected (while Consul is unreachable altogether the
  lease is extended for up to ``OUTAGE_GRACE_S``);
- hands a stream back to its preferred writer once that host is healthy and
  caught up;
- publishes the host's replica positions (rate limited) for the rule above.

Every lock it takes and every position it writes goes in a Consul
transaction fenced by the queue's deletion (:mod:`kvguard`): once a queue
is deleted, nothing of it is written again, so no key of a deleted queue is
created again by a host that had not heard of the deletion yet.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

import consul

from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.consul_client import AgentHome, ConsulClient, create_session
from zmqueue.controlplane.discovery import list_hosts
from zmqueue.controlplane.kvguard import (
    FENCED,
    GONE,
    INVALID_SESSION,
    TXN_OPS_MAX,
    Guard,
    QueueGuards,
    take_lock,
    write_fenced,
)
from zmqueue.controlplane.writer_election import (
    Candidacy,
    Confirmed,
    ConsulOutage,
    Deposed,
    Elected,
    Event,
    Opened,
    StreamKey,
    Waiting,
    heard_enough,
    heard_needed,
    lock_key,
    may_campaign,
    parse_lock_key,
    preferred_serves,
    waiting_note,
)
from zmqueue.errors import ConsulUnavailable
from zmqueue.numbers import digits

log = logging.getLogger(__name__)
BUMP_MAX = 10_000
"""Most times a candidate takes a lock again to move its LockIndex (its
epoch) past the epochs already used (:meth:`Leadership._acquire`)."""

Holder = tuple[str | None, int, int]
"""A stream lock as read: (session holding it or None, LockIndex, ModifyIndex).
A free lock's ModifyIndex is Consul's index of its release (0: never held)."""

CYCLE_S = 0.25
"""Cycle period while something is in motion: a candidate lock is free, this
host holds a stream it may hand back, a lock changed hands, or the candidacies
changed in the last :data:`BUSY_FOR_S`."""
STEADY_CYCLE_S = 0.5
"""Cycle period otherwise (every lock held, nothing changed); writers confirm
their leases well within ``LEASE_S`` (2 s). A steady cycle is one small
consistent read (see :meth:`Leadership._holders`)."""
LEADERS_PREFIX = f"{kv.PREFIX}leaders/"
BUSY_FOR_S = 2.0
SESSION_TTL_S = 10
POSITIONS_EVERY_S = 0.5
OUTAGE_GRACE_S = 60.0
"""While every Consul address is unreachable, a writer keeps its streams this
long: no other host can acquire a lock from a Consul that is down, so
availability wins over waiting. A definite loss (session gone, lock held by
another session) deposes at once. See docs/REPLICATION.md."""
WAIT_NOTE_S = 5.0
"""A stream waiting this long for its voters' positions after a release is logged once."""
OUTAGE_NOTE_S = 10.0
"""During an outage, a log line every this many seconds (the first one at once)."""


class Leadership(threading.Thread):
    def __init__(self, addresses: tuple[str, ...], timeout_s: float, node: str,
                 checks: list[str], value: dict[str, Any], post: Callable[[Event], None],
                 home: AgentHome | None = None, outage_grace_s: float = OUTAGE_GRACE_S) -> None:
        """``home``: where the host's ``checks`` are registered; sessions are
        created there (see :class:`AgentHome`). ``outage_grace_s``: how long
        writers keep their streams while Consul is unreachable (default
        :data:`OUTAGE_GRACE_S`; ``HostConfig.outage_grace_ms``)."""
        super().__init__(name="leadership", daemon=True)
        self.client = ConsulClient(addresses, timeout_s, agent_local=True)
        self.home = home
        self.node = node
        self.checks = checks
        self.value = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()  # (as kvlayout's)
        self.post = post
        self.outage_grace_s = outage_grace_s
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._cands: dict[StreamKey, Candidacy] = {}
        self._positions: dict[StreamKey, tuple[int, int]] = {}
        self._terms: dict[StreamKey, int] = {}
        self._acked: dict[StreamKey, int] = {}
        """Per stream written here with ``sync_quorum="all"``: what every voter holds."""
        self._confirmed: dict[StreamKey, int] = {}
        """Per stream this host writes: the assignment version whose change of
        the voters it has confirmed (``Stream.confirmation``), published with
        its position for the internal manager."""
        self.session: str | None = None
        self.held: dict[StreamKey, int] = {}
        self._elected_opened: dict[StreamKey, int] = {}
        """Per lock held: the ``Candidacy.opened`` of the stream told it was elected."""
        self._elected_inc: dict[StreamKey, int] = {}
        """Per lock held: the incarnation of its queue then (``Candidacy.incarnation``)."""
        self.guards = QueueGuards(self.client)
        """Per queue of a stream here: whether its incarnation is alive, and the
        check its writes carry (:mod:`kvguard`)."""
        self._cands_seq = 0
        """Bumped by :meth:`update` whenever the candidacies change."""
        self._fence_for: tuple[int, int] | None = None
        self._fence_memo: dict[StreamKey, Guard] = {}
        """What :meth:`_fence` answered last, and for which (candidacies, guards) versions."""
        self._renewed_at = 0.0
        self._published_at = 0.0
        self._published: dict[StreamKey, tuple[int, int, int, int, bool]] = {}
        """(epoch, seq, seen, confirmed, opened) of every stream position this host published."""
        self._floors: dict[StreamKey, int] = {}
        """Per stream, the highest ``stream_acked_key`` value this host read or wrote."""
        self._opening: frozenset[StreamKey] = frozenset()
        """Streams whose writer here holds acknowledgements of their first
        records until its position, marked opened, is in Consul."""
        self._opened: set[StreamKey] = set()
        """Streams whose position this host published past seq 0 or marked
        opened (the mark stays in every later publication)."""
        self._seen: dict[StreamKey, int] = {}
        """Per stream, the release of its lock this host last saw (the lock's
        ModifyIndex while free), published with its position."""
        self._busy_until = 0.0
        self._seen_holders: dict[StreamKey, int] = {}
        self._holders_at: str | None = None
        """X-Consul-Index of the last full read of ``leaders/`` (None: read it
        in full next cycle), and what that read found:"""
        self._holders_seen: dict[StreamKey, Holder] = {}
        self.full_reads = 0
        """Full reads of ``leaders/`` so far (the steady state makes none)."""
        self._wake = threading.Event()
        self._waiting: dict[StreamKey, tuple[int, float, bool]] = {}
        """Free streams waiting for their voters (:meth:`_note_waiting`): (release, since, said)."""
        self._waiting_told: dict[StreamKey, str] = {}
        """The :class:`Waiting` note last posted per stream."""
        self._below_floor: dict[StreamKey, int] = {}
        """Free streams this host may not lead because it holds less than their
        acknowledged floor, and the floor it was told about (said once)."""
        self._unserved: frozenset[tuple[str, int]] = frozenset()
        """Partitions of the queues this host does not serve (it knows no good
        config of them): each gets its ``kvlayout.unserved_key`` marker."""
        self._marked: set[tuple[str, int]] | None = None
        self._unserved_seen: dict[tuple[str, int], set[str]] = {}
        """The markers of every host, as the last read of the positions found them."""
        self._mark_failed = ""
        """The markers of this host in Consul as last written or read (None: not
        read yet; the first cycle lists those an earlier run left)."""

    # --- inputs from the request loop (thread safe) -------------------------
    def update(self, cands: dict[StreamKey, Candidacy],
               positions: dict[StreamKey, tuple[int, int]],
               confirmed: Mapping[StreamKey, int] | None = None,
               opening: Collection[StreamKey] = (), acked: Mapping[StreamKey, int] | None = None,
               terms: Mapping[StreamKey, int] | None = None,
               unserved: Collection[tuple[str, int]] = ()) -> None:
        """``opening``: streams written here whose first records wait for
        their opened mark in Consul (:class:`Opened` answers each).
        ``acked``: per stream written here with ``sync_quorum="all"``, the
        highest seq every voter holds (published with its position).
        ``terms``: streams whose newest term heard here is newer than their
        last record's epoch (a new writer's epoch must pass it).
        ``unserved``: the partitions of the queues this host does not serve
        (their config in Consul KV is bad and it knows no earlier good value):
        it marks them in Consul (``kvlayout.unserved_key``) so that its peers
        write its streams of them meanwhile and the internal manager does not
        count it caught up in them."""
        unserved = frozenset(unserved)
        with self._lock:
            changed = cands != self._cands or unserved != self._unserved
            self._unserved = unserved
            self._cands, self._positions = dict(cands), dict(positions)
            self._cands_seq += 1 if changed else 0
            self._terms = dict(terms or {})
            self._confirmed = dict(confirmed or {})
            self._acked = dict(acked or {})
            self._opening = frozenset(opening)
            done = [s for s in self._opening if s in self._opened]
            asked = len(done) < len(self._opening)
        for s in done:  # (marked before: the data plane's stream started again)
            self.post(Opened(s))
        if changed:  # a new or moved stream: campaign now, not a cycle later
            self._busy_until = time.monotonic() + BUSY_FOR_S
        if changed or asked:
            self._wake.set()

    # --- the thread ----------------------------------------------------------
    def run(self) -> None:
        outage_since: float | None = None
        next_note = 0.0
        while not self.stopped.is_set():
            self._wake.clear()
            try:
                if self._cycle():
                    self._busy_until = time.monotonic() + BUSY_FOR_S
                if outage_since is not None:
                    log.info("Consul reachable again after %.1f s", time.monotonic() - outage_since)
                    self.post(ConsulOutage(None, self.outage_grace_s))
                outage_since = None
            except ConsulUnavailable as exc:
                now = time.monotonic()
                if outage_since is None:
                    outage_since, next_note = now, now + OUTAGE_NOTE_S
                    log.warning("Consul unreachable: writers keep their streams for up to %.0f s "
                                "(%s)", self.outage_grace_s, exc)
                    self.post(ConsulOutage(outage_since, self.outage_grace_s))
                elif now >= next_note:  # no election can happen meanwhile: say so now and then
                    next_note = now + OUTAGE_NOTE_S
                    log.warning("Consul still unreachable after %.0f s (%s)", now - outage_since, exc)
                # the session may not have survived the outage (a restarted
                # agent, a new server leader): check it on the first cycle after,
                # and read the locks in full (a restarted agent's index starts over)
                self._renewed_at = 0.0
                self._holders_at = None
                if self.held and now - outage_since < self.outage_grace_s:
                    # nobody can take a lock while Consul is down for every
                    # host: keep serving, and if only this one is cut off, a
                    # replica that follows a newer writer no longer counts
                    # towards this one's acks (``Confirmed.by_consul``)
                    self.post(Confirmed(frozenset(self.held), now, by_consul=False))
            except consul.ConsulException as exc:
                log.warning("leadership cycle: %s", exc)
            steady = time.monotonic() >= self._busy_until
            self._wake.wait(STEADY_CYCLE_S if steady else CYCLE_S)
        self._release_all()

    def _ensure_session(self) -> str:
        now = time.monotonic()
        if self.session is not None and now - self._renewed_at < SESSION_TTL_S / 3:
            return self.session
        if self.session is not None:
            try:
                sid = self.session
                self.client.call(lambda c: c.session.renew(sid))
                self._renewed_at = now
                return self.session
            except consul.NotFound:
                log.warning("session %s expired; every lock it held is lost", self.session)
                self._lose_all()
        sid = create_session(self.client, self.home, self.node, self.checks, SESSION_TTL_S)
        self.session, self._renewed_at = sid, now
        self._holders_at = None
        return sid

    def _lose_all(self) -> None:
        for s in list(self.held):
            self.post(Deposed(s))
        self.held.clear()
        self._elected_opened.clear()
        self._elected_inc.clear()
        self.session = None

    def _cycle(self) -> bool:
        """One round; True when something is in motion (see CYCLE_S)."""
        sid = self._ensure_session()
        with self._lock:
            cands, positions, confirmations = self._cands, self._positions, self._confirmed
            opening, acked, seq = self._opening, self._acked, self._cands_seq
            unserved = self._unserved
            for s in [s for s in self._opened if s not in cands]:  # (a later stream of that key
                self._opened.discard(s)                             # publishes its own mark)
                self._published.pop(s, None)
            for s in [s for s in self._floors if s not in cands]:
                del self._floors[s]
            for s in [s for s in self._below_floor if s not in cands]:
                del self._below_floor[s]
        sent_at = time.monotonic()
        holders = self._holders()
        fence = self._fence(cands, seq, holders, unserved)
        try:
            self._mark_unserved(unserved, {q: g for q in {q for q, _ in unserved}
                                           if isinstance(g := self.guards.of(q, 0), Guard)})
            self._mark_failed = ""
        except consul.ConsulException as exc:  # (not this cycle's elections: tried again next cycle)
            if str(exc) != self._mark_failed:
                log.warning("unserved marks not written: %s", exc)
            self._mark_failed = str(exc)
        mine = {s for s, (h, _, _) in holders.items() if h == sid}
        # Health and peers' positions matter only when a candidate lock is free
        # or this host holds a stream it may have to hand back: in the steady
        # state a cycle is one read (these reads cost the request loop GIL time,
        # which showed in its latency tail).
        free = [s for s in cands if s in fence and holders.get(s, (None, 0, 0))[0] is None]
        for s in free:  # published with this host's position: it is taken after the release
            self._seen[s] = holders[s][2] if s in holders and holders[s][1] else 0
        borrowed = [s for s in mine if s in cands and cands[s].preferred not in (None, self.node)]
        passing = self._passing_now() if free or borrowed else set()
        # peers' positions decide a hand-back and every free stream (even its
        # healthy origin takes it only if it holds what a majority holds)
        decide_by_position = bool(borrowed or free)
        state, seen, floors = self._positions_of_others() if decide_by_position else ({}, {}, {})
        out = self._unserved_seen if decide_by_position else {}

        def live(s: StreamKey) -> set[str]:
            """The passing hosts that keep stream ``s``: a host that marked its
            queue unserved keeps none of its streams, so it counts as down for
            them (no hand-back to it, no waiting for it to campaign)."""
            return passing - out.get((s[0], s[1]), set())
        for s, n in floors.items():
            self._floors[s] = max(n, self._floors.get(s, 0))
        for s in list(self.held):
            if s not in mine:
                if s not in holders and self.guards.judged(s[0], self._elected_inc.get(s, 0)) == GONE:
                    log.info("the writer lock of %s was deleted with its queue", s)
                else:
                    log.warning("lost the writer lock of %s", s)
                del self.held[s]
                self._elected_opened.pop(s, None)
                self._elected_inc.pop(s, None)
                self.post(Deposed(s))
        for s in mine - set(self.held):
            self.held[s] = holders[s][1]
            self._elected_opened[s] = cands[s].opened if s in cands else 0
            self._elected_inc[s] = cands[s].incarnation if s in cands else 0
            self.post(Elected(s, holders[s][1]))
        for s in list(mine):
            if (s not in cands or self._reopened(s, cands[s])
                    or self._should_hand_back(s, cands[s], live(s), positions, state)):
                self._release(s)
                mine.discard(s)
                if self.session is None:
                    return True  # the session is gone (all deposed): a new one next cycle
        self.post(Confirmed(frozenset(mine), sent_at))
        for s in free:
            released = self._seen[s]
            confirmed = {n for n, i in seen.get(s, {}).items() if i >= released} if released else None
            mine_pos = kv.Position(*positions.get(s, (0, 0)))
            if confirmed is not None:
                self._note_waiting(s, cands[s], live(s), mine_pos, state.get(s, {}), confirmed, released)
            self._note_floor(s, cands[s], mine_pos, floors.get(s, 0))
            used = max([mine_pos.epoch, self._terms.get(s, 0), *(p.epoch for p in state.get(s, {}).values())])
            if (may_campaign(self.node, cands[s], live(s), mine_pos, state.get(s, {}), confirmed,
                             floors.get(s, 0)) and not self._acquire(s, sid, cands[s], fence[s], used)):
                return True  # the session is gone: a new one campaigns next cycle
        for s in [s for s in self._waiting if s not in free]:  # (taken meanwhile: no longer waiting)
            del self._waiting[s]
        for s in [s for s in self._waiting_told if s not in free]:
            self._tell_waiting(s, None)
        self._publish_positions(positions, fence, urgent=bool(free), confirmed=confirmations, opening=opening,
                                acked=acked)
        epochs = {s: e for s, (_, e, _) in holders.items()}
        moved, self._seen_holders = epochs != self._seen_holders, epochs
        return bool(free or borrowed or moved)

    def _fence(self, cands: Mapping[StreamKey, Candidacy], seq: int,
               holders: Mapping[StreamKey, Holder],
               unserved: Collection[tuple[str, int]] = ()) -> dict[StreamKey, Guard]:
        """The candidate streams whose queue is alive, each with the guard its
        lock and position writes carry (:mod:`kvguard`): the streams of a
        queue deleted, or not the live queue of its name, write nothing.
        Reads the verdicts not known yet, and again those of queues whose
        lock held here is gone (deleted with its queue?). ``seq``: the
        candidacies' :attr:`_cands_seq` (unchanged, with nothing to read:
        the last answer stands, at no cost per stream). ``unserved``: the
        partitions this host marks unserved; their queues' verdicts are kept
        too (incarnation 0: whichever is live)."""
        vanished = [s for s in self.held if s not in holders]
        if (not vanished and self._fence_for == (seq, self.guards.version)
                and time.monotonic() < self.guards.next_due):
            return self._fence_memo
        wanted = {s[0]: c.incarnation for s, c in cands.items()}
        for q, _ in unserved:
            wanted.setdefault(q, 0)
        for s in vanished:
            self.guards.recheck(s[0])
            inc = self.guards.incarnation(s[0])
            if inc is not None:
                wanted.setdefault(s[0], inc)
        self.guards.resolve(wanted)
        self._fence_for = (seq, self.guards.version)
        self._fence_memo = {s: g for s, c in cands.items()
                            if isinstance(g := self.guards.of(s[0], c.incarnation), Guard)}
        return self._fence_memo

    def _reopened(self, s: StreamKey, cand: Candidacy) -> bool:
        """Whether the stream behind a lock held here is not the one told it
        was elected: it was closed and opened again between two cycles (this
        host left its replicas and came back), so it serves as a replica under
        a lock nobody writes with. The lock is then released: an election
        makes the new copy, or another replica, the writer."""
        if cand.opened == self._elected_opened.get(s, cand.opened):
            return False
        log.warning("stream %s was closed and opened again on this host while it held the writer lock; "
                    "releasing it for an election", s)
        return True

    def _note_waiting(self, s: StreamKey, cand: Candidacy, passing: set[str], mine: kv.Position,
                      positions: Mapping[str, kv.Position], confirmed: set[str], released: int) -> None:
        """Say once, WAIT_NOTE_S into a release, that a stream waits for its voters
        (:func:`heard_enough`); a failover's first cycles always wait a moment."""
        if not cand.sync or heard_enough(self.node, cand, passing, mine, positions, confirmed):
            self._waiting.pop(s, None)
            self._tell_waiting(s, None)
            return
        self._tell_waiting(s, waiting_note(cand, passing))
        now = time.monotonic()
        at, since, said = self._waiting.get(s, (-1, now, False))
        if at != released:
            self._waiting[s] = (released, now, False)
            return
        if not said and now - since >= WAIT_NOTE_S:
            self._waiting[s] = (released, since, True)
            voters = sorted(set().union(*cand.voter_sets()))
            heard = sorted(n for n in voters if n == self.node or n in confirmed)
            down = sorted(n for n in voters if n not in passing)
            needs = " and ".join(f"{heard_needed(len(v), cand.quorum)} of {list(v)}"
                                 for v in cand.voter_sets() if v)
            log.warning("stream %s has had no writer for %.0f s: of its voters %s, %s published a position "
                        "since its writer's lock was released and %s are down; it waits for %s%s, enough "
                        "to hold every acknowledged record, so bring a down host back (or, if its disk is "
                        "gone for good, see OPERATOR_GUIDE 'When a cluster loses quorum')",
                        "/".join(map(str, s)), now - since, voters, heard, down, needs,
                        " (a change of the replica set is being confirmed)" if cand.previous else "")

    def _tell_waiting(self, s: StreamKey, note: str | None) -> None:
        """Post what ``s``'s election waits for, when it changed."""
        if self._waiting_told.get(s) == note:
            return
        if note is None:
            del self._waiting_told[s]
        else:
            self._waiting_told[s] = note
        self.post(Waiting(s, note))

    def _note_floor(self, s: StreamKey, cand: Candidacy, mine: kv.Position, floor: int) -> None:
        """Say once per floor that this host holds less of a ``sync_quorum="all"``
        stream than a writer said every voter held (:func:`may_campaign`)."""
        if cand.quorum != "all" or mine.seq >= floor:
            self._below_floor.pop(s, None)
            return
        if self._below_floor.get(s) != floor:
            self._below_floor[s] = floor
            log.warning("stream %s: this host holds records up to seq %d, but a writer said every voter "
                        "held %d (acknowledged with sync_quorum all): it came back without them (a lost or "
                        "replaced disk?) and will not lead the stream; a voter that holds them must come "
                        "back (OPERATOR_GUIDE 'When a cluster loses quorum')",
                        "/".join(map(str, s)), mine.seq, floor)

    def _holders(self) -> dict[StreamKey, Holder]:
        """Every lock's (session, LockIndex, ModifyIndex), as of a consistent read sent now.

        A full read of ``leaders/`` grows with the streams (4 ms and 2 ms of
        this process's CPU at 600 locks, twice a second, in a thread that
        shares the GIL with the request loop). So a cycle first asks only for
        the prefix's index: listing ``zmqueue/leaders`` with separator ``/``
        collapses every lock into one key, yet the index is the highest
        modify index of any lock under it, tombstones included, so an
        acquire, a release, a session invalidated or a key deleted all move
        it. Unchanged index: the last full read still holds, confirmed as of
        this read. Moved: read in full."""
        if self._holders_at is not None:
            idx, _ = self.client.call(lambda c: c.kv.get(
                LEADERS_PREFIX.rstrip("/"), keys=True, separator="/", consistency="consistent"))
            if idx == self._holders_at:
                return self._holders_seen
        idx, items = self.client.call(lambda c: c.kv.get(LEADERS_PREFIX, recurse=True,
                                                        consistency="consistent"))
        holders: dict[StreamKey, Holder] = {}
        for it in items or []:
            s = parse_lock_key(str(it.get("Key", "")))
            if s is not None:
                holders[s] = (it.get("Session"), int(it.get("LockIndex") or 0),
                              int(it.get("ModifyIndex") or 0))
        self._holders_at, self._holders_seen = idx, holders
        self.full_reads += 1
        return holders

    def _passing_now(self) -> set[str]:
        """Healthy hosts straight from Consul (fresher than the metadata cache,
        so a dead writer's stream is taken over within a cycle of its check
        going critical)."""
        return {h.node for h in list_hosts(self.client) if h.passing}

    def _positions_of_others(self) -> tuple[dict[StreamKey, dict[str, kv.Position]],
                                            dict[StreamKey, dict[str, int]], dict[StreamKey, int]]:
        """Every host's published positions, the lock release each was
        published after (``seen``: 0 when none), and what writers said every
        voter holds (``kvlayout.stream_acked_key``)."""
        _, items = self.client.call(lambda c: c.kv.get(kv.POSITIONS_PREFIX, recurse=True))
        self._unserved_seen = kv.decode_unserved(items)
        if self._marked is not None:  # (deleted with their queue meanwhile: written again if still due)
            self._marked &= {pid for pid, nodes in self._unserved_seen.items() if self.node in nodes}
        return kv.decode_stream_positions(items), kv.decode_stream_seen(items), kv.decode_stream_acked(items)

    def _mark_unserved(self, want: frozenset[tuple[str, int]], fence: Mapping[str, Guard]) -> None:
        """Write this host's ``kvlayout.unserved_key`` marker for each partition
        of ``want`` (fenced by its queue's deletion: ``fence``) and delete
        those of partitions no longer in it. The first call lists the
        markers an earlier run of this host left (it may have stopped while
        a config was bad, and serve the queue now)."""
        if self._marked is None:
            _, keys = self.client.call(lambda c: c.kv.get(kv.POSITIONS_PREFIX, keys=True))
            tail = f"/{kv.UNSERVED_ORIGIN}/{self.node}"
            self._marked = set()
            for key in keys or []:
                parts = str(key)[len(kv.POSITIONS_PREFIX):].split("/")
                if str(key).endswith(tail) and len(parts) == 4 and (n := digits(parts[1])) is not None:
                    self._marked.add((parts[0], n))
        add = sorted(pid for pid in want - self._marked if pid[0] in fence)
        drop = sorted(self._marked - want)
        if add:
            value = base64.b64encode(kv.encode_unserved()).decode()
            writes: dict[str, list[dict[str, Any]]] = {}
            for q, p in add:
                writes.setdefault(q, []).append({"KV": {"Verb": "set", "Key": kv.unserved_key(
                    kv.PartitionId(q, p), self.node), "Value": value}})
            fenced = write_fenced(self.client, writes, {q: fence[q] for q in writes})
            done = [pid for pid in add if pid[0] not in fenced]
            self._marked.update(done)
            for q in sorted({q for q, _ in done}):
                log.warning("this host does not serve queue %s (its config in Consul KV is not valid and "
                            "it knows no earlier good value): marked in zmqueue-positions/%s/<p>/%s/%s, "
                            "so the other replicas write its streams until the value is fixed",
                            q, q, kv.UNSERVED_ORIGIN, self.node)
        for i in range(0, len(drop), TXN_OPS_MAX):
            ops = [{"KV": {"Verb": "delete", "Key": kv.unserved_key(kv.PartitionId(q, p), self.node)}}
                   for q, p in drop[i:i + TXN_OPS_MAX]]
            self.client.call(lambda c: c.txn.put(ops))  # noqa: B023
        if drop:
            self._marked.difference_update(drop)
            for q in sorted({q for q, _ in drop}):
                log.info("this host serves queue %s again (or it is gone): its unserved marks are removed", q)

    def _should_hand_back(self, s: StreamKey, cand: Candidacy, passing: set[str],
                          positions: dict[StreamKey, tuple[int, int]],
                          state: Mapping[StreamKey, Mapping[str, kv.Position]]) -> bool:
        pref = cand.preferred
        if pref is None or pref == self.node or not preferred_serves(cand, passing):
            return False
        theirs = state.get(s, {}).get(pref)
        return theirs is not None and theirs >= kv.Position(*positions.get(s, (0, 0)))

    def _lock_write(self, sid: str, key: str, **how: str) -> bool | None:
        """``kv.put(key, acquire=sid)`` or ``release=sid``: Consul's answer, or
        None when it says the session is invalid. Every lock the session held
        is lost then, and the next cycle creates a new session at once instead
        of retrying with this one until its renewal is due (which kept a
        stream without a writer for 2-3 s after a Consul restart)."""
        try:
            return bool(self.client.call(lambda c: c.kv.put(key, self.value, **how)))
        except consul.ConsulException as exc:
            if "invalid session" not in str(exc):
                raise
            log.warning("session %s is no longer valid (%s); every lock it held is lost, "
                        "campaigning with a new session", sid, exc)
            self._lose_all()
            return None

    def _take(self, sid: str, key: str, guard: Guard) -> int | None:
        """:func:`kvguard.take_lock` with this host's value; None when Consul
        says the session is invalid (as :meth:`_lock_write`)."""
        got = take_lock(self.client, key, self.value, sid, guard)
        if got == INVALID_SESSION:
            log.warning("session %s is no longer valid; every lock it held is lost, "
                        "campaigning with a new session", sid)
            self._lose_all()
            return None
        return got

    def _acquire(self, s: StreamKey, sid: str, cand: Candidacy, guard: Guard, used: int = 0) -> bool:
        """Try to take ``s``'s lock (for the stream ``cand`` describes; fenced
        by ``guard``, see :meth:`_take`); False when the session is invalid.
        The epoch is the lock's LockIndex, which must pass ``used``, the
        newest epoch of a record this host or a peer's published position
        holds: a lock key deleted (by hand, or a KV export and import)
        starts again at 1, and replicas refuse a writer whose epoch is below
        theirs (the stream took no writes, for good). Each release and
        acquire moves LockIndex up one; at most BUMP_MAX times."""
        key = lock_key(s)
        epoch = 0
        for attempt in range(BUMP_MAX + 1):
            if attempt:
                if attempt == 1:
                    log.warning("the writer lock of %s was granted at LockIndex %d, but epoch %d is used "
                                "already (the lock key was deleted by hand, or imported?): taking it again "
                                "until its LockIndex passes %d", s, epoch, used, used)
                if self._lock_write(sid, key, release=sid) is None:
                    return False
            got = self._take(sid, key, guard)
            if got is None:
                return False
            if got == FENCED:
                log.info("the writer lock of %s was not taken: its queue's tombstone changed since it was "
                         "read (the queue deleted meanwhile?); reading it again", s)
                self.guards.recheck(s[0])
                return True
            if got <= 0:
                return True
            epoch = got
            if epoch > used:
                break
        else:
            log.error("the writer lock of %s is at LockIndex %d after %d tries, not above epoch %d: "
                      "released; replicas would refuse this writer", s, epoch, BUMP_MAX, used)
            self._lock_write(sid, key, release=sid)
            return True
        self.held[s] = epoch
        self._elected_opened[s], self._elected_inc[s] = cand.opened, cand.incarnation
        log.info("became writer of %s at epoch %d", s, epoch)
        self.post(Elected(s, epoch))
        return True

    def _release(self, s: StreamKey) -> None:
        sid = self.session
        if sid is None or self._lock_write(sid, lock_key(s), release=sid) is None:
            return
        self._elected_opened.pop(s, None)
        self._elected_inc.pop(s, None)
        if self.held.pop(s, None) is not None:
            log.info("released the writer lock of %s", s)
            self.post(Deposed(s))

    def _publish_positions(self, positions: dict[StreamKey, tuple[int, int]],
                           fence: Mapping[StreamKey, Guard], urgent: bool = False,
                           confirmed: Mapping[StreamKey, int] | None = None,
                           opening: Collection[StreamKey] = (),
                           acked: Mapping[StreamKey, int] | None = None) -> None:
        """Publish the positions that changed, at most every POSITIONS_EVERY_S;
        with ``urgent`` (a lock is free), those of streams whose lock was
        released since they were published go out at once: a candidate
        counts only positions published after the release
        (:func:`heard_enough`). Streams in ``opening`` and not opened yet go
        out at once, marked opened, and each is answered with :class:`Opened`
        once Consul has it. Every write carries its queue's guard from
        ``fence`` (:func:`kvguard.write_fenced`): a stream not in it writes
        nothing, nor does one whose queue was deleted since."""
        now = time.monotonic()
        due = now - self._published_at >= POSITIONS_EVERY_S
        asked = {s for s in opening if s not in self._opened and s in positions and s in fence}
        if not due and not urgent and not asked:
            return
        confirmed = confirmed or {}
        current = {s: (*p, self._seen.get(s, 0), confirmed.get(s, 0), s in self._opened or s in asked)
                   for s, p in positions.items() if s in fence}
        changed = {s: p for s, p in current.items() if self._published.get(s) != p
                   and (due or s in asked or p[2] != (self._published.get(s) or (0, 0, 0, 0, False))[2])}
        floors = {s: n for s, n in (acked or {}).items()
                  if due and s in fence and n > self._floors.get(s, 0)}
        if not changed and not floors:
            return
        writes: dict[str, list[dict[str, Any]]] = {}
        for s, (e, q, seen, conf, mark) in changed.items():
            value = kv.encode_position(kv.Position(e, q), seen, conf, mark)
            writes.setdefault(s[0], []).append({"KV": {"Verb": "set", "Key": kv.stream_position_key(
                kv.PartitionId(s[0], s[1]), s[2], self.node), "Value": base64.b64encode(value).decode()}})
        for s, n in floors.items():
            writes.setdefault(s[0], []).append({"KV": {"Verb": "set", "Key": kv.stream_acked_key(
                kv.PartitionId(s[0], s[1]), s[2]), "Value": base64.b64encode(kv.encode_acked(n)).decode()}})
        fenced = write_fenced(self.client, writes, {s[0]: g for s, g in fence.items()})
        for name in fenced:
            log.info("positions of queue %s not published: its tombstone changed since it was read (the "
                     "queue deleted meanwhile?); reading it again", name)
            self.guards.recheck(name)
        changed = {s: p for s, p in changed.items() if s[0] not in fenced}
        self._published.update(changed)
        self._floors.update({s: n for s, n in floors.items() if s[0] not in fenced})
        if due:
            self._published_at = now
        for s, (_, q, _, _, mark) in changed.items():
            if (q or mark) and s not in self._opened:
                self._opened.add(s)
                if s in opening:
                    self.post(Opened(s))

    def _release_all(self) -> None:
        try:
            for s in list(self.held):
                self._release(s)
            if self.session is not None:
                sid = self.session
                self.client.call(lambda c: c.session.destroy(sid))
        except (ConsulUnavailable, consul.ConsulException) as exc:
            log.warning("could not release locks on stop: %s", exc)

    def stop(self) -> None:
        self.stopped.set()
        self._wake.set()
