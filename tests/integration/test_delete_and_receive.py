"""Deletes that ride on another request: delete_and_receive (a consumer's
delete + next receive, one RECEIVE) and a push subscription's auto_delete
(the delete on the credit it returns, one CREDIT)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import zmqueue
from tests.conftest import QueueCluster, wait_for
from tests.security.harness import metric, scrape
from zmqueue.protocol import Command


def _requests(qcluster: QueueCluster, command: str) -> float:
    """How many ``command`` requests the hosts answered (their /metrics)."""
    return sum(metric(scrape(h), "zmqueue_request_latency_seconds_count", command=command)
               for h in qcluster.factory.hosts)


def _delivered_twice(q: zmqueue.Queue) -> tuple[zmqueue.Message, zmqueue.Message]:
    """A message received, then received again once its visibility timeout
    (1 s on these queues) ran out: its first delivery's receipt is stale."""
    q.send(b"first")
    [first] = q.receive(max_messages=1, wait_time=5)
    [again] = wait_for(lambda: q.receive(max_messages=1, wait_time=1), 10,
                       "the message visible again after its visibility timeout")
    assert again.id == first.id and again.receive_count == 2
    return first, again


def replicated_queue(qcluster: QueueCluster, base: str, replicas: int) -> zmqueue.Queue:
    """A queue with ``replicas`` streams of partition 0 (synchronous with 2 or
    more), once every one is written (visibility timeout 60 s)."""
    q: zmqueue.Queue = qcluster.client.create_queue(
        qcluster.queue_name(base), visibility_timeout=60, replication_factor=replicas,
        sync_replication=replicas > 1)

    def written() -> bool:
        q.refresh()
        return len(q.routes.part(0).writers) == replicas

    wait_for(written, 20, "streams written")
    return q


@pytest.mark.parametrize("replicas", [1, 2])
def test_deletes_ride_on_the_next_receive_and_a_drained_queue_is_empty(
        qcluster: QueueCluster, replicas: int) -> None:
    """With 2 replicas, synchronous: the carried deletes are replicated before the answer."""
    q = replicated_queue(qcluster, "dar", replicas)
    sent_ids = set(q.send_batch([b"m%d" % i for i in range(25)]))
    first = q.receive(max_messages=10, wait_time=5)
    assert first
    deletes_before, receives_before = _requests(qcluster, "DELETE"), _requests(qcluster, "RECEIVE")
    seen = {m.id for m in first}
    receipts = [m.receipt for m in first]
    while receipts:
        outcomes, msgs = q.delete_and_receive(receipts, max_messages=10)
        assert outcomes == [None] * len(receipts)
        assert not seen & {m.id for m in msgs}, "a deleted or in-flight message came back"
        seen |= {m.id for m in msgs}
        receipts = [m.receipt for m in msgs]
    assert seen == sent_ids
    # every delete rode on a receive: no host answered a DELETE meanwhile
    assert _requests(qcluster, "DELETE") == deletes_before
    assert _requests(qcluster, "RECEIVE") >= receives_before + 3
    stats = q.stats()
    assert (stats["total"], stats["in_flight"], stats["visible"]) == (0, 0, 0)


def test_a_stale_receipt_is_reported_and_the_messages_still_come(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("dar-stale"), visibility_timeout=1)
    m1, m1_again = _delivered_twice(q)
    q.send(b"second")
    outcomes, msgs = q.delete_and_receive([m1.receipt, m1_again.receipt], max_messages=5)
    assert isinstance(outcomes[0], zmqueue.InvalidReceipt)  # the first receipt went stale
    assert outcomes[1] is None
    assert [m.body for m in msgs] == [b"second"]


