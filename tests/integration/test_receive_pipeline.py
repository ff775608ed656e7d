"""Pipelined receives (``Queue.receive_pipeline``): RECEIVE requests in flight
ahead of the caller, deletes riding on them, on real hosts."""

from __future__ import annotations

import collections

import pytest

import zmqueue
from tests.conftest import QueueCluster
from tests.integration.test_delete_and_receive import _delivered_twice, _requests, replicated_queue


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_pipeline_drains_a_queue_with_requests_ahead_and_its_deletes_riding_on_them(
        qcluster: QueueCluster, replicas: int) -> None:
    q = replicated_queue(qcluster, "rp", replicas)
    sent = q.send_batch([b"m%d" % i for i in range(250)])
    deletes_before = _requests(qcluster, "DELETE")
    seen: list[str] = []
    with q.receive_pipeline(max_messages=20, wait_time=0.5, in_flight=2) as pipe:
        while msgs := pipe.receive():
            seen += [m.id for m in msgs]
            pipe.delete(msgs)
        assert pipe.requests >= 6, "batches were asked for ahead, not one round trip each"
    assert sorted(seen) == sorted(sent), "every message once, none twice"
    assert pipe.failed_deletes == []
    assert _requests(qcluster, "DELETE") == deletes_before, "every delete rode on a receive"
    stats = q.stats()
    assert (stats["total"], stats["in_flight"], stats["visible"]) == (0, 0, 0)


def test_closing_makes_the_messages_received_ahead_visible_again_at_once(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("rp-close"), visibility_timeout=300)
    q.send_batch([b"c%d" % i for i in range(40)])
    pipe = q.receive_pipeline(max_messages=10, wait_time=1, in_flight=3)
    first = pipe.receive()  # the plain way (nothing was asked ahead yet)
    second = pipe.receive()  # now three requests went ahead: 30 taken, 10 returned
    assert len(first) == len(second) == 10 and pipe.requests == 3
    pipe.close()
    stats = q.stats()
    # the 20 taken ahead and never returned are visible now, not in 300 s
    assert (stats["in_flight"], stats["visible"]) == (20, 20)
    rest = q.receive(max_messages=10, wait_time=1)
    assert {m.id for m in rest}.isdisjoint({m.id for m in first + second})
    with pytest.raises(zmqueue.ClientClosed, match="receive_pipeline"):
        pipe.receive()


def test_closing_gives_back_the_messages_received_ahead_without_spending_their_receive_count(
        qcluster: QueueCluster) -> None:
    """(``close`` made them visible with plain CHANGE_VISIBILITY 0: their
    receive count spent, so with ``max_receive_count=1`` the next receive
    moved them to the dead-letter queue, though no application saw them.)"""
    name = qcluster.queue_name("rp-close-dlq")
    q = qcluster.client.create_queue(name, dead_letter_queue=name + "-dlq", max_receive_count=1,
                                     visibility_timeout=60)
    q.send_batch([b"d%d" % i for i in range(20)])
    handed: list[zmqueue.Message] = []
    with q.receive_pipeline(max_messages=2, wait_time=1, in_flight=3) as pipe:
        for _ in range(2):
            msgs = pipe.receive()
            handed += msgs
            pipe.delete(msgs)
        assert pipe.requests >= 2, "batches were taken ahead"
    rest: list[zmqueue.Message] = []
    while msgs := q.receive(max_messages=10, wait_time=0.5):
        rest += msgs
    assert len(handed) + len(rest) == 20, "none dead-lettered"
    assert {m.receive_count for m in rest} == {1}, "their first receive by an application"
    assert qcluster.client.get_queue(name + "-dlq").stats()["total"] == 0


def test_a_stale_delete_is_reported_and_the_rest_are_deleted(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("rp-stale"), visibility_timeout=1)
    stale, again = _delivered_twice(q)
    q.change_visibility(again, 300)  # received again and in flight: the first receipt is stale
    q.send_batch([b"s%d" % i for i in range(30)])
    with q.receive_pipeline(max_messages=10, wait_time=1, visibility_timeout=60) as pipe:
        got = pipe.receive() + pipe.receive()  # the second came from a request ahead
        pipe.delete([stale, *got])
        while msgs := pipe.receive():  # the deletes rode on the request sent by the first
            got += msgs
            pipe.delete(msgs)
    assert len({m.id for m in got}) == 30
    assert len(pipe.failed_deletes) == 1
    receipt, err = pipe.failed_deletes[0]
    assert receipt is stale and isinstance(err, zmqueue.InvalidReceipt)
    with pytest.raises(zmqueue.InvalidReceipt) as raised:
        pipe.raise_failed()
    assert raised.value is err
    assert q.stats()["total"] == 1  # only the message received again is left
    q.delete(again)


