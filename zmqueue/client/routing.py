"""Where a queue's requests go: the client's view of partitions, replicas and
stream writers, refreshed from any host (GET_QUEUE) and corrected by
NotLeader replies.

- FIFO partition: one stream (``fifo``); sends, receives, deletes go to its
  writer.
- Standard partition: one stream per replica host; a send goes to any replica
  that writes its own stream (this client's "home" replica first), a receive
  to every replica that writes a stream, a delete to the writer of the stream
  named in the receipt.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from typing import Any

from zmqueue.protocol import FIFO_ORIGIN as FIFO_ORIGIN

REFRESH_MIN_S = 0.2
"""A queue handle re-reads its routes at most this often (unless forced:
:meth:`zmqueue.client.queue.Queue.refresh`)."""


@dataclass
class PartitionRoute:
    replicas: list[str] = field(default_factory=list)
    endpoints: dict[str, str] = field(default_factory=dict)
    writers: dict[str, str] = field(default_factory=dict)
    home: str | None = None

    def endpoint(self, node: str | None) -> str | None:
        return self.endpoints.get(node or "")


class Routes:
    def __init__(self, fifo: bool) -> None:
        self.fifo = fifo
        self.parts: dict[int, PartitionRoute] = {}
        self.lock = threading.Lock()

    def apply(self, info: dict[str, Any]) -> None:
        with self.lock:
            for p in info.get("partitions", []):
                old = self.parts.get(int(p["partition"]))
                route = PartitionRoute(list(p.get("replicas") or []), dict(p.get("endpoints") or {}),
                                       dict(p.get("writers") or {}))
                if old is not None:
                    for origin, node in old.writers.items():
                        # read mid-election, or from a host's cache a moment behind
                        # the NOT_LEADER hint that taught it: no writer named for
                        # the stream. The last one known, still a healthy replica,
                        # is the best guess (if wrong, it answers NOT_LEADER)
                        if origin not in route.writers and node in route.endpoints:
                            route.writers[origin] = node
                route.home = old.home if old and old.home in route.replicas else None
                if route.home is None and route.replicas:
                    route.home = random.choice(route.replicas)
                self.parts[int(p["partition"])] = route

    def part(self, p: int) -> PartitionRoute:
        with self.lock:
            return self.parts.get(p) or PartitionRoute()

    def all_endpoints(self, p: int) -> list[str]:
        r = self.part(p)
        return [ep for n in r.replicas if (ep := r.endpoint(n))]

    def for_stream(self, p: int, origin: str) -> list[str]:
        """The stream's writer first, then the other replicas (who redirect)."""
        r = self.part(p)
        first = r.endpoint(r.writers.get(origin))
        rest = [ep for ep in self.all_endpoints(p) if ep != first]
        return ([first] if first else []) + rest

    def for_send(self, p: int) -> list[str]:
        if self.fifo:
            return self.for_stream(p, FIFO_ORIGIN)
        r = self.part(p)
        writers_of_own = [n for n in r.replicas if r.writers.get(n) == n]
        order = sorted(r.replicas, key=lambda n: (n not in writers_of_own, n != r.home, n))
        return [ep for n in order if (ep := r.endpoint(n))]

    def for_receive(self, p: int) -> list[str]:
        if self.fifo:
            return self.for_stream(p, FIFO_ORIGIN)[:1]
        r = self.part(p)
        writing = {n for n in r.writers.values() if n in r.endpoints}
        nodes = [n for n in r.replicas if n in writing] or list(r.replicas)
        return [ep for n in nodes if (ep := r.endpoint(n))]

    def note_writer(self, p: int, origin: str, node: str | None, endpoint: str | None) -> None:
        with self.lock:
            r = self.parts.get(p)
            if r is None or node is None:
                return
            r.writers[origin] = node
            if endpoint:
                r.endpoints[node] = endpoint
