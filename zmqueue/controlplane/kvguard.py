"""Fencing a host's writes of a queue's keys by the queue's deletion.

A host's leadership thread writes two kinds of keys of each queue it keeps:
writer locks (``zmqueue/leaders/<q>/...``, taken with Consul's ``lock``) and
its positions (``zmqueue-positions/<q>/...``). It acts on candidacies the
data plane derived from a metadata snapshot a moment old, so such a write
could be sent after ``DELETE_QUEUE`` had deleted the queue's trees: it
created the key again, and nothing ever deleted it (until the forty-fifth
session, 20-65 % of deletes under load left 1-6 such keys each).

``DELETE_QUEUE`` writes the queue's tombstone (``zmqueue/deleted/<q>``)
before it deletes anything, and nothing else writes that key. So each such
write goes in a transaction that first checks the tombstone is as it was
when the leadership thread found the queue's incarnation alive
(:class:`Guard`: ``check-not-exists`` when there was none, ``check-index``
on its ModifyIndex otherwise): a deletion since makes Consul refuse the
whole transaction, so no key of a deleted queue is ever written again. (The
config key cannot serve: ``check-index`` compares its ModifyIndex, which
every settings edit moves, and ``get`` proves only that *a* queue of that
name exists, perhaps one created again since.)

:func:`judge` decides, from one atomic read of a queue's tombstone and config
key, whether a stream of a given incarnation is alive (and its guard), gone
(a deletion named it: write nothing of it again) or not the live queue (its
name was deleted and created again, and the data plane has not caught up:
wait). :class:`QueueGuards` keeps those verdicts for the leadership thread.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import consul

from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.consul_client import ConsulClient

TXN_OPS_MAX = 64
"""Consul caps a transaction at 64 operations."""
RECHECK_S = 2.0
"""A queue found not live in the incarnation asked about is read again this
often (the data plane's candidacies normally change first)."""

Op = dict[str, Any]
GONE = "gone"
"""Verdict: a ``DELETE_QUEUE`` deleted this incarnation; write nothing of it again."""
NOT_CURRENT = "not current"
"""Verdict: another incarnation of the name is the live queue; write nothing for now."""


@dataclass(frozen=True)
class Guard:
    """The tombstone of ``queue`` as it was while the incarnation was alive:
    its ModifyIndex, 0 when there was none."""

    queue: str
    tombstone_index: int

    def op(self) -> Op:
        """The transaction operation that fails once the queue was deleted since."""
        key = kv.deleted_key(self.queue)
        if self.tombstone_index <= 0:
            return {"KV": {"Verb": "check-not-exists", "Key": key}}
        return {"KV": {"Verb": "check-index", "Key": key, "Index": self.tombstone_index}}


Verdict = Guard | str
"""A :class:`Guard` (alive: its writes go with it), :data:`GONE` or :data:`NOT_CURRENT`."""
Read = tuple[int, int | None, int | None]
"""One queue's part of a :func:`parse_reads` answer: (tombstone ModifyIndex or
0, the incarnation it names or None, config CreateIndex or None)."""


def judge(queue: str, incarnation: int, tombstone_index: int, tombstone_names: int | None,
          config_created: int | None) -> Verdict:
    """Whether a stream of ``queue``'s ``incarnation`` (its config key's
    CreateIndex; 0: not known) may still write its queue's keys, from one
    atomic read: the tombstone's ModifyIndex (0: none) and the incarnation
    it names (None: none, or unreadable), and the config key's CreateIndex
    (None: no config key).

    Incarnations grow with Consul's index, so a tombstone naming a later one
    than ``incarnation`` means that one was deleted, and a fortiori this
    one. A config key missing with no tombstone of this incarnation is a
    config deleted by hand (the queue's hosts keep serving it: see
    docs/CONSUL_KV.md), or Consul's state lost: alive, guarded by the
    tombstone as it is, which any later ``DELETE_QUEUE`` of a config put
    back moves."""
    guard = Guard(queue, max(tombstone_index, 0))
    if incarnation > 0 and tombstone_names is not None and tombstone_names >= incarnation:
        return GONE
    if config_created is None or incarnation <= 0 or config_created == incarnation:
        return guard
    return NOT_CURRENT


def read_ops(queues: Iterable[str]) -> list[Op]:
    """A read-only transaction's operations for :func:`parse_reads`: two per
    queue (``get-tree`` answers a missing key with nothing, where ``get``
    would fail the whole transaction)."""
    return [op for q in queues for op in (
        {"KV": {"Verb": "get-tree", "Key": kv.deleted_key(q)}},
        {"KV": {"Verb": "get-tree", "Key": kv.queue_config_key(q)}})]


def parse_reads(queues: Iterable[str], answer: Mapping[str, Any] | None) -> dict[str, Read]:
    """Per queue of a :func:`read_ops` transaction, its :data:`Read`. A
    ``get-tree`` of a tombstone also lists longer names (``orders`` lists
    ``orders-dlq``): only exact keys count."""
    items: dict[str, Mapping[str, Any]] = {}
    for r in (answer or {}).get("Results") or []:
        item = r.get("KV") if isinstance(r, dict) else None
        if isinstance(item, dict) and isinstance(item.get("Key"), str):
            items[item["Key"]] = item
    out: dict[str, Read] = {}
    for q in queues:
        tomb, cfg = items.get(kv.deleted_key(q)), items.get(kv.queue_config_key(q))
        names: int | None = None
        index = 0
        if tomb is not None:
            index = _int(tomb.get("ModifyIndex"))
            decoded = kv.decode_tombstone(kv.deleted_key(q), _b64(tomb.get("Value")))
            names = decoded if isinstance(decoded, int) else None
        out[q] = (index, names, _int(cfg.get("CreateIndex")) if cfg is not None else None)
    return out


def _int(v: Any) -> int:
    return v if type(v) is int else 0


def _b64(v: Any) -> bytes | None:
    try:
        return base64.b64decode(v) if isinstance(v, str) else None
    except ValueError:
        return None


def txn_errors(exc: consul.ConsulException) -> list[tuple[int, str]]:
    """A refused transaction's errors, ``(op index, what)``; [] when ``exc`` is
    not Consul's 409 answer to a transaction."""
    text = str(exc)
    if not text.startswith("409 "):
        return []
    try:
        errors = json.loads(text[4:]).get("Errors") or []
    except (ValueError, AttributeError):
        return []
    return [(e["OpIndex"], str(e.get("What", ""))) for e in errors
            if isinstance(e, dict) and type(e.get("OpIndex")) is int]


@dataclass
class Batch:
    """One transaction's operations and the queue each belongs to."""

    ops: list[Op]
    queues: list[str]

    def without(self, drop: set[str]) -> Batch:
        keep = [i for i, q in enumerate(self.queues) if q not in drop]
        return Batch([self.ops[i] for i in keep], [self.queues[i] for i in keep])

    def fenced(self, errors: list[tuple[int, str]]) -> set[str] | None:
        """The queues whose guard failed, when every error is a guard's (None:
        some other operation failed)."""
        out = set()
        for i, _ in errors:
            if not 0 <= i < len(self.ops) or self.ops[i]["KV"]["Verb"] not in ("check-index",
                                                                                "check-not-exists"):
                return None
            out.add(self.queues[i])
        return out or None


def batches(writes: Mapping[str, list[Op]], guards: Mapping[str, Guard],
            ops_max: int = TXN_OPS_MAX) -> list[Batch]:
    """Pack each queue's writes, each run of them led by the queue's guard,
    into transactions of at most ``ops_max`` operations."""
    assert ops_max >= 2
    out: list[Batch] = []
    cur = Batch([], [])
    for q, ops in writes.items():
        for i in range(0, len(ops), ops_max - 1):
            run = [guards[q].op(), *ops[i:i + ops_max - 1]]
            if len(cur.ops) + len(run) > ops_max:
                out.append(cur)
                cur = Batch([], [])
            cur.ops += run
            cur.queues += [q] * len(run)
    if cur.ops:
        out.append(cur)
    return out


FENCED = -1
""":func:`take_lock`: not taken, the queue was deleted since its guard was read."""
INVALID_SESSION = -2
""":func:`take_lock`: Consul says the session is invalid (every lock it held is lost)."""


def take_lock(client: ConsulClient, key: str, value: bytes, sid: str, guard: Guard) -> int:
    """Take lock ``key`` with session ``sid`` in one transaction led by
    ``guard``, so the lock key of a queue deleted since is never created
    again: the LockIndex granted (the term's epoch, from the transaction's
    answer: no read back), 0 when another session holds the lock,
    :data:`FENCED` or :data:`INVALID_SESSION`."""
    lock = {"Verb": "lock", "Key": key, "Value": base64.b64encode(value).decode(), "Session": sid}
    ops = [guard.op(), {"KV": lock}]
    try:
        answer = client.call(lambda c: c.txn.put(ops))
    except consul.ConsulException as exc:
        errors = txn_errors(exc)
        if errors and all(i == 0 for i, _ in errors):
            return FENCED
        if errors and all("lock is already held" in what for _, what in errors):
            return 0
        if "invalid session" in str(exc):
            return INVALID_SESSION
        raise
    for r in (answer or {}).get("Results") or []:
        item = r.get("KV") if isinstance(r, dict) else None
        if isinstance(item, dict) and item.get("Key") == key:
            return _int(item.get("LockIndex")) if item.get("Session") == sid else 0
    return 0  # (taken, yet not in the answer: the holder's next cycle finds it held, and adopts it)


def write_fenced(client: ConsulClient, writes: Mapping[str, list[Op]],
                 guards: Mapping[str, Guard]) -> set[str]:
    """Write each queue's operations in transactions led by its guard
    (:func:`batches`); returns the queues whose guard failed (deleted since:
    nothing of theirs was written). Every other queue's writes are retried
    without them."""
    fenced: set[str] = set()
    for batch in batches(writes, guards):
        while batch.ops:
            ops = batch.ops
            try:
                client.call(lambda c: c.txn.put(ops))  # noqa: B023
                break
            except consul.ConsulException as exc:
                failed = batch.fenced(txn_errors(exc))
                if failed is None:
                    raise
                fenced |= failed
                batch = batch.without(failed)
    return fenced


@dataclass
class _Known:
    incarnation: int
    """The incarnation the data plane asked about."""
    read: Read
    verdict: Verdict
    """:func:`judge` of ``read`` for ``incarnation``."""
    due: float
    """When to read it again (inf: not unless asked)."""


class QueueGuards:
    """The leadership thread's verdicts per queue (one thread: not thread safe)."""

    def __init__(self, client: ConsulClient) -> None:
        self.client = client
        self._known: dict[str, _Known] = {}
        self.reads = 0
        """Read transactions so far."""
        self.version = 0
        """Bumped whenever a verdict is read, dropped or due again."""
        self.next_due = float("inf")
        """The earliest time a verdict is due to be read again."""

    def of(self, queue: str, incarnation: int) -> Verdict | None:
        """The verdict on ``queue``'s ``incarnation`` (None: not read for it yet)."""
        k = self._known.get(queue)
        return k.verdict if k is not None and k.incarnation == incarnation else None

    def incarnation(self, queue: str) -> int | None:
        """The incarnation ``queue`` was last read for (None: not read)."""
        k = self._known.get(queue)
        return None if k is None else k.incarnation

    def judged(self, queue: str, incarnation: int) -> Verdict | None:
        """The verdict the last read of ``queue`` gives any ``incarnation`` (an
        earlier one whose lock was held here); None: not read."""
        k = self._known.get(queue)
        return None if k is None else judge(queue, incarnation, *k.read)

    def recheck(self, queue: str) -> None:
        """Read ``queue`` again at the next :meth:`resolve` (its guard failed,
        or its lock vanished)."""
        k = self._known.get(queue)
        if k is not None:
            k.due = self.next_due = 0.0
            self.version += 1

    def resolve(self, wanted: Mapping[str, int]) -> None:
        """Know a verdict on each queue of ``wanted`` (queue -> incarnation),
        reading those not read for that incarnation yet, or due again, in
        transactions of 32 queues; forget every other queue."""
        for q in [q for q in self._known if q not in wanted]:
            del self._known[q]
            self.version += 1
        now = time.monotonic()
        todo = [q for q, inc in wanted.items()
                if (k := self._known.get(q)) is None or k.incarnation != inc or k.due <= now]
        step = TXN_OPS_MAX // 2
        for i in range(0, len(todo), step):
            chunk = todo[i:i + step]
            ops = read_ops(chunk)
            answer = self.client.call(lambda c: c.txn.put(ops))  # noqa: B023
            self.reads += 1
            for q, read in parse_reads(chunk, answer).items():
                verdict = judge(q, wanted[q], *read)
                self._known[q] = _Known(wanted[q], read, verdict,
                                        now + RECHECK_S if verdict == NOT_CURRENT else float("inf"))
            self.version += 1
        self.next_due = min((k.due for k in self._known.values()), default=float("inf"))
