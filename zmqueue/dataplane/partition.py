"""One queue partition served by this host: SQS semantics over a store.

It turns wire-level send/receive/delete/visibility requests into store calls,
enforces the queue's limits, keeps the FIFO deduplication window, and holds
the partition's long-poll waiters and push subscribers. Everything runs on
the host's request-loop thread.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from zmqueue.config import QueueConfig
from zmqueue.dataplane.dispatch import Request
from zmqueue.dataplane.messages import (
    check_size,
    decode_blob,
    encode_blob,
    group_hash,
    new_message_id,
    validate_attributes,
)
from zmqueue.dataplane.storage import Delivered, NewMessage, PartitionStoreProtocol
from zmqueue.errors import InvalidParameter, InvalidReceipt
from zmqueue.protocol import Receipt

DEDUP_WINDOW_MS = 5 * 60 * 1000
DEDUP_MAX_ENTRIES = 1_000_000


@dataclass
class Waiter:
    request: Request
    max_messages: int
    visibility_ms: int
    deadline_ms: int


@dataclass
class Subscriber:
    sub_id: int
    identity: bytes
    prefetch: int
    visibility_ms: int
    credit: int = 0
    delivered: int = 0

    def __post_init__(self) -> None:
        self.credit = self.prefetch


@dataclass
class DedupWindow:
    """dedup key -> (message id, expiry), oldest first; bounded."""

    entries: OrderedDict[str, tuple[bytes, int]] = field(default_factory=OrderedDict)

    def get(self, key: str, now_ms: int) -> bytes | None:
        self.prune(now_ms)
        item = self.entries.get(key)
        return item[0] if item else None

    def put(self, key: str, message_id: bytes, now_ms: int) -> None:
        self.entries[key] = (message_id, now_ms + DEDUP_WINDOW_MS)
        while len(self.entries) > DEDUP_MAX_ENTRIES:
            self.entries.popitem(last=False)

    def prune(self, now_ms: int) -> None:
        while self.entries:
            _, (_, expires) = next(iter(self.entries.items()))
            if expires > now_ms:
                return
            self.entries.popitem(last=False)


class PartitionRuntime:
    def __init__(self, queue: str, partition: int, config: QueueConfig,
                 store: PartitionStoreProtocol, epoch: int = 0) -> None:
        self.queue = queue
        self.partition = partition
        self.config = config
        self.store = store
        self.epoch = epoch
        self.dedup = DedupWindow()
        self.waiters: deque[Waiter] = deque()
        self.subscribers: dict[int, Subscriber] = {}

    # --- send -------------------------------------------------------------
    def send(self, items: list[Any], now_ms: int) -> list[str]:
        """Validate and append a batch; returns message ids (hex), in order.

        A FIFO duplicate (same dedup key within 5 minutes) is not stored and
        returns the original id. The whole batch is checked before anything
        is appended, so a bad item rejects the batch.
        """
        cfg = self.config
        prepared: list[tuple[NewMessage | None, bytes, str | None]] = []
        batch_keys: dict[str, bytes] = {}
        for i, item in enumerate(items):
            msg, key = self._prepare(i, item)
            known = (self.dedup.get(key, now_ms) or batch_keys.get(key)) if key else None
            if known is not None:
                prepared.append((None, known, None))
                continue
            if key:
                batch_keys[key] = msg.message_id
            prepared.append((msg, msg.message_id, key))
        new = [m for m, _, _ in prepared if m is not None]
        if new:
            self.store.append(new, now_ms, self.epoch)
        for m, mid, key in prepared:
            if m is not None and key:
                self.dedup.put(key, mid, now_ms)
        del cfg
        return [mid.hex() for _, mid, _ in prepared]

    def _prepare(self, i: int, item: Any) -> tuple[NewMessage, str | None]:
        cfg = self.config
        if not isinstance(item, list) or len(item) != 5:
            raise InvalidParameter(f"message {i}: expected [body, attributes, delay, group, dedup]")
        body, attrs, delay, group, dedup = item
        if not isinstance(body, bytes):
            raise InvalidParameter(f"message {i}: body must be bytes", field="body")
        attrs = validate_attributes(attrs)
        for name, val, limit in (("group_id", group, 128), ("dedup_id", dedup, 128)):
            if val is not None and (not isinstance(val, str) or not 0 < len(val) <= limit):
                raise InvalidParameter(f"message {i}: {name} must be 1-{limit} characters", field=name)
        if delay is None:
            delay = cfg.delay_s
        if not isinstance(delay, int) or isinstance(delay, bool) or not 0 <= delay <= 900:
            raise InvalidParameter(f"message {i}: delay must be 0-900 seconds", field="delay")
        key: str | None = None
        if cfg.fifo:
            if group is None:
                raise InvalidParameter(f"message {i}: FIFO queues need a group_id", field="group_id")
            key = dedup or (hashlib.sha256(body).hexdigest() if cfg.content_based_dedup else None)
        blob = encode_blob(attrs, group, dedup)
        check_size(body, blob, cfg.max_message_bytes)
        msg = NewMessage(new_message_id(), body, blob, group_hash(group) if cfg.fifo else 0,
                         delay * 1000)
        return msg, key

    def append_dead_letters(self, items: list[tuple[bytes, bytes, bytes, int, str]], now_ms: int) -> None:
        """Store messages moved here from another queue's partition:
        (message id, body, blob, carried receive count, source queue)."""
        msgs = []
        for mid, body, blob, rc, source in items:
            meta = decode_blob(blob)
            new_blob = encode_blob(meta.get("a") or {}, meta.get("g"), meta.get("d"), rc, source)
            msgs.append(NewMessage(mid, body, new_blob, group_hash(meta.get("g")) if self.config.fifo
                                   else 0, 0))
        self.store.append(msgs, now_ms, self.epoch)

    # --- receive ----------------------------------------------------------
    def receive(self, max_messages: int, visibility_ms: int, now_ms: int
                ) -> tuple[list[list[Any]], list[Delivered]]:
        """Up to ``max_messages`` wire-encoded messages, and the dead letters
        the caller must move to the DLQ."""
        mrc = self.config.max_receive_count if self.config.dead_letter_queue else None
        delivered, dead = self.store.receive(max_messages, now_ms, visibility_ms,
                                             max_receive_count=mrc)
        return [self.encode_delivered(d) for d in delivered], dead

    def encode_delivered(self, d: Delivered) -> list[Any]:
        meta = decode_blob(d.attributes)
        receipt = Receipt(self.queue, self.partition, d.seq, d.receive_count, self.epoch).encode()
        rc = d.receive_count + int(meta.get("rc", 0))
        return [d.message_id.hex(), d.body, meta.get("a") or {}, receipt, rc, d.enqueue_ms,
                meta.get("g"), meta.get("src")]

    # --- delete / visibility -----------------------------------------------
    def _own(self, receipt: Receipt) -> None:
        if receipt.queue != self.queue or receipt.partition != self.partition:
            raise InvalidReceipt("the receipt belongs to another queue or partition")

    def delete(self, receipt: Receipt, now_ms: int) -> None:
        self._own(receipt)
        self.store.delete(receipt.seq, receipt.receive_count, now_ms)

    def change_visibility(self, receipt: Receipt, timeout_s: int, now_ms: int) -> int:
        self._own(receipt)
        return self.store.change_visibility(receipt.seq, receipt.receive_count, timeout_s * 1000,
                                            now_ms)

    def visibility_ms(self, override_s: int | None) -> int:
        return (self.config.visibility_timeout_s if override_s is None else override_s) * 1000
