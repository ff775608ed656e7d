"""Replication between hosts: PUB/SUB records with (epoch, seq), gap repair
over the peer channel, durable positions, heartbeats.

Writer side: after each group commit the writer publishes the stream's new
records on its PUB socket (topic = stream key). Every ``HEARTBEAT_MS`` it
publishes one heartbeat frame for all of its streams that some replica has
not reported caught up with (topic :data:`HEARTBEAT_TOPIC`). Replica side: a
SUB socket connected to every peer applies records that follow its last seq;
a gap (PUB/SUB drops under load and misses what was sent before a subscriber
joined), a heartbeat announcing more, or a restart makes it fetch the missing
range with CATCH_UP from the writer's peer ROUTER. After each commit a
replica reports its durable position (POSITION, one-way), which is what
synchronous replication waits for; every ``REPORT_EVERY_MS`` it reports all
of its replica streams to each writer host in one POSITIONS request.

Per-host batching: a host's fixed cost per stream is a few dictionary
lookups a second, not a frame or a request per stream (a host carrying
hundreds of idle streams spent its loop on per-stream heartbeats and
reports; docs/OPERATOR_GUIDE.md, "How many queues a host carries").

Fencing: a replica refuses records whose epoch is below the stream's current
epoch. A replica whose log diverged from the writer's (it holds records of an
older term that the writer does not have) is told to resync: it cuts its copy
back to what the writer's log shares with it (``keep``, see
:func:`keep_after_divergence`) and fetches the rest; with no ``keep`` (a
writer from before the thirty-sixth session) it drops the whole copy. A
replica reports a position in a term only once it holds a record of that
term (before, its longer diverged tail was counted as the writer's records).

Wire bodies (MessagePack). Records travel as chunks ``[table, heap]``: the
88-byte record rows and the payload heap exactly as in a segment block
(docs/SEGMENT_FORMAT.md), validated before use.

- PUB ``[topic, REPLICATE push {"s": key, "e": epoch, "prev": [epoch, seq], "c": [chunk...]}]``
- PUB ``[HEARTBEAT_TOPIC, HEARTBEAT push {"n": node, "h": [[key, epoch, last seq], ...]}]``
  (a single-stream body ``{"s", "e", "last"}`` from an older host is accepted)
- peer ``CATCH_UP {"s", "from", "prev": [epoch, seq], "max"}`` ->
  ``{"e", "c": [chunk...], "last"}`` or ``{"resync": true, "e", "keep": seq, "first": seq}``
  (``first``: the writer's first retained seq)
- peer ``POSITION {"s", "node", "e", "seq"}`` -> ``{"e", "last_epoch", "last"}``;
  with ``"ack": false`` (the report after each commit) no reply is sent; a new
  writer's recovery probe is ``{"e": -1, "seq": -1, "term": its epoch}``, and a
  replica's term moves up to ``term`` before it answers (its vote: it takes no
  record of an older term after it)
- peer ``POSITIONS {"node", "b": [[key, epoch, seq], ...]}`` ->
  ``{"b": [[epoch, last_epoch, last] or None or {"refused": reason}, ...]}``
  (one entry per asked stream, in order; None for a stream the writer host
  does not have, ``refused`` for one whose partition ``node`` is no replica of)

A position report is checked before it counts (docs/PROTOCOL.md): fields in
range (else INVALID_PARAMETER), ``node`` a replica of the partition, with
CURVE ``node`` the sender's ZAP User-Id (its host key's registered name,
else ACCESS_DENIED), and a seq past the writer's own log in its epoch is
ignored (one forged report used to acknowledge a send no replica held).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, cast

import zmq

from zmqueue import protocol
from zmqueue.dataplane.forwarder import Forwarder
from zmqueue.dataplane.resends import ReplicatedSends
from zmqueue.dataplane.server import Wakeable
from zmqueue.dataplane.storage import replay
from zmqueue.dataplane.storage.records import Table
from zmqueue.dataplane.storage.replica import validate
from zmqueue.dataplane.stream import Role, Stream
from zmqueue.dataplane.topology import StreamKey
from zmqueue.errors import AccessDenied, InvalidParameter, NotLeader, ProtocolError, StaleEpoch, ZmqueueError
from zmqueue.numbers import digits
from zmqueue.protocol import Command

log = logging.getLogger(__name__)

HEARTBEAT_MS = 200
HEARTBEAT_TOPIC = b"\x01heartbeats\x00"
"""Topic of the batched heartbeats (stream topics start with a queue name,
which never starts with a control character)."""
REPORT_EVERY_MS = 1000
BATCH_MAX = 1000
"""Streams per heartbeat frame and per POSITIONS request."""
CATCH_UP_MAX = 2000
STALE_LOG_EVERY_S = 60.0
POSITION_MAX = 2**63 - 1
"""Bound of a position report's epoch and seq (a probe sends -1 for both)."""
PUBLISH_MAX = 2000


