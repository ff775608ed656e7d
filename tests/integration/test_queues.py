"""SQS semantics through the public client API, against real hosts and a real
Consul (two hosts, so queues land on either)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import zmqueue
from tests.conftest import QueueCluster, wait_for
from tests.helpers import back_and_not_dead_lettered, bodies_of
from tests.security.harness import metric, scrape
from zmqueue import OutgoingMessage
from zmqueue.client import receiving
from zmqueue.protocol import Command, Receipt


def test_create_queue_is_idempotent_and_refuses_a_different_config(qcluster: QueueCluster) -> None:
    c = qcluster.client
    name = qcluster.queue_name()
    q1 = c.create_queue(name, visibility_timeout=10)
    q2 = c.create_queue(name, visibility_timeout=10)
    assert q1.config == q2.config
    with pytest.raises(zmqueue.QueueAlreadyExists, match=r"\(visibility_timeout\)") as err:
        c.create_queue(name, visibility_timeout=11)
    assert err.value.details["differs"] == ["visibility_timeout"]  # (as create_queue takes it)
    assert name in c.list_queues()
    assert c.list_queues(prefix=name) == [name]
    assert c.get_queue(name).config.visibility_timeout_s == 10


def test_an_unknown_queue_is_queue_not_found_and_a_deleted_queue_is_gone(qcluster: QueueCluster) -> None:
    c = qcluster.client
    with pytest.raises(zmqueue.QueueNotFound):
        c.get_queue(qcluster.queue_name("missing"))
    name = qcluster.queue_name()
    q = c.create_queue(name)
    q.send_batch([b"x" * 1000] * 100)
    dirs = [h.data_dir / "queues" / name for h in qcluster.factory.hosts]
    segments = lambda: [p for d in dirs for p in d.rglob("*.seg")]  # noqa: E731
    assert segments(), "the queue's messages are on the hosts' disks"
    c.delete_queue(name)
    assert name not in c.list_queues()
    with pytest.raises(zmqueue.QueueNotFound):
        c.get_queue(name)
    with pytest.raises(zmqueue.QueueNotFound):
        c.delete_queue(name)
    # each host moves the streams into its trash once its cache sees the
    # deletion, and a background thread deletes them
    trashes = [h.data_dir / "trash" for h in qcluster.factory.hosts]
    wait_for(lambda: not segments() and not any(t.is_dir() and any(t.iterdir()) for t in trashes), 20,
             "the deleted queue's files gone from every host")


def test_a_receipt_of_a_deleted_queue_never_deletes_a_message_of_its_successor(
        qcluster: QueueCluster) -> None:
    """A queue deleted and created again under its name starts its streams
    at seq 1 again, so a receipt (or a column-read message) of the old queue
    names a (seq, receive count) a new message has too. Receipts carry the
    queue's incarnation (its config key's CreateIndex): the old message is
    gone, so the delete succeeds as for any gone message, and deletes
    nothing; a visibility change is refused."""
    c = qcluster.client
    name = qcluster.queue_name()
    q = c.create_queue(name, visibility_timeout=600)
    q.send(b"old plain")
    q.send(b"old with attributes", attributes={"k": "v"})  # (received as a list: the host's receipt)
    olds = q.receive(max_messages=10, wait_time=5)
    olds += q.receive(max_messages=10, wait_time=1) if len(olds) < 2 else []
    assert sorted(m.body for m in olds) == [b"old plain", b"old with attributes"]
    c.delete_queue(name)
    q2 = c.create_queue(name, visibility_timeout=600)
    q2.send(b"new plain")
    q2.send(b"new with attributes", attributes={"k": "v"})
    news = q2.receive(max_messages=10, wait_time=5)
    news += q2.receive(max_messages=10, wait_time=1) if len(news) < 2 else []
    assert sorted(m.body for m in news) == [b"new plain", b"new with attributes"]
    assert {Receipt.decode(m.receipt).seq for m in olds} == {Receipt.decode(m.receipt).seq for m in news}
    assert q2.delete_batch([m.receipt for m in olds]) == [None, None]  # gone: succeeds, deletes nothing
    errors, _ = q2.delete_and_receive(olds, max_messages=10, wait_time=0)  # the column-read one by ref
    assert errors == [None, None]
    with pytest.raises(zmqueue.InvalidReceipt, match="earlier queue"):
        q2.change_visibility(olds[0].receipt, 0)
    assert q2.stats()["in_flight"] == 2, "the new queue's messages are still there"
    assert q2.delete_batch(news) == [None, None]
    assert q2.stats()["total"] == 0


def test_a_handle_follows_its_queue_deleted_and_created_again_with_more_partitions(
        qcluster: QueueCluster) -> None:
    """A handle re-reads the queue's config with its routes (every 2 s while
    receiving): opened before the queue was deleted and created again with 3
    partitions, it drains all 3 (it used to ask partition 0 only)."""
    c = qcluster.client
    name = qcluster.queue_name()
    old = c.create_queue(name)
    c.delete_queue(name)
    new = c.create_queue(name, partitions=3)
    sent = set(new.send_batch([f"m{i}".encode() for i in range(30)]))
    got: set[str] = set()

    def drained() -> bool:
        msgs = old.receive(max_messages=10, wait_time=1)
        got.update(m.id for m in msgs)
        if msgs:
            old.delete_batch(msgs)
        return got == sent

    wait_for(drained, 60, "the old handle to receive every message of the new queue")
    assert old.config.partitions == 3


def test_a_sent_message_is_received_with_its_attributes_and_deleted(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name())
    before = time.time()
    mid = q.send(b"hello", attributes={"k": "v", "n": 3})
    [m] = q.receive(max_messages=10, wait_time=5)
    assert (m.id, m.body, m.attributes, m.receive_count) == (mid, b"hello", {"k": "v", "n": 3}, 1)
    assert before - 1 <= m.sent_at.timestamp() <= time.time() + 1
    assert q.stats()["in_flight"] == 1
    q.delete(m.receipt)
    st = q.stats()
    assert st["in_flight"] == 0 and st["visible"] == 0
    assert q.receive(wait_time=0) == []


def test_batches_keep_order_of_ids_and_mixed_items(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name())
    ids = q.send_batch([b"a", "b", OutgoingMessage(b"c", attributes={"x": "1"})])
    assert len(set(ids)) == 3
    got = {m.id: m for m in q.receive(max_messages=10, wait_time=5)}
    assert {got[i].body for i in ids} == {b"a", b"b", b"c"}
    assert got[ids[2]].attributes == {"x": "1"}
    assert q.delete_batch([m.receipt for m in got.values()]) == [None, None, None]


def test_an_expired_visibility_timeout_makes_the_message_visible_again_and_stales_the_old_receipt(
        qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name(), visibility_timeout=1)
    q.send(b"m")
    [first] = q.receive()
    assert q.receive() == []
    [second] = q.receive(wait_time=5)
    assert second.id == first.id and second.receive_count == 2
    with pytest.raises(zmqueue.InvalidReceipt):
        q.delete(first.receipt)
    assert q.stats()["in_flight"] == 1  # the stale delete removed nothing
    q.delete(second.receipt)
    assert q.stats()["total"] == 0


def test_change_visibility_to_zero_wakes_a_waiting_long_poll(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name(), visibility_timeout=60)
    q.send(b"m")
    [m] = q.receive()
    result: list[list[zmqueue.Message]] = []
    waiter = threading.Thread(target=lambda: result.append(q.receive(wait_time=15)))

    def parked() -> float:
        return sum(metric(scrape(h), "zmqueue_parked_polls") for h in qcluster.factory.hosts)

    before = parked()
    started = time.monotonic()
    waiter.start()
    # the long poll is parked on a host before the change (else it would find the message visible)
    wait_for(lambda: parked() > before, 10, "the long poll parked")
    q.change_visibility(m.receipt, 0)
    waiter.join(timeout=15)
    assert result and result[0][0].id == m.id
    assert time.monotonic() - started < 5


def test_change_visibility_extends_the_timeout(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name(), visibility_timeout=1)
    q.send(b"m")
    [m] = q.receive()
    q.change_visibility(m.receipt, 30)
    assert q.receive(wait_time=2) == []
    q.delete(m.receipt)


def test_change_visibility_batch_releases_extends_and_answers_for_each_receipt(
        qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name(), visibility_timeout=60, partitions=2)
    q.send_batch([b"m%d" % i for i in range(6)])
    held: list[zmqueue.Message] = []

    def gather(into: list[zmqueue.Message], n: int) -> bool:
        into += q.receive(max_messages=10)
        return len(into) >= n

    wait_for(lambda: gather(held, 6), 10, "all six received")
    by_body = {m.body: m for m in held}
    gone = by_body[b"m5"]
    q.delete(gone)
    # one timeout for all: three released at once, a deleted one's receipt refused
    out = q.change_visibility_batch([by_body[b"m0"], by_body[b"m1"], by_body[b"m2"].receipt, gone], 0)
    assert out[:3] == [None, None, None]
    assert isinstance(out[3], zmqueue.InvalidReceipt), out
    back: list[zmqueue.Message] = []
    wait_for(lambda: gather(back, 3), 10, "the released three back")
    assert sorted(m.body for m in back) == [b"m0", b"m1", b"m2"], "m3 and m4 stay hidden for 60 s"
    # one timeout per receipt: m3 now, m4 in ten minutes
    assert q.change_visibility_batch([by_body[b"m3"], by_body[b"m4"]], [0, 600]) == [None, None]
    [m3] = q.receive(max_messages=10, wait_time=5)
    assert m3.body == b"m3"
    assert q.receive(max_messages=10, wait_time=1) == []
    # bad input fails before any request, saying what to do
    with pytest.raises(zmqueue.InvalidParameter, match="one per receipt"):
        q.change_visibility_batch([m3, by_body[b"m4"]], [0])
    with pytest.raises(zmqueue.InvalidParameter, match="0-43200 seconds"):
        q.change_visibility_batch([m3], 43201)
    with pytest.raises(zmqueue.InvalidParameter, match="1 to 1000 receipts"):
        q.change_visibility_batch([], 0)


@pytest.mark.parametrize("fifo", [False, True], ids=["standard", "fifo"])
def test_a_long_poll_on_a_queue_deleted_while_it_waits_raises_queue_not_found(
        qcluster: QueueCluster, fifo: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a receive without a wait does, and well before its wait ends (it
    returned [] after the whole wait)."""
    c = qcluster.client
    name = qcluster.queue_name() + (".fifo" if fifo else "")
    q = c.create_queue(name, fifo=fifo)
    assert q.receive(wait_time=0) == []
    out: dict[str, object] = {}
    polling = threading.Event()
    long_poll = receiving.long_poll

    def spy(*args: Any) -> Any:  # (the real long poll, once it starts)
        polling.set()
        return long_poll(*args)

    monkeypatch.setattr(receiving, "long_poll", spy)

    def poll() -> None:
        t0 = time.monotonic()
        try:
            out["got"] = q.receive(wait_time=15)
        except zmqueue.ZmqueueError as exc:
            out["got"] = exc
        out["s"] = time.monotonic() - t0

    waiting = threading.Thread(target=poll, daemon=True)
    waiting.start()
    wait_for(polling.is_set, 10, "the long poll started")
    c.delete_queue(name)
    waiting.join(20)
    assert isinstance(out.get("got"), zmqueue.QueueNotFound), out
    assert float(out["s"]) < 10, out  # type: ignore[arg-type]