def test_received_messages_handed_back_are_deleted_by_reference_on_the_next_receive(
        qcluster: QueueCluster) -> None:
    """delete_and_receive(messages): plain messages come in column groups and
    go back as (seq, receive count) pairs (dref), replicated before the
    answer (2 replicas, synchronous); no receipt text is built or sent."""
    q = replicated_queue(qcluster, "dar-ref", 2)
    sent_ids = set(q.send_batch([b"r%d" % i for i in range(25)]))
    msgs = q.receive(max_messages=10, wait_time=5)
    assert msgs
    deletes_before = _requests(qcluster, "DELETE")
    seen = {m.id for m in msgs}
    handled = list(msgs)
    while msgs:
        outcomes, got = q.delete_and_receive(msgs, max_messages=10)
        assert outcomes == [None] * len(msgs)
        assert not seen & {m.id for m in got}, "a deleted or in-flight message came back"
        seen |= {m.id for m in got}
        handled += got
        msgs = got
    assert seen == sent_ids
    assert _requests(qcluster, "DELETE") == deletes_before  # every delete rode on a receive
    assert not any("receipt" in m.__dict__ for m in handled), "a receipt text was built"
    stats = q.stats()
    assert (stats["total"], stats["in_flight"], stats["visible"]) == (0, 0, 0)
    # a handed-back message's receipt, built when read, is a well-formed text a
    # receipt-based delete takes (its message is gone: the delete succeeds)
    assert q.delete_batch([handled[0].receipt]) == [None]


def test_a_stale_message_reference_is_refused_and_texts_and_messages_mix(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("dar-ref-stale"), visibility_timeout=1)
    m1, m1_again = _delivered_twice(q)
    q.send_batch([b"second", b"third"])
    _, [m2] = q.delete_and_receive([], max_messages=1)
    # m1 is the first delivery (stale now): refused, as its receipt would be
    outcomes, msgs = q.delete_and_receive([m1, m1_again, m2.receipt], max_messages=5)
    assert isinstance(outcomes[0], zmqueue.InvalidReceipt)
    assert outcomes[1:] == [None, None]
    assert [m.body for m in msgs] == [b"third"]
    outcomes, _ = q.delete_and_receive(msgs, max_messages=1)
    assert outcomes == [None] and q.stats()["total"] == 0


def test_plain_messages_come_in_column_groups_to_a_client_that_asks(qcluster: QueueCluster) -> None:
    """RECEIVE with ``cols``: a batch of plain messages is one column group; a
    batch with attributes, and any reply to a client that does not ask, are
    message lists (what older clients read)."""
    q = qcluster.client.create_queue(qcluster.queue_name("dar-cols"), visibility_timeout=60)
    ids = q.send_batch([b"c0", b"c1", b"c2"])
    ep = q.routes.for_receive(0)[0]
    reply = qcluster.client.request(ep, Command.RECEIVE, {"q": q.name, "max": 2, "cols": True})
    assert reply["m"] == [] and len(reply["ms"]) == 1
    origin, _epoch, raw_ids, bodies, seqs, counts, _sent = reply["ms"][0]
    assert bodies == [b"c0", b"c1"] and counts == [1, 1] and len(set(seqs)) == 2
    assert [raw_ids[:16].hex(), raw_ids[16:].hex()] == ids[:2]
    assert origin in {h.node for h in qcluster.factory.hosts}
    plain = qcluster.client.request(ep, Command.RECEIVE, {"q": q.name, "max": 5})
    assert "ms" not in plain and [m[1] for m in plain["m"]] == [b"c2"]
    q.send(b"a0", attributes={"k": "v"})
    q.send(b"a1")
    mixed = qcluster.client.request(ep, Command.RECEIVE, {"q": q.name, "max": 5, "cols": True})
    assert "ms" not in mixed and [(m[1], m[2]) for m in mixed["m"]] == [(b"a0", {"k": "v"}), (b"a1", {})]
    stats = q.stats()
    assert stats["in_flight"] == 5
    # a long poll parked with cols is answered in columns too
    late = threading.Timer(0.3, lambda: q.send(b"late"))
    late.start()
    try:
        parked = qcluster.client.request(ep, Command.RECEIVE, {"q": q.name, "max": 5, "cols": True,
                                                               "wait_ms": 10_000})
    finally:
        late.cancel()
    assert parked["m"] == [] and [g[3] for g in parked["ms"]] == [[b"late"]]


