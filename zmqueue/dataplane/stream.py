"""One replicated stream of a partition on this host: its store, its role,
and SQS semantics over it.

A FIFO partition has one stream (origin ``fifo``); a standard partition has
one per replica host (origin = the node that accepts sends into it). Every
replica host of the partition keeps a copy of every stream. The stream's
writer (the holder of its Consul lock, at epoch = the lock's LockIndex)
appends records and serves receives; the other copies apply the writer's
records in sequence order. Everything runs on the host's request-loop thread.

An encrypted queue's stream has a ``cipher`` (zmqueue.security.atrest): it
seals body and attribute blob before they reach the store (so segments and
replication carry ciphertext) and opens them where this layer reads them.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from zmqueue.config import QueueConfig, acks_needed
from zmqueue.dataplane.dispatch import Request
from zmqueue.dataplane.messages import group_hash, validate_attributes
from zmqueue.dataplane.resends import tagged_ids
from zmqueue.dataplane.storage import (
    Columns,
    Delivered,
    NewMessage,
    PartitionStoreProtocol,
    RecordType,
)
from zmqueue.dataplane.storage.config import DEDUP_WINDOW_MS
from zmqueue.dataplane.storage.records import Table
from zmqueue.dataplane.storage.replay import F_ATTR_LEN, F_BODY_LEN, F_DATA_OFF, F_ID, F_TIME
from zmqueue.dataplane.topology import StreamKey
from zmqueue.errors import InvalidParameter, InvalidReceipt, Unavailable
from zmqueue.protocol import (
    REPLY_MESSAGE_BYTES_MAX,
    Receipt,
    ReceiptEncoder,
    check_size,
    decode_blob,
    encode_blob,
    hex_ids,
)

log = logging.getLogger(__name__)

_BYTES_ONLY = {bytes}

DEDUP_MAX_ENTRIES = 1_000_000
LEASE_S = 2.0
"""A writer serves this long after its lock was last confirmed (well under
the 3 s health TTL after which Consul would release the lock)."""
SILENT_S = 3.0
"""A replica that has not reported its position for this long, and that
Consul does not call passing, is out of a synchronous write's reach
(``Stream.out_of_reach``); replicas report at least once a second."""


class Role(Enum):
    REPLICA = "replica"
    RECOVERING = "recovering"
    WRITER = "writer"


@dataclass
class PendingAck:
    seq: int
    request: Request
    result: Any
    at: float = 0.0
    """time.monotonic() when the records were committed locally."""


@dataclass
class DedupWindow:
    """dedup key -> (message id, expiry), oldest first; bounded."""

    entries: OrderedDict[str, tuple[bytes, int]] = field(default_factory=OrderedDict)

    def get(self, key: str, now_ms: int) -> bytes | None:
        self.prune(now_ms)
        item = self.entries.get(key)
        return item[0] if item else None

    def put(self, key: str, message_id: bytes, sent_ms: int) -> None:
        self.entries[key] = (message_id, sent_ms + DEDUP_WINDOW_MS)
        while len(self.entries) > DEDUP_MAX_ENTRIES:
            self.entries.popitem(last=False)

    def prune(self, now_ms: int) -> None:
        while self.entries:
            _, (_, expires) = next(iter(self.entries.items()))
            if expires > now_ms:
                return
            self.entries.popitem(last=False)


def dedup_key(cfg: QueueConfig, body: bytes, dedup: str | None) -> str | None:
    if not cfg.fifo:
        return None
    return dedup or (hashlib.sha256(body).hexdigest() if cfg.content_based_dedup else None)


class Stream:
    def __init__(self, key: StreamKey, config: QueueConfig, store: PartitionStoreProtocol,
                 replicas: tuple[str, ...], cipher: Any = None) -> None:
        self.key = key
        self.queue, self.partition, self.origin = key
        self.config = config
        self._receipt = ReceiptEncoder(*key, config.incarnation or None)
        self.store = store
        self.replicas = replicas
        self.joining: tuple[str, ...] = ()
        """Replicas not caught up yet: not voters in the writer election, and
        a sync ack also needs a majority of the voters (``replicated_seq``)."""
        self.leaving: tuple[str, ...] = ()
        self.previous: tuple[str, ...] = ()
        """A change of the voters in flight (``kvlayout.PartitionAssignment``):
        the replicas it removes (no voters), and the voters before it, a
        majority of whom a sync ack also needs until the change is confirmed."""
        self.version = 0
        """The partition assignment's version."""
        self._confirm: tuple[int, int] | None = None
        """(version, seq): the change this writer confirms once a majority of
        the new voters holds ``seq`` (its last record when it saw the change)."""
        self.confirmed = 0
        """The last version whose change this writer confirmed (``confirmation``)."""
        self.handing_over = False
        self.opened = 0
        """Which opening of its stream key on this host this object is (``StreamSet``
        numbers them): a stream closed and opened again is a new writer candidate."""
        """This host is leaving the set of an asynchronous stream: as its writer
        it takes no more writes, so that the new voters hold everything it
        acknowledged (alone) before it hands the stream over."""
        self.local = ""
        """This host's node id (set by the stream set)."""
        self.role = Role.REPLICA
        self.epoch = store.epoch
        """The current term as far as this host knows (fences older records):
        at least the newest term among its records (a host restarted with
        records of term 3 answered catch-ups as term 0 before, and a replica
        fetching them refused the records as newer than their sender's term)."""
        self.lease_until = 0.0
        self.unconfirmed = False
        """The writer's lease was last extended through a Consul outage
        (``writer_election.Confirmed.by_consul``): another host may have been
        elected meanwhile, so an asynchronous write too is acknowledged only
        once a majority of the replicas holds it (``quorum``)."""
        self.dedup = DedupWindow()
        self.acks: deque[PendingAck] = deque()
        self.follower_pos: dict[str, int] = {}
        self.follower_seen: dict[str, float] = {}
        """time.monotonic() of each replica's last position report in this term."""
        self.writer_since = time.monotonic()
        """When this host last started writing the stream (a grace for the reports)."""
        self.published_seq: int
        self.published_epoch: int
        self.published_all()
        self.cipher = cipher
        self.rebuild_dedup()

    # --- at-rest encryption -------------------------------------------------
    def seal(self, mid: bytes, body: bytes, blob: bytes) -> tuple[bytes, bytes]:
        if self.cipher is None:
            return body, blob
        return self.cipher.seal(body, mid, b"b"), self.cipher.seal(blob, mid, b"a")

    def open(self, mid: bytes, body: bytes, blob: bytes) -> tuple[bytes, bytes]:
        if self.cipher is None:
            return body, blob
        return self.cipher.open(body, mid, b"b"), self.cipher.open(blob, mid, b"a")

    def published_all(self) -> None:
        """Count everything in the store as published (replicas hold it, or
        there are none): the next REPLICATE's ``prev`` names the store's last
        record, whose seq and epoch replicas check theirs against."""
        self.published_seq, self.published_epoch = self.store.last_seq, self.store.last_epoch

    # --- role ---------------------------------------------------------------
    @property
    def writable(self) -> bool:
        return self.role is Role.WRITER and time.monotonic() < self.lease_until and not self.handing_over

    @property
    def every(self) -> bool:
        """A synchronous write waits for every voter (``sync_quorum="all"``)."""
        return self.config.sync_replication and self.config.sync_quorum == "all"

    def quorum(self) -> int:
        """How many copies a write waits for, this writer's included (1: its own)."""
        if self.every:
            return len(self.voters())
        r = max(1, len(self.replicas) - len(self.leaving))
        return acks_needed(r, "majority") if self.config.sync_replication or self.unconfirmed else 1

    def _need(self, nodes: Collection[str]) -> int:
        """How many of the voters ``nodes`` a write waits for: a majority, or all."""
        return acks_needed(len(nodes), "all" if self.every else "majority")

    def _ack_sets(self) -> list[tuple[Collection[str], int]]:
        """Every (set of replicas, how many of them) a synchronous write waits
        for: a quorum of the replicas that are not leaving (with
        ``sync_quorum="all"``: every voter; joining ones are no voters), a
        majority of the voters too while some replicas join or leave, and
        while a change of the voters is in flight, the same of the voters
        before it."""
        if self.every:
            voters = self.voters()
            sets: list[tuple[Collection[str], int]] = [(voters, len(voters))]
        else:
            members = [n for n in self.replicas if n not in self.leaving] if self.leaving else self.replicas
            sets = [(members, self.quorum())]
            if self.joining or self.leaving:
                voters = self.voters()
                sets.append((voters, self._need(voters)))
        if self.previous:
            sets.append((self.previous, self._need(self.previous)))
        return sets

    def replicated_seq(self) -> int:
        """Highest seq held by a quorum of replicas (this writer included);
        while some replicas are joining, also by a majority of the voters
        (the others), so that the writer election, which counts only voters,
        finds every acknowledged record; while a change of the voters is in
        flight, by a majority of the voters before it too. Leaving replicas
        count only there."""
        need = self.quorum()
        if need <= 1 or not self.follower_pos:  # async, R=1, or no replica has reported yet
            return self.store.last_seq if need <= 1 else 0
        return min(self._held_by(nodes, k) for nodes, k in self._ack_sets())

    def out_of_reach(self, passing: Callable[[], Collection[str]], now: float) -> list[str]:
        """The replicas that keep a synchronous write from its quorum now: [] if
        a quorum (and, while some are joining, a majority of the voters) may
        still acknowledge. A replica counts as gone only when it has not
        reported a position for ``SILENT_S`` in this term *and* Consul does
        not call it passing (``passing()``), so a write is refused at once only
        when its ack would have timed out; a slow or briefly silent replica
        still gets the ack timeout."""
        if self.quorum() <= 1:
            return []
        since = now - SILENT_S
        seen, start = self.follower_seen, self.writer_since
        silent = [n for n in self.replicas if n != self.local and seen.get(n, start) < since]
        if not silent:
            return []
        up = passing()
        gone = [n for n in silent if n not in up]
        if not gone:
            return []
        short = any(sum(1 for n in nodes if n not in gone) < k for nodes, k in self._ack_sets())
        return gone if short else []

    def needs(self) -> str:
        """What a synchronous write needs, in words (for refusals): "2 of 3",
        and while replicas join, a majority of the others too."""
        joining = (f", and a majority of the replicas that are not joining {list(self.joining)} "
                   "(still catching up)") if self.joining else ""
        if self.every:
            voters = self.voters()
            before = (f", and all of {list(self.previous)} (the voters before a change of the replica set "
                      "that is being confirmed)") if self.previous else ""
            return f"all {len(voters)} voting replicas {voters} (sync_quorum all){before}"
        if self.previous:
            joining += (f", and a majority of {list(self.previous)} (the voters before a change of the "
                        "replica set that is being confirmed)")
        return f"{self.quorum()} of {len(self.replicas) - len(self.leaving)}{joining}"

    def voters(self) -> list[str]:
        """The replicas that are neither joining nor leaving (all of them if every one is)."""
        return ([n for n in self.replicas if n not in self.joining and n not in self.leaving]
                or list(self.replicas))

    def _held_by(self, nodes: Collection[str], need: int | None = None) -> int:
        """The highest seq ``need`` of ``nodes`` hold (default: a majority; this
        writer included)."""
        held = sorted([self.store.last_seq if n == self.local else self.follower_pos.get(n, 0)
                       for n in nodes], reverse=True)
        k = acks_needed(len(held), "majority") if need is None else need
        return held[k - 1] if 0 < k <= len(held) else 0

    def confirmation(self) -> int:
        """The last partition assignment version whose change of the voters
        this writer confirmed: a majority of the new voters (all of them with
        ``sync_quorum="all"``) holds every
        record it held when it saw the change, so every record acknowledged
        before it took effect (later ones need that majority anyway). The
        internal manager ends the change once each stream's writer confirmed
        it (``kvlayout.PartitionAssignment.previous``). 0 off a writer."""
        if self.role is not Role.WRITER:
            self._confirm, self.confirmed = None, 0
            return 0
        if not self.previous or self.confirmed >= self.version:
            return self.confirmed
        if self._confirm is None or self._confirm[0] != self.version:
            self._confirm = (self.version, self.store.last_seq)
        version, seq = self._confirm
        if self.handing_over:  # (an async ack is this writer's alone: all of it)
            seq = self.store.last_seq
        voters = self.voters()
        if self._held_by(voters, self._need(voters)) >= seq:
            self.confirmed = version
        return self.confirmed

    # --- dedup ----------------------------------------------------------------
    def rebuild_dedup(self) -> None:
        """FIFO: refill the dedup window from the log's messages of the last
        ``DEDUP_WINDOW_MS`` (by time, not by count: compaction keeps every
        segment holding such a message, StorageConfig.keep_messages_ms).
        Read newest first and only as far as the window's bound
        (``DEDUP_MAX_ENTRIES``): the store filters out reference records
        (receives, deletes) before any payload is looked at, and only a
        message's attribute blob is opened (its body only when
        ``content_based_dedup`` stands in for a missing dedup id)."""
        if not self.config.fifo:
            return
        horizon = int(time.time() * 1000) - DEDUP_WINDOW_MS
        found: list[tuple[str, bytes, int]] = []  # newest first
        seen: set[str] = set()
        for table, heap in self.store.recent_messages(horizon):
            for key, mid, sent_ms in reversed(self._dedup_keys(table, heap)):
                if key not in seen:  # (the newest record of a key wins, as when noted in order)
                    seen.add(key)
                    found.append((key, mid, sent_ms))
            if len(found) >= DEDUP_MAX_ENTRIES:
                break
        window = DedupWindow()
        for key, mid, sent_ms in reversed(found):
            window.put(key, mid, sent_ms)
        self.dedup = window

    def note_table(self, table: Table, heap: bytes) -> None:
        """Replica side: remember the dedup keys of replicated FIFO messages."""
        if not self.config.fifo:
            return
        for key, mid, sent_ms in self._dedup_keys(table[table["type"] == RecordType.MESSAGE], heap):
            self.dedup.put(key, mid, sent_ms)

    def _dedup_keys(self, messages: Table, heap: bytes) -> list[tuple[str, bytes, int]]:
        """(dedup key, message id, time_ms) of each of the MESSAGE rows
        ``messages`` that has a key, in order."""
        out = []
        content = self.config.content_based_dedup
        for row in messages.tolist():
            mid, off, blen = row[F_ID], row[F_DATA_OFF], row[F_BODY_LEN]
            blob = heap[off + blen:off + blen + row[F_ATTR_LEN]]
            if self.cipher is not None:
                blob = self.cipher.open(blob, mid, b"a")
            key = decode_blob(blob).get("d")
            if not key and content:  # (the body is opened only then)
                body = heap[off:off + blen]
                if self.cipher is not None:
                    body = self.cipher.open(body, mid, b"b")
                key = dedup_key(self.config, body, None)
            if key:
                out.append((key, mid, row[F_TIME]))
        return out

    # --- send -------------------------------------------------------------------
    def send(self, items: list[Any], now_ms: int, tag: bytes | None = None) -> list[str]:
        """Validate and append a batch; returns message ids (hex), in order.

        A FIFO duplicate (same dedup key within 5 minutes) is not stored and
        returns the original id. The whole batch is checked before anything
        is appended, so a bad item rejects the batch. ``tag``: the request's
        tag, the first 8 bytes of every new id (:mod:`~zmqueue.dataplane.resends`).
        """
        fast = None if self.config.fifo else self._send_plain(items, now_ms, tag)
        if fast is not None:
            return fast
        prepared: list[tuple[NewMessage | None, bytes]] = []
        batch_keys: dict[str, bytes] = {}
        new_keys: list[tuple[str, bytes]] = []
        # every id of the batch in one call (uuid4 per message was ~2 us each)
        ids = tagged_ids(tag, len(items)) if tag else os.urandom(16 * len(items))
        for i, item in enumerate(items):
            msg, key = self._prepare(i, item, ids[16 * i : 16 * i + 16])
            known = (self.dedup.get(key, now_ms) or batch_keys.get(key)) if key else None
            if known is not None:
                prepared.append((None, known))
                continue
            if key:
                batch_keys[key] = msg.message_id
                new_keys.append((key, msg.message_id))
            prepared.append((msg, msg.message_id))
        new = [m for m, _ in prepared if m is not None]
        if new:
            self.store.append(new, now_ms, self.epoch)
        for key, mid in new_keys:
            self.dedup.put(key, mid, now_ms)
        return [mid.hex() for _, mid in prepared]

    def _send_plain(self, items: list[Any], now_ms: int, tag: bytes | None) -> list[str] | None:
        """The common standard-queue batch (bodies only, no attributes, no
        per-message delay), appended as columns; None if the batch is not plain."""
        limit = self.config.max_message_bytes
        bodies = []
        for item in items:
            if (not isinstance(item, list) or len(item) != 5 or not isinstance(item[0], bytes)
                    or item[1] or item[2] is not None or item[3] is not None or item[4] is not None):
                return None
            if len(item[0]) > limit:
                return None  # the general path raises MessageTooLarge with details
            bodies.append(item[0])
        return hex_ids(self._append_bodies(bodies, now_ms, tag))

    def send_bodies(self, bodies: list[Any], now_ms: int, tag: bytes | None = None) -> bytes:
        """A SEND's plain bodies (``b``: bytes only, stored with the queue's
        delay and no attributes), checked whole, then appended as columns;
        returns their ids, 16 bytes each, joined, in order. Standard queues
        only: a FIFO message names its group."""
        if self.config.fifo:
            raise InvalidParameter(f"queue {self.queue!r} is FIFO: each message needs a group_id, "
                                   "so send it as m items, not plain bodies (b)", field="bodies")
        if set(map(type, bodies)) != _BYTES_ONLY:
            bad = next(i for i, b in enumerate(bodies) if type(b) is not bytes)
            raise InvalidParameter(f"message {bad}: body must be bytes", field="body")
        limit = self.config.max_message_bytes
        if max(map(len, bodies)) > limit:
            big = next(i for i, b in enumerate(bodies) if len(b) > limit)
            check_size(bodies[big], b"", limit, big)
        return self._append_bodies(bodies, now_ms, tag)

    def _append_bodies(self, bodies: list[bytes], now_ms: int, tag: bytes | None) -> bytes:
        ids = tagged_ids(tag, len(bodies)) if tag else os.urandom(16 * len(bodies))
        if self.cipher is not None:  # an encrypted queue: seal each body (AAD binds its id)
            bodies = self.cipher.seal_many(bodies, ids, b"b")
        self.store.append_batch(bodies, now_ms, self.epoch, message_ids=ids,
                                delay_ms=self.config.delay_s * 1000)
        return ids

    def _prepare(self, i: int, item: Any, mid: bytes) -> tuple[NewMessage, str | None]:
        """Item ``i`` of a SEND, checked, as a message with id ``mid``; and its dedup key."""
        cfg = self.config
        if not isinstance(item, list) or len(item) != 5:
            raise InvalidParameter(f"message {i}: expected [body, attributes, delay, group, dedup]")
        body, attrs, delay, group, dedup = item
        if not isinstance(body, bytes):
            raise InvalidParameter(f"message {i}: body must be bytes", field="body")
        attrs = validate_attributes(attrs, i)
        for name, val, limit in (("group_id", group, 128), ("dedup_id", dedup, 128)):
            if val is not None and (not isinstance(val, str) or not 0 < len(val) <= limit):
                raise InvalidParameter(f"message {i}: {name} must be 1-{limit} characters", field=name)
        if delay is None:
            delay = cfg.delay_s
        if not isinstance(delay, int) or isinstance(delay, bool) or not 0 <= delay <= 900:
            raise InvalidParameter(f"message {i}: delay must be a whole number of seconds from 0 to 900, "
                                   f"got {delay!r:.40}", field="delay")
        if cfg.fifo and group is None:
            raise InvalidParameter(f"message {i}: FIFO queues need a group_id", field="group_id")
        blob = encode_blob(attrs, group, dedup)
        check_size(body, blob, cfg.max_message_bytes, i)
        sealed, sealed_blob = self.seal(mid, body, blob)
        msg = NewMessage(mid, sealed, sealed_blob, group_hash(group) if cfg.fifo else 0, delay * 1000)
        return msg, dedup_key(cfg, body, dedup)

    def append_dead_letters(self, items: list[tuple[bytes, bytes, bytes, int, str]], now_ms: int) -> None:
        """Store messages moved here from another queue:
        (message id, body, blob, carried receive count, source queue)."""
        msgs = []
        for mid, body, blob, rc, source in items:
            meta = decode_blob(blob)
            new_blob = encode_blob(meta.get("a") or {}, meta.get("g"), meta.get("d"), rc, source)
            gh = group_hash(meta.get("g")) if self.config.fifo else 0
            msgs.append(NewMessage(mid, *self.seal(mid, body, new_blob), gh, 0))
        self.store.append(msgs, now_ms, self.epoch)

    # --- receive -------------------------------------------------------------------
    def receive(self, max_messages: int, visibility_ms: int, now_ms: int, cols: bool = False,
                spent_bytes: int = 0, count_bytes: bool = False
                ) -> tuple[list[Any] | None, list[list[Any]], list[Delivered], int]:
        """Up to ``max_messages`` messages: (column group or None, wire-encoded
        message lists, the dead letters the caller must move to the DLQ, and
        with ``count_bytes`` the bytes of the messages handed out, else 0).

        Their bytes (bodies + attributes as stored) are at most
        :data:`REPLY_MESSAGE_BYTES_MAX` with ``spent_bytes``, what the reply
        already holds from other streams; at least one message when that is 0
        (the store's ``max_bytes``): only those are taken in flight.

        With ``cols`` (a client that reads them: RECEIVE ``cols``), a batch of
        plain messages (no attributes, no cipher; not FIFO, whose messages
        carry their group) is one column group ``[origin, epoch, ids (16 bytes
        each, joined), bodies, seqs, receive counts, sent ms]``, from which the
        client builds each receipt only if it is read; any other batch is
        :meth:`encode_delivered` lists."""
        mrc = self.config.max_receive_count if self.config.dead_letter_queue else None
        cap = REPLY_MESSAGE_BYTES_MAX
        if cols and self.cipher is None and not self.config.fifo:
            got, dead = self.store.receive_columns(max_messages, now_ms, visibility_ms, max_receive_count=mrc,
                                                   max_bytes=cap, spent_bytes=spent_bytes)
            if isinstance(got, Columns):
                nbytes = sum(map(len, got.bodies)) if count_bytes else 0
                return [self.key[2], self.epoch, got.message_ids, got.bodies, got.seqs, got.receive_counts,
                        got.enqueue_ms], [], dead, nbytes
            delivered = got
        else:
            if self.cipher is not None:  # (no key at all: refused before any message is taken)
                self.cipher.check_readable()
            delivered, dead = self.store.receive(max_messages, now_ms, visibility_ms, max_receive_count=mrc,
                                                max_bytes=cap, spent_bytes=spent_bytes)
        nbytes = sum([len(d.body) + len(d.attributes) for d in delivered]) if count_bytes else 0
        if self.cipher is not None:
            return None, self._open_delivered(delivered, now_ms), dead, nbytes
        return None, [self.encode_delivered(d) for d in delivered], dead, nbytes

    def _open_delivered(self, delivered: list[Delivered], now_ms: int) -> list[list[Any]]:
        """The messages of an encrypted queue as wire lists; one this host
        cannot open (sealed with a key id its --key-dir no longer holds) is
        made visible again with its receive count as it was (no receive was
        spent on it: it would otherwise reach max_receive_count unseen), and
        the receive fails if none could be opened."""
        out: list[list[Any]] = []
        error: Unavailable | None = None
        for d in delivered:
            try:
                out.append(self.encode_delivered(d))
            except Unavailable as exc:
                error = exc
                self.store.give_back(d.seq, d.receive_count, now_ms)
        if error is not None:
            log.warning("%s: %d message(s) left in the queue: %s", "/".join(map(str, self.key)),
                        len(delivered) - len(out), error)
            if not out:
                raise error
        return out

    def encode_delivered(self, d: Delivered) -> list[Any]:
        if not d.attributes and self.cipher is None:  # a plain body: no blob to read
            return [d.message_id.hex(), d.body, {}, self._receipt(d.seq, d.receive_count, self.epoch),
                    d.receive_count, d.enqueue_ms, None, None]
        body, blob = self.open(d.message_id, d.body, d.attributes)
        meta = decode_blob(blob)
        receipt = self._receipt(d.seq, d.receive_count, self.epoch)
        rc = d.receive_count + int(meta.get("rc", 0))
        return [d.message_id.hex(), body, meta.get("a") or {}, receipt, rc, d.enqueue_ms,
                meta.get("g"), meta.get("src")]

    def configure(self, config: QueueConfig) -> None:
        """Take a new config of the queue (set_attributes, a KV edit)."""
        if config.incarnation != self.config.incarnation:
            self._receipt = ReceiptEncoder(*self.key, config.incarnation or None)
        self.config = config

    # --- delete / visibility ---------------------------------------------------------
    def _own(self, receipt: Receipt) -> None:
        if (receipt.queue, receipt.partition, receipt.origin) != self.key:
            raise InvalidReceipt("the receipt belongs to another queue or partition")

    def earlier_queue(self, incarnation: int | None) -> bool:
        """Whether a receipt (or a ``dref``) of queue incarnation ``incarnation``
        was handed out by an earlier queue of this name, deleted since: the
        message it names is gone, whatever this queue holds at its seq.
        None (a version-2 receipt, an older client) or an unknown current
        incarnation (0): not known to be earlier."""
        now = self.config.incarnation
        return incarnation is not None and now != 0 and incarnation != now

    def _gone_with_earlier_queue(self) -> InvalidReceipt:
        return InvalidReceipt(f"the receipt is of an earlier queue named {self.queue!r} (deleted "
                              "since): its message is gone", gone=True)

    def delete_many(self, items: list[Any], now_ms: int) -> list[InvalidReceipt | None]:
        """Delete by receipt texts; one outcome per item (None: deleted). This
        stream's receipts are read by their tails only (ReceiptEncoder.read)."""
        out: list[InvalidReceipt | None] = [None] * len(items)
        mine: list[int] = []
        refs: list[tuple[int, int]] = []
        read = self._receipt.read
        for i, text in enumerate(items):
            try:
                ref = read(text)
                if ref is None:  # another stream's (raises), or this one's packed otherwise
                    rec = Receipt.decode(text)
                    self._own(rec)
                    if self.earlier_queue(rec.incarnation):
                        out[i] = self._gone_with_earlier_queue()
                        continue
                    ref = (rec.seq, rec.receive_count)
                refs.append(ref)
                mine.append(i)
            except InvalidReceipt as exc:
                out[i] = exc
        for i, err in zip(mine, self.store.delete_many(refs, now_ms), strict=True):
            out[i] = err
        return out

    def delete_refs(self, seqs: list[int], counts: list[int], now_ms: int,
                    incarnation: int | None = None) -> list[InvalidReceipt | None]:
        """:meth:`delete_many` by (seq, receive count) pairs of this stream (RECEIVE
        ``dref``: the client read them from a column group, not from receipt
        texts), received from queue incarnation ``incarnation``."""
        if self.earlier_queue(incarnation):
            return [self._gone_with_earlier_queue()] * len(seqs)
        return self.store.delete_columns(seqs, counts, now_ms)

    def change_visibility(self, receipt: Receipt, timeout_s: int, now_ms: int) -> int:
        self._own(receipt)
        if self.earlier_queue(receipt.incarnation):
            raise self._gone_with_earlier_queue()
        return self.store.change_visibility(receipt.seq, receipt.receive_count, timeout_s * 1000,
                                            now_ms)

    def give_back(self, receipt: Receipt, now_ms: int) -> None:
        """Undo the receive ``receipt`` came from (a client that took the
        message and handed it out to nobody): visible now, its receive count
        as before."""
        self._own(receipt)
        if self.earlier_queue(receipt.incarnation):
            raise self._gone_with_earlier_queue()
        self.store.give_back(receipt.seq, receipt.receive_count, now_ms)

    def visibility_ms(self, override_s: int | None) -> int:
        return (self.config.visibility_timeout_s if override_s is None else override_s) * 1000