def test_a_malformed_or_foreign_receipt_is_refused_alone(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("rp-bad"), visibility_timeout=60)
    other = qcluster.client.create_queue(qcluster.queue_name("rp-other"), visibility_timeout=60)
    other.send(b"x")
    [foreign] = other.receive(max_messages=1, wait_time=5)
    q.send_batch([b"b%d" % i for i in range(30)])
    got: list[zmqueue.Message] = []
    with q.receive_pipeline(max_messages=10, wait_time=0.5) as pipe:
        while msgs := pipe.receive():
            got += msgs
            pipe.delete(["not-a-receipt", foreign.receipt, *msgs] if len(got) == 10 else msgs)
    assert len({m.id for m in got}) == 30
    refused = {str(item): type(err) for item, err in pipe.failed_deletes}
    assert refused == {"not-a-receipt": zmqueue.InvalidReceipt, foreign.receipt: zmqueue.InvalidParameter}
    assert q.stats()["total"] == 0, "the good deletes went through"
    assert other.stats()["in_flight"] == 1, "the other queue's message was not touched"


def test_a_malformed_receipt_riding_on_a_plain_receive_is_refused_alone(qcluster: QueueCluster) -> None:
    """Short batches (no backlog): the deletes go with the plain
    delete_and_receive, which refuses the whole list for one bad receipt;
    the pipeline reports that one and sends the rest again."""
    q = qcluster.client.create_queue(qcluster.queue_name("rp-bad-plain"), visibility_timeout=60)
    q.send_batch([b"p%d" % i for i in range(5)])
    with q.receive_pipeline(max_messages=10, wait_time=0.5) as pipe:
        msgs = pipe.receive()
        assert len(msgs) == 5 and pipe.requests == 0, "a short batch: nothing asked ahead"
        pipe.delete(["not-a-receipt", *msgs])
        assert pipe.receive() == []
        assert pipe.fallbacks == 2
        assert [(str(item), type(err)) for item, err in pipe.failed_deletes] == [
            ("not-a-receipt", zmqueue.InvalidReceipt)]
        assert q.stats()["total"] == 0, "the good deletes went with the plain receive"


def test_a_fifo_pipeline_keeps_each_groups_order(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("rp") + ".fifo", fifo=True, visibility_timeout=60)
    groups = "ABC"
    for i in range(20):
        q.send_batch([zmqueue.OutgoingMessage(f"{g}{i}".encode(), group_id=g) for g in groups])
    bodies: dict[str, list[int]] = collections.defaultdict(list)
    with q.receive_pipeline(max_messages=4, wait_time=0.5, in_flight=2) as pipe:
        while msgs := pipe.receive():
            for m in msgs:
                bodies[m.group_id or ""].append(int(m.body[1:]))
            pipe.delete(msgs)
    assert pipe.failed_deletes == []
    assert dict(bodies) == {g: list(range(20)) for g in groups}, "each group once, in send order"
    assert q.stats()["total"] == 0


def test_pipeline_options_are_checked(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("rp-opts"))
    with pytest.raises(zmqueue.InvalidParameter, match="in_flight must be 1 to 8"):
        q.receive_pipeline(in_flight=0)
    with pytest.raises(zmqueue.InvalidParameter, match="max_messages must be 1 to 1000"):
        q.receive_pipeline(max_messages=1001)
    with pytest.raises(zmqueue.InvalidParameter, match="wait_time"):
        q.receive_pipeline(wait_time=21)
    with pytest.raises(zmqueue.InvalidParameter, match="on_deleted"):
        q.receive_pipeline(on_deleted=5)


def test_one_receipt_where_a_list_belongs_is_refused_saying_so(qcluster: QueueCluster) -> None:
    """(``rp.delete(m.receipt)`` deleted nothing and reported each character
    of the receipt as a malformed receipt; ``delete_batch(m)`` was TypeError.)"""
    q = qcluster.client.create_queue(qcluster.queue_name("rp-one"))
    q.send(b"m")
    with q.receive_pipeline(max_messages=1, wait_time=5) as rp:
        [m] = rp.receive()
        for one in (m, m.receipt):
            with pytest.raises(zmqueue.InvalidParameter, match="list of receipts or Messages, got one"):
                rp.delete(one)
            with pytest.raises(zmqueue.InvalidParameter, match="pass \\[it\\]"):
                q.delete_batch(one)
            with pytest.raises(zmqueue.InvalidParameter, match="change_visibility_batch takes a list"):
                q.change_visibility_batch(one, 0)
        rp.delete([m])
    assert rp.failed_deletes == [] and q.stats()["total"] == 0