def keep_after_divergence(prev_epoch: int, prev_seq: int, last_seq: int, first_seq: int,
                          epoch_at: Callable[[int], int | None]) -> int:
    """How much of a diverged copy its replica keeps: the copy ends with a
    record ``(prev_epoch, prev_seq)`` that this writer's log (``first_seq``
    .. ``last_seq``, ``epoch_at`` reading a record's epoch) does not hold.

    Epochs never decrease along a log, so where the writer's records are of
    a later term than ``prev_epoch`` the copy's (of ``prev_epoch`` or older)
    differ: the copy keeps up to the writer's last record of a term no later
    than ``prev_epoch``, and less than ``prev_seq`` (Kafka's truncation by
    leader epoch). What it keeps is checked again by the next catch-up's
    ``prev``, so a copy whose kept part still differs is cut again, each
    time shorter. 0 (the whole copy goes) when nothing can be compared: the
    writer's first retained record is already of a later term, or the copy
    ends below it (compaction removed the writer's older segments)."""
    lo, hi = first_seq, min(prev_seq - 1, last_seq)
    if hi < lo:
        return 0
    first = epoch_at(lo)
    if first is None or first > prev_epoch:
        return 0
    while lo < hi:  # epoch_at(lo) <= prev_epoch; binary search for the last such seq
        mid = (lo + hi + 1) // 2
        e = epoch_at(mid)
        if e is not None and e <= prev_epoch:
            lo = mid
        else:
            hi = mid - 1
    return lo


def stream_topic(key: StreamKey) -> bytes:
    return f"{key[0]}/{key[1]}/{key[2]}\x00".encode()


def stream_id(key: StreamKey) -> str:
    return f"{key[0]}/{key[1]}/{key[2]}"


def parse_stream_id(text: Any) -> StreamKey:
    if not isinstance(text, str) or text.count("/") != 2:
        raise InvalidParameter("bad stream id", field="s")
    q, p, o = text.split("/")
    n = digits(p)
    if n is None:
        raise InvalidParameter("bad stream id", field="s")
    return q, n, o


def encode_chunks(chunks: list[tuple[Table, bytes]]) -> list[list[bytes]]:
    return [[t.tobytes(), h] for t, h in chunks]


def decode_chunks(raw: Any) -> list[tuple[Table, bytes]]:
    if not isinstance(raw, list):
        raise ProtocolError("replicated chunks must be a list")
    out = []
    for item in raw:
        if not isinstance(item, list) or len(item) != 2 or not all(isinstance(x, bytes) for x in item):
            raise ProtocolError("a replicated chunk must be [table bytes, heap bytes]")
        out.append((validate(item[0], item[1]), item[1]))
    return out