def test_long_polling_returns_as_soon_as_a_message_arrives_or_empty_after_wait_time(
        qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name())
    t0 = time.monotonic()
    assert q.receive(wait_time=1) == []
    assert 0.9 <= time.monotonic() - t0 < 4
    sender = threading.Timer(0.5, lambda: q.send(b"late"))
    t0 = time.monotonic()
    sender.start()
    got = q.receive(wait_time=15)
    assert [m.body for m in got] == [b"late"]
    assert time.monotonic() - t0 < 5


def test_per_queue_and_per_message_delays_hide_messages_until_due(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name(), delay=1)
    q.send(b"queue-delay")
    q.send(b"no-delay", delay=0)
    assert [m.body for m in q.receive(10)] == [b"no-delay"]
    assert q.stats()["delayed"] == 1
    got = q.receive(10, wait_time=5)
    assert [m.body for m in got] == [b"queue-delay"]


def test_a_message_received_too_often_moves_to_the_dead_letter_queue_with_its_attributes(
        qcluster: QueueCluster) -> None:
    c = qcluster.client
    name, dlq_name = qcluster.queue_name(), qcluster.queue_name("dlq")
    q = c.create_queue(name, visibility_timeout=1, dead_letter_queue=dlq_name, max_receive_count=2)
    mid = q.send(b"poison", attributes={"why": "test"})
    for n in (1, 2):
        [m] = q.receive(wait_time=5)
        assert m.receive_count == n
    assert q.receive(wait_time=2) == []
    dlq = c.get_queue(dlq_name)
    [d] = wait_for(lambda: dlq.receive(wait_time=1), 10, "the message in the DLQ")
    assert (d.id, d.body, d.attributes, d.dead_letter_source) == (mid, b"poison", {"why": "test"}, name)
    assert d.receive_count == 3
    assert q.stats()["total"] == 0


