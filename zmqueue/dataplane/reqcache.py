"""Replies to mutating requests, kept by request id for a while, so that a
retried request (same id) gets the first reply instead of being applied twice.

Bounded by count and age: ``max_entries`` replies for at most ``ttl_ms``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


class ReplyCache:
    def __init__(self, max_entries: int = 100_000, ttl_ms: int = 5 * 60 * 1000) -> None:
        self.max_entries = max_entries
        self.ttl_ms = ttl_ms
        self._items: OrderedDict[tuple[int, int], tuple[int, bytes]] = OrderedDict()
        self._running: dict[tuple[int, int], Any] = {}
        self.hits = 0

    def start(self, command: int, request_id: int, request: Any) -> None:
        """``request`` is being handled (a retry arriving now joins it)."""
        if len(self._running) < self.max_entries:
            self._running[(command, request_id)] = request

    def in_progress(self, command: int, request_id: int) -> Any:
        return self._running.get((command, request_id))

    def done(self, command: int, request_id: int) -> None:
        self._running.pop((command, request_id), None)

    def get(self, command: int, request_id: int, now_ms: int) -> bytes | None:
        item = self._items.get((command, request_id))
        if item is None or now_ms - item[0] > self.ttl_ms:
            return None
        self.hits += 1
        return item[1]

    def put(self, command: int, request_id: int, payload: bytes, now_ms: int) -> None:
        self._items[(command, request_id)] = (now_ms, payload)
        self._items.move_to_end((command, request_id))
        while len(self._items) > self.max_entries:
            self._items.popitem(last=False)
        while self._items:
            first = next(iter(self._items.values()))
            if now_ms - first[0] <= self.ttl_ms:
                break
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
