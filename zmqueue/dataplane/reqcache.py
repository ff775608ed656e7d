"""Replies to mutating requests, kept by request id for a while, so that a
retried request (same id) gets the first reply instead of being applied twice.

Bounded by count and age: ``max_entries`` replies for at most ``ttl_ms``.
Keys are ``(client identity, command, request id)``: the identity is the
authenticated (CURVE) name, ``""`` without CURVE, where every client shares
it. Each reply is kept with its request's fingerprint
(:func:`zmqueue.protocol.request_fingerprint`), so a different request that
reuses an id (two clients without CURVE counting from the same number) is
told apart from a retry and refused, never answered with another's reply.
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
        self._items: OrderedDict[Key, tuple[int, bytes, int]] = OrderedDict()
        """key -> (stored at ms, reply, fingerprint of the request)."""
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

    def get(self, key: Key, now_ms: int) -> tuple[bytes, int] | None:
        """(reply, fingerprint of the request it answered), if kept."""
        item = self._items.get(key)
        if item is None or now_ms - item[0] > self.ttl_ms:
            return None
        self.hits += 1
        return item[1], item[2]

    def put(self, key: Key, payload: bytes, now_ms: int, fingerprint: int = 0) -> None:
        self._items[key] = (now_ms, payload, fingerprint)
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