def test_a_dead_letter_queue_is_redriven_to_its_sources_and_to_a_named_queue(
        qcluster: QueueCluster, capsys: pytest.CaptureFixture[str]) -> None:
    from zmqueue.cli.main import main

    c = qcluster.client
    name, dlq_name, other = qcluster.queue_name(), qcluster.queue_name("dlq"), qcluster.queue_name("to")
    q = c.create_queue(name, visibility_timeout=1, dead_letter_queue=dlq_name, max_receive_count=1)
    sent = {q.send(f"m{i}".encode(), attributes={"i": i}): f"m{i}".encode() for i in range(6)}
    got: dict[str, zmqueue.Message] = {}

    def received_all() -> bool:
        got.update({m.id: m for m in q.receive(10, wait_time=1)})
        return len(got) == 6

    wait_for(received_all, 20, "each message received once, not deleted")
    dlq = c.get_queue(dlq_name)
    # the receives after their visibility timeout move them to the DLQ
    wait_for(lambda: q.receive(10, wait_time=0.5) == [] and dlq.stats()["total"] == 6, 20,
             "6 messages in the DLQ")
    dlq.send_batch([b"orphan-1", b"orphan-2"])  # sent there directly: no source queue

    report = dlq.redrive(wait_time=0.5)
    assert (report.moved, report.skipped, report.failed_deletes) == ({name: 6}, 2, 0)
    back: list[zmqueue.Message] = []

    def back_in_source() -> bool:
        back.extend(q.receive(10, wait_time=1))
        return len(back) >= 6

    wait_for(back_in_source, 20, "6 back in the source")
    assert sorted(m.body for m in back) == sorted(sent.values())
    assert all(m.receive_count == 1 and m.dead_letter_source is None for m in back)
    assert sorted(m.attributes["i"] for m in back) == list(range(6))
    # the orphans stayed, visible again; the CLI moves them with --to
    wait_for(lambda: dlq.stats()["visible"] == 2, 10, "the 2 orphans visible in the DLQ")
    c.create_queue(other)
    assert main(["queue", "redrive", dlq_name, "--to", other,
                 "--consul", qcluster.factory.agent.http_addr]) == 0
    assert f"moved 2 messages from {dlq_name} (2 to {other})" in capsys.readouterr().out
    assert sorted(m.body for m in c.get_queue(other).receive(10, wait_time=2)) == [b"orphan-1", b"orphan-2"]
    assert dlq.stats()["total"] == 0
    with pytest.raises(zmqueue.InvalidParameter):
        dlq.redrive(to=dlq_name)


def test_a_fifo_dead_letter_queue_is_redriven_in_group_order(qcluster: QueueCluster) -> None:
    c = qcluster.client
    name, dlq_name = qcluster.queue_name() + ".fifo", qcluster.queue_name("dlq") + ".fifo"
    dlq = c.create_queue(dlq_name, fifo=True)
    q = c.create_queue(name, fifo=True, visibility_timeout=1, dead_letter_queue=dlq_name,
                       max_receive_count=1)
    bodies = [f"a{i}".encode() for i in range(4)]
    for b in bodies:
        q.send(b, group_id="A")
    first = wait_for(lambda: q.receive(10, wait_time=1), 10, "the group received once")
    assert [m.body for m in first] == bodies
    wait_for(lambda: q.receive(10, wait_time=0.5) == [] and dlq.stats()["total"] == 4, 20,
             "the group moved to the FIFO DLQ")
    assert dlq.redrive(wait_time=0.5).moved == {name: 4}
    back = wait_for(lambda: q.receive(10, wait_time=1), 10, "the group back in the source")
    assert [(m.body, m.group_id, m.receive_count) for m in back] == [(b, "A", 1) for b in bodies]
    assert dlq.stats()["total"] == 0


def test_purge_empties_a_queue(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name())
    q.send_batch([b"x"] * 50)
    assert q.purge() == 50
    assert q.stats()["total"] == 0 and q.receive() == []


