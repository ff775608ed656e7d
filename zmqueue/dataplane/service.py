"""The queue service: the data-plane handlers for messages, on one host.

The host keeps a copy of every stream of every partition it is a replica of
(:mod:`zmqueue.dataplane.stream`). It serves sends, receives, deletes and
visibility changes only for the streams it currently writes (it holds their
Consul lock, within its lease); a request for a stream another host writes
gets NotLeader naming that host. A request for a queue this host has not heard
of is parked while the host refreshes its metadata, then served or refused
with QueueNotFound. A newly elected writer's recovery, and the requests held
until it settles, are :mod:`zmqueue.dataplane.handover`'s.

Group commit: handlers append to stores; :meth:`flush` commits every store
touched in this loop iteration, publishes the new records to the replicas,
and acknowledges a request once its records are on a quorum of replicas
(synchronous replication) or committed locally (asynchronous). It never
reads Consul: the host hands it metadata and leadership events.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zmqueue.config import MAX_VISIBILITY_S
from zmqueue.dataplane import fields as F
from zmqueue.dataplane.deadletters import DeadLetterMover
from zmqueue.dataplane.dispatch import DEFERRED, Dispatcher, Request, now_ms
from zmqueue.dataplane.forwarder import Forwarder
from zmqueue.dataplane.handover import Handover
from zmqueue.dataplane.messages import check_groups
from zmqueue.dataplane.nowriter import ConsulLost, no_writer
from zmqueue.dataplane.pushing import Pusher
from zmqueue.dataplane.replication import Replicator
from zmqueue.dataplane.resends import request_tag
from zmqueue.dataplane.server import Wakeable
from zmqueue.dataplane.storage import StorageConfig
from zmqueue.dataplane.storage.records import BLOCK_TARGET_BYTES
from zmqueue.dataplane.storage.store import STATS_KEYS
from zmqueue.dataplane.stream import LEASE_S, SILENT_S, PendingAck, Role, Stream
from zmqueue.dataplane.streamset import OPEN_RETRY_MS, StreamSet
from zmqueue.dataplane.topology import FIFO_ORIGIN, Metadata, PartKey, StreamKey, config_unreadable
from zmqueue.dataplane.waiting import Waiters, has_messages
from zmqueue.errors import (
    InvalidParameter,
    InvalidReceipt,
    NotLeader,
    QueueNotFound,
    Unavailable,
    ZmqueueError,
    to_wire,
)
from zmqueue.protocol import MAX_BATCH, REPLY_MESSAGE_BYTES_MAX, RETRY_MARK, Command, Receipt, hex_ids

log = logging.getLogger(__name__)

MAX_WAIT_MS = 20_000
PARK_TIMEOUT_MS = 3000
HOUSEKEEPING_MS = 1000
HOUSEKEEPING_SLICES = 10
ACK_TIMEOUT_S = 5.0
_INT_ONLY = {int}


def _delete_refs(body: dict[str, Any]) -> tuple[str, list[int], list[int]]:
    """A RECEIVE's ``dref``: ``[origin, seqs, receive counts]``, validated."""
    raw = body.get("dref")
    if isinstance(raw, list) and len(raw) == 3:
        origin, seqs, counts = raw
        if (isinstance(origin, str) and isinstance(seqs, list) and isinstance(counts, list)
                and 0 < len(seqs) == len(counts) <= MAX_BATCH
                and {*map(type, seqs), *map(type, counts)} == _INT_ONLY  # (not bool: a subclass)
                and 0 <= min(seqs) <= max(seqs) < 2**63 and 0 <= min(counts) <= max(counts) < 2**63):
            return origin, seqs, counts
    raise InvalidParameter("dref must be [origin, seqs, receive counts]: one stream's messages, "
                           f"1 to {MAX_BATCH}, as a received column group names them", field="dref")


def _incarnation(body: dict[str, Any]) -> int | None:
    """A ``dref``'s ``inc``: the queue incarnation its messages were received
    from (None: a client that sends none)."""
    inc = body.get("inc")
    if inc is None or (type(inc) is int and 0 <= inc < 2**63):
        return inc
    raise InvalidParameter("inc must be the queue incarnation a receive reply named (an int)", field="inc")


def _results(errors: list[InvalidReceipt | None]) -> list[Any]:
    """Delete outcomes on the wire: nil, or an error map. Deleting a message
    that is already gone succeeds (as in SQS), so a retried delete is
    idempotent; a receipt of a message received again since is refused."""
    return [None if err is None or err.details.get("gone") else to_wire(err) for err in errors]


def dead_letter_items(raw: list[Any], limit: int) -> list[tuple[bytes, bytes, bytes, int, str]]:
    """Validate the items of a dead-letter SEND (host to host):
    [message id hex, body, attributes blob, receive count, source queue]."""
    out = []
    for i, item in enumerate(raw):
        ok = (isinstance(item, list) and len(item) == 5 and isinstance(item[0], str)
              and len(item[0]) == 32 and isinstance(item[1], bytes) and isinstance(item[2], bytes)
              and isinstance(item[3], int) and 0 <= item[3] < 2**31 and isinstance(item[4], str))
        if not ok:
            raise InvalidParameter(f"dead letter {i}: expected [id hex, body, blob, count, source]")
        try:
            mid = bytes.fromhex(item[0])
        except ValueError:
            raise InvalidParameter(f"dead letter {i}: the message id is not hex") from None
        if len(item[1]) + len(item[2]) > max(limit, 1 << 20):
            raise InvalidParameter(f"dead letter {i} is larger than the DLQ accepts")
        out.append((mid, item[1], item[2], item[3], item[4]))
    return out


