"""Push consumers: credit-based flow control over the client's connection.

A subscriber starts with ``prefetch`` credits. Each pushed message costs one
credit; the client returns credits (CREDIT) as it finishes messages, so a slow
consumer never holds more than ``prefetch`` messages it has not finished.
Pushed messages are ordinary receives: under their visibility timeout, and
deleted by receipt.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from zmqueue import protocol
from zmqueue.dataplane.dispatch import Outbox
from zmqueue.dataplane.partition import PartitionRuntime, Subscriber
from zmqueue.errors import InvalidParameter
from zmqueue.protocol import Command

PUSH_BATCH_MAX = 100
MAX_SUBSCRIBERS = 10_000

Take = Callable[[PartitionRuntime, int, int, int], list[list[Any]]]


class Pusher:
    def __init__(self) -> None:
        self.outbox: Outbox | None = None
        self.subs: dict[int, PartitionRuntime] = {}
        self._ids = itertools.count(1)

    def subscribe(self, rt: PartitionRuntime, identity: bytes, prefetch: int, vis_ms: int) -> int:
        if len(self.subs) >= MAX_SUBSCRIBERS:
            raise InvalidParameter(f"this host has {MAX_SUBSCRIBERS} subscribers already")
        sub_id = next(self._ids)
        rt.subscribers[sub_id] = Subscriber(sub_id, identity, prefetch, vis_ms)
        self.subs[sub_id] = rt
        return sub_id

    def _get(self, sub_id: int, identity: bytes) -> Subscriber:
        rt = self.subs.get(sub_id)
        sub = rt.subscribers.get(sub_id) if rt else None
        if sub is None or sub.identity != identity:
            raise InvalidParameter(f"no subscription {sub_id} on this connection", field="subscription")
        return sub

    def add_credit(self, sub_id: int, identity: bytes, n: int) -> int:
        sub = self._get(sub_id, identity)
        sub.credit = min(sub.credit + n, sub.prefetch)
        return sub.credit

    def unsubscribe(self, sub_id: int, identity: bytes) -> None:
        self._get(sub_id, identity)
        rt = self.subs.pop(sub_id)
        rt.subscribers.pop(sub_id, None)

    def drop_partition(self, rt: PartitionRuntime) -> None:
        for sub_id in list(rt.subscribers):
            self.subs.pop(sub_id, None)
        rt.subscribers.clear()

    def push(self, rt: PartitionRuntime, now_ms: int, take: Take) -> None:
        assert self.outbox is not None, "register() the service first"
        for sub in list(rt.subscribers.values()):
            if sub.credit <= 0 or not rt.store.has_visible(now_ms):
                continue
            msgs = take(rt, min(sub.credit, PUSH_BATCH_MAX), sub.visibility_ms, now_ms)
            if not msgs:
                return
            sub.credit -= len(msgs)
            sub.delivered += len(msgs)
            body = {"sub": sub.sub_id, "q": rt.queue, "p": rt.partition, "m": msgs}
            self.outbox.put("client", sub.identity, protocol.encode_push(Command.DELIVER, body))