def test_purge_and_stats_reach_writers_the_handle_did_not_know(qcluster: QueueCluster) -> None:
    """A handle's routes are what it saw at creation, often before every replica's
    stream had its writer: purge() and stats() asked those writers only, so a purge
    left the other streams' messages behind (stats under-counted)."""
    c = qcluster.client
    q = c.create_queue(qcluster.queue_name(), replication_factor=2)
    info = wait_for(lambda: len((i := c.queue_info(q.name))["partitions"][0]["writers"]) == 2 and i, 10,
                    "both replicas writing their streams")
    eps = info["partitions"][0]["endpoints"]
    for ep in eps.values():  # a standard queue: each replica stores what it takes in its own stream
        c.connection(ep).request(Command.SEND, {"q": q.name, "p": 0, "b": [b"x"] * 5}, 5000)
    seen = copy.deepcopy(info)  # the routes as read while one writer was still being elected
    seen["partitions"][0]["writers"] = dict(list(info["partitions"][0]["writers"].items())[:1])
    q.routes.parts.clear()
    q.routes.apply(seen)
    q._refreshed_at = time.monotonic()  # just read
    assert q.purge() == 10
    assert c.get_queue(q.name).stats()["total"] == 0
    unseen = next(n for n in info["partitions"][0]["writers"] if n not in seen["partitions"][0]["writers"])
    c.connection(eps[unseen]).request(Command.SEND, {"q": q.name, "p": 0, "b": [b"y"] * 3}, 5000)
    q.routes.parts.clear()
    q.routes.apply(seen)
    q._refreshed_at = time.monotonic() - 3  # read a while ago
    assert q.stats()["total"] == 3


def test_retention_drops_messages_older_than_the_retention_period(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name(), retention=1)
    q.send_batch([b"old"] * 5)
    wait_for(lambda: q.stats()["total"] == 0, 10, "retention to drop the messages")
    assert q.receive() == []


def test_retention_reaches_every_queue_of_a_host(qcluster: QueueCluster) -> None:
    """Housekeeping visits a slice of the host's streams at a time; every
    stream still gets its turn (13 queues: slices that do not divide evenly)."""
    queues = [qcluster.client.create_queue(f"{qcluster.queue_name()}-{i}", retention=1) for i in range(13)]
    for q in queues:
        q.send(b"old")
    wait_for(lambda: all(q.stats()["total"] == 0 for q in queues), 15, "retention to empty every queue")


def test_fifo_keeps_group_order_and_holds_a_group_while_a_message_is_in_flight(
        qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name() + ".fifo", fifo=True, visibility_timeout=30)
    for i in range(5):
        q.send(f"a{i}".encode(), group_id="A")
        q.send(f"b{i}".encode(), group_id="B")
    [first] = q.receive(max_messages=1)
    group = first.group_id
    other = "B" if group == "A" else "A"
    got = q.receive(max_messages=10)
    assert got and all(m.group_id == other for m in got), "group of the in-flight message is held"
    assert [m.body for m in got] == [f"{other.lower()}{i}".encode() for i in range(5)]
    q.delete(first.receipt)
    rest = q.receive(max_messages=10)
    assert [m.body for m in rest] == [f"{group.lower()}{i}".encode() for i in range(1, 5)]


def test_fifo_sends_are_deduplicated_by_dedup_id_and_by_content_when_asked(qcluster: QueueCluster) -> None:
    c = qcluster.client
    q = c.create_queue(qcluster.queue_name() + ".fifo", fifo=True)
    a = q.send(b"one", group_id="g", dedup_id="d1")
    assert q.send(b"other body", group_id="g", dedup_id="d1") == a
    ids = q.send_batch([OutgoingMessage(b"x", group_id="g", dedup_id="d2"),
                        OutgoingMessage(b"y", group_id="g", dedup_id="d2")])
    assert ids[0] == ids[1]
    cq = c.create_queue(qcluster.queue_name() + ".fifo", fifo=True, content_based_dedup=True)
    assert cq.send(b"same", group_id="g") == cq.send(b"same", group_id="g")
    assert q.stats()["total"] == 2 and cq.stats()["total"] == 1
    with pytest.raises(zmqueue.InvalidParameter, match="group_id"):
        q.send(b"no group")


def test_bad_requests_get_specific_errors(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name(), max_message_bytes=1024)
    with pytest.raises(zmqueue.MessageTooLarge) as exc:
        q.send(b"x" * 2000)
    assert exc.value.details == {"size": 2000, "limit": 1024}
    with pytest.raises(zmqueue.InvalidParameter, match="too many attributes"):
        q.send(b"x", attributes={f"k{i}": "v" for i in range(11)})
    with pytest.raises(zmqueue.InvalidParameter, match="max_messages"):
        q.receive(max_messages=0)
    with pytest.raises(zmqueue.InvalidParameter, match="wait_time"):
        q.receive(wait_time=21)
    with pytest.raises(zmqueue.InvalidParameter, match="queue name"):
        qcluster.client.create_queue("bad name!")
    with pytest.raises(zmqueue.InvalidReceipt):
        q.delete("not-a-receipt")
    assert q.stats()["total"] == 0


def test_a_message_whose_attributes_take_it_over_the_limit_is_refused_by_the_client_as_by_the_host(
        qcluster: QueueCluster) -> None:
    """(The client checked the body alone against max_message_bytes, the host
    body + attributes + ids: such a message reached a host, and a batch's
    requests to other partitions were sent before it was refused.)"""
    c = qcluster.client
    q = c.create_queue(qcluster.queue_name("big-attrs"), max_message_bytes=1024, partitions=2)
    attrs: dict[str, str | int | float | bytes] = {"note": "y" * 1000}
    with pytest.raises(zmqueue.MessageTooLarge) as host:
        c.request(q.routes.for_send(0)[0], Command.SEND,
                  {"q": q.name, "p": 0, "m": [[b"x" * 100, attrs, None, None, None]]})
    with pytest.raises(zmqueue.MessageTooLarge) as sent:
        q.send(b"x" * 100, attributes=attrs)
    assert str(sent.value) == str(host.value)
    assert "message 0: 1112 bytes (body 100 + attributes" in str(sent.value)
    batch = [OutgoingMessage(b"small"), OutgoingMessage(b"x" * 100, attributes=attrs, dedup_id="d")]
    with pytest.raises(zmqueue.MessageTooLarge, match=r"message 1: 1116 bytes \(body 100") as info:
        q.send_batch(batch * 2)
    assert info.value.details["index"] == 1
    assert "ids" not in info.value.details, "refused before any request was sent"
    assert q.stats()["total"] == 0


