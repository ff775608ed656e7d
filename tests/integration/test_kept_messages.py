"""Messages a long poll took beyond ``max_messages`` (several partitions
answered at once) are kept in the Queue handle, and handed out by its next
receive only while they are still its own: not once another consumer could
have received and deleted them, nor after the queue was deleted and created
again."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import zmqueue
from tests.conftest import QueueCluster, wait_for
from tests.helpers import take_and_delete
from zmqueue.client.receiving import give_back
from zmqueue.client.transport import Connection
from zmqueue.protocol import Command, group_partition

PARTITIONS = 4


def _groups(n: int) -> dict[int, str]:
    """A FIFO group per partition (of ``n``)."""
    out: dict[int, str] = {}
    for k in range(1000):
        out.setdefault(group_partition(f"g{k}", n), f"g{k}")
        if len(out) == n:
            return out
    raise AssertionError("no group for some partition")


def _send_at_once(q: zmqueue.Queue, sends: dict[int, list[list[Any]]]) -> None:
    """One SEND per partition, all on the wire before any reply is read: a
    host that writes several of the partitions takes them together, and wakes
    their parked polls together."""
    pending: dict[tuple[str, int], bool] = {}
    conns: dict[str, Connection] = {}
    for p, wire in sends.items():
        ep = q.routes.for_send(p)[0]
        conn = conns.setdefault(ep, q.client.connection(ep))
        rid = conn.next_request_id()
        conn.send(Command.SEND, {"q": q.name, "p": p, "m": wire}, rid)
        pending[(ep, rid)] = True

    def answered() -> bool:
        for ep, conn in conns.items():
            for data in conn.recv_queued():
                frame = conn.reply_of(data)
                if frame is not None:
                    assert not frame.is_error, frame.body
                    pending.pop((ep, frame.request_id), None)
        return not pending

    wait_for(answered, 10, "every SEND answered")


def _merged_receive(qcluster: QueueCluster, q: zmqueue.Queue, producer: zmqueue.Queue,
                    wires: dict[int, list[list[Any]]]) -> list[zmqueue.Message]:
    """``q.receive(max_messages=1)`` parked on every partition while each gets
    messages at once; returns what it handed out, once the hosts show more in
    flight than that (the rest is held by the handle)."""
    for _attempt in range(3):
        got: list[zmqueue.Message] = []
        poll = threading.Thread(target=lambda got=got: got.extend(q.receive(max_messages=1, wait_time=10)))
        poll.start()
        wait_for(lambda: q.stats()["waiters"] >= PARTITIONS, 10, "a long poll parked on every partition")
        _send_at_once(producer, wires)
        poll.join(20)
        assert not poll.is_alive() and len(got) == 1
        if q.stats()["in_flight"] > 1:
            return got
        q.purge()  # (every answer but one came after the cancel: try again)
    raise AssertionError("no long poll got answers from several partitions at once in 3 attempts")


def test_a_kept_message_is_not_handed_out_after_another_consumer_received_and_deleted_it(
        qcluster: QueueCluster) -> None:
    name = qcluster.queue_name("kept") + ".fifo"
    q = qcluster.client.create_queue(name, fifo=True, partitions=PARTITIONS, visibility_timeout=2)
    groups = _groups(PARTITIONS)
    wires = {p: [[f"{g}:{i}".encode(), None, None, g, None] for i in range(2)] for p, g in groups.items()}
    with zmqueue.connect(qcluster.factory.agent.http_addr, request_timeout=10) as other:
        producer = other.get_queue(name)
        _merged_receive(qcluster, q, producer, wires)  # one handed out, the others kept
        # the visibility timeout runs out: another consumer receives and deletes everything
        seen: list[bytes] = []

        def drained() -> bool:
            return not take_and_delete(producer, 10, seen) and producer.stats()["total"] == 0

        wait_for(drained, 30, "the other consumer to receive and delete every message")
        assert len(set(seen)) == 2 * PARTITIONS
    again = q.receive(max_messages=10)
    assert [m.body for m in again] == [], "messages received and deleted elsewhere were handed out again"


def test_a_kept_message_of_a_queue_deleted_and_created_again_is_not_handed_out(
        qcluster: QueueCluster) -> None:
    name = qcluster.queue_name("kept")
    c = qcluster.client
    q = c.create_queue(name, partitions=PARTITIONS, visibility_timeout=60)
    wires = {p: [[f"old-{p}".encode(), None, None, None, None]] for p in range(PARTITIONS)}
    with zmqueue.connect(qcluster.factory.agent.http_addr, request_timeout=10) as other:
        _merged_receive(qcluster, q, other.get_queue(name), wires)
        other.delete_queue(name)
        other.create_queue(name, partitions=PARTITIONS, visibility_timeout=60)
    again = q.receive(max_messages=10, wait_time=1)
    assert [m.body for m in again] == [], "messages of the deleted queue came from its successor's handle"
    q.send(b"new")
    got = wait_for(lambda: q.receive(max_messages=10, wait_time=1), 10, "the new queue's message")
    assert [m.body for m in got] == [b"new"]


def test_a_message_the_handle_gives_back_keeps_its_receive_count(qcluster: QueueCluster) -> None:
    """(A kept FIFO message released when another of its group was handed out
    counted a receive nobody saw: with max_receive_count=1 it went to the
    dead-letter queue unseen.) CHANGE_VISIBILITY ``back`` undoes the receive."""
    c = qcluster.client
    name = qcluster.queue_name("give-back") + ".fifo"
    q = c.create_queue(name, fifo=True, max_receive_count=1, dead_letter_queue=name[:-5] + "-dl.fifo")
    mid = q.send(b"once", group_id="g")
    [m] = wait_for(lambda: q.receive(wait_time=1), 10, "the message")
    assert m.receive_count == 1
    give_back(q, [m])  # (what the handle does with a kept message it will not hand out)
    [again] = wait_for(lambda: q.receive(wait_time=1), 10, "the message back at once, not dead-lettered")
    assert (again.id, again.receive_count) == (mid, 1)
    q.delete(again)
    assert c.get_queue(name[:-5] + "-dl.fifo").receive(wait_time=0) == []
    with pytest.raises(zmqueue.InvalidParameter, match="back must be true or false"):
        c.request(q.routes.for_receive(0)[0], Command.CHANGE_VISIBILITY,
                  {"q": name, "p": 0, "r": [[again.receipt, 0]], "back": "yes"})


def test_closing_the_client_gives_back_its_handles_kept_messages(qcluster: QueueCluster) -> None:
    """(A client closed with messages kept in a Queue handle left them in
    flight for their visibility timeout, then they came back with their
    receive count spent, though nobody saw them.)"""
    name = qcluster.queue_name("kept-close")
    qcluster.client.create_queue(name, partitions=PARTITIONS, visibility_timeout=60)
    wires = {p: [[f"m-{p}".encode(), None, None, None, None]] for p in range(PARTITIONS)}
    with zmqueue.connect(qcluster.factory.agent.http_addr, request_timeout=10) as other:
        q = other.get_queue(name)
        [handed] = _merged_receive(qcluster, q, qcluster.client.get_queue(name), wires)
        kept = {m.id for m in q._leftovers.messages()}
        assert kept, "the handle keeps the merged poll's extras"
    back = qcluster.client.get_queue(name).receive(max_messages=10, wait_time=1)  # now, not in 60 s
    assert {m.id for m in back} >= kept and handed.id not in {m.id for m in back}
    assert {m.receive_count for m in back} == {1}


@pytest.mark.parametrize("call", ["receive", "delete_and_receive"])
def test_kept_messages_handed_out_take_the_visibility_timeout_the_receive_asks_for(
        qcluster: QueueCluster, call: str) -> None:
    """(A receive with ``visibility_timeout=120`` returned kept messages with
    the deadline of the receive that took them, the queue's 6 s: another
    consumer received them 6 s later.)"""
    name = qcluster.queue_name("kept-vis")
    qcluster.client.create_queue(name, partitions=PARTITIONS, visibility_timeout=6)
    wires = {p: [[f"m-{p}".encode(), None, None, None, None]] for p in range(PARTITIONS)}
    with zmqueue.connect(qcluster.factory.agent.http_addr, request_timeout=10) as other:
        q = other.get_queue(name)
        [handed] = _merged_receive(qcluster, q, qcluster.client.get_queue(name), wires)
        kept = {m.id for m in q._leftovers.messages()}
        assert kept, "the handle keeps the merged poll's extras"
        if call == "receive":
            got = q.receive(max_messages=10, visibility_timeout=120)
        else:
            outcome, got = q.delete_and_receive([handed], max_messages=10, visibility_timeout=120)
            assert outcome == [None]
        assert {m.id for m in got} == kept
        consumer = qcluster.client.get_queue(name)
        deadline = time.monotonic() + 8  # past the 6 s they were taken with
        while time.monotonic() < deadline:
            again = consumer.receive(max_messages=10, wait_time=1)
            assert kept.isdisjoint(m.id for m in again), "handed out for 120 s, received elsewhere"
        q.delete_batch(got)