def test_a_host_refuses_carried_deletes_that_would_wait_or_name_another_queue(
        qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("dar-bad"))
    other = qcluster.client.create_queue(qcluster.queue_name("dar-other"))
    other.send(b"x")
    [m] = other.receive(max_messages=1, wait_time=5)
    ep = q.routes.for_receive(0)[0]
    with pytest.raises(zmqueue.InvalidParameter, match="cannot wait"):
        qcluster.client.request(ep, Command.RECEIVE, {"q": q.name, "max": 1, "wait_ms": 100,
                                                      "del": [m.receipt]})
    with pytest.raises(zmqueue.InvalidReceipt, match="must belong to queue"):
        qcluster.client.request(ep, Command.RECEIVE, {"q": q.name, "max": 1, "del": [m.receipt]})
    with pytest.raises(zmqueue.InvalidParameter, match="receipt 0 belongs to queue"):
        q.delete_and_receive([m.receipt])
    with pytest.raises(zmqueue.InvalidParameter, match="receipt 0 belongs to queue"):
        q.delete_and_receive([m])  # the message itself: checked the same way
    for bad in (["h1", [1], [1, 2]], ["h1", [-1], [1]], ["h1", [], []], [7, [1], [1]], "x"):
        with pytest.raises(zmqueue.InvalidParameter, match="dref must be"):
            qcluster.client.request(ep, Command.RECEIVE, {"q": q.name, "max": 1, "dref": bad})
    with pytest.raises(zmqueue.InvalidParameter, match="cannot wait"):
        qcluster.client.request(ep, Command.RECEIVE, {"q": q.name, "max": 1, "wait_ms": 100,
                                                      "dref": ["h1", [1], [1]]})
    assert other.stats()["in_flight"] == 1  # nothing was deleted by the refused requests


def test_a_delete_batch_refuses_per_item_a_receipt_of_another_stream_or_a_torn_one(
        qcluster: QueueCluster) -> None:
    a = qcluster.client.create_queue(qcluster.queue_name("dar-a"))
    b = qcluster.client.create_queue(qcluster.queue_name("dar-b"))
    a.send_batch([b"a1", b"a2"])
    b.send(b"b1")
    ra = [m.receipt for m in a.receive(max_messages=2, wait_time=5)]
    [mb] = b.receive(max_messages=1, wait_time=5)
    assert len(ra) == 2
    ep = a.routes.for_receive(0)[0]
    reply = qcluster.client.request(ep, Command.DELETE, {"q": a.name, "p": 0,
                                                         "r": [ra[0], mb.receipt, ra[1][:-2]]})
    first, other, torn = reply["results"]
    assert first is None
    assert other is not None and "another queue or partition" in other["message"]
    assert torn is not None and "malformed" in torn["message"]
    assert a.stats()["in_flight"] == 1 and b.stats()["in_flight"] == 1


def test_on_a_fifo_queue_the_carried_delete_releases_its_group_to_the_same_receive(
        qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("dar") + ".fifo", fifo=True, visibility_timeout=60)
    for i in range(4):
        q.send(f"a{i}".encode(), group_id="A")
    [m] = q.receive(max_messages=1, wait_time=5)  # the group is held while a0 is in flight
    assert m.body == b"a0"
    bodies = []
    receipts = [m.receipt]
    while receipts:
        outcomes, msgs = q.delete_and_receive(receipts, max_messages=1)
        assert outcomes == [None]
        bodies += [x.body for x in msgs]
        receipts = [x.receipt for x in msgs]
    # each delete ran before its receive: the next message of the group came back with it, in order
    assert bodies == [b"a1", b"a2", b"a3"]


