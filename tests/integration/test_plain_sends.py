"""SEND with plain bodies (``b``): a list of bytes instead of five-item
message lists, answered with the ids joined (``ib``); checked as a whole
before anything is stored; refused for FIFO queues; and a client that meets
a host from before ``b`` sends ``m`` lists from then on, losing nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import zmqueue
from tests.conftest import QueueCluster
from tests.replication.test_failover import drain
from zmqueue.client.transport import Connection
from zmqueue.errors import InvalidParameter, MessageTooLarge
from zmqueue.protocol import Command, sent_ids


def test_plain_bodies_are_stored_in_order_and_answered_with_joined_ids(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("plain"), visibility_timeout=60)
    endpoint = q.routes.for_send(0)[0]
    bodies = [f"p{i:03d}".encode() for i in range(250)]
    reply = qcluster.client.request(endpoint, Command.SEND, {"q": q.name, "p": 0, "b": bodies})
    assert set(reply) == {"ib"} and isinstance(reply["ib"], bytes) and len(reply["ib"]) == 16 * 250
    ids = sent_ids(reply)
    assert ids is not None and len(set(ids)) == 250
    got = drain(q, 250)
    assert got == dict(zip(ids, bodies, strict=True)), "each id names its own body"
    assert q.send_batch([b"x", b"y"]) and q.send(b"z"), "the client library sends b itself"


@pytest.mark.parametrize(("b", "error", "words"), [
    ([], InvalidParameter, "bodies must be a list of 1 to 1000"),
    ("not a list", InvalidParameter, "bodies must be a list"),
    ([b"ok"] * 1001, InvalidParameter, "bodies must be a list of 1 to 1000"),
    ([b"ok", "text", b"ok"], InvalidParameter, "message 1: body must be bytes"),
    ([b"ok", None], InvalidParameter, "message 1: body must be bytes"),
    ([b"ok", b"x" * 2048], MessageTooLarge, "message 1: 2048 bytes .* exceed the queue's limit of 1024"),
])
def test_a_bad_plain_batch_is_refused_whole_with_what_to_fix(
        qcluster: QueueCluster, b: Any, error: type[Exception], words: str) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("plain-bad"), max_message_bytes=1024)
    endpoint = q.routes.for_send(0)[0]
    with pytest.raises(error, match=words):
        qcluster.client.request(endpoint, Command.SEND, {"q": q.name, "p": 0, "b": b})
    assert q.receive(max_messages=10) == [], "nothing of a refused batch was stored"
    assert q.send_batch([b"after"]), "the host still takes sends"


def test_a_fifo_queue_refuses_plain_bodies_and_says_why(qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("plain-fifo") + ".fifo", fifo=True)
    endpoint = q.routes.for_send(0)[0]
    with pytest.raises(InvalidParameter, match="group_id"):
        qcluster.client.request(endpoint, Command.SEND, {"q": q.name, "p": 0, "b": [b"a"]})


@pytest.mark.parametrize("b", [[b"from b"], None], ids=["bodies", "nil"])
def test_a_send_with_both_plain_bodies_and_messages_is_refused_and_nothing_is_stored(
        qcluster: QueueCluster, b: Any) -> None:
    """(Only ``b`` was stored, the ``m`` messages dropped, and one id answered.)"""
    q = qcluster.client.create_queue(qcluster.queue_name("plain-both"))
    endpoint = q.routes.for_send(0)[0]
    m = [[b"from m-1", None, None, None, None], [b"from m-2", None, None, None, None]]
    with pytest.raises(InvalidParameter, match=r"plain bodies \(b\) or messages \(m\), not both") as err:
        qcluster.client.request(endpoint, Command.SEND, {"q": q.name, "p": 0, "m": m, "b": b})
    assert err.value.details["field"] == "bodies"
    assert q.stats()["total"] == 0, "nothing of the refused request was stored"


@pytest.fixture
def older_hosts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Hosts as one from before plain bodies sees them: every SEND's ``b``
    arrives under a key it does not know (the real host then answers what an
    older one answers: INVALID_PARAMETER on ``messages``). Yields the keys of
    every SEND body sent."""
    seen: list[str] = []
    real = Connection._send

    def send(self: Connection, command: Command, body: Any, request_id: int) -> None:
        if command == Command.SEND and isinstance(body, dict):
            seen.append("b" if "b" in body else "m" if "m" in body else "?")
            if "b" in body:
                body = {("unknown" if k == "b" else k): v for k, v in body.items()}
        real(self, command, body, request_id)

    monkeypatch.setattr(Connection, "_send", send)
    yield seen


def test_a_client_meeting_an_older_host_sends_message_lists_and_loses_nothing(
        qcluster: QueueCluster, older_hosts: list[str]) -> None:
    with zmqueue.connect(qcluster.factory.agent.http_addr, request_timeout=10) as client:
        q = client.create_queue(qcluster.queue_name("plain-old"), visibility_timeout=60)
        ids = q.send_batch([b"first", b"second"])
        assert older_hosts == ["b", "m"], "refused once as b, then sent as m lists"
        assert client.plain_sends is False
        ids += [q.send(b"third")]
        with q.pipeline(window=50, max_requests=2) as pipe:
            pending = [pipe.send(f"piped-{i}".encode()) for i in range(100)]
        assert all(p.id and p.error is None for p in pending)
        assert "b" not in older_hosts[2:], "no more b after the first refusal"
        got = drain(q, 103)
        assert set(got) == set(ids) | {p.id for p in pending} and len(got) == 103


def test_a_pipeline_meeting_an_older_host_resends_its_requests_as_message_lists(
        qcluster: QueueCluster, older_hosts: list[str]) -> None:
    with zmqueue.connect(qcluster.factory.agent.http_addr, request_timeout=10) as client:
        q = client.create_queue(qcluster.queue_name("plain-old-pipe"), visibility_timeout=60)
        with q.pipeline(window=50, max_requests=4) as pipe:
            pending = [pipe.send(f"m-{i}".encode()) for i in range(200)]
        assert all(p.id and p.error is None for p in pending), [p.error for p in pending if p.error]
        assert older_hosts[0] == "b" and "m" in older_hosts and client.plain_sends is False
        got = drain(q, 200)
        assert got == {p.id: f"m-{p.index}".encode() for p in pending}, "each once, none lost"