def test_push_subscribers_never_hold_more_than_their_prefetch_and_share_with_pull(
        qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name(), visibility_timeout=30)
    q.send_batch([f"m{i}".encode() for i in range(40)])
    seen: list[bytes] = []
    peak = [0]

    def slow(m: zmqueue.Message) -> None:
        peak[0] = max(peak[0], q.stats()["in_flight"])
        seen.append(m.body)
        time.sleep(0.02)

    with q.subscribe(slow, prefetch=3) as sub:
        assert sub.serving_all  # (every partition's host answered the subscribe)
        pulled = wait_for(lambda: q.receive(max_messages=5), 10, "a pull consumer to get some")
        q.delete_batch([m.receipt for m in pulled])
        wait_for(lambda: len(seen) + len(pulled) >= 40, 30, "every message consumed")
        assert sub.max_unfinished_seen <= 3
    assert peak[0] <= 3 + 5  # the subscriber's credit plus the pull consumer's batch
    assert sorted(seen + [m.body for m in pulled]) == sorted(f"m{i}".encode() for i in range(40))
    wait_for(lambda: q.stats()["total"] == 0, 10, "auto-deletes")


def test_closing_a_subscription_gives_back_the_messages_its_handler_never_saw(
        qcluster: QueueCluster) -> None:
    """The messages pushed and not yet handed to the handler when it closes:
    visible at once, their receive counts as before. (They stayed in flight
    for their visibility timeout and came back with their receive count
    spent: with ``max_receive_count=1``, into the dead-letter queue unseen.)"""
    name = qcluster.queue_name("sub-close-back")
    q = qcluster.client.create_queue(name, visibility_timeout=60, dead_letter_queue=name + "-dlq",
                                     max_receive_count=1)
    sent = q.send_batch([b"s%d" % i for i in range(10)])  # (before subscribing: pushed in one batch)
    in_hand = threading.Event()
    release = threading.Event()
    seen: list[zmqueue.Message] = []

    def handler(m: zmqueue.Message) -> None:
        seen.append(m)
        in_hand.set()
        release.wait(10)

    sub = q.subscribe(handler, prefetch=10)
    try:
        assert in_hand.wait(10)
        wait_for(lambda: len(sub.inbox) == 9, 15, "the rest of the push waiting behind the handler")
        closing = threading.Thread(target=sub.close)
        closing.start()
        wait_for(lambda: sub.stopped.is_set(), 15, "the subscription stopping")
        release.set()
        closing.join(10)
    finally:
        release.set()
        sub.close()
    assert len(seen) == 1
    rest: list[zmqueue.Message] = []
    while msgs := q.receive(max_messages=10, wait_time=1):  # now, not after 60 s
        rest += msgs
    assert sorted(m.id for m in seen + rest) == sorted(sent)
    assert {m.receive_count for m in rest} == {1}, "their first receive by an application"
    assert qcluster.client.get_queue(name + "-dlq").stats()["total"] == 0


_EXITS_WITH_A_HANDLER_IN_HAND = """
import sys, threading, time, zmqueue
client = zmqueue.connect(sys.argv[1])
q = client.get_queue(sys.argv[2])
started = threading.Event()

def handler(m):
    started.set()
    time.sleep(60)

q.subscribe(handler)
q.send(b"in hand")
assert started.wait(10)
print("returning with the subscription open", flush=True)
"""


def test_a_blocking_subscription_still_open_at_exit_unsubscribes_so_its_message_is_not_dead_lettered(
        qcluster: QueueCluster) -> None:
    """A program returns with its handler in hand and neither the
    subscription nor the client closed. (Its daemon thread just vanished at
    exit; the hosts kept the subscription for 30 s and pushed the message
    to the dead connection after each visibility timeout, every push a
    receive, into the dead-letter queue.)"""
    name = qcluster.queue_name("exit-open")
    q = qcluster.client.create_queue(name, visibility_timeout=1, dead_letter_queue=name + "-dlq",
                                     max_receive_count=3)
    root = str(Path(zmqueue.__file__).resolve().parents[1])  # (this checkout's zmqueue in the child)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _EXITS_WITH_A_HANDLER_IN_HAND,
                           str(qcluster.factory.agent.http_addr), name],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0 and "returning" in proc.stdout, proc.stderr
    assert time.monotonic() - t0 < 30  # (closed at exit: up to 5 s for the handler in hand)
    m = back_and_not_dead_lettered(q, qcluster.client.get_queue(name + "-dlq"), 1)
    assert m.body == b"in hand" and m.receive_count == 2  # (pushed once, received now)
    q.delete(m)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # (the SystemExit)
def test_a_subscription_whose_thread_a_handler_ended_unsubscribes(qcluster: QueueCluster) -> None:
    """A handler's SystemExit (or any BaseException) ends the subscription's
    thread. (The hosts kept the subscription, and pushed the message in hand
    again after each visibility timeout into the dead-letter queue.)"""
    name = qcluster.queue_name("thread-ended")
    q = qcluster.client.create_queue(name, visibility_timeout=1, dead_letter_queue=name + "-dlq",
                                     max_receive_count=3)

    def handler(m: zmqueue.Message) -> None:
        sys.exit("the handler ends its thread")

    sub = q.subscribe(handler)
    try:
        q.send(b"in hand")
        wait_for(lambda: not sub.thread.is_alive(), 20, "the subscription's thread ended")
        assert sub.stopped.is_set() and sub.conns == {}
        assert sub not in qcluster.client._subs  # (stopped by itself: its client forgot it)
        m = back_and_not_dead_lettered(q, qcluster.client.get_queue(name + "-dlq"), 1)
        assert m.body == b"in hand" and m.receive_count == 2
        q.delete(m)
    finally:
        sub.close()


def test_a_subscription_to_a_deleted_queue_stops_and_closes_its_connections(qcluster: QueueCluster) -> None:
    name = qcluster.queue_name("deleted-under-sub")
    q = qcluster.client.create_queue(name, partitions=2)
    sub = q.subscribe(lambda m: None)
    try:
        assert len(sub.conns) >= 2  # (one per partition and serving host)
        conns = [c for c, _ in sub.conns.values()]
        qcluster.client.delete_queue(name)
        wait_for(lambda: not sub.thread.is_alive(), 30, "the subscription stopped by itself")
        assert sub.queue_deleted and sub.conns == {}
        assert all(c.closed for c in conns)
        assert sub not in qcluster.client._subs  # (stopped by itself: its client forgot it)
    finally:
        sub.close()