def test_a_push_subscription_deletes_on_its_credits_and_drains_the_queue(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("dar-push"), visibility_timeout=60)
    sent = set(q.send_batch([b"p%d" % i for i in range(40)]))
    deletes_before, credits_before = _requests(qcluster, "DELETE"), _requests(qcluster, "CREDIT")
    got: list[str] = []
    with q.subscribe(lambda m: got.append(m.id), prefetch=5) as sub:
        wait_for(lambda: len(got) >= len(sent) and q.stats()["total"] == 0, 30,
                 "every message handled and deleted")
        assert sub.failed == 0
    assert set(got) == sent and len(got) == len(sent)
    assert _requests(qcluster, "DELETE") == deletes_before  # the deletes rode on the credits
    # a batch of pushed messages is credited (and deleted) in one CREDIT, not one per message
    assert _requests(qcluster, "CREDIT") - credits_before <= len(sent) / 2


def test_a_push_handler_failure_keeps_its_message_and_the_batch_is_still_deleted(
        qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("dar-push-fail"), visibility_timeout=300)
    q.send_batch([b"f%d" % i for i in range(12)])
    got: list[bytes] = []

    def handler(m: zmqueue.Message) -> None:
        if m.body == b"f3":
            raise RuntimeError("this one fails")
        got.append(m.body)

    with q.subscribe(handler, prefetch=4) as sub:
        wait_for(lambda: len(got) == 11 and q.stats()["in_flight"] == 1 and q.stats()["visible"] == 0,
                 30, "the 11 others handled and deleted")
        assert sub.failed == 1 and sub.handled == 11
    stats = q.stats()
    assert (stats["total"], stats["in_flight"]) == (1, 1)  # f3: back after its visibility timeout


def test_pushed_messages_with_attributes_come_as_lists_and_are_deleted_on_the_credits_by_receipt(
        qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("dar-push-attrs"), visibility_timeout=60)
    sent = {q.send(b"a%d" % i, attributes={"i": i}) for i in range(10)}
    deletes_before = _requests(qcluster, "DELETE")
    got: list[zmqueue.Message] = []
    with q.subscribe(got.append, prefetch=5):
        wait_for(lambda: len(got) >= len(sent) and q.stats()["total"] == 0, 30,
                 "every message handled and deleted")
    assert {m.id for m in got} == sent and all(m.attributes == {"i": int(m.body[1:])} for m in got)
    assert _requests(qcluster, "DELETE") == deletes_before  # by receipt ("del"), on the credits


def test_a_credit_deleting_by_reference_must_name_the_subscriptions_queue(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("dar-push-q"))
    q.send(b"x")
    conn = qcluster.client.connection(q.routes.for_receive(0)[0])
    sub = conn.request(Command.SUBSCRIBE, {"q": q.name, "p": 0, "prefetch": 1, "cols": True})["sub"]
    try:
        with pytest.raises(zmqueue.InvalidParameter, match="subscription's queue"):
            conn.request(Command.CREDIT, {"sub": sub, "n": 1, "dref": ["h", [1], [1]], "q": "another"})
    finally:
        conn.request(Command.UNSUBSCRIBE, {"sub": sub})


def test_a_credit_for_a_subscription_the_host_dropped_says_to_subscribe_again(
        qcluster: QueueCluster) -> None:
    """(It said only "no subscription N on this connection", which a client's
    log showed after a drain moved the partition away.)"""
    q = qcluster.client.create_queue(qcluster.queue_name("dar-push-gone"))
    conn = qcluster.client.connection(q.routes.for_receive(0)[0])

    def subscribed() -> dict[str, Any] | None:  # (create_queue waits 5 s at most for the election)
        try:
            return dict(conn.request(Command.SUBSCRIBE, {"q": q.name, "p": 0, "prefetch": 1, "cols": True}))
        except zmqueue.NotLeader:
            return None

    sub = wait_for(subscribed, 30, "a subscription once the partition's writer is elected")["sub"]
    assert conn.request(Command.CREDIT, {"sub": sub, "n": 0})["credit"] == 1
    conn.request(Command.UNSUBSCRIBE, {"sub": sub})
    with pytest.raises(zmqueue.InvalidParameter,
                       match=rf"no subscription {sub} on this connection: .*dropped it .*subscribe again"):
        conn.request(Command.CREDIT, {"sub": sub, "n": 0})
    q.send(b"still served")
    assert [m.body for m in q.receive(max_messages=1, wait_time=5)] == [b"still served"]
