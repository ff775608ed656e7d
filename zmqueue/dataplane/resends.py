"""Sends this host holds as a replica, by the request that stored them, so a
SEND retried here after its first host died is answered, not stored twice.

A writer gives every message of a SEND request an id whose first 8 bytes are
the request's tag (:func:`request_tag`: a hash of the client's identity, the
request id and the request's fingerprint) and whose last 8 bytes are random. Replicas see those ids in
the records they apply and note, per partition, the ids each tag stored. A
client whose writer died before confirming retries the same request (the same
request id) at another host of the partition; if that host applied the
request's records as a replica, it answers with the ids they were stored
under. Without this, standard queues stored such a send twice.

The retry must find every message of the request (a request's records are
noted as one run, extended when a catch-up delivers them in pieces); a retry
that finds fewer is stored again, which is the at-least-once fallback.
A host of a partition with one replica looks a SEND up only while the index
:meth:`~ReplicatedSends.holds` one of the partition's requests (R was lowered,
a drain left it alone, or it reopened a stream another host may have
written): a partition with R=1 from the start hashes no tag (but a FIFO
one for the TTL after its host reopened it with sends of the TTL before);
a retry marked ``rt`` is looked up whatever it holds (not found, the
service applies the replication frames queued on its SUB socket and looks
again: just after R was lowered, the failed host's last records may not be
noted yet).
Bounded: ``max_entries`` requests and ``max_ids`` ids in all, each for at
most ``ttl_ms`` (a client retries for its request timeout, seconds).

A resync that cuts records from a copy (they diverged from the writer's log)
forgets the requests noted from them (:meth:`ReplicatedSends.forget`): until
the thirty-sixth session a retry of such a send (never acknowledged: its
writer does not hold it) was answered with the ids of records that no longer
existed anywhere, a confirmed send stored nowhere.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections import OrderedDict

import numpy as np

from zmqueue.dataplane.storage.protocol import PartitionStoreProtocol
from zmqueue.dataplane.storage.records import RecordType, Table
from zmqueue.protocol import MESSAGE_ID_BYTES

TAG_BYTES = 8
ID_BYTES = MESSAGE_ID_BYTES
RECENT_RECORDS = 10_000
"""How far back a stream opened from disk is read for recent sends."""
READ_STEP = 2000
"""Records read at a time meanwhile (as many as a catch-up reply holds)."""

Key = tuple[str, int, bytes]
"""(queue, partition, request tag)."""
Part = tuple[str, int]
"""(queue, partition)."""


def request_tag(user: str, request_id: int, fingerprint: int = 0) -> bytes:
    """The 8-byte tag of a client's request: the same on every host, for the
    same request sent again (``fingerprint``: :func:`zmqueue.protocol.request_fingerprint`;
    without it two clients reusing an id found each other's sends)."""
    return hashlib.blake2b(request_id.to_bytes(8, "big") + fingerprint.to_bytes(4, "big") + user.encode(),
                           digest_size=TAG_BYTES).digest()


def tagged_ids(tag: bytes, n: int) -> bytes:
    """``n`` message ids, 16 bytes each, joined: ``tag`` + 8 random bytes."""
    if n == 1:
        return tag + os.urandom(ID_BYTES - TAG_BYTES)
    ids = np.frombuffer(os.urandom(ID_BYTES * n), np.uint8).reshape(n, ID_BYTES).copy()
    ids[:, :TAG_BYTES] = np.frombuffer(tag, np.uint8)
    return ids.tobytes()


class ReplicatedSends:
    def __init__(self, max_entries: int = 100_000, max_ids: int = 1_000_000,
                 ttl_ms: int = 2 * 60 * 1000) -> None:
        self.max_entries = max_entries
        self.max_ids = max_ids
        self.ttl_ms = ttl_ms
        self._items: OrderedDict[Key, tuple[int, int, bytes, str]] = OrderedDict()
        """key -> (noted at ms, seq of its last message, ids joined, the origin of the
        stream that holds them)."""
        self._ids = 0
        self._parts: dict[Part, list[int]] = {}
        """(queue, partition) -> [its requests noted, when the last was noted (ms)]
        (:meth:`holds`)."""
        self.hits = 0
        self._later: list[tuple[str, int, Table, int, str]] = []
        """Applied chunks not noted yet (:meth:`note_later`)."""

    def note_later(self, queue: str, p: int, table: Table, now_ms: int, origin: str = "") -> None:
        """:meth:`note`, deferred until :meth:`note_deferred` or the next
        :meth:`get`: a replica notes a chunk after its loop pass has committed
        it and reported its position, so the noting is not on the path of a
        synchronous ack. ``table`` must not change meanwhile (a decoded chunk)."""
        self._later.append((queue, p, table, now_ms, origin))

    def note_deferred(self) -> None:
        """Note the chunks :meth:`note_later` kept (once per loop pass)."""
        if self._later:
            later, self._later = self._later, []
            for queue, p, table, now_ms, origin in later:
                self.note(queue, p, table, now_ms, origin)

    def note(self, queue: str, p: int, table: Table, now_ms: int, origin: str = "") -> None:
        """Note the MESSAGE records of an applied chunk (of the stream of
        ``origin`` in partition ``p``), one run per tag."""
        if len(table) == 1:
            row = table[0]
            if int(row["type"]) == RecordType.MESSAGE:
                mid = bytes(row["message_id"])
                self._put((queue, p, mid[:TAG_BYTES]), int(row["seq"]), mid, now_ms, origin)
            return
        msgs = table[table["type"] == RecordType.MESSAGE]
        if not len(msgs):
            return
        raw = msgs["message_id"].tobytes()
        tags = np.frombuffer(raw, np.uint64)[::2]
        starts = [0, *(np.flatnonzero(tags[1:] != tags[:-1]) + 1).tolist(), len(msgs)]
        seqs = msgs["seq"]
        for a, b in itertools.pairwise(starts):
            self._put((queue, p, raw[a * ID_BYTES:a * ID_BYTES + TAG_BYTES]), int(seqs[b - 1]),
                      raw[a * ID_BYTES:b * ID_BYTES], now_ms, origin, first_seq=int(seqs[a]))

    def _put(self, key: Key, last_seq: int, ids: bytes, now_ms: int, origin: str,
             first_seq: int = 0) -> None:
        old = self._items.pop(key, None)
        part = self._parts.get(key[:2])
        if part is None:
            part = self._parts[key[:2]] = [0, now_ms]
        if old is not None:
            self._ids -= len(old[2]) // ID_BYTES
            if old[1] + 1 == (first_seq or last_seq):  # the same request, delivered in pieces
                ids = old[2] + ids
        else:
            part[0] += 1
        part[1] = max(part[1], now_ms)
        self._items[key] = (now_ms, last_seq, ids, origin)
        self._ids += len(ids) // ID_BYTES
        while self._items:
            first = next(iter(self._items.values()))
            if (self._ids <= self.max_ids and len(self._items) <= self.max_entries
                    and now_ms - first[0] <= self.ttl_ms):
                break
            self._drop(*self._items.popitem(last=False))

    def _drop(self, key: Key, item: tuple[int, int, bytes, str]) -> None:
        """Account for ``item``, removed from the index."""
        self._ids -= len(item[2]) // ID_BYTES
        part = self._parts[key[:2]]
        part[0] -= 1
        if not part[0]:
            del self._parts[key[:2]]

    def note_recent(self, queue: str, p: int, store: PartitionStoreProtocol, now_ms: int,
                    origin: str = "", last: int = RECENT_RECORDS) -> None:
        """Note the messages a stream opened from disk stored within the TTL
        (among its last ``last`` records): a host restarted soon after it
        died still answers a retry of what it, or a writer it replicated,
        stored before."""
        horizon = now_ms - self.ttl_ms
        seq = max(1, store.last_seq - last + 1)
        while seq <= store.last_seq:
            chunks = store.read_chunks(seq, READ_STEP)
            if not chunks:
                return
            for table, _ in chunks:
                recent = table[table["time_ms"] >= horizon]  # (a request's records share their time)
                if len(recent):
                    self.note(queue, p, recent, now_ms, origin)
            seq = int(chunks[-1][0]["seq"][-1]) + 1

    def forget(self, queue: str, p: int, origin: str, after_seq: int) -> int:
        """Forget the requests noted from the stream of ``origin`` whose last
        message is past ``after_seq``: a resync cut them from this host's copy
        (they were never acknowledged: its writer does not hold them), and a
        retry answered with their ids would be a send confirmed but stored
        nowhere. Returns how many requests were forgotten."""
        self.note_deferred()
        gone = [k for k, v in self._items.items()
                if k[0] == queue and k[1] == p and v[3] == origin and v[1] > after_seq]
        for k in gone:
            self._drop(k, self._items.pop(k))
        return len(gone)

    def holds(self, queue: str, p: int, now_ms: int) -> bool:
        """Whether a request of partition ``p`` may be found here: one was noted
        within the TTL, or an applied chunk of the partition waits to be
        (:meth:`note_later`, at most a loop pass's chunks). What a host of a
        partition with one replica asks before it hashes a SEND's tag: O(1),
        and false for a partition with R=1 from the start (nothing replicated,
        nothing reopened from another host's writing)."""
        part = self._parts.get((queue, p))
        if part is not None and now_ms - part[1] <= self.ttl_ms:
            return True
        return bool(self._later) and any(c[0] == queue and c[1] == p for c in self._later)

    def get(self, queue: str, p: int, tag: bytes, count: int, now_ms: int) -> bytes | None:
        """The ids (16 bytes each, joined) the request tagged ``tag`` was
        stored under, if all ``count`` of its messages were noted here within
        the TTL."""
        self.note_deferred()
        item = self._items.get((queue, p, tag))
        if item is None or now_ms - item[0] > self.ttl_ms or len(item[2]) != count * ID_BYTES:
            return None
        self.hits += 1
        return item[2]

    def origin(self, queue: str, p: int, tag: bytes) -> str:
        """The origin of the stream that holds the request tagged ``tag`` ("" if unknown)."""
        item = self._items.get((queue, p, tag))
        return item[3] if item is not None else ""

    def __len__(self) -> int:
        return len(self._items)
