"""A handle on one queue: send, receive, delete, visibility, purge, stats,
subscribe. Requests go to the host serving each partition; routing follows
NotLeader replies and is refreshed after timeouts."""

from __future__ import annotations

import contextlib
import itertools
import random
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from zmqueue.client.models import AttributeValue, Message, OutgoingMessage
from zmqueue.config import QueueConfig
from zmqueue.errors import (
    InvalidParameter,
    NotLeader,
    RequestTimeout,
    Unavailable,
    ZmqueueError,
    from_wire,
)
from zmqueue.protocol import Command, Receipt, group_partition

if TYPE_CHECKING:
    from zmqueue.client.client import Client
    from zmqueue.client.subscription import Subscription

MAX_BATCH = 1000


class Queue:
    def __init__(self, client: Client, info: dict[str, Any]) -> None:
        self.client = client
        self.config = QueueConfig.from_dict(info["config"])
        self.name = self.config.name
        self._routes: dict[int, str | None] = {}
        self._route_lock = threading.Lock()
        self._rr = itertools.count(random.randrange(1 << 16))
        self._apply_info(info)

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, fifo={self.config.fifo}, partitions={self.config.partitions})"

    # --- routing ---------------------------------------------------------------
    def _apply_info(self, info: dict[str, Any]) -> None:
        with self._route_lock:
            for p in info.get("partitions", []):
                self._routes[int(p["partition"])] = p.get("endpoint")

    def _refresh(self) -> None:
        with contextlib.suppress(Unavailable, RequestTimeout):
            self._apply_info(self.client.queue_info(self.name))

    def call(self, partition: int, command: Command, body: dict[str, Any],
             extra_timeout_ms: int = 0) -> Any:
        """One request to the partition's host, retried idempotently."""
        rid: int | None = None
        last: ZmqueueError | None = None
        for attempt in range(self.client.retries + 1):
            endpoint = self._routes.get(partition)
            if endpoint is None:
                self._refresh()
                endpoint = self._routes.get(partition)
            if endpoint is None:
                last = Unavailable(f"partition {partition} of {self.name!r} has no healthy host now")
                time.sleep(min(1.0, 0.1 * 2**attempt))
                continue
            conn = self.client.connection(endpoint)
            rid = rid or conn.next_request_id()
            try:
                return self.client.request(endpoint, command, body, rid, extra_timeout_ms)
            except NotLeader as exc:
                last = exc
                new = exc.details.get("endpoint")
                with self._route_lock:
                    self._routes[partition] = new if isinstance(new, str) else None
            except Unavailable as exc:
                last = exc
                self._refresh()
                time.sleep(min(1.0, 0.05 * 2**attempt))
        assert last is not None
        raise last

    # --- send ----------------------------------------------------------------------
    def _partition_for(self, msg: OutgoingMessage) -> int:
        n = self.config.partitions
        if n == 1:
            return 0
        if self.config.fifo and msg.group_id:
            return group_partition(msg.group_id, n)
        return next(self._rr) % n

    def send(self, body: bytes | str, attributes: dict[str, AttributeValue] | None = None,
             delay: int | None = None, group_id: str | None = None,
             dedup_id: str | None = None) -> str:
        """Send one message; returns its id (the original id for a FIFO duplicate)."""
        return self.send_batch([OutgoingMessage(body, attributes, delay, group_id, dedup_id)])[0]

    def send_batch(self, items: Iterable[bytes | str | OutgoingMessage]) -> list[str]:
        """Send up to 1000 messages in one request per partition; ids in order."""
        msgs = [i if isinstance(i, OutgoingMessage) else OutgoingMessage(i) for i in items]
        if not 1 <= len(msgs) <= MAX_BATCH:
            raise InvalidParameter(f"send_batch takes 1 to {MAX_BATCH} messages, got {len(msgs)}")
        by_part: dict[int, list[int]] = {}
        for i, m in enumerate(msgs):
            by_part.setdefault(self._partition_for(m), []).append(i)
        ids: list[str] = [""] * len(msgs)
        for p, idxs in by_part.items():
            reply = self.call(p, Command.SEND, {"q": self.name, "p": p,
                                                 "m": [msgs[i].to_wire() for i in idxs]})
            for i, mid in zip(idxs, reply["ids"], strict=True):
                ids[i] = mid
        return ids

    # --- receive -------------------------------------------------------------------
    def receive(self, max_messages: int = 1, wait_time: float = 0,
                visibility_timeout: int | None = None) -> list[Message]:
        """Up to ``max_messages`` (1-1000) messages. With ``wait_time`` (0-20 s)
        a long poll: returns as soon as a message is available, or empty."""
        if not isinstance(max_messages, int) or not 1 <= max_messages <= MAX_BATCH:
            raise InvalidParameter("max_messages must be 1 to 1000", field="max_messages")
        if not 0 <= wait_time <= 20:
            raise InvalidParameter("wait_time must be 0 to 20 seconds", field="wait_time")
        n = self.config.partitions
        start = next(self._rr) % n
        order = [(start + i) % n for i in range(n)]
        if n > 1:
            for p in order:
                got = self._receive_one(p, max_messages, 0, visibility_timeout)
                if got:
                    return got
        wait_ms = int(wait_time * 1000)
        return self._receive_one(order[0], max_messages, wait_ms, visibility_timeout)

    def _receive_one(self, p: int, max_n: int, wait_ms: int, vis: int | None) -> list[Message]:
        body: dict[str, Any] = {"q": self.name, "p": p, "max": max_n, "wait_ms": wait_ms}
        if vis is not None:
            body["vis_s"] = vis
        reply = self.call(p, Command.RECEIVE, body, extra_timeout_ms=wait_ms)
        return [Message.from_wire(self.name, m) for m in reply["m"]]

    # --- delete / visibility ---------------------------------------------------------
    def _by_partition(self, receipts: list[str]) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for i, r in enumerate(receipts):
            rec = Receipt.decode(r)
            if rec.queue != self.name:
                raise InvalidParameter(f"receipt {i} belongs to queue {rec.queue!r}, not {self.name!r}")
            out.setdefault(rec.partition, []).append(i)
        return out

    def delete(self, receipt: str) -> None:
        """Delete a received message; InvalidReceipt if the receipt is stale."""
        err = self.delete_batch([receipt])[0]
        if err is not None:
            raise err

    def delete_batch(self, receipts: Iterable[str]) -> list[ZmqueueError | None]:
        """Delete up to 1000 messages; returns one outcome per receipt (None = deleted)."""
        return self._batch(Command.DELETE, list(receipts), None)

    def change_visibility(self, receipt: str, timeout: int) -> None:
        """Make a received message visible after ``timeout`` seconds from now (0 = now)."""
        err = self._batch(Command.CHANGE_VISIBILITY, [receipt], timeout)[0]
        if err is not None:
            raise err

    def _batch(self, command: Command, receipts: list[str], timeout: int | None) -> list[ZmqueueError | None]:
        if not 1 <= len(receipts) <= MAX_BATCH:
            raise InvalidParameter(f"1 to {MAX_BATCH} receipts per batch, got {len(receipts)}")
        out: list[ZmqueueError | None] = [None] * len(receipts)
        for p, idxs in self._by_partition(receipts).items():
            items: list[Any] = [receipts[i] if timeout is None else [receipts[i], timeout] for i in idxs]
            reply = self.call(p, command, {"q": self.name, "p": p, "r": items})
            for i, res in zip(idxs, reply["results"], strict=True):
                out[i] = None if res is None else from_wire(res)
        return out

    # --- whole queue -----------------------------------------------------------------
    def purge(self) -> int:
        """Delete every message of the queue; returns how many were removed."""
        return sum(self.call(p, Command.PURGE_QUEUE, {"q": self.name, "p": p})["purged"]
                   for p in range(self.config.partitions))

    def stats(self) -> dict[str, int]:
        """Counters summed over partitions: visible, in_flight, delayed, ..."""
        total: dict[str, int] = {}
        for p in range(self.config.partitions):
            for k, v in self.call(p, Command.QUEUE_STATS, {"q": self.name, "p": p}).items():
                if isinstance(v, int):
                    total[k] = max(total.get(k, 0), v) if k == "oldest_age_ms" else total.get(k, 0) + v
        return total

    def subscribe(self, handler: Callable[[Message], None], prefetch: int = 10,
                  visibility_timeout: int | None = None, auto_delete: bool = True) -> Subscription:
        """Have hosts push messages to ``handler`` (on a background thread),
        never more than ``prefetch`` unfinished at a time. With ``auto_delete``
        a message is deleted when the handler returns; if it raises, the
        message becomes visible again after its visibility timeout."""
        from zmqueue.client.subscription import Subscription

        return Subscription(self, handler, prefetch, visibility_timeout, auto_delete).start()
