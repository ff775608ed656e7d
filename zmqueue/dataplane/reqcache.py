"""Replies to mutating requests, kept by request id for a while, so that a
retried request (same id) gets the first reply instead of being applied twice.

Bounded by count and age: ``max_entries`` replies for at most ``ttl_ms``.
Keys are ``(client identity, command, request id)``: the identity is the
authenticated (CURVE) name, ``""`` without CURVE, so one client's ids never
answer another's requests.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

Key = tuple[str, int, int]
"""(client identity, command, request id)."""


class ReplyCache:
    def __init__(self, max_entries: int = 100_000, ttl_ms: int = 5 * 60 * 1000) -> None:
        self.max_entries = max_entries
        self.ttl_ms = ttl_ms
        self._items: OrderedDict[Key, tuple[int, bytes]] = OrderedDict()
        self._running: dict[Key, Any] = {}
        self.hits = 0

    def start(self, key: Key, request: Any) -> None:
        """``request`` is being handled (a retry arriving now joins it)."""
        if len(self._running) < self.max_entries:
            self._running[key] = request

    def in_progress(self, key: Key) -> Any:
        return self._running.get(key)

    def done(self, key: Key) -> None:
        self._running.pop(key, None)

    def get(self, key: Key, now_ms: int) -> bytes | None:
        item = self._items.get(key)
        if item is None or now_ms - item[0] > self.ttl_ms:
            return None
        self.hits += 1
        return item[1]

    def put(self, key: Key, payload: bytes, now_ms: int) -> None:
        self._items[key] = (now_ms, payload)
        self._items.move_to_end(key)
        while len(self._items) > self.max_entries:
            self._items.popitem(last=False)
        while self._items:
            first = next(iter(self._items.values()))
            if now_ms - first[0] <= self.ttl_ms:
                break
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
