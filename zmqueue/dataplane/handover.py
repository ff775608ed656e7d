"""Writer handover on one host: from "elected" to "serving", and the
requests that arrive in between.

A host elected to write a stream does not serve it at once: the stream is
RECOVERING while the host asks its peers' positions and fetches the records
it lacks (catch-up), for at most ``RECOVERY_S``; then it becomes WRITER from
the last sequence it holds, and appends a record of its epoch (EPOCH) when
its log is not empty. Sends and receives that arrive meanwhile, or
while no writer of the stream is known at all (an election in progress), are
*held* (for at most ``WRITER_WAIT_MS`` in all) and run again when the writer
settles, instead of bouncing with NOT_LEADER. See docs/REPLICATION.md
("Held requests") and docs/SEQUENCES.md.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from zmqueue.dataplane.dispatch import Request, now_ms
from zmqueue.dataplane.stream import Role, Stream
from zmqueue.dataplane.topology import StreamKey
from zmqueue.errors import ZmqueueError
from zmqueue.protocol import Command

if TYPE_CHECKING:
    from zmqueue.dataplane.service import QueueService

log = logging.getLogger(__name__)

RECOVERY_S = 1.5
"""The longest a new writer waits for its peers' positions and catch-up."""
WRITER_WAIT_MS = 2000
"""The longest a send or receive is held waiting for a stream's writer to be
settled (see :meth:`Handover.hold`), then it gets NOT_LEADER."""