class QueueService:
    def __init__(self, node: str, data_dir: Path, forwarder: Forwarder, pub: Any,
                 request_refresh: Callable[[], None],
                 storage_defaults: StorageConfig | None = None) -> None:
        self.node = node
        self.forwarder = forwarder
        self.request_refresh = request_refresh
        self.meta = Metadata()
        self.unserved: frozenset[PartKey] = frozenset()
        """The partitions of the queues this host does not serve (their config
        is bad and it knows no good value: ``Metadata.unreadable``); the
        leadership thread marks them in Consul (``kvlayout.unserved_key``)."""
        self.set = StreamSet(node, data_dir / "queues", storage_defaults or StorageConfig(),
                             trash=data_dir / "trash")
        self.parked: list[tuple[Request, int]] = []
        self.dirty: set[StreamKey] = set()
        self.dlq_targets: set[StreamKey] = set()
        """Streams that took dead letters this iteration: committed first, so a
        source's DLQ_MOVE record is never durable before the copy is."""
        self.new_acks: dict[StreamKey, list[PendingAck]] = {}
        self.acking: dict[StreamKey, Stream] = {}
        """Streams with sends waiting for their replicas (``st.acks``): the
        per-iteration timeout check looks at these, not at every stream."""
        self.opened: set[StreamKey] = set()
        """Streams whose position from this host is in Consul past seq 0 or
        marked opened (the leadership thread's ``Opened``): their writer may
        acknowledge. Until then a stream's first acknowledgements wait
        (``opening``), so that no manager reading positions up to 0.5 s old
        takes a stream with acknowledged records for an empty one and moves
        its partition to empty replicas (docs/REPLICATION.md, "A stream's
        first records")."""
        self.opening: set[StreamKey] = set()
        """Streams whose acknowledgements wait for their opened mark."""
        self.consul_lost: ConsulLost | None = None
        """Since when the leadership thread has not reached Consul (None: it does)."""
        self.election_waits: dict[StreamKey, str] = {}
        """Streams without a writer whose election here waits for their voters:
        what for (the leadership thread's ``Waiting``)."""
        self.opening_asked = False
        """``opening`` gained a stream since the leadership thread last heard."""
        self.marked_replies: dict[StreamKey, list[tuple[Request, Any, float]]] = {}
        """Retried sends found in this host's copy of a stream not opened here
        yet: answered once it is (``_answer_when_opened``)."""
        self.waiters = Waiters()
        self.pusher = Pusher()
        self.watches = (self.waiters.watch, self.pusher.watch)
        """What a pass's changes and ``touch`` are handed to (see partwatch)."""
        self.next_housekeeping_ms = 0
        self.next_open_retry_ms = 0
        self.housekeeping_due: list[StreamKey] = []
        self.housekeeping_slice = 1
        self.handover = Handover(self)
        """Newly elected writers' recovery, and the requests held meanwhile."""
        self.replicator = Replicator(forwarder.ctx, node, pub, forwarder, lambda: self.set.streams,
                                     self.meta_peer_endpoint, self.dirty.add, self._resync,
                                     self.commit_if_big)
        self.dlq = DeadLetterMover(self)
        self.set.on_open = self._note_recent_sends

    def _note_recent_sends(self, st: Stream, now: int) -> None:
        """A stream opened from disk: its recent sends can answer retries, with R > 1
        or when another host may have written them: a standard stream of another
        origin (R was lowered, or drained to one), and a FIFO partition's one stream
        whatever R, since whichever host is elected writes it (after R was lowered or
        its replica moved, other hosts' records) and nothing on disk says which host
        wrote a record (its epoch names a term, not a host). With R=1 that costs one
        read of the stream's last records at its open, and lookups of the
        partition's sends for the TTL after, if it stored any within it."""
        if (len(st.replicas) > 1 or st.key[2] != self.node) and st.store.last_seq:
            self.replicator.resends.note_recent(st.queue, st.partition, st.store, now, st.key[2])

    def meta_peer_endpoint(self, node: str) -> str | None:
        return self.meta.peer_endpoint(node)

    def handlers(self) -> dict[Command, Callable[[Request, dict[str, Any], int], Any]]:
        """The client-facing commands; one table for registration and for
        re-running requests parked while metadata was refreshed."""
        return {Command.SEND: self.h_send, Command.RECEIVE: self.h_receive,
                Command.DELETE: self.h_delete, Command.CHANGE_VISIBILITY: self.h_change_visibility,
                Command.PURGE_QUEUE: self.h_purge, Command.QUEUE_STATS: self.h_stats,
                Command.SUBSCRIBE: self.h_subscribe, Command.CREDIT: self.h_credit,
                Command.UNSUBSCRIBE: self.h_unsubscribe, Command.CANCEL: self.h_cancel}

    def register(self, d: Dispatcher) -> None:
        self.pusher.outbox = d.outbox
        for cmd, fn in self.handlers().items():
            d.register(cmd, self._guard(fn))
        d.register(Command.CATCH_UP, lambda req: self.replicator.h_catch_up(F.body_map(req.body)),
                   sockets=("peer",))
        d.register(Command.POSITION, self._h_position, sockets=("peer",))
        d.register(Command.POSITIONS, self._h_positions, sockets=("peer",))
        d.one_way[Command.POSITION] = self._note_position

    # --- metadata and leadership --------------------------------------------------
    def apply_metadata(self, meta: Metadata, now: int, allow_removals: bool = True) -> None:
        """Hold the streams ``meta`` gives this node. With ``allow_removals``
        False (the control plane's state went back in time), nothing known is
        dropped: data is only removed after a deletion seen in a newer state."""
        if not allow_removals:
            meta = meta.merged_with(self.meta)
        self.meta = meta
        self.unserved = (frozenset(k for k in meta.partitions if k[0] in meta.unreadable)
                         if meta.unreadable else frozenset())
        for key in self.set.reconcile(meta, now):
            self._closed(key)
        writers = {}
        for (q, p), info in meta.partitions.items():
            for origin, node in info.writers.items():
                writers[(q, p, origin)] = node
        pubs = [pe.pub for pe in meta.peers.values() if pe.pub and pe.node != self.node]
        self.replicator.set_topology(pubs, writers)
        parked, self.parked = self.parked, []
        for req, _ in parked:
            self.redispatch(req)
        if self.handover.held:  # a writer may be known now
            self.handover.rerun()

    def _closed(self, key: StreamKey) -> None:
        """A stream this host no longer keeps: its queue was deleted, or its
        replica moved to another host (a drain). Pending sends and parked
        polls hear which: QUEUE_NOT_FOUND, or NOT_LEADER (the client re-reads
        the routes and goes on; it used to be told the queue was deleted)."""
        err: ZmqueueError
        if key[0] in self.meta.configs:
            err = NotLeader(f"this host no longer keeps queue {key[0]!r} partition {key[1]} (its "
                            "replica moved); retry", leader=None, endpoint=None)
        else:
            err = QueueNotFound(f"queue {key[0]!r} was deleted")
        for a in self.new_acks.pop(key, []):
            a.request.fail(err)
        for req, _, _ in self.marked_replies.pop(key, []):
            req.fail(err)
        self.opened.discard(key)
        self.opening.discard(key)
        if not self.set.led_streams((key[0], key[1])):
            self.waiters.fail_partition((key[0], key[1]), err)
            self.pusher.drop_partition((key[0], key[1]))

    def metadata_unavailable(self) -> None:
        parked, self.parked = self.parked, []
        for req, _ in parked:
            req.fail(Unavailable("queue metadata is unavailable (Consul unreachable); retry"))

    def on_elected(self, key: StreamKey, epoch: int) -> None:
        self.handover.on_elected(key, epoch)

    def on_deposed(self, key: StreamKey) -> None:
        st = self.set.streams.get(key)
        if st is None:
            return
        st.role = Role.REPLICA
        self.handover.on_deposed(key)
        err = NotLeader(f"this host stopped writing {key[0]!r}/{key[1]}; retry", leader=None,
                        endpoint=None)
        for a in list(st.acks) + self.new_acks.pop(key, []):
            a.request.fail(err)
        st.acks.clear()
        part = (key[0], key[1])
        if not self.set.led_streams(part):
            self.waiters.answer_all(part)

    def touch(self, part: PartKey) -> None:
        """A stream of ``part`` may have become receivable other than by a
        request (it started or resumed writing): its parked polls and push
        subscribers are looked at in the next pass."""
        for watch in self.watches:
            watch.touch(part)

    def on_opened(self, key: StreamKey) -> None:
        """This host's position of ``key`` in Consul says the stream holds
        records (or may): its writer releases what waited for that, and the
        retried sends found in its copy are answered."""
        self.opened.add(key)
        self.opening.discard(key)
        for req, result, _ in self.marked_replies.pop(key, []):
            req.committed = True  # (applied and committed here before it was found)
            req.reply(result)
        st = self.set.streams.get(key)
        if st is not None and st.role is Role.WRITER:
            self._release(st)

    def _answer_when_opened(self, req: Request, key: StreamKey, result: Any) -> Any:
        """``result`` for a retried send found in this host's copy of stream
        ``key`` (its writer died before replying): at once if the stream is
        opened here, else once this host's position of it is in Consul (this
        answer acknowledges the send, and no manager may take the partition
        for an empty one meanwhile: REPLICATION, "A stream's first records")."""
        if key in self.opened or key not in self.set.streams:
            return result
        self._ask_open(key)
        self.marked_replies.setdefault(key, []).append((req, result, time.monotonic()))
        return DEFERRED

    def _ask_open(self, key: StreamKey) -> None:
        """Have the leadership thread mark this host's position of ``key``
        opened (answered by ``on_opened``)."""
        if key not in self.opening:
            self.opening.add(key)
            self.opening_asked = True

    @staticmethod
    def _not_opened(queue: str, p: int, what: str) -> Unavailable:
        return Unavailable(
            f"queue {queue!r} partition {p}: {what}, but this host could not record in Consul within "
            f"{ACK_TIMEOUT_S:.0f} s that the stream holds records (an acknowledgement waits for that, "
            f"so that no manager moves the partition away as empty). Check the host's Consul agent "
            f"(zmqueue status) and retry, with the same dedup id on a FIFO queue; the write may still "
            f"be delivered", stored=True)

    def on_confirmed(self, streams: frozenset[StreamKey], at: float, by_consul: bool = True) -> None:
        """The leadership thread confirmed these streams' locks at ``at``;
        ``by_consul`` False: through a Consul outage, unconfirmed, so their
        writes need a majority of the replicas until Consul confirms again
        (``Stream.unconfirmed``, ``writer_election.Confirmed``)."""
        mono = time.monotonic()
        for key in streams:
            st = self.set.streams.get(key)
            if st is not None and st.role is not Role.REPLICA:
                if st.lease_until <= mono:  # writing again: its parked polls may be served
                    self.touch((key[0], key[1]))
                st.lease_until = max(st.lease_until, at + LEASE_S)
                if st.unconfirmed == by_consul:
                    st.unconfirmed = not by_consul
                    if st.config.sync_replication:  # (its writes wait for a majority anyway: nothing to say)
                        continue
                    name = "/".join(map(str, key))
                    if by_consul:
                        log.info("stream %s: Consul confirms its writer again; asynchronous writes "
                                 "are acknowledged by this host alone again", name)
                    else:
                        log.warning("stream %s: Consul unreachable; until it confirms this host as the "
                                    "writer again, asynchronous writes are acknowledged once a majority "
                                    "of the replicas holds them (another host may have been elected)", name)

    def candidacies(self) -> dict[StreamKey, tuple[tuple[str, ...], str | None, tuple[str, ...], bool,
                                                   tuple[str, ...], tuple[str, ...], str, int, int]]:
        """Per stream: its replicas, its preferred writer, its joining replicas,
        whether its replication is synchronous, a change of the voters in
        flight (its leaving replicas and its previous voters), its
        ``sync_quorum``, which opening of the stream on this host it is
        (``Stream.opened``), and its queue's incarnation."""
        return {k: (st.replicas, None if k[2] == FIFO_ORIGIN else k[2], st.joining,
                    st.config.sync_replication, st.leaving, st.previous, st.config.sync_quorum, st.opened,
                    st.config.incarnation)
                for k, st in self.set.streams.items()}

    def leadership_view(self) -> tuple[dict[StreamKey, tuple[int, int]], dict[StreamKey, int],
                                       dict[StreamKey, int], dict[StreamKey, int]]:
        """What the leadership thread publishes, in one walk over the streams
        (every 0.1 s; a host may keep hundreds): each stream's position
        (epoch of its last record, seq); per stream this host writes, the
        assignment version whose change of the voters it has confirmed
        (``Stream.confirmation``), when any; and per stream it writes with
        ``sync_quorum="all"``, the highest seq every voter holds (its acked
        floor, ``kvlayout.stream_acked_key``); and per stream whose term
        (``Stream.epoch``, from the frames and heartbeats it heard) is newer than
        its last record's, that term (a term that wrote nothing here still
        counts: a replica refuses a writer of an older one)."""
        positions, confirmations, acked, terms = {}, {}, {}, {}
        for k, st in self.set.streams.items():
            positions[k] = (last_epoch := st.store.last_epoch, st.store.last_seq)
            if st.epoch > last_epoch:
                terms[k] = st.epoch
            if st.role is Role.WRITER:
                if st.previous or st.confirmed:
                    confirmations[k] = st.confirmation()
                if st.every:
                    acked[k] = st.replicated_seq()
        return positions, confirmations, acked, terms

    def _resync(self, key: StreamKey, keep: int) -> None:
        try:
            fresh = self.set.resync(key, keep, now_ms())
        except (OSError, ZmqueueError) as exc:  # (a full or failing disk: not the loop's end)
            log.error("stream %s: could not cut its diverged copy after seq %d (%s); it catches "
                      "up from where it ends and is cut again when the writer answers",
                      "/".join(map(str, key)), keep, exc)
            fresh = self.set.streams.get(key)
        if fresh is not None:
            self.replicator.catch_up(fresh, now_ms())

    # --- request plumbing -------------------------------------------------------------
    def _guard(self, fn: Callable[[Request, dict[str, Any], int], Any]) -> Callable[[Request], Any]:
        def handler(req: Request) -> Any:
            return fn(req, F.body_map(req.body), now_ms())
        return handler

    def redispatch(self, req: Request) -> None:
        handler = self.handlers()[req.frame.command]
        try:
            result = handler(req, F.body_map(req.body), now_ms())
        except ZmqueueError as exc:
            req.fail(exc)
            return
        if result is not DEFERRED:
            req.reply(result)

    def known(self, req: Request, queue: str, p: int, now: int) -> bool:
        """Whether this host knows the partition; False after parking the request."""
        cfg = self.meta.configs.get(queue)
        if cfg is not None:
            if not 0 <= p < cfg.partitions:
                raise InvalidParameter(f"queue {queue!r} has partitions 0..{cfg.partitions - 1}",
                                       field="partition")
            return True
        bad = self.meta.unreadable.get(queue)
        if bad is not None:  # (no use parking: a refresh reads the same value)
            raise config_unreadable(queue, bad)
        if getattr(req, "_parked_once", False):
            raise QueueNotFound(f"queue {queue!r} does not exist; create it first", queue=queue)
        req._parked_once = True  # type: ignore[attr-defined]
        self.parked.append((req, now + PARK_TIMEOUT_MS))
        self.request_refresh()
        return False

    def redirect_to(self, queue: str, p: int, origin: str) -> str | None:
        """Another host that takes this stream's requests: its writer, or on
        a standard partition any replica writing its own stream; None if none
        is known."""
        info = self.meta.partitions.get((queue, p))
        writer = info.writers.get(origin) if info else None
        if writer == self.node:
            writer = None
        if writer is None and info is not None and origin != FIFO_ORIGIN:
            # standard queues: any replica that writes its own stream takes sends
            for n in info.replicas:
                if n != self.node and info.writers.get(n) == n:
                    return n
        return writer

    def not_writer(self, queue: str, p: int, origin: str) -> ZmqueueError:
        """NotLeader naming the host to try; when none is known and this
        host's copy failed to open, that failure (the cause, what to do); else
        why no host writes it (:func:`no_writer`: Consul lost, an election
        waiting for a majority). A request for another host's stream (a purge
        or stats of one stream, a delete by receipt) names that stream's
        writer only: a replica writing its own stream does not write this one
        either, and two such hosts named each other, so a client bounced the
        request between them until its deadline."""
        if origin in (self.node, FIFO_ORIGIN):
            writer = self.redirect_to(queue, p, origin)
        else:
            info = self.meta.partitions.get((queue, p))
            writer = info.writers.get(origin) if info is not None else None
            writer = None if writer == self.node else writer
        failure = self.set.failed.get((queue, p, origin))
        if writer is None and failure is not None:
            err = failure.error
            return type(err)(f"queue {queue!r} partition {p}: {err} (tried {failure.attempts} times)",
                             **err.details)
        return no_writer(queue, p, origin, writer, self.meta.client_endpoint(writer), lost=self.consul_lost,
                         waiting=self.election_waits.get((queue, p, origin)), now=time.monotonic())

    def on_consul_outage(self, since: float | None, grace_s: float) -> None:
        self.consul_lost = None if since is None else ConsulLost(since, grace_s)

    def on_waiting(self, key: StreamKey, note: str | None) -> None:
        if note is None:
            self.election_waits.pop(key, None)
        else:
            self.election_waits[key] = note

    def writer_stream(self, queue: str, p: int, origin: str, named_by: str | None = None) -> Stream:
        """The stream this host writes, else NOT_LEADER naming its writer.
        ``named_by``: where the request named the origin (``receipt``, or the
        field, e.g. ``origin``): a stream the partition does not have is then
        refused as such (:meth:`check_origin`) rather than with NOT_LEADER."""
        st = self.set.streams.get((queue, p, origin))
        if st is None and named_by is not None:
            self.check_origin(queue, p, origin, named_by)
        if st is None or not st.writable:
            if st is not None and st.handing_over and st.role is Role.WRITER:
                to = self.redirect_to(queue, p, origin)
                raise NotLeader(f"{queue!r} partition {p} ({origin}) is being handed over: this host "
                                "is leaving its replica set (drained or replaced) and takes no more "
                                f"writes; retry {'on ' + to if to else 'in a moment'}",
                                leader=to, endpoint=self.meta.client_endpoint(to))
            raise self.not_writer(queue, p, origin)
        return st

    def check_origin(self, queue: str, p: int, origin: str, named_by: str) -> None:
        """Refuse a request naming a stream partition ``p`` does not have: an
        origin that is no replica, former voter or leaving replica of its
        assignment, no stream with a writer, and not on this host's disk. Only
        a replica of the partition (not joining) judges: it keeps every stream
        of it (another host answers NOT_LEADER naming a replica, which does).
        Before the forty-sixth session such a request got NOT_LEADER naming a
        replica that redirected it back (h1 said h2, h2 said h1), and the
        client went to and fro until its timeout."""
        info = self.meta.partitions.get((queue, p))
        if info is None or self.node not in info.replicas or self.node in info.joining:
            return
        known = (set(self.meta.origins((queue, p))) | set(info.previous) | set(info.leaving)
                 | self.set.kept_origins((queue, p)))
        if origin in known:
            return
        what = (f"queue {queue!r} partition {p} has no stream {origin!r} (its streams: "
                f"{', '.join(sorted(known))}): no host writes it and no replica keeps it")
        if named_by == "receipt":
            raise InvalidReceipt(f"the receipt names a stream that does not exist: {what}; it was not "
                                 "issued by this queue (drop it)")
        raise InvalidParameter(what, field=named_by)

    def _part(self, req: Request, body: dict[str, Any], now: int) -> tuple[str, int] | None:
        queue = F.get_queue(body)
        p = F.get_int(body, "p", 0, 63, default=0, name="partition")
        return (queue, p) if self.known(req, queue, p, now) else None

    def in_reach(self, st: Stream, what: str) -> None:
        """Refuse a synchronous write at once (UNAVAILABLE, before anything is
        written) when the replicas out of reach leave it short of its quorum:
        it would only wait the ack timeout, and a refused send that was
        stored here could be delivered and then stored again by its retry."""
        gone = st.out_of_reach(self.meta.passing, time.monotonic())
        if not gone:
            return
        raise Unavailable(
            f"queue {st.queue!r} partition {st.partition}: replicas {gone} of {list(st.replicas)} "
            f"are down (no position report for {SILENT_S:.0f} s, not passing in Consul); "
            f"synchronous replication needs {st.needs()}. Nothing "
            f"was {what}: retry once one is back (zmqueue queue show {st.queue}; the operator "
            f"guide's \"quorum loss\")", replicas=len(st.replicas), down=gone, stored=False)

    def after_commit(self, st: Stream, req: Request, result: Any) -> Any:
        """Reply ``result`` once this iteration's records of ``st`` are replicated."""
        self.dirty.add(st.key)
        self.new_acks.setdefault(st.key, []).append(PendingAck(0, req, result))
        self.commit_if_big(st)
        return DEFERRED

    # --- handlers -------------------------------------------------------------------------
    def h_send(self, req: Request, body: dict[str, Any], now: int) -> Any:
        part = self._part(req, body, now)
        if part is None:
            return DEFERRED
        items = tag = None
        plain = "b" in body  # bodies alone (no attributes, delay, group or dedup id)
        if plain and "m" in body:  # (only b was stored, and one id answered, for all of them)
            raise InvalidParameter("a SEND carries plain bodies (b) or messages (m), not both; "
                                   "nothing was stored: send them as two requests, or all as m",
                                   field="bodies")
        if body.get("dl") is None:
            items = (F.get_list(body, "b", MAX_BATCH, name="bodies") if plain
                     else F.get_list(body, "m", MAX_BATCH, name="messages"))
            info = self.meta.partitions.get(part)
            stored = None
            # (R=1 from the start: no other host holds a copy, and nothing of the partition is
            # noted here. After R was lowered or a drain to one replica, this host writes the
            # streams the others wrote, a FIFO partition's one stream too, and holds their sends;
            # a retry marked rt is looked up whatever the index holds: the failed host's last
            # records may still be queued here unapplied, R just lowered, nothing noted yet)
            if info is not None and (len(info.replicas) > 1 or body.get(RETRY_MARK)
                                     or self.replicator.resends.holds(part[0], part[1], now)):
                tag = request_tag(req.user or "", req.frame.request_id, req.fingerprint)
                stored = self.replicator.resends.get(part[0], part[1], tag, len(items), now)
                if stored is None and body.get(RETRY_MARK):
                    # a retry after its first host failed: that host's last
                    # records may still be queued here, unapplied
                    self.replicator.take_pending(now)
                    stored = self.replicator.resends.get(part[0], part[1], tag, len(items), now)
            if stored is not None:
                # a retry of a send whose writer died before replying: its
                # records are in this host's copy of that writer's stream,
                # which the stream's next writer recovers like any record
                self.replicator.counters["sends_found_replicated"] += 1
                origin = self.replicator.resends.origin(part[0], part[1], tag or b"")
                return self._answer_when_opened(req, (part[0], part[1], origin),
                                                {"ib": stored} if plain else {"ids": hex_ids(stored)})
        cfg = self.meta.configs[part[0]]
        key = (part[0], part[1], FIFO_ORIGIN if cfg.fifo else self.node)
        if cfg.fifo and cfg.partitions > 1 and items is not None and not plain:
            check_groups(items, part[0], part[1], cfg.partitions)
        if self.handover.hold(req, [key], now):
            return DEFERRED
        st = self.writer_stream(*key)
        self.in_reach(st, "stored")
        if items is None:
            if req.sock != "peer":
                raise InvalidParameter("dead-letter moves are host-to-host (peer socket) only",
                                       field="dl")
            dead = dead_letter_items(F.get_list(body, "dl", MAX_BATCH), st.config.max_message_bytes)
            st.append_dead_letters(dead, now)
            self.dlq_targets.add(st.key)
            return self.after_commit(st, req, {"n": len(dead)})
        if plain:
            return self.after_commit(st, req, {"ib": st.send_bodies(items, now, tag)})
        return self.after_commit(st, req, {"ids": st.send(items, now, tag)})

    def readable_streams(self, part: PartKey) -> list[Stream]:
        led = self.set.led_streams(part)
        if not led:
            fifo = self.meta.configs[part[0]].fifo
            raise self.not_writer(part[0], part[1], FIFO_ORIGIN if fifo else self.node)
        return led

    def h_receive(self, req: Request, body: dict[str, Any], now: int) -> Any:
        part = self._part(req, body, now)
        if part is None:
            return DEFERRED
        max_n = F.get_int(body, "max", 1, MAX_BATCH, default=1, name="max_messages")
        wait_ms = F.get_int(body, "wait_ms", 0, MAX_WAIT_MS, default=0, name="wait_time")
        vis_s = F.get_opt_int(body, "vis_s", 0, MAX_VISIBILITY_S, name="visibility_timeout")
        cols = body.get("cols") is True
        if body.get("del") is not None or body.get("dref") is not None:
            return self._delete_then_take(req, part, body, max_n, wait_ms, vis_s, cols, now)
        if not self.set.led_streams(part) and self.handover.hold(
                req, [st.key for st in self.set.partition_streams(part)], now):
            return DEFERRED
        reply = self.take(self.readable_streams(part), max_n, vis_s, now, cols)
        if has_messages(reply) or wait_ms == 0:
            reply["x"] = self._elsewhere(part, now)
            return reply
        self.waiters.park(part, req, max_n, vis_s, now + wait_ms, cols)
        return DEFERRED

    def _elsewhere(self, part: PartKey, now: int) -> bool:
        """Whether this host's copies of the partition's streams it does not
        write show a receivable message (RECEIVE reply ``x``; False lets a
        client that got messages here skip the partition's other hosts).
        Replicas trail their writers a little: a hint, not a promise."""
        return any(st.store.may_have_visible(now) for st in self.set.partition_streams(part)
                   if not st.writable)

    def take(self, streams: list[Stream], max_n: int, vis_s: int | None, now: int,
             cols: bool = False) -> dict[str, Any]:
        """Up to ``max_n`` messages from ``streams``, as a RECEIVE reply:
        ``{"m": message lists}``, plus ``"ms": column groups`` when ``cols``
        and there is one (see Stream.receive). Their bytes are at most
        :data:`REPLY_MESSAGE_BYTES_MAX` in all: what a stream handed out counts
        against the next one's (at least one message per reply, though)."""
        lists: list[list[Any]] = []
        groups: list[list[Any]] = []
        n = spent = 0
        for i, st in enumerate(streams):
            if n >= max_n or spent >= REPLY_MESSAGE_BYTES_MAX:
                break
            group, msgs, dead, nbytes = st.receive(max_n - n, st.visibility_ms(vis_s), now, cols, spent,
                                                   count_bytes=i + 1 < len(streams))
            spent += nbytes
            if group is not None or msgs or dead:
                self.dirty.add(st.key)
            if dead:
                self.dlq.add(st, dead)
            if group is not None:
                groups.append(group)
                n += len(group[4])
            lists.extend(msgs)
            n += len(msgs)
        if not groups:
            return {"m": lists}
        inc = streams[0].config.incarnation  # (for the receipts the client builds from the groups)
        return {"m": lists, "ms": groups, "inc": inc} if inc else {"m": lists, "ms": groups}

    def _receipts(self, body: dict[str, Any]) -> list[Any]:
        return F.get_list(body, "r", MAX_BATCH, name="receipts")

    def _receipt_stream(self, req: Request, first: Receipt, now: int) -> Stream | None:
        if not self.known(req, first.queue, first.partition, now):
            return None
        return self.writer_stream(first.queue, first.partition, first.origin, named_by="receipt")

    def _delete_then_take(self, req: Request, part: PartKey, body: dict[str, Any], max_n: int,
                          wait_ms: int, vis_s: int | None, cols: bool, now: int) -> Any:
        """A RECEIVE carrying messages to delete first, as receipt texts (``del``)
        or as one stream's (seq, receive count) pairs (``dref``): one round trip
        for a consumer's delete + next receive. Answered after the deletes'
        commit and replication ack, like DELETE; it never parks."""
        if wait_ms:
            raise InvalidParameter("a receive that carries deletes (del, dref) cannot wait: "
                                   "send wait_ms 0, or delete first", field="wait_time")
        if body.get("del") is not None:
            items = F.get_list(body, "del", MAX_BATCH, name="del")
            first = Receipt.decode(items[0])
            if (first.queue, first.partition) != part:
                raise InvalidReceipt(f"del: the receipts must belong to queue {part[0]!r} partition "
                                     f"{part[1]}, the one received from")
            st = self.writer_stream(part[0], part[1], first.origin, named_by="receipt")
            self.in_reach(st, "deleted or received")
            results = self._delete_items(st, items, now)
        else:
            origin, seqs, counts = _delete_refs(body)
            st = self.writer_stream(part[0], part[1], origin, named_by="dref")
            self.in_reach(st, "deleted or received")
            results = _results(st.delete_refs(seqs, counts, now, _incarnation(body)))
        reply = self.take(self.readable_streams(part), max_n, vis_s, now, cols)
        reply["dr"] = results
        reply["x"] = self._elsewhere(part, now)
        return self.after_commit(st, req, reply)

    def h_delete(self, req: Request, body: dict[str, Any], now: int) -> Any:
        items = self._receipts(body)
        st = self._receipt_stream(req, Receipt.decode(items[0]), now)
        if st is None:
            return DEFERRED
        self.in_reach(st, "deleted")
        return self.after_commit(st, req, {"results": self._delete_items(st, items, now)})

    def _delete_items(self, st: Stream, items: list[Any], now: int) -> list[Any]:
        """Delete by receipt texts; one result per item (see _results)."""
        return _results(st.delete_many(items, now))

    def h_change_visibility(self, req: Request, body: dict[str, Any], now: int) -> Any:
        items = self._receipts(body)
        if not all(isinstance(i, list) and len(i) == 2 for i in items):
            raise InvalidParameter("change_visibility items must be [receipt, timeout_s]")
        back = body.get("back", False)
        if not isinstance(back, bool):
            raise InvalidParameter("back must be true or false", field="back")
        st = self._receipt_stream(req, Receipt.decode(items[0][0]), now)
        if st is None:
            return DEFERRED
        results: list[Any] = []
        for text, timeout_s in items:
            try:
                if not isinstance(timeout_s, int) or not 0 <= timeout_s <= MAX_VISIBILITY_S:
                    raise InvalidParameter(f"visibility timeout must be 0-{MAX_VISIBILITY_S} seconds",
                                           field="visibility_timeout")
                if back:  # (the receive undone: visible now, its count as before)
                    st.give_back(Receipt.decode(text), now)
                else:
                    st.change_visibility(Receipt.decode(text), timeout_s, now)
                results.append(None)
            except ZmqueueError as exc:
                results.append(to_wire(exc))
        return self.after_commit(st, req, {"results": results})

    def _written(self, part: PartKey, body: dict[str, Any]) -> list[Stream]:
        """The streams of ``part`` this host writes, or only stream ``o`` if the
        body names one (NOT_LEADER naming its writer when this host does not
        write it: a client follows one stream through a failover)."""
        origin = F.get_str(body, "o", 256, name="origin", optional=True)
        if origin is None:
            return self.readable_streams(part)
        return [self.writer_stream(part[0], part[1], origin, named_by="origin")]

    def h_purge(self, req: Request, body: dict[str, Any], now: int) -> Any:
        part = self._part(req, body, now)
        if part is None:
            return DEFERRED
        streams = self._written(part, body)
        n = 0
        for st in streams:
            n += st.store.purge(now)
            self.dirty.add(st.key)
        return self.after_commit(streams[0], req, {"purged": n})

    def h_stats(self, req: Request, body: dict[str, Any], now: int) -> Any:
        part = self._part(req, body, now)
        if part is None:
            return DEFERRED
        total = dict.fromkeys(STATS_KEYS, 0)  # zeros while this host has no stream of it yet
        own = bool(body.get("own")) or body.get("o") is not None
        streams = self._written(part, body) if own else self.set.partition_streams(part)
        for st in streams:
            for k, v in st.store.stats(now).items():
                total[k] = max(total.get(k, 0), v) if k == "oldest_age_ms" else total.get(k, 0) + v
        total["waiters"] = self.waiters.count(part)
        total["writer_streams"] = len(self.set.led_streams(part)) if body.get("o") is None else 1
        if body.get("o") is None:
            return total
        return {**total, "node": self.node}  # (a client counts each host's waiters once, not per stream)

    def h_subscribe(self, req: Request, body: dict[str, Any], now: int) -> Any:
        part = self._part(req, body, now)
        if part is None:
            return DEFERRED
        self.readable_streams(part)
        prefetch = F.get_int(body, "prefetch", 1, 1000, default=10)
        vis_s = F.get_opt_int(body, "vis_s", 0, MAX_VISIBILITY_S, name="visibility_timeout")
        return {"sub": self.pusher.subscribe(part, req.identity, prefetch, vis_s, body.get("cols") is True)}

    def h_credit(self, req: Request, body: dict[str, Any], now: int) -> Any:
        """Credits back to a subscription; the deletes of a finished batch of
        pushed messages may ride on them (auto_delete): one stream's (seq,
        receive count) pairs of the subscription's own partition, whose queue
        ``q`` names (``dref``; the front door checked the delete permission on
        it), or receipt texts (``del``, messages pushed as lists). Everything
        is checked before the credits count. A stream this host no longer
        writes answers without ``dr``: the client deletes on its own."""
        sub = F.get_int(body, "sub", 0, 2**62, name="subscription")
        n = F.get_int(body, "n", 0, 1000, name="credit")
        key: StreamKey | None = None
        refs: tuple[list[int], list[int]] | None = None
        inc: int | None = None
        items: list[Any] = []
        if body.get("dref") is not None and body.get("del") is not None:
            raise InvalidParameter("a CREDIT carries its deletes as dref or as del, not both", field="del")
        if body.get("dref") is not None:
            part = self.pusher.part_of(sub, req.identity)
            if body.get("q") != part[0]:
                raise InvalidParameter(f"dref: q must name the subscription's queue {part[0]!r}",
                                       field="q")
            origin, seqs, counts = _delete_refs(body)
            key, refs, inc = (part[0], part[1], origin), (seqs, counts), _incarnation(body)
        elif body.get("del") is not None:
            items = F.get_list(body, "del", MAX_BATCH, name="del")
            first = Receipt.decode(items[0])
            key = (first.queue, first.partition, first.origin)
        credit = self.pusher.add_credit(sub, req.identity, n)
        if key is None:
            return {"credit": credit}
        try:
            st = self.writer_stream(*key)
        except NotLeader:
            return {"credit": credit}
        dr = (_results(st.delete_refs(*refs, now, inc)) if refs is not None
              else self._delete_items(st, items, now))
        return self.after_commit(st, req, {"credit": credit, "dr": dr})

    def h_unsubscribe(self, req: Request, body: dict[str, Any], now: int) -> Any:
        self.pusher.unsubscribe(F.get_int(body, "sub", 0, 2**62, name="subscription"), req.identity)
        return {}

    def h_cancel(self, req: Request, body: dict[str, Any], now: int) -> Any:
        rid = F.get_int(body, "rid", 0, 2**64 - 1, name="request id")
        return {"cancelled": self.waiters.cancel(req.identity, rid)}

    def _note_position(self, body: Any, user: str | None = None) -> bool:
        """A one-way POSITION (a replica's report after a commit): recorded,
        acks released, nothing goes back. False for any other POSITION.
        ``user``: the connection's authenticated identity (CURVE), if any."""
        if not isinstance(body, dict) or body.get("ack") is not False:
            return False
        st = self.replicator.note_position(body, user)
        if st is not None:
            self._release(st)
        return True

    def _h_position(self, req: Request) -> Any:
        body = F.body_map(req.body)
        if self._note_position(body, req.user):
            return DEFERRED
        reply = self.replicator.h_position(body, req.user)
        st = self.set.streams.get(self.replicator_key(body))
        if st is not None:
            self._release(st)
        return reply

    def _h_positions(self, req: Request) -> Any:
        reply, noted = self.replicator.h_positions(F.body_map(req.body), req.user)
        for st in noted:
            self._release(st)
        return reply

    @staticmethod
    def replicator_key(body: Any) -> StreamKey:
        from zmqueue.dataplane.replication import parse_stream_id

        return parse_stream_id(body.get("s") if isinstance(body, dict) else None)

    # --- loop hooks ----------------------------------------------------------------------
    def tick(self, now: int, ready: frozenset[Wakeable] | None = None) -> int | None:
        """Timers, and the host-to-host sockets in ``ready`` (None: all)."""
        self.forwarder.poll(now, ready)
        self.replicator.poll(now, ready)
        self.handover.tick(now)
        if self.parked and self.parked[0][1] <= now:
            expired = [r for r, due in self.parked if due <= now]
            self.parked = [(r, due) for r, due in self.parked if due > now]
            for req in expired:
                req.fail(Unavailable("queue metadata did not arrive in time (Consul slow or "
                                     "unreachable); retry"))
        wake = self.waiters.serve(self, now)
        push_wake = self.pusher.push_all(self, now)
        if push_wake is not None and (wake is None or push_wake < wake):
            wake = push_wake
        self.dlq.move(now)
        self._expire_acks()
        if self.set.failed and now >= self.next_open_retry_ms:
            self._retry_opens(now)
        if now >= self.next_housekeeping_ms:
            self._housekeeping(now)
        return wake

    def _retry_opens(self, now: int) -> None:
        """Open again the streams whose stores failed to open (their queue's
        metadata did not change: nothing else would)."""
        self.next_open_retry_ms = now + OPEN_RETRY_MS
        for key in self.set.reconcile(self.meta, now):
            self._closed(key)
        if self.handover.held:  # a stream may be open now
            self.handover.rerun()

    def _housekeeping(self, now: int) -> None:
        """Expiry and compaction, every stream once per ``HOUSEKEEPING_MS``, a
        slice of the streams every ``HOUSEKEEPING_MS / HOUSEKEEPING_SLICES``
        (all at once took a host with 600 streams 10-50 ms: a stall in the
        send latency's tail once a second)."""
        self.next_housekeeping_ms = now + HOUSEKEEPING_MS // HOUSEKEEPING_SLICES
        if not self.housekeeping_due:
            self.housekeeping_due = list(self.set.streams)
            self.housekeeping_slice = -(-len(self.housekeeping_due) // HOUSEKEEPING_SLICES)
        keys = self.housekeeping_due[-self.housekeeping_slice:]
        del self.housekeeping_due[-self.housekeeping_slice:]
        for key in keys:
            st = self.set.streams.get(key)
            if st is None:
                continue
            if st.store.expire(now):
                self.dirty.add(key)
            st.store.compact(discard=self.set.trash.discard, now_ms=now)
            if st.role is Role.WRITER and st.store.last_epoch >= st.epoch:
                self._roll_idle(st, now)

    def _roll_idle(self, st: Stream, now: int) -> None:
        """An idle stream's active segment, old and holding no live message,
        is closed by a record of the writer's term (a block with an EPOCH record starts
        a new segment on every copy, docs/SEGMENT_FORMAT.md "Files"), so the
        next compaction removes it and the bodies it holds."""
        try:
            if not st.store.roll_due(now):
                return
            st.store.mark_epoch(now)
        except (OSError, ZmqueueError) as exc:  # a closed store, an unreadable block: not now
            log.debug("stream %s: no roll of its idle segment: %s", st.key, exc)
            return
        self.dirty.add(st.key)

    def _expire_acks(self) -> None:
        if self.marked_replies:
            self._expire_marked(time.monotonic() - ACK_TIMEOUT_S)
        if not self.acking:
            return
        limit = time.monotonic() - ACK_TIMEOUT_S
        for key, st in list(self.acking.items()):
            if not st.acks:
                del self.acking[key]
            while st.acks and st.acks[0].at < limit:
                a = st.acks.popleft()
                if key not in self.opened:
                    a.request.fail(self._not_opened(st.queue, st.partition, "the write is stored here"))
                    continue
                have = 1 + sum(1 for v in st.follower_pos.values() if v >= a.seq)
                why = ("synchronous replication needs" if st.config.sync_replication else
                       "this host cannot reach Consul (another host may write the stream now), so "
                       "until Consul confirms it as the writer again an asynchronous write needs")
                a.request.fail(Unavailable(
                    f"only {have} of {len(st.replicas)} replicas acknowledged within "
                    f"{ACK_TIMEOUT_S:.0f} s; {why} {st.needs()} (the "
                    f"others are down or behind: retry once they are back, with the same dedup "
                    f"id on a FIFO queue; the write is stored here and may still be delivered)",
                    replicas=len(st.replicas), acknowledged=have, stored=True))

    def _expire_marked(self, limit: float) -> None:
        for key, waiting in list(self.marked_replies.items()):
            while waiting and waiting[0][2] < limit:
                req, _, _ = waiting.pop(0)
                req.fail(self._not_opened(key[0], key[1], "this send is stored here (in a copy of a "
                                          "writer that failed before replying)"))
            if not waiting:
                del self.marked_replies[key]

    def _release(self, st: Stream) -> None:
        if st.store.last_epoch < st.epoch and st.store.last_seq:
            return  # no record of this term yet (its takeover record failed to commit)
        if st.key not in self.opened:
            if st.acks:  # (the stream's first acknowledgements)
                self._ask_open(st.key)
            return
        done = st.replicated_seq()
        while st.acks and st.acks[0].seq <= done:
            a = st.acks.popleft()
            a.request.committed = True  # flush() added it after its commit
            a.request.reply(a.result)

    def _commit(self, key: StreamKey) -> bool:
        """Commit stream ``key``'s staged records and settle the acks waiting for
        them (a writer publishes and waits for its replicas); True for a replica
        that committed (its position is reported)."""
        st = self.set.streams.get(key)
        acks = self.new_acks.pop(key, [])
        if st is None:
            return False
        try:
            st.store.commit()
        except ZmqueueError as exc:
            log.warning("commit of %s failed: %s", key, exc)
            for a in acks:
                a.request.fail(exc)
            if st.role is Role.WRITER:  # what was staged is gone: the takeover record too
                self.handover.unmarked.add(key)
            return False
        if st.role is Role.WRITER:
            if len(st.replicas) > 1:  # R=1: nobody to publish to
                self.replicator.publish(st)
            else:
                st.published_all()
            stamp = time.monotonic()
            for a in acks:
                a.seq, a.at = st.store.last_seq, stamp
                st.acks.append(a)
            self._release(st)
            if st.acks:
                self.acking[key] = st
            for a in acks:  # still waiting for replicas: encode the replies meanwhile
                if not a.request.answered:
                    a.request.prepare(a.result)
            return False
        for a in acks:
            a.request.reply(a.result)
        return True

    def commit_if_big(self, st: Stream) -> None:
        """Commit ``st`` now, in the middle of a loop pass, once its staged records
        hold :data:`BLOCK_TARGET_BYTES` (large messages arriving together made
        blocks, and the replication frames carrying them, larger than a peer
        takes: replicas stopped at them). The stream stays dirty: the pass's
        flush commits what is staged after, and tells the watches."""
        if st.store.staged_bytes >= BLOCK_TARGET_BYTES:
            self.replicator.counters["early_commits"] += 1
            self._commit(st.key)

    def flush(self) -> None:
        reported: set[StreamKey] = set()
        if self.dlq_targets:
            order = sorted(self.dirty, key=lambda k: k not in self.dlq_targets)
            self.dlq_targets.clear()
        else:
            order = list(self.dirty)
        for key in order:
            if self._commit(key):
                reported.add(key)
        for watch in self.watches:  # (what changed after this pass's serve)
            watch.note_changed(self.dirty)
        self.dirty.clear()
        self.replicator.report_positions(now_ms(), reported)
        self.replicator.resends.note_deferred()  # (the pass's applied chunks, after their acks)

    def close(self) -> None:
        self.set.close()
        self.replicator.close()
        self.forwarder.close()
