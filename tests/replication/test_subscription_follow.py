"""Push subscriptions follow the queue's routes: after the FIFO writer is
killed (kill -9) the subscription subscribes at the new writer, and after a
host restarts (its subscriptions were in memory) it subscribes there again.
Every acknowledged send reaches the handler; redeliveries are counted."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

import zmqueue
from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses
from tests.replication.test_failover import by_node, three_hosts, writer_of
from zmqueue.localcluster import ConsulAgent, HostProcess


@pytest.fixture
def client(consul_agent: ConsulAgent) -> Iterator[zmqueue.Client]:
    with zmqueue.connect(consul_agent.http_addr, request_timeout=2, retries=8) as c:
        yield c


class Collector:
    """The handler: bodies in the order they were handed over."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.lock = threading.Lock()

    def __call__(self, m: zmqueue.Message) -> None:
        with self.lock:
            self.bodies.append(m.body)

    def distinct(self) -> set[bytes]:
        with self.lock:
            return set(self.bodies)

    def first_seen_order(self) -> list[bytes]:
        with self.lock:
            return list(dict.fromkeys(self.bodies))


def send_fifo(q: zmqueue.Queue, lo: int, hi: int) -> list[bytes]:
    bodies = [f"{i:04d}".encode() for i in range(lo, hi)]
    for b in bodies:
        q.send(b, group_id="g", dedup_id=b.decode())  # retried through a failover
    return bodies


def test_a_subscription_moves_to_the_new_fifo_writer_after_kill_9(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    hs = three_hosts(hosts, consul_agent)
    q = client.create_queue("pushed.fifo", fifo=True, replication_factor=3)
    got = Collector()
    with q.subscribe(got, prefetch=5) as sub:
        before = send_fifo(q, 0, 20)
        wait_for(lambda: got.distinct() >= set(before), 20, "the first 20 pushed")
        node, _ = wait_for(lambda: writer_of(consul_agent, "pushed.fifo", "fifo"), 10, "a writer")
        by_node(hs, node).kill9()
        after = send_fifo(q, 20, 40)  # each acknowledged by the new writer
        wait_for(lambda: got.distinct() >= set(after), 30,
                 "the 20 sent after the kill pushed through the new writer")
        assert sub.resubscribed >= 1 and sub.dropped >= 1
        assert sub.links_lost >= 1, "the dead writer was dropped when its connection dropped"
    order = got.first_seen_order()
    assert order == before + after, "FIFO order of first deliveries kept, nothing lost"
    dups = len(got.bodies) - len(order)
    assert dups <= 5, f"{dups} redeliveries: more than the prefetch in flight at the kill"


def one_host(hosts: HostFactory, agent: ConsulAgent) -> HostProcess:
    h = hosts.start("h1")
    wait_for(lambda: all_passing(check_statuses(agent, h.node)), 60, "h1 passing")
    return h


def test_a_subscription_subscribes_again_at_a_restarted_host(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    h = one_host(hosts, consul_agent)
    q = client.create_queue("pushed")
    got = Collector()
    with q.subscribe(got, prefetch=10) as sub:
        first = [f"a{i}".encode() for i in range(10)]
        q.send_batch(first)
        wait_for(lambda: got.distinct() >= set(first), 20, "the first batch pushed")
        h.stop()  # SIGTERM: a clean stop; its subscriptions lived in its memory
        h = hosts.restart(h)
        wait_for(lambda: all_passing(check_statuses(consul_agent, h.node)), 60, "h1 passing again")
        second = [f"b{i}".encode() for i in range(10)]
        deadline = time.monotonic() + 20
        while True:  # the client's retries ride out the restart
            try:
                q.send_batch(second)
                break
            except zmqueue.Unavailable:
                if time.monotonic() > deadline:
                    raise
        wait_for(lambda: got.distinct() >= set(second), 30, "the second batch pushed after the restart")
        assert sub.resubscribed >= 1
    assert got.distinct() == set(first) | set(second)


def test_a_subscription_stops_by_itself_when_its_queue_is_deleted(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    one_host(hosts, consul_agent)
    q = client.create_queue("pushed-then-deleted")
    got = Collector()
    with q.subscribe(got) as sub:
        q.send(b"x")
        wait_for(lambda: got.distinct() == {b"x"}, 20, "the message pushed")
        client.delete_queue("pushed-then-deleted")
        wait_for(lambda: not sub.thread.is_alive(), 30, "the subscription thread ended")
        assert sub.queue_deleted
