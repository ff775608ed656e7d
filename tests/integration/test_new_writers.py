"""A new queue's writers serve as soon as ``create_queue`` returns: a send or
receive sent straight to a listed writer, with no retry, is answered, also
while that host is still recovering the stream it was just elected to write
(it waits for the recovery instead of answering NOT_LEADER)."""

from __future__ import annotations

from tests.conftest import QueueCluster
from zmqueue.protocol import Command


def test_each_listed_writer_of_a_new_queue_serves_its_first_requests(qcluster: QueueCluster) -> None:
    c = qcluster.client
    for i in range(6):
        fifo = i % 2 == 1
        name = qcluster.queue_name(f"fresh{i}") + (".fifo" if fifo else "")
        q = c.create_queue(name, fifo=fifo, replication_factor=3)
        route = q.routes.part(0)
        writers = sorted(set(route.writers.values()))
        assert writers and all(route.endpoint(w) for w in writers), route
        for w in writers:
            conn = c.connection(str(route.endpoint(w)))  # one attempt each, no retry
            m = [b"first", None, None, "g" if fifo else None, f"d{w}" if fifo else None]
            sent = conn.request(Command.SEND, {"q": name, "p": 0, "m": [m]}, 5000)
            assert len(sent["ids"]) == 1, (name, w, sent)
            got = conn.request(Command.RECEIVE, {"q": name, "p": 0, "max": 10}, 5000)
            assert isinstance(got["m"], list), (name, w, got)