def test_deletes_pending_when_the_client_closes_are_reported_failed_not_dropped(
        qcluster: QueueCluster) -> None:
    c = zmqueue.connect(qcluster.client.consul_addresses[0])
    q = c.create_queue(qcluster.queue_name("rp-client-closed"), visibility_timeout=30)
    q.send_batch([b"a", b"b", b"c"])
    heard: list[tuple[int, type[Exception] | None]] = []
    rp = q.receive_pipeline(max_messages=10, wait_time=5,
                            on_deleted=lambda items, errors: heard.extend(
                                (len(items), type(e) if e else None) for e in errors))
    msgs = rp.receive()
    rp.delete(msgs)
    c.close()
    with pytest.raises(zmqueue.ClientClosed):
        rp.receive()
    rp.close()
    assert [type(e) for _, e in rp.failed_deletes] == [zmqueue.ClientClosed] * len(msgs)
    assert "visibility timeout" in str(rp.failed_deletes[0][1])
    assert [e for _, e in heard] == [zmqueue.ClientClosed] * len(msgs), "on_deleted heard them"
    with pytest.raises(zmqueue.ClientClosed, match="receive pipeline was closed"):
        rp.delete(msgs)
    assert qcluster.client.get_queue(q.name).stats()["in_flight"] == len(msgs), "not deleted, not lost"


def test_an_on_deleted_that_raises_loses_no_batch(qcluster: QueueCluster) -> None:
    """(The batch that came with the deletes' answer was dropped when
    ``on_deleted`` raised: invisible until its visibility timeout.) The
    exception is logged and counted, not raised by ``receive``."""
    q = qcluster.client.create_queue(qcluster.queue_name("rp-on-deleted"), visibility_timeout=60)
    q.send_batch([f"m{i}".encode() for i in range(40)])
    raised: list[int] = []

    def on_deleted(items: list[object], errors: list[object]) -> None:
        if len(raised) < 2:
            raised.append(len(items))
            raise RuntimeError("the application's callback fails")

    got: dict[str, bytes] = {}
    with q.receive_pipeline(max_messages=10, wait_time=1, on_deleted=on_deleted) as rp:
        for _ in range(30):
            msgs = rp.receive()  # (the callback's exception does not come out of it)
            got.update((m.id, m.body) for m in msgs)
            rp.delete(msgs)
            if len(got) == 40:
                break
    assert len(raised) == 2 and rp.callback_errors == 2, "the callback raised twice, counted"
    assert sorted(got.values()) == sorted(f"m{i}".encode() for i in range(40)), "every batch came"
    assert rp.failed_deletes == []
    assert q.stats()["total"] == 0, "and was deleted"


def test_an_on_deleted_that_raises_does_not_cut_close_short(
        qcluster: QueueCluster, caplog: pytest.LogCaptureFixture) -> None:
    """(``close`` raised the callback's exception from the answers it waited
    for: the pending deletes were neither sent nor reported failed, and the
    messages received ahead stayed invisible for their visibility timeout.)"""
    q = qcluster.client.create_queue(qcluster.queue_name("rp-on-deleted-close"), visibility_timeout=300)
    q.send_batch([b"c%d" % i for i in range(60)])
    heard: list[int] = []
    raising = [False]

    def on_deleted(items: list[object], errors: list[object]) -> None:
        heard.append(len(items))
        if raising[0]:
            raise RuntimeError("the application's callback fails")

    pipe = q.receive_pipeline(max_messages=10, wait_time=1, in_flight=3, on_deleted=on_deleted)
    returned = []
    for _ in range(3):  # the plain way, then from requests ahead (the deletes riding on them)
        msgs = pipe.receive()
        assert len(msgs) == 10
        returned += msgs
        pipe.delete(msgs)
    assert pipe.requests >= 4, "requests went ahead, some carrying deletes"
    heard_before = len(heard)
    raising[0] = True  # from here on every on_deleted raises: close must do its work regardless
    pipe.close()  # returns: the callback's exceptions do not come out of it
    raised = len(heard) - heard_before
    assert raised >= 1 and sum(heard) == 30, "every delete's outcome was heard"
    assert pipe.callback_errors == raised, "each exception counted"
    assert sum("on_deleted raised" in r.getMessage() for r in caplog.records) == raised, "and logged"
    assert pipe.failed_deletes == []
    stats = q.stats()
    # the 30 returned were deleted; the rest (received ahead, or never received) are visible
    # now, not in 300 s
    assert (stats["total"], stats["in_flight"], stats["visible"]) == (30, 0, 30)
    rest = q.receive(max_messages=10, wait_time=1)
    assert rest and {m.id for m in rest}.isdisjoint({m.id for m in returned})
