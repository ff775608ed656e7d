"""Everything survives a host restart with its data dir: queues, messages,
deletes, receive counts and DLQ moves. Retried requests are applied once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import zmqueue
from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses, segments_hold
from zmqueue.client.receiving import receive_targets
from zmqueue.localcluster import ConsulAgent, HostProcess
from zmqueue.protocol import Command


def start_passing(hosts: HostFactory, agent: ConsulAgent, node: str = "h1",
                  old: HostProcess | None = None) -> HostProcess:
    h = hosts.restart(old) if old is not None else hosts.start(node)
    wait_for(lambda: all_passing(check_statuses(agent, h.node)), 60, f"{h.node} passing")
    return h


@pytest.fixture
def client(consul_agent: ConsulAgent) -> Iterator[zmqueue.Client]:
    with zmqueue.connect(consul_agent.http_addr, request_timeout=5) as c:
        yield c


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_queues_messages_deletes_and_dlq_moves_survive_a_host_restart(
        stop: str, hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    h = start_passing(hosts, consul_agent)
    q = client.create_queue("durable", fsync="always")
    pq = client.create_queue("poison", visibility_timeout=1, dead_letter_queue="poison-dlq",
                             max_receive_count=1, fsync="always")
    ids = q.send_batch([f"m{i}".encode() for i in range(20)])
    got = q.receive(max_messages=5, visibility_timeout=600)
    assert len(got) == 5
    assert q.delete_batch([m.receipt for m in got[:3]]) == [None] * 3  # 3 deleted, 2 in flight
    poison = pq.send(b"poison")
    assert [m.id for m in pq.receive(wait_time=5)] == [poison]
    dlq = client.get_queue("poison-dlq")
    # the next receive attempt after the visibility timeout moves it to the DLQ
    wait_for(lambda: not pq.receive(wait_time=1) and dlq.stats()["total"] == 1, 15,
             "the poison message moved to the DLQ")
    before = q.stats()["total"]

    if stop == "sigterm":
        assert h.stop() == 0
    else:
        h.kill9()
    start_passing(hosts, consul_agent, old=h)

    assert {"durable", "poison", "poison-dlq"} <= set(client.list_queues())
    q = client.get_queue("durable")
    wait_for(lambda: q.stats()["total"] == before, 10, "the queue back with the same total")
    received: dict[str, Any] = {}
    for _ in range(10):
        for m in q.receive(max_messages=100, wait_time=1):
            received[m.id] = m
        if len(received) >= before:
            break
    deleted = {m.id for m in got[:3]}
    in_flight = {m.id for m in got[3:]}
    assert set(received) == set(ids) - deleted, "deleted stay deleted, all others come back"
    pq = client.get_queue("poison")
    assert pq.receive(wait_time=1) == [], "a DLQ move does not come back after a restart"
    for mid in in_flight:
        assert received[mid].receive_count == 2, "receive counts survive"
    [d] = wait_for(lambda: dlq.receive(wait_time=1), 10, "the DLQ message after restart")
    assert d.id == poison and d.dead_letter_source == "poison"


def test_a_retried_send_with_the_same_request_id_is_stored_once(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    start_passing(hosts, consul_agent)
    q = client.create_queue("retry")
    endpoint = q.routes.for_send(0)[0]
    assert endpoint is not None
    conn = client.connection(endpoint)
    rid = conn.next_request_id()
    body = {"q": "retry", "p": 0, "m": [[b"once", None, None, None, None]]}
    first = conn.request(Command.SEND, body, 5000, request_id=rid)
    again = conn.request(Command.SEND, body, 5000, request_id=rid)
    assert first == again
    assert q.stats()["total"] == 1
    assert [m.body for m in q.receive(10)] == [b"once"]


def test_a_receive_waits_out_the_restart_of_the_only_host_serving_the_queue(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    h1 = start_passing(hosts, consul_agent, "h1")
    h2 = start_passing(hosts, consul_agent, "h2")
    with zmqueue.connect(consul_agent.http_addr, request_timeout=30) as client:
        q = client.create_queue("wait-out")  # R=1: one of the two hosts serves it
        q.send(b"kept")
        [node] = q.routes.part(0).replicas
        serving = h1 if node == h1.node else h2
        serving.kill9()
        # the other host's GET_QUEUE lists no endpoint for a host Consul does
        # not report passing: the client's routes for the queue go empty
        wait_for(lambda: not all_passing(check_statuses(consul_agent, node)), 30, f"{node} not passing")

        def no_targets() -> bool:
            q._refreshed_at = 0.0  # allow a refresh now
            q.refresh()
            return not receive_targets(q)

        wait_for(no_targets, 30, "routes without a host serving the queue")
        # stats with no host to ask: a clear Unavailable, not an empty answer
        with zmqueue.connect(consul_agent.http_addr, request_timeout=1) as impatient, \
                pytest.raises(zmqueue.Unavailable, match="no reachable host"):
            impatient.get_queue("wait-out").stats()
        restarter = threading.Thread(target=start_passing, args=(hosts, consul_agent),
                                     kwargs={"old": serving})
        restarter.start()
        try:
            got = q.receive(max_messages=1, wait_time=5)  # waits for a host; does not raise
        finally:
            restarter.join(90)

        def kept() -> bool:
            got.extend(q.receive(max_messages=1, wait_time=1))
            return bool(got)

        wait_for(kept, 30, "the stored message received after the restart")
        assert [m.body for m in got] == [b"kept"]
        assert q.stats()["in_flight"] == 1


def test_a_dead_letter_move_the_dlq_refuses_is_retried_until_the_dlq_takes_it(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    """A DLQ on the same host that refuses a move (its max_messages reached; a
    low disk alike) leaves the message waiting for the move, retried every
    second, instead of failing the host's pass and dropping the move until a
    restart; once the DLQ has room, the message lands there."""
    h = start_passing(hosts, consul_agent)
    dlq = client.create_queue("full-dlq", max_messages=1)
    dlq.send(b"occupant")
    q = client.create_queue("src", visibility_timeout=1, dead_letter_queue="full-dlq",
                            max_receive_count=1)
    mid = q.send(b"poison")
    assert [m.id for m in q.receive(wait_time=5)] == [mid]
    assert q.receive(wait_time=3) == []  # past its timeout: taken out of delivery for the move
    wait_for(lambda: "dead-letter queue full-dlq cannot take 1 messages of src" in h.log_tail(),
             20, "the refused move in the host's log", interval_s=0.2)
    assert dlq.stats()["total"] == 1
    dlq.set_attributes(max_messages=10)
    moved = wait_for(lambda: [m for m in dlq.receive(max_messages=10, wait_time=1) if m.id == mid],
                     20, "the poison message in the DLQ once it has room")
    assert (moved[0].body, moved[0].dead_letter_source) == (b"poison", "src")
    assert q.stats()["total"] == 0
    assert q.receive(wait_time=1) == []


@pytest.mark.parametrize("fifo", [False, True], ids=["standard-source", "fifo-source"])
def test_dead_letters_wait_while_their_dlq_was_created_again_as_the_other_type(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client, fifo: bool) -> None:
    """The type rule is checked at create and set_attributes; a DLQ deleted and
    created again as the other type is caught at the move. (A standard
    queue's dead letters landed in the FIFO queue without a group id.) The
    messages wait in their source, and move once the DLQ is of its type again."""
    h = start_passing(hosts, consul_agent)
    q = client.create_queue("src", fifo=fifo, visibility_timeout=1, dead_letter_queue="dlq",
                            max_receive_count=1)
    client.delete_queue("dlq")
    client.create_queue("dlq", fifo=not fifo)
    wait_for(lambda: client.queue_info("dlq")["config"]["fifo"] is not fifo, 10, "the host knows the new DLQ")
    mid = q.send(b"poison", group_id="g" if fifo else None)
    assert [m.id for m in q.receive(wait_time=5)] == [mid]
    assert q.receive(wait_time=3) == []  # past its timeout: taken out of delivery for the move
    kinds = ("a FIFO queue, the source a standard one", "a standard queue, the source a FIFO one")
    wait_for(lambda: f"dead-letter queue dlq of src is {kinds[fifo]}" in h.log_tail(),
             20, "the refused move in the host's log", interval_s=0.2)
    assert client.get_queue("dlq").stats()["total"] == 0
    assert q.stats()["total"] == 1, "kept in its source"
    client.delete_queue("dlq")
    dlq = client.create_queue("dlq", fifo=fifo)
    moved = wait_for(lambda: dlq.receive(max_messages=10, wait_time=1), 20,
                     "the poison message in the DLQ once it is of the source's type")
    assert [(m.id, m.body, m.dead_letter_source) for m in moved] == [(mid, b"poison", "src")]
    assert moved[0].group_id == ("g" if fifo else None)
    assert q.stats()["total"] == 0


def _holds(host: HostProcess, name: str, marker: bytes) -> bool:
    return segments_hold((host.data_dir / "queues" / name).glob("*/*"), marker)


def test_a_host_down_while_its_queue_was_deleted_and_created_again_serves_none_of_the_deleted_messages(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    """(A host knew the incarnation of its streams only while it ran: down
    while the queue was deleted and created again, it opened its copies of
    the deleted queue's streams in the new queue when it came back, and
    served their messages.) Each stream's directory records its incarnation;
    a host removes copies whose incarnation a deletion's tombstone names."""
    start_passing(hosts, consul_agent, "h1")
    h2 = start_passing(hosts, consul_agent, "h2")
    q = client.create_queue("again", replication_factor=2)
    for i in range(40):  # (single sends: both hosts take some, each copies the other's)
        q.send(b"deleted-%d" % i)
    wait_for(lambda: _holds(h2, "again", b"deleted-"), 10, "h2 holding the queue's messages")
    assert h2.stop() == 0
    client.delete_queue("again")
    client.create_queue("again", replication_factor=2)
    h2 = start_passing(hosts, consul_agent, old=h2)
    wait_for(lambda: not _holds(h2, "again", b"deleted-"), 20, "h2's copies of the deleted queue removed")
    fresh = client.get_queue("again")
    fresh.send(b"new")
    got: list[bytes] = []
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:  # (everything visible, from both hosts)
        msgs = fresh.receive(max_messages=10, wait_time=1)
        got += [m.body for m in msgs]
        if msgs:
            fresh.delete_batch([m.receipt for m in msgs])
        elif b"new" in got:
            break
    assert got == [b"new"]
