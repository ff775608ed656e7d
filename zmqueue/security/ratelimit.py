"""Token buckets: per queue and per (client identity, queue), on one host.

Each request costs one token. A bucket refills at ``rate_per_s`` up to
``burst``; a request finding it empty is refused with Throttled naming how
long until a token is back (``retry_after_ms``). Limits come from the queue's
config (``rate_limit_per_s`` / ``rate_burst`` for the whole queue,
``client_rate_limit_per_s`` per identity), so an edit in Consul KV applies
from the next request. Buckets are per host: a queue served by N writers can
take up to N times the limit (docs/SECURITY.md).
"""

from __future__ import annotations

import math
from collections import OrderedDict

from zmqueue.errors import Throttled

MAX_BUCKETS = 100_000


class Bucket:
    __slots__ = ("at", "tokens")

    def __init__(self, tokens: float, at: float) -> None:
        self.tokens = tokens
        self.at = at


class RateLimiter:
    def __init__(self, max_buckets: int = MAX_BUCKETS) -> None:
        self.buckets: OrderedDict[tuple[str, ...], Bucket] = OrderedDict()
        self.max_buckets = max_buckets

    def take(self, key: tuple[str, ...], rate_per_s: float, burst: float, now_s: float) -> int:
        """Take a token; 0 if granted, else ms until one is available."""
        b = self.buckets.get(key)
        if b is None:
            b = self.buckets[key] = Bucket(burst, now_s)
            while len(self.buckets) > self.max_buckets:
                self.buckets.popitem(last=False)
        else:
            b.tokens = min(burst, b.tokens + (now_s - b.at) * rate_per_s)
            b.at = now_s
            self.buckets.move_to_end(key)
        if b.tokens >= 1.0:
            b.tokens -= 1.0
            return 0
        return max(1, math.ceil((1.0 - b.tokens) / rate_per_s * 1000))

    def check(self, key: tuple[str, ...], rate_per_s: float | None, burst: int | None, now_s: float,
              what: str) -> None:
        if rate_per_s is None or rate_per_s <= 0:
            return
        wait = self.take(key, rate_per_s, float(burst or max(1, math.ceil(rate_per_s))), now_s)
        if wait:
            raise Throttled(f"{what} is over its limit of {rate_per_s:g} requests/s; retry in {wait} ms",
                            retry_after_ms=wait, limit_per_s=rate_per_s)