class Replicator:
    """Owns the SUB socket and the peer requests of this host's streams."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], node: str, pub: zmq.Socket[bytes],
                 forwarder: Forwarder, streams: Callable[[], dict[StreamKey, Stream]],
                 peer_endpoint: Callable[[str], str | None], mark_dirty: Callable[[StreamKey], None],
                 on_resync: Callable[[StreamKey, int], None],
                 commit_if_big: Callable[[Stream], None] = lambda st: None) -> None:
        self.node = node
        self.commit_if_big = commit_if_big
        self._stale_logged: dict[StreamKey, float] = {}
        """When each stream last logged a refused stale frame (monotonic s)."""
        self._report_logged: dict[tuple[str, Any], float] = {}
        """When each kind of refused position report last logged, per stream or
        sender (monotonic s): at most once a minute each."""
        """Called after each chunk a replica stages (the service commits early past a size)."""
        self.pub = pub
        self.forwarder = forwarder
        self.streams = streams
        self.peer_endpoint = peer_endpoint
        self.mark_dirty = mark_dirty
        self.on_resync = on_resync
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.RCVHWM, 100_000)
        self.sub.setsockopt(zmq.MAXMSGSIZE, protocol.PEER_MAX_FRAME_BYTES)
        self.sub.setsockopt(zmq.SUBSCRIBE, HEARTBEAT_TOPIC)
        self.connected: set[str] = set()
        self.subscribed: set[StreamKey] = set()
        self.writer_of: dict[StreamKey, str] = {}
        self.catching_up: dict[StreamKey, float] = {}
        self.due: set[StreamKey] = set()
        """Replica streams to report at the next flush, not up to
        ``REPORT_EVERY_MS`` later (their writer changed)."""
        self.next_report_ms = 0
        self.next_heartbeat_ms = 0
        self.resends = ReplicatedSends()
        """What this host stored as a replica, by request (retried sends find it)."""
        self.counters: dict[str, int] = {"gaps": 0, "stale_refused": 0, "resyncs": 0,
                                         "resync_kept": 0, "resync_compacted": 0, "published": 0,
                                         "applied": 0, "sends_found_replicated": 0, "early_commits": 0,
                                         "positions_ahead_ignored": 0, "positions_not_replica": 0,
                                         "positions_wrong_identity": 0}

    # --- topology -------------------------------------------------------------------
    def set_topology(self, pub_endpoints: list[str], writers: dict[StreamKey, str]) -> None:
        for ep in pub_endpoints:
            if ep not in self.connected:
                if self.forwarder.curve is not None:
                    try:
                        self.forwarder.curve.client(self.sub, ep)
                    except ZmqueueError:
                        continue  # its key is not known yet: connect on a later update
                self.sub.connect(ep)
                self.connected.add(ep)
        for key, node in writers.items():
            if self.writer_of.get(key) != node:
                # a writer we did not know (a failover, or a stream new to us): report
                # our position to it at the next flush, not up to REPORT_EVERY_MS later,
                # so a writer already writing learns it sooner and its reply (its epoch
                # and last seq) starts our catch-up if we are behind. Its recovery does
                # not wait for this report: a newly elected writer probes each passing
                # replica itself and settles when all answered, or after RECOVERY_S
                # (handover.py); and a copy holding no record of its term yet, or a
                # stream this host writes, reports nothing (_replica_and_writer)
                self.due.add(key)
        self.writer_of = dict(writers)
        want = set(self.streams())
        for key in want - self.subscribed:
            self.sub.setsockopt(zmq.SUBSCRIBE, stream_topic(key))
        for key in self.subscribed - want:
            self.sub.setsockopt(zmq.UNSUBSCRIBE, stream_topic(key))
        self.subscribed = want

    # --- writer side ----------------------------------------------------------------
    def publish(self, st: Stream) -> None:
        """Publish what this writer committed since the last call."""
        while st.published_seq < st.store.last_seq:
            chunks = st.store.read_chunks(st.published_seq + 1, PUBLISH_MAX)
            if not chunks:
                return
            body = {"s": stream_id(st.key), "e": st.epoch,
                    "prev": [st.published_epoch, st.published_seq], "c": encode_chunks(chunks)}
            self._send_pub(stream_topic(st.key), protocol.encode_push(Command.REPLICATE, body))
            last = chunks[-1][0]
            st.published_seq, st.published_epoch = int(last["seq"][-1]), int(last["epoch"][-1])
            self.counters["published"] += sum(len(t) for t, _ in chunks)

    def heartbeats(self, now_ms: int) -> None:
        """Every ``HEARTBEAT_MS``: one frame with ``[key, epoch, last seq]`` of
        each written stream that a replica has not reported caught up with
        (a replica that has reported ``last`` in this epoch needs no beat;
        after a failover the new writer knows no position, so it beats until
        each replica has reported)."""
        if now_ms < self.next_heartbeat_ms:
            return
        self.next_heartbeat_ms = now_ms + HEARTBEAT_MS
        beats = []
        for st in self.streams().values():
            if st.role is not Role.WRITER or len(st.replicas) < 2:
                continue
            last, pos = st.store.last_seq, st.follower_pos
            if any(pos.get(n, -1) < last for n in st.replicas if n != self.node):
                beats.append([stream_id(st.key), st.epoch, last])
        for i in range(0, len(beats), BATCH_MAX):
            body = {"n": self.node, "h": beats[i:i + BATCH_MAX]}
            self._send_pub(HEARTBEAT_TOPIC, protocol.encode_push(Command.HEARTBEAT, body))

    def _send_pub(self, topic: bytes, payload: bytes) -> None:
        try:
            self.pub.send_multipart([topic, payload], zmq.NOBLOCK)
        except zmq.Again:
            self.counters["pub_dropped"] = self.counters.get("pub_dropped", 0) + 1

    # --- peer requests served by this host (on the peer ROUTER) ----------------------
    def h_catch_up(self, body: dict[str, Any]) -> Any:
        st = self._stream(body.get("s"))
        start = body.get("from")
        prev = body.get("prev") or [0, 0]
        if not isinstance(start, int) or start < 1 or not isinstance(prev, list) or len(prev) != 2:
            raise InvalidParameter("catch-up needs from >= 1 and prev [epoch, seq]")
        if not all(isinstance(x, int) and x >= 0 for x in prev):
            raise InvalidParameter("catch-up prev must be [epoch, seq], both >= 0")
        if prev[1] > st.store.last_seq or (prev[1] > 0 and self._epoch_at(st, prev[1]) != prev[0]):
            if st.role is not Role.WRITER:
                # only the writer's log says what a copy must cut: a host behind the asker
                # (a former writer back as a replica, named by a stale writer_of) must not
                raise NotLeader(f"stream {stream_id(st.key)}: this host does not write it and does "
                                "not hold the asker's last record", leader=None)
            keep = keep_after_divergence(prev[0], prev[1], st.store.last_seq, st.store.first_seq,
                                         lambda seq: self._epoch_at(st, seq))
            return {"resync": True, "e": st.epoch, "keep": keep, "first": st.store.first_seq}
        chunks = st.store.read_chunks(start, CATCH_UP_MAX)
        first = int(chunks[0][0]["seq"][0]) if chunks else None
        if prev[1] > 0 and start <= st.store.last_seq and first != start:
            return {"resync": True, "e": st.epoch, "first": st.store.first_seq}
        return {"e": st.epoch, "c": encode_chunks(chunks), "last": st.store.last_seq}

    def _epoch_at(self, st: Stream, seq: int) -> int | None:
        recs = st.store.read_records(seq, 1)
        return recs[0].epoch if recs and recs[0].seq == seq else None

    def h_position(self, body: dict[str, Any], user: str | None = None) -> Any:
        """A POSITION request (a replica's report, or a new writer's probe);
        ``user``: the connection's authenticated identity (CURVE), if any."""
        st = self._stream(body.get("s"))
        node, epoch, seq = self._report_fields(body.get("node"), body.get("e"), body.get("seq"))
        term = body.get("term")
        if term is not None and (not isinstance(term, int) or isinstance(term, bool)
                                 or not 0 <= term <= POSITION_MAX):
            raise InvalidParameter(f"a probe's term must be an integer from 0 to {POSITION_MAX}, "
                                   f"got {term!r:.40}", field="term", min=0, max=POSITION_MAX)
        self._check_sender(node, user)
        self._check_replica(st, node)
        self._note(st, node, epoch, seq)
        if isinstance(term, int) and term > st.epoch and st.role is Role.REPLICA:
            # a new writer's recovery probe: our answer is its vote, and the new writer
            # settles on what it shows. Raft's vote rule: from now on nothing of an older
            # term is applied here, nor reported to its writer (our reports carry this
            # term), so that writer can no longer count this copy toward an
            # acknowledgement the new writer lacks (before, a replica that had answered
            # still took the cut-off writer's next record and acknowledged it with it)
            log.debug("stream %s: probed by the writer of term %d, this copy leaves term %d",
                      stream_id(st.key), term, st.epoch)
            st.epoch = term
        return {"e": st.epoch, "last_epoch": st.store.last_epoch, "last": st.store.last_seq}

    def note_position(self, body: dict[str, Any], user: str | None = None) -> Stream | None:
        """A one-way POSITION: record it; the stream, None if this host has
        none by that id. A report is not answered; one that is malformed, sent
        under another host's name (CURVE) or by a host that is not a replica
        of the partition raises (the dispatcher then answers it as a request,
        with that error)."""
        st = self.streams().get(parse_stream_id(body.get("s")))
        node, epoch, seq = self._report_fields(body.get("node"), body.get("e"), body.get("seq"))
        self._check_sender(node, user)
        if st is not None:
            self._check_replica(st, node)
            self._note(st, node, epoch, seq)
        return st

    @staticmethod
    def _report_fields(node: Any, epoch: Any, seq: Any) -> tuple[str, int, int]:
        """A position report's node, epoch and seq, checked (INVALID_PARAMETER)."""
        if not isinstance(node, str) or not 0 < len(node) <= 256:
            raise InvalidParameter("a position report's node must be the reporting host's node id "
                                   "(a string of 1-256 characters)", field="node")
        for name, value in (("e", epoch), ("seq", seq)):
            if not isinstance(value, int) or isinstance(value, bool) or not -1 <= value <= POSITION_MAX:
                raise InvalidParameter(f"a position report's {name} must be an integer from -1 to "
                                       f"{POSITION_MAX}, got {value!r:.40}",
                                       field=name, min=-1, max=POSITION_MAX)
        return node, epoch, seq

    def _check_sender(self, node: str, user: str | None) -> None:
        """With CURVE, a host reports positions under its own name only: the
        report's ``node`` must be the connection's ZAP User-Id, the name its
        host key is registered under (its node id). Before the forty-sixth
        session any host key could report for any replica, and one forged
        report made a synchronous send count as acknowledged. Without CURVE
        there is no identity to check (docs/SECURITY.md)."""
        if self.forwarder.curve is None or node == user:
            return
        self.counters["positions_wrong_identity"] += 1
        self._log_refused(("identity", user), "refused a position report for %r from the host key "
                          "registered as %r: a host reports under its own node id only (at most once a "
                          "minute per key)", node, user)
        raise AccessDenied(f"this connection's host key is registered as {user!r}, not as {node!r}: a host "
                           "reports positions under its own node id only (register each host's key "
                           "under its node id: zmqueue keys register --role host --name NODE)",
                           action="report positions", queue=None, identity=user)

    def _check_replica(self, st: Stream, node: str) -> None:
        """Only the partition's replicas report positions of its streams (or
        probe them): a report from another host is refused, and not counted."""
        if node in st.replicas:
            return
        self.counters["positions_not_replica"] += 1
        raise InvalidParameter(f"{node!r} is not a replica of {st.queue!r} partition {st.partition} "
                               f"(its replicas: {', '.join(st.replicas)}): its position of "
                               f"{stream_id(st.key)} is not counted", field="node")

    def _note(self, st: Stream, node: str, epoch: int, seq: int) -> None:
        """Record a replica's reported position (a writer, in its own epoch).
        Only the partition's current replicas count toward a sync ack: a host
        that has just left the set may still report for a moment, and a
        record held by it and the writer alone is not on a majority of the
        set the next writer is elected from. A seq past this writer's own
        last one in its epoch is impossible (a replica holds only what the
        writer of that epoch wrote): it is ignored, counted and logged, never
        clamped (a host that reports it is broken or forging)."""
        if epoch != st.epoch or st.role is not Role.WRITER or node not in st.replicas:
            return
        if seq > st.store.last_seq:
            self.counters["positions_ahead_ignored"] += 1
            self._log_refused(("ahead", st.key), "stream %s: ignoring %r's position %d, past this "
                              "writer's last seq %d in its epoch %d (a broken or forged report; at most "
                              "once a minute per stream)", stream_id(st.key), node, seq,
                              st.store.last_seq, epoch)
            return
        st.follower_pos[node] = seq
        st.follower_seen[node] = time.monotonic()

    def _log_refused(self, what: tuple[str, Any], msg: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._report_logged.get(what, -STALE_LOG_EVERY_S) >= STALE_LOG_EVERY_S:
            self._report_logged[what] = now
            log.warning(msg, *args)

    def _stream(self, sid: Any) -> Stream:
        st = self.streams().get(parse_stream_id(sid))
        if st is None:
            raise InvalidParameter(f"this host has no stream {sid!r:.200}", field="s")
        return st

    # --- replica side ------------------------------------------------------------------
    def poll(self, now_ms: int, ready: frozenset[Wakeable] | None = None) -> None:
        """Records on the SUB socket if it is in ``ready`` (None: look), then heartbeats."""
        if ready is None or self.sub in ready:
            self.take_pending(now_ms)
        self.heartbeats(now_ms)

    def take_pending(self, now_ms: int, limit: int = 1000) -> None:
        """Apply the frames already queued on the SUB socket (up to ``limit``)."""
        sub = self.sub
        for _ in range(limit):
            try:
                frames = sub.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            if len(frames) == 2:
                try:
                    frame = protocol.decode(frames[1], protocol.PEER_MAX_FRAME_BYTES)
                    self._on_pub(frame.command, frame.body, now_ms)
                except ZmqueueError as exc:
                    log.debug("dropped a replication frame: %s", exc)
            # EVENTS says whether another is queued: a recv on an empty socket
            # raises zmq.Again, which costs microseconds per block applied
            if not cast(int, sub.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
                break

    def _on_pub(self, cmd: Command, body: Any, now_ms: int) -> None:
        if not isinstance(body, dict):
            return
        if cmd == Command.HEARTBEAT:
            beats = body["h"] if "h" in body else [[body.get("s"), body.get("e"), body.get("last")]]
            if not isinstance(beats, list):
                raise ProtocolError("heartbeats must be a list of [stream, epoch, last seq]")
            for beat in beats:
                if isinstance(beat, list) and len(beat) == 3:
                    self._heard_last(parse_stream_id(beat[0]), beat[1], beat[2], now_ms)
            return
        st = self._replica_in(parse_stream_id(body.get("s")), body.get("e"))
        if st is None or cmd != Command.REPLICATE:
            return
        prev = body.get("prev")
        if (isinstance(prev, list) and len(prev) == 2 and prev[1] == st.store.last_seq
                and prev[1] > 0 and prev[0] != st.store.last_epoch):
            self.catch_up(st, now_ms)  # diverged: the writer answers how much of our copy it shares
            return
        self.apply(st, decode_chunks(body.get("c")), st.epoch, published=True)

    def _heard_last(self, key: StreamKey, epoch: Any, last: Any, now_ms: int) -> None:
        """A writer of term ``epoch`` says its log ends at ``last`` (a
        heartbeat, a POSITIONS reply): catch up if our copy is behind."""
        st = self._replica_in(key, epoch)
        if st is None or not isinstance(last, int):
            return
        if last > st.store.last_seq or (last < st.store.last_seq and not self._holds_term(st)):
            # (behind; or longer than the writer's log and holding nothing of its term: every
            # record of ours past its last differs from what it writes there, a diverged tail)
            self.catch_up(st, now_ms)

    def _replica_in(self, key: StreamKey, epoch: Any) -> Stream | None:
        """Our replica stream ``key`` if a frame of term ``epoch`` may touch
        it (the stream's epoch moves up to it); None otherwise."""
        st = self.streams().get(key)
        if st is None or st.role is not Role.REPLICA:
            return None
        if not isinstance(epoch, int) or epoch < st.epoch:
            self.counters["stale_refused"] += 1
            now = time.monotonic()
            if now - self._stale_logged.get(key, -STALE_LOG_EVERY_S) >= STALE_LOG_EVERY_S:
                self._stale_logged[key] = now
                log.warning("stream %s: refusing frames of term %r, this copy is at term %d (a deposed "
                            "writer still sending, or a writer lock key that started again: see "
                            "zmqueue_replication_events_total{event=\"stale_refused\"}); at most once a "
                            "minute per stream", stream_id(key), epoch, st.epoch)
            return None
        st.epoch = epoch
        return st

    def apply(self, st: Stream, chunks: list[tuple[Table, bytes]], epoch: int,
              published: bool = False) -> bool:
        """Apply chunks that extend the local log; False on a gap or divergence.

        ``published``: records the writer published (REPLICATE), not a
        catch-up reply. An empty copy takes a catch-up that starts past seq 1
        (the writer's first retained record, after compaction), but not a
        published block past seq 1: that is a gap, and it catches up from the
        start. (An empty replica that joined a partition took the block a new
        writer published right after taking over, its takeover record, as
        its first record, skipped every message before it, and counted as
        caught up; elected later, it had none of them.)"""
        now = int(time.time() * 1000)
        for table, heap in chunks:
            small = len(table) <= replay.SMALL_CHUNK  # (a few records: Python scalars are cheaper)
            epochs = table["epoch"].tolist() if small else table["epoch"]
            if (max(epochs) if small else int(epochs.max())) > epoch:
                raise StaleEpoch("a record's epoch is newer than its sender's term")
            last = st.store.last_seq
            first = int(table["seq"][0])  # seqs are contiguous (validated on decode)
            at_last = last - first if last else -1
            if 0 <= at_last < len(table) and int(epochs[at_last]) != st.store.last_epoch:
                self.catch_up(st, now)  # the writer holds another record at our last seq
                return False
            if first + len(table) - 1 <= last:
                if int(epochs[-1]) > st.store.last_epoch and st.role is Role.REPLICA:
                    # the writer's record at the frame's end is of a later term than any of
                    # ours: our copy runs past the writer's log with another term's records
                    # (a tail its recovery did not cut), and the writer answers how much of it
                    # we keep. The same records (a duplicate, a catch-up's overlap) never
                    # are: our record at that seq has their epoch, which is <= our last's
                    self.catch_up(st, now)
                    return False
                continue
            if first > last + 1 and (last or published):
                self.counters["gaps"] += 1
                self.catch_up(st, now)
                return False
            n = st.store.apply_chunk(table, heap)
            fresh = table[max(0, at_last + 1):]
            self.resends.note_later(st.queue, st.partition, fresh, now, st.key[2])  # (after the ack)
            if st.config.fifo:
                st.note_table(fresh, heap)
            self.counters["applied"] += n
            self.mark_dirty(st.key)
            self.commit_if_big(st)
        self.mark_dirty(st.key)
        return True

    def _resync(self, st: Stream, keep: Any, first: Any = None) -> None:
        """The writer does not hold our last record: keep the first ``keep``
        records (0, or not a seq below our last: all go), fetch the rest.
        ``first``: the writer's first retained seq (None from a host older
        than the forty-fifth session), which tells a copy that is merely
        behind what the writer's compaction removed from one that diverged.
        Only a REPLICA copy is cut (a new writer, RECOVERING, that asked a peer
        holding another term's tail keeps its log and what it noted of it)."""
        if st.role is not Role.REPLICA:
            return
        if not isinstance(keep, int) or not 0 <= keep < st.store.last_seq:
            keep = 0
        last, last_epoch = st.store.last_seq, st.store.last_epoch
        self.counters["resyncs"] += 1
        self.counters["resync_kept"] += keep
        self.resends.forget(st.queue, st.partition, st.key[2], keep)  # (retries of them: store again)
        if keep == 0 and isinstance(first, int) and first > last:
            self.counters["resync_compacted"] += 1
            log.warning("stream %s: this copy ends at seq %d, and its writer no longer holds that far "
                        "back (compaction: its log starts at seq %d): dropping the copy's records and "
                        "fetching the stream from seq %d", stream_id(st.key), last, first, first)
        else:
            log.warning("stream %s diverged from its writer: the writer does not hold this copy's last "
                        "record (seq %d, term %d); keeping %d records (up to seq %d), cutting the %d "
                        "after them and fetching the rest", stream_id(st.key), last, last_epoch, keep,
                        keep, last - keep)
        self.on_resync(st.key, keep)

    def catch_up(self, st: Stream, now_ms: int, source: str | None = None) -> None:
        """Fetch records after our last seq from ``source`` (default: the writer)."""
        if self.catching_up.get(st.key, 0) > time.monotonic():
            return
        node = source or self.writer_of.get(st.key)
        endpoint = self.peer_endpoint(node) if node else None
        if endpoint is None or node == self.node:
            return
        self.catching_up[st.key] = time.monotonic() + 3.0
        key = st.key
        body = {"s": stream_id(key), "from": st.store.last_seq + 1, "max": CATCH_UP_MAX,
                "prev": [st.store.last_epoch, st.store.last_seq]}

        def done(reply: Any, err: ZmqueueError | None) -> None:
            self.catching_up.pop(key, None)
            cur = self.streams().get(key)
            if err is not None or cur is None or not isinstance(reply, dict):
                return
            e = reply.get("e")
            # a new writer (RECOVERING) fetches its peers' records of older terms; a replica
            # takes nothing, no records and no order to cut, from a term older than its own
            if not isinstance(e, int) or (e < cur.epoch and cur.role is not Role.RECOVERING):
                return
            if reply.get("resync"):
                self._resync(cur, reply.get("keep"), reply.get("first"))
                return
            cur.epoch = max(cur.epoch, e) if cur.role is Role.REPLICA else cur.epoch
            ok = self.apply(cur, decode_chunks(reply.get("c") or []), e)
            last = reply.get("last")
            if ok and isinstance(last, int) and last > cur.store.last_seq:
                self.catch_up(cur, int(time.time() * 1000), source)

        self.forwarder.request(endpoint, Command.CATCH_UP, body, done, now_ms, timeout_ms=3000)

    def report_positions(self, now_ms: int, force: set[StreamKey]) -> None:
        """Tell writers our durable position: after commits, and every second.

        The report after a commit (the streams in ``force``) is one-way
        (``"ack": False``: the writer records it and sends nothing back),
        because it is on the path of every synchronous send and a reply costs
        both hosts a loop iteration. Every ``REPORT_EVERY_MS`` (and at once
        for streams whose writer changed) one POSITIONS request per writer
        host reports all of our replica streams it writes; its reply carries
        the writer's epoch and last seq of each (a replica behind starts a
        catch-up; heartbeats do too)."""
        for key in force:
            if (found := self._replica_and_writer(key)) is not None:
                st, endpoint = found
                self.forwarder.notify(endpoint, Command.POSITION, {
                    "s": stream_id(key), "node": self.node, "e": st.epoch,
                    "seq": st.store.last_seq, "ack": False})
        if now_ms >= self.next_report_ms:
            self.next_report_ms = now_ms + REPORT_EVERY_MS
            keys: Iterable[StreamKey] = self.streams()
        elif self.due:
            keys = self.due
        else:
            return
        by_writer: dict[str, list[Stream]] = {}
        for key in keys:
            if (found := self._replica_and_writer(key)) is not None:
                by_writer.setdefault(found[1], []).append(found[0])
        self.due = set()
        for endpoint, sts in by_writer.items():
            for i in range(0, len(sts), BATCH_MAX):
                batch = sts[i:i + BATCH_MAX]
                body = {"node": self.node,
                        "b": [[stream_id(st.key), st.epoch, st.store.last_seq] for st in batch]}
                self.forwarder.request(endpoint, Command.POSITIONS, body,
                                       self._on_positions_reply([st.key for st in batch]),
                                       now_ms, timeout_ms=2000)

    @staticmethod
    def _holds_term(st: Stream) -> bool:
        """Whether our copy holds a record of its term (``Stream.epoch``), or
        nothing at all. Records of a term come only from its writer, each
        appended where the copy was checked to agree with that writer's log
        (the frame's ``prev``, the epoch at our last seq, a catch-up's
        ``prev``), so a copy holding one agrees with that writer up to its
        last seq. Without one, a copy's tail may be an older term's that the
        writer does not hold (one longer than the writer's log, not cut at
        its takeover: a replica not passing then, or answering its probe
        late)."""
        return not st.store.last_seq or st.store.last_epoch >= st.epoch

    def _replica_and_writer(self, key: StreamKey) -> tuple[Stream, str] | None:
        """Our replica stream ``key`` and its writer's peer endpoint, if both are
        known and our copy may report a position in its term: only one holding a
        record of that term (``_holds_term``). A writer counts a replica's
        position as its records up to there; every record it acknowledges is of
        its own term (its takeover record comes first), so a copy without one
        has nothing to report, and one whose older tail runs past the writer's
        log reported that tail as the writer's records (a synchronous write was
        acknowledged with a copy holding another record at its seq)."""
        st = self.streams().get(key)
        writer = self.writer_of.get(key)
        if st is None or st.role is not Role.REPLICA or not writer or writer == self.node:
            return None
        if not self._holds_term(st):
            return None
        endpoint = self.peer_endpoint(writer)
        return (st, endpoint) if endpoint is not None else None

    def h_positions(self, body: dict[str, Any], user: str | None = None
                    ) -> tuple[dict[str, Any], list[Stream]]:
        """A replica host's periodic POSITIONS: record each report; the reply
        (our epoch and last seq of each stream, None where we have none, and
        ``{"refused": reason}`` for a stream whose partition the sender is not
        a replica of) and the streams whose follower positions were recorded.
        ``user``: the connection's authenticated identity (CURVE), if any."""
        node, items = body.get("node"), body.get("b")
        if not isinstance(node, str) or not isinstance(items, list) or len(items) > BATCH_MAX:
            raise InvalidParameter(f"POSITIONS needs node and b: up to {BATCH_MAX} "
                                   "[stream, epoch, seq] items")
        if not all(isinstance(item, list) and len(item) == 3 for item in items):
            raise InvalidParameter("a POSITIONS item is [stream, epoch, seq]", field="b")
        # every item checked before any is noted
        keys = [parse_stream_id(item[0]) for item in items]
        for item in items:
            self._report_fields(node, item[1], item[2])
        self._check_sender(node, user)
        streams = self.streams()
        out: list[Any] = []
        noted: list[Stream] = []
        for key, item in zip(keys, items, strict=True):
            st = streams.get(key)
            if st is None:
                out.append(None)
                continue
            try:
                self._check_replica(st, node)
            except InvalidParameter as exc:
                out.append({"refused": exc.message})
                continue
            self._note(st, node, item[1], item[2])
            noted.append(st)
            out.append([st.epoch, st.store.last_epoch, st.store.last_seq])
        return {"b": out}, noted

    def _on_positions_reply(self, keys: list[StreamKey]) -> Callable[[Any, ZmqueueError | None], None]:
        def done(reply: Any, err: ZmqueueError | None) -> None:
            items = reply.get("b") if err is None and isinstance(reply, dict) else None
            if not isinstance(items, list) or len(items) != len(keys):
                return
            now = int(time.time() * 1000)
            for key, item in zip(keys, items, strict=True):
                if isinstance(item, list) and len(item) == 3:
                    self._heard_last(key, item[0], item[2], now)
        return done

    def close(self) -> None:
        self.sub.close(linger=0)
