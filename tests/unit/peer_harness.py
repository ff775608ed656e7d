"""Stand-ins for a host's peer plumbing, for tests that drive real stores and
the real replication and recovery code with the hosts' peer requests handed
from one to another by the test (no sockets): test_recovery_fetch,
test_vote_fence, test_diverged_tail."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import zmq

from zmqueue.dataplane.replication import Replicator
from zmqueue.dataplane.streamset import StreamSet
from zmqueue.dataplane.topology import Metadata
from zmqueue.protocol import Command

Call = tuple[str, Command, Any, Any]
"""A request or one-way report: (endpoint, command, body, callback or None)."""


class Forwarder:
    """Stands in for a host's Forwarder: keeps each request and one-way report
    for the test to deliver (and answer, through the callback)."""

    curve = None

    def __init__(self) -> None:
        self.calls: list[Call] = []

    def request(self, endpoint: str, command: Command, body: Any, callback: Any,
                now_ms: int, timeout_ms: int = 5000) -> None:
        self.calls.append((endpoint, command, body, callback))

    def notify(self, endpoint: str, command: Command, body: Any) -> bool:
        self.calls.append((endpoint, command, body, None))
        return True

    def take(self) -> list[Call]:
        calls, self.calls = self.calls, []
        return calls


class Svc:
    """What Handover's recovery reads of a QueueService: plain values."""

    def __init__(self, node: str, streams: StreamSet, forwarder: Forwarder, rep: Replicator,
                 meta: Metadata) -> None:
        self.node, self.set, self.meta = node, streams, meta
        self.forwarder, self.replicator = forwarder, rep
        self.dirty: set[Any] = set()

    def touch(self, part: Any) -> None:
        pass


@contextmanager
def zmq_context() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    """A ZeroMQ context for the hosts' replicators, destroyed at the end."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        yield ctx
    finally:
        ctx.destroy(linger=0)