def test_a_closed_subscription_is_forgotten_by_its_client_and_client_close_closes_the_open_ones(
        qcluster: QueueCluster) -> None:
    """A long-lived client that opens and closes many subscriptions keeps
    none of the closed ones (it kept every one, and all it held, until it
    closed); the ones still open are closed with the client."""
    client = zmqueue.connect(qcluster.factory.agent.http_addr, request_timeout=10)
    try:
        q = client.create_queue(qcluster.queue_name("sub-churn"))
        for _ in range(10):
            sub = q.subscribe(lambda m: None)
            assert client._subs == [sub]
            sub.close()
            assert client._subs == []
        sub.close()  # (again: idempotent)
        assert client._subs == []
        open_subs = [q.subscribe(lambda m: None) for _ in range(3)]
        open_subs[1].close()
        assert client._subs == [open_subs[0], open_subs[2]]
    finally:
        client.close()
    assert client._subs == []
    left = (open_subs[0], open_subs[2])
    assert all(s.stopped.is_set() and s.conns == {} for s in left)
    wait_for(lambda: not any(s.thread.is_alive() for s in left), 15, "the subscriptions' threads ended")
    qcluster.client.delete_queue(q.name)


def test_a_long_poll_over_several_partitions_returns_the_first_message_and_strands_none(
        qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name(), partitions=4, visibility_timeout=60)
    for round_ in range(3):
        sender = threading.Timer(0.3, lambda r=round_: q.send(f"late-{r}".encode()))
        t0 = time.monotonic()
        sender.start()
        got = q.receive(max_messages=10, wait_time=10)
        assert [m.body for m in got] == [f"late-{round_}".encode()]
        assert time.monotonic() - t0 < 5
        q.delete(got[0].receipt)
    # every parked poll was cancelled: nothing sits in flight or was lost
    st = q.stats()
    assert st["in_flight"] == 0 and st["total"] == 0