class Handover:
    def __init__(self, svc: QueueService) -> None:
        self.svc = svc
        self.recovering: dict[StreamKey, tuple[float, set[str]]] = {}
        """Per stream in recovery: its deadline and the peers not heard from yet."""
        self.ahead: dict[StreamKey, dict[str, tuple[int, int]]] = {}
        """Per stream in recovery: the peers whose answered position, (epoch of
        the last record, seq), was ahead of this host's copy, not fetched from yet."""
        self.held: dict[StreamKey, list[Request]] = {}
        """Sends and receives held while a stream's writer is being settled."""
        self.held_due = 0
        """The earliest time (ms) a held request stops waiting."""
        self.unmarked: set[StreamKey] = set()
        """Streams written here whose takeover record may have been lost with a
        failed commit (a full disk): appended again at the next tick."""

    # --- recovery of a newly elected writer -----------------------------------------
    def on_elected(self, key: StreamKey, epoch: int) -> None:
        svc = self.svc
        st = svc.set.streams.get(key)
        if st is None:
            return
        st.role, st.epoch = Role.RECOVERING, epoch
        st.lease_until = time.monotonic() + 1.0
        peers = {n for n in st.replicas if n != svc.node and n in svc.meta.passing()}
        self.recovering[key] = (time.monotonic() + RECOVERY_S, set(peers))
        self.ahead[key] = {}
        for n in peers:
            self._ask_position(st, n)

    def _ask_position(self, st: Stream, node: str) -> None:
        svc = self.svc
        endpoint = svc.meta.peer_endpoint(node)
        key = st.key
        if endpoint is None:
            self.recovering.get(key, (0.0, set()))[1].discard(node)
            return
        # (e = -1: no position of ours; term: the replica leaves older terms before it answers,
        # so nothing it holds after its answer, which is all this host fetches, is acknowledged
        # by an older writer: Raft's vote rule, docs/REPLICATION.md "A vote ends the older term")
        body = {"s": f"{key[0]}/{key[1]}/{key[2]}", "node": svc.node, "e": -1, "seq": -1, "term": st.epoch}

        def done(reply: Any, err: ZmqueueError | None) -> None:
            cur = svc.set.streams.get(key)
            rec = self.recovering.get(key)
            if rec is not None:
                rec[1].discard(node)
            if cur is None or err is not None or not isinstance(reply, dict):
                return
            last, last_epoch = reply.get("last"), reply.get("last_epoch")
            if cur.role is Role.RECOVERING and isinstance(last, int) and last > cur.store.last_seq:
                if isinstance(last_epoch, int) and key in self.ahead:
                    self.ahead[key][node] = (last_epoch, last)
                self._fetch(cur, node, last)

        svc.forwarder.request(endpoint, Command.POSITION, body, done, now_ms(), timeout_ms=1000)

    def _fetch(self, st: Stream, node: str, last: int) -> None:
        """Catch up from ``node`` (one catch-up per stream at a time: a peer
        that answered meanwhile is fetched from after it, see ``ahead``)."""
        if st.key in self.svc.replicator.catching_up:
            return
        self.ahead.get(st.key, {}).pop(node, None)
        log.info("new writer of %s fetches %d records from %s", st.key, last - st.store.last_seq, node)
        self.svc.replicator.catch_up(st, now_ms(), source=node)

    def _next_ahead(self, st: Stream) -> bool:
        """Fetch from the peer furthest ahead of this host's copy that is not
        fetched from yet; whether there was one. A peer that answered while
        the catch-up from another was in flight was skipped until the
        thirty-sixth session: with R = 5, a new writer that fetched from a
        peer less far along than another became writer without records a
        majority held (three of five need not include the first peer)."""
        ahead = self.ahead.get(st.key)
        mine = (st.store.last_epoch, st.store.last_seq)
        while ahead:
            node = max(ahead, key=ahead.__getitem__)
            if ahead[node] <= mine:
                ahead.clear()
                return False
            self._fetch(st, node, ahead[node][1])  # (takes it out of ``ahead``)
            if st.key in self.svc.replicator.catching_up:
                return True  # (else no endpoint is known for it: the next one)
        return False

    def _finish_recovery(self) -> None:
        svc = self.svc
        now = time.monotonic()
        for key, (deadline, pending) in list(self.recovering.items()):
            st = svc.set.streams.get(key)
            if st is None or st.role is not Role.RECOVERING:
                self.recovering.pop(key, None)
                self.ahead.pop(key, None)
                continue
            if now < deadline and (key in svc.replicator.catching_up or self._next_ahead(st)
                                   or pending):
                continue
            self.recovering.pop(key)
            self.ahead.pop(key, None)
            st.role = Role.WRITER
            svc.touch((key[0], key[1]))  # its parked polls and subscribers may be served now
            st.store.epoch = st.epoch
            # what replicas hold now: the next publish's prev is checked against it (an
            # epoch kept from when this host opened the stream empty, then applied
            # records as a replica, made every replica drop its copy)
            st.published_all()
            self._mark_epoch(st)
            st.follower_pos = {}
            st.follower_seen = {}
            st.writer_since = now
            log.info("writing stream %s at epoch %d from seq %d", key, st.epoch, st.store.last_seq)
            self.rerun(key)

    def _mark_epoch(self, st: Stream) -> None:
        """Append the takeover record (RecordType.EPOCH) to a log that is not
        empty, so that this host's position is of its own term before it
        acknowledges anything: without it, a log whose last records are of an
        older term compared as behind a copy holding another writer's later
        records, although some of its own had been acknowledged since (Raft's
        leader appends a no-op entry of its term for this). Every ack of this
        term waits for a quorum to hold the record (``PendingAck.seq`` is the
        store's last seq), as Raft commits older entries only with one of its
        own term. A pending ack is released only once the log holds a record
        of this term (``QueueService._release``), so a takeover record lost
        with a failed commit (a full disk) is appended again (``unmarked``)
        before anything is acknowledged. docs/REPLICATION.md, "Takeover record"."""
        if not st.store.last_seq or st.store.last_epoch >= st.epoch:
            return
        try:
            st.store.mark_epoch(now_ms())
        except ZmqueueError as exc:  # a closed store: the stream is going away
            log.warning("stream %s: no takeover record: %s", st.key, exc)
            return
        self.svc.dirty.add(st.key)

    def on_deposed(self, key: StreamKey) -> None:
        """The host lost ``key``'s lock: no recovery, held requests answered
        (NOT_LEADER, or redirected)."""
        self.recovering.pop(key, None)
        self.ahead.pop(key, None)
        self.rerun(key)

    # --- held requests -----------------------------------------------------------------
    def hold(self, req: Request, keys: list[StreamKey], now: int) -> bool:
        """Whether ``req`` now waits, for at most WRITER_WAIT_MS in all, until
        one of ``keys`` has a settled writer. That is while this host
        recovers a stream it was just elected to write, or while it keeps a
        stream for which no writer is known yet but itself (an election in
        progress: its own stream of a new queue, or a FIFO stream whose
        writer failed). The first sends and receives after a queue is
        created or a writer fails over then wait and are served, or
        redirected to the new writer, instead of bouncing with NOT_LEADER.
        Only for handlers that changed nothing before asking."""
        until = getattr(req, "_writer_wait_until", None)
        if until is None:
            until = now + WRITER_WAIT_MS
        elif now >= until:
            return False
        svc = self.svc
        for key in keys:
            st = svc.set.streams.get(key)
            # held only while no other host can take it: a standard
            # partition's other writers take sends and hold their own messages
            if key in self.recovering or (st is not None and st.role is Role.REPLICA
                                          and self._no_writer_but_me(key)):
                req._writer_wait_until = until  # type: ignore[attr-defined]
                self.held_due = min(self.held_due, until) if self.held else until
                self.held.setdefault(key, []).append(req)
                return True
        return False

    def _no_writer_but_me(self, key: StreamKey) -> bool:
        """Whether no host but this one is due to write ``key``: no writer is
        known and no other host takes its requests, or it is this host's own
        stream of a standard partition and no other host holds its lock. A
        host's own stream is its to write: just after a queue is created, or
        after the host restarts, it may be listed as the writer (its lock
        taken) before the election reaches the request loop, and a send
        redirected to another writer then would bounce a client that went to
        the listed writer."""
        svc = self.svc
        if key[2] == svc.node:
            info = svc.meta.partitions.get(key[:2])
            writer = info.writers.get(key[2]) if info is not None else None
            return writer is None or writer == svc.node
        return svc.redirect_to(*key) is None

    def rerun(self, key: StreamKey | None = None) -> None:
        """Run again the requests held for ``key`` (None: all of them). Each
        is served, redirected, or held again until its own deadline."""
        if key is not None:
            reqs = self.held.pop(key, [])
        else:
            reqs = [req for held in self.held.values() for req in held]
            self.held = {}
        for req in reqs:
            self.svc.redispatch(req)

    def tick(self, now: int) -> None:
        if self.recovering:
            self._finish_recovery()
        if self.unmarked:
            for key in self.unmarked:
                st = self.svc.set.streams.get(key)
                if st is not None and st.role is Role.WRITER:
                    self._mark_epoch(st)
            self.unmarked.clear()
        if self.held and now >= self.held_due:
            self.rerun()  # the ones past their deadline get NOT_LEADER