def test_the_cli_sends_each_line_as_a_message(
        qcluster: QueueCluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`zmqueue send Q --lines`: a pipeline on a standard queue, ordered
    batches on a FIFO queue; one id printed per line; --dedup-id refused."""
    import io

    from zmqueue.cli.main import main

    consul = qcluster.factory.agent.http_addr
    std = qcluster.client.create_queue(qcluster.queue_name("lines"))
    fifo = qcluster.client.create_queue(qcluster.queue_name("lines") + ".fifo", fifo=True)
    text = b"".join(b"line %d\n" % i for i in range(150)) + b"\n"  # a trailing empty line is skipped
    for q, extra in ((std, ["--attr", "src=cli"]), (fifo, ["--group-id", "g"])):
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text)))
        assert main(["send", q.name, "--lines", *extra, "--consul", consul]) == 0
        ids = capsys.readouterr().out.split()
        assert len(ids) == len(set(ids)) == 150
        got = _receive_all(q, 150)
        assert {m.id for m in got} == set(ids)
        if q is fifo:
            assert [m.body for m in got] == [b"line %d" % i for i in range(150)], "FIFO order"
        else:
            assert sorted(m.body for m in got) == sorted(b"line %d" % i for i in range(150))
            assert all(m.attributes == {"src": "cli"} for m in got)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"a\nb\n")))
    assert main(["send", std.name, "--lines", "--dedup-id", "x", "--consul", consul]) != 0
    assert "--dedup-id" in capsys.readouterr().err


def test_the_cli_takes_the_body_of_send_after_its_options(
        qcluster: QueueCluster, capsys: pytest.CaptureFixture[str]) -> None:
    """(``zmqueue send Q --attr k=v BODY`` was refused: ``unrecognized
    arguments: BODY``; only ``send Q BODY --attr k=v`` worked.)"""
    from zmqueue.cli.main import main

    consul = qcluster.factory.agent.http_addr
    q = qcluster.client.create_queue(qcluster.queue_name("body"))
    assert main(["send", q.name, "--attr", "k=v", "after an option", "--consul", consul]) == 0
    assert main(["send", q.name, "--delay", "0", "--consul", consul, "after --consul"]) == 0
    assert main(["send", q.name, "--attr", "k=w", "--consul", consul, "--", "-dash"]) == 0
    ids = capsys.readouterr().out.split()
    got = {m.id: m for m in _receive_all(q, 3)}
    assert set(got) == set(ids)
    assert sorted((m.body, m.attributes) for m in got.values()) == [
        (b"-dash", {"k": "w"}), (b"after --consul", {}), (b"after an option", {"k": "v"})]


def _run_receive(q: zmqueue.Queue, consul: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "zmqueue", "receive", q.name, "--wait", "5",
                             "--delete", "--consul", consul, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_the_cli_receive_deletes_only_what_it_wrote_and_ends_quietly_when_stdout_closes(
        qcluster: QueueCluster) -> None:
    """``zmqueue receive --delete | head -1``: a message is deleted only once its
    line was written; a stdout nobody reads ends the command with status 141 and
    nothing on stderr. (It ended with ``zmqueue receive: error: Broken pipe``;
    its lines were printed into stdout's buffer and deleted before the buffer
    was written, so a message nobody could read was deleted.)"""
    consul = qcluster.factory.agent.http_addr
    q = qcluster.client.create_queue(qcluster.queue_name("pipe"))
    sent = set(q.send_batch([b"m0", b"m1", b"m2"]))
    p = _run_receive(q, consul, "--max", "3", "--visibility-timeout", "2")
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # the reader is gone before the command writes anything
    err = p.stderr.read().decode()
    assert p.wait(60) == 141, err
    assert err == ""
    # none was written, so none was deleted: all three are received again
    assert {m.id for m in _receive_all(q, 3)} == sent

    [one] = q.send_batch([b"read"])
    p = _run_receive(q, consul, "--max", "1")
    assert p.stdout is not None and p.stderr is not None
    line = json.loads(p.stdout.readline())  # (head -1)
    p.stdout.close()
    assert p.wait(60) == 0, p.stderr.read()
    assert (line["id"], line["body"]) == (one, "read")
    wait_for(lambda: q.stats()["total"] == 0, 10, "the message written deleted")


def _receive_all(q: zmqueue.Queue, n: int) -> list[zmqueue.Message]:
    """At least ``n`` messages of ``q`` in delivery order, each deleted."""
    got: list[zmqueue.Message] = []

    def enough() -> bool:
        msgs = q.receive(10, wait_time=1)
        got.extend(msgs)
        if msgs:
            q.delete_batch(msgs)
        return len(got) >= n

    wait_for(enough, 30, f"{n} messages received from {q.name}")
    return got


def test_a_redrive_that_cannot_move_its_messages_says_why_and_hides_none(qcluster: QueueCluster) -> None:
    """(A target named wrong was looked up only after a batch was received:
    the batch stayed invisible for the redrive's 60 s visibility timeout, and
    the next redrive found nothing.)"""
    c = qcluster.client
    dlq = c.create_queue(qcluster.queue_name("rd-dlq"))
    c.create_queue(qcluster.queue_name("rd-src"), dead_letter_queue=dlq.name)  # so dlq is a DLQ
    dlq.send_batch([b"dead0", b"dead1", b"dead2"])
    with pytest.raises(zmqueue.QueueNotFound, match="does not exist"):
        dlq.redrive(to=qcluster.queue_name("rd-typo"))
    fifo = c.create_queue(qcluster.queue_name("rd-fifo") + ".fifo", fifo=True)
    with pytest.raises(zmqueue.InvalidParameter, match="no group_id; redrive to a standard queue"):
        dlq.redrive(to=fifo.name)
    for kwargs in ({"to": 123}, {"max_messages": "5"}, {"max_messages": 0}, {"visibility_timeout": 0},
                   {"wait_time": 30}):
        with pytest.raises(zmqueue.InvalidParameter):
            dlq.redrive(**kwargs)
    assert dlq.stats()["visible"] == 3, "nothing was received by the refused redrives"
    target = c.create_queue(qcluster.queue_name("rd-target"))
    report = dlq.redrive(to=target.name, wait_time=0.5)
    assert report.moved == {target.name: 3} and report.missing == []
    assert bodies_of(target, 3, 20, "the three dead letters in the target") == [b"dead0", b"dead1", b"dead2"]


def test_a_redrive_that_fails_part_way_says_what_it_had_moved(qcluster: QueueCluster) -> None:
    """(The report of the batches moved before a failing one was lost with the
    exception: an operator could not tell what had moved.)"""
    c = qcluster.client
    dlq = c.create_queue(qcluster.queue_name("rp-dlq"))
    a, b = (c.create_queue(qcluster.queue_name(n), visibility_timeout=1, dead_letter_queue=dlq.name,
                           max_receive_count=1) for n in ("rp-a", "rp-b"))

    def dead_letter(q: zmqueue.Queue, bodies: list[bytes], total: int) -> None:
        q.send_batch(bodies)
        wait_for(lambda: len(q.receive(10, wait_time=0.5)) == 0 and dlq.stats()["total"] == total, 30,
                 f"{q.name}'s messages in the DLQ")

    dead_letter(a, [b"a0", b"a1", b"a2"], 3)  # first in the DLQ, so first in the redrive's batch
    dead_letter(b, [b"b" * 2000, b"b" * 2001], 5)
    b.set_attributes(max_message_bytes=1024)  # b's dead letters no longer fit back
    with pytest.raises(zmqueue.MessageTooLarge) as err:
        dlq.redrive(wait_time=0.5)
    report = err.value.details["redrive"]
    assert report.moved == {a.name: 3}
    assert f"the redrive had moved 3 messages from {dlq.name!r} before this: 3 to {a.name}" in str(err.value)
    assert bodies_of(a, 3, 20, "a's three messages back in a") == [b"a0", b"a1", b"a2"]
    wait_for(lambda: dlq.stats()["visible"] == 2, 10, "b's two given back, visible in the DLQ")


def test_dead_letters_of_a_deleted_source_queue_are_skipped_named_and_given_back(
        qcluster: QueueCluster, capsys: pytest.CaptureFixture[str]) -> None:
    """The skipped dead letters are given back: visible at once, their
    receive counts as before (each redrive counted a receive of them)."""
    c = qcluster.client
    name, keep, dlq_name = qcluster.queue_name("rd-src"), qcluster.queue_name("rd-keep"), \
        qcluster.queue_name("rd-src-dlq")
    for src, body in ((name, b"a"), (name, b"b"), (keep, b"k")):
        q = c.create_queue(src, visibility_timeout=1, dead_letter_queue=dlq_name, max_receive_count=1)
        q.send(body)
    dlq = c.get_queue(dlq_name)
    wait_for(lambda: sum(len(c.get_queue(s).receive(10, wait_time=0.5)) for s in (name, keep)) == 0
             and dlq.stats()["total"] == 3, 30, "the messages received once, then moved to the DLQ")
    c.delete_queue(name)
    report = dlq.redrive(wait_time=0.5)
    assert (report.moved, report.skipped, report.missing) == ({keep: 1}, 2, [name])
    wait_for(lambda: dlq.stats()["visible"] == 2, 10, "the skipped dead letters visible again at once")
    from zmqueue.cli.main import main

    assert main(["queue", "redrive", dlq_name, "--consul", qcluster.factory.agent.http_addr]) == 0
    assert f"whose source queue no longer exists ({name})" in capsys.readouterr().out
    got = wait_for(lambda: dlq.receive(10, wait_time=1, visibility_timeout=1), 10, "the skipped dead letters")
    assert sorted(m.body for m in got) == [b"a", b"b"]
    # moved once (count 1), then this receive: the two redrives counted none
    assert [m.receive_count for m in got] == [2, 2]
    # the last source deleted: no longer a dead-letter queue; --to with --force still moves its messages
    c.delete_queue(keep)
    with pytest.raises(zmqueue.InvalidParameter, match=f"{dlq_name!r} is not a dead-letter queue"):
        dlq.redrive(wait_time=0.5)
    other = c.create_queue(qcluster.queue_name("rd-other"))
    with pytest.raises(zmqueue.InvalidParameter, match=f"{dlq_name!r} is not a dead-letter queue"):
        dlq.redrive(to=other.name, wait_time=0.5)
    wait_for(lambda: dlq.stats()["visible"] == 2, 10, "the dead letters visible again")
    assert dlq.redrive(to=other.name, wait_time=0.5, force=True).moved == {other.name: 2}


def test_a_redrive_of_a_queue_that_is_not_a_dead_letter_queue_is_refused_and_counts_no_receive(
        qcluster: QueueCluster, capsys: pytest.CaptureFixture[str]) -> None:
    """(``zmqueue queue redrive`` of a source queue received its whole
    backlog and left it, "without a source queue", each message's receive
    counted: two runs, and a consumer's next receive dead-lettered all of
    them.)"""
    from zmqueue.cli.main import main

    c = qcluster.client
    name, dlq_name = qcluster.queue_name("rd-not"), qcluster.queue_name("rd-not-dlq")
    q = c.create_queue(name, dead_letter_queue=dlq_name, max_receive_count=2)
    q.send_batch([f"m{i}".encode() for i in range(5)])
    with pytest.raises(zmqueue.InvalidParameter, match=f"{name!r} is not a dead-letter queue") as info:
        q.redrive(wait_time=0.5)
    assert f"{dlq_name} (of {name})" in str(info.value) and "--to QUEUE" in str(info.value)
    for _ in range(2):
        assert main(["queue", "redrive", name, "--consul", qcluster.factory.agent.http_addr]) == 1
        assert "is not a dead-letter queue" in capsys.readouterr().err
    assert q.stats()["visible"] == 5, "nothing received"
    got: list[zmqueue.Message] = []

    def all_received() -> bool:
        got.extend(q.receive(10, wait_time=1))
        return len(got) >= 5

    wait_for(all_received, 20, "the 5 messages, in the source queue")
    assert sorted(m.receive_count for m in got) == [1] * 5
    assert c.get_queue(dlq_name).stats()["total"] == 0


def test_a_redrive_to_a_named_queue_of_a_queue_that_is_not_a_dead_letter_queue_is_refused_unless_forced(
        qcluster: QueueCluster, capsys: pytest.CaptureFixture[str]) -> None:
    """(A redrive with ``to`` moved the messages of any queue, a source
    queue's whole backlog too; SQS's message move task takes a dead-letter
    queue as its source only.)"""
    from zmqueue.cli.main import main

    c, consul_addr = qcluster.client, qcluster.factory.agent.http_addr
    name, dlq_name, to = (qcluster.queue_name("rdf-src"), qcluster.queue_name("rdf-dlq"),
                          qcluster.queue_name("rdf-to"))
    q = c.create_queue(name, dead_letter_queue=dlq_name, max_receive_count=2)
    target = c.create_queue(to)
    q.send_batch([f"m{i}".encode() for i in range(5)])
    with pytest.raises(zmqueue.InvalidParameter, match=f"{name!r} is not a dead-letter queue") as info:
        q.redrive(to=to, wait_time=0.5)
    assert f"{dlq_name} (of {name})" in str(info.value)
    assert f"zmqueue queue redrive {name} --to {to} --force" in str(info.value)
    with pytest.raises(zmqueue.InvalidParameter, match="force"):
        q.redrive(force=True, wait_time=0.5)  # force lifts the check of a redrive with to only
    assert main(["queue", "redrive", name, "--to", to, "--consul", consul_addr]) == 1
    assert "is not a dead-letter queue" in capsys.readouterr().err
    assert q.stats()["visible"] == 5 and target.stats()["total"] == 0, "nothing received, nothing moved"
    assert main(["queue", "redrive", name, "--to", to, "--force", "--consul", consul_addr]) == 0
    assert f"moved 5 messages from {name} (5 to {to})" in capsys.readouterr().out
    got: list[zmqueue.Message] = []

    def all_moved() -> bool:
        got.extend(target.receive(10, wait_time=1))
        return len(got) >= 5

    wait_for(all_moved, 20, "the 5 messages in the target")
    assert sorted(m.body for m in got) == [f"m{i}".encode() for i in range(5)]
    assert q.stats()["total"] == 0


def test_more_dead_letters_at_once_than_one_request_carries_all_reach_a_dlq_on_another_host(
        qcluster: QueueCluster) -> None:
    """(Dead letters waiting for a DLQ written by another host were forwarded
    in one SEND however many there were: past 1,000 the host refused it ("dl
    must be a list of 1 to 1000 items") every second for good, and the
    messages stayed in flight.)"""
    c = qcluster.client
    dlq = c.create_queue(qcluster.queue_name("many-dl"))
    dl_host = dlq.routes.for_send(0)[0]
    for _ in range(20):  # a source whose partition another host writes
        q = c.create_queue(qcluster.queue_name("many-src"), max_receive_count=1, dead_letter_queue=dlq.name)
        if q.routes.for_send(0)[0] != dl_host:
            break
    else:  # (2 hosts: placement spreads partitions over them)
        raise AssertionError("20 source queues all landed on the DLQ's host")
    n = 3000
    for i in range(0, n, 1000):
        q.send_batch([b"d%d" % j for j in range(i, i + 1000)])
    taken = 0
    while taken < n:  # received once each, visible again 2 s later
        got = q.receive(max_messages=1000, wait_time=1, visibility_timeout=2)
        assert got, f"the messages were sent ({taken} received)"
        taken += len(got)

    def all_moved() -> bool:  # their second receive: past max_receive_count, dead letters
        assert q.receive(max_messages=1000, wait_time=0.5) == []
        return bool(dlq.stats()["total"] == n)

    wait_for(all_moved, 30, f"all {n} dead letters in the DLQ")
    assert q.stats()["total"] == 0
