"""Request deduplication: a retried mutating request (same request id) gets
the first reply and is applied once, on every queue type; the cache is keyed
by the client identity too."""

from __future__ import annotations

from typing import Any

from tests.conftest import QueueCluster, wait_for
from zmqueue.dataplane.dispatch import DEFERRED, Dispatcher
from zmqueue.errors import InvalidParameter, from_wire
from zmqueue.protocol import Command, decode, encode_request


def _writer(qc: QueueCluster, q: Any) -> str:
    return str(q.routes.for_send(0)[0])


def _raw(qc: QueueCluster, endpoint: str, command: Command, body: Any, rid: int) -> Any:
    return qc.client.connection(endpoint).request(command, body, 5000, rid)


def _from_cache(qc: QueueCluster, endpoint: str) -> int:
    status = qc.client.request(endpoint, Command.STATUS, None)
    return int(status["counters"].get("retries_answered_from_cache", 0))


def test_a_retried_send_is_stored_once(plain_cluster: QueueCluster) -> None:
    q = plain_cluster.client.create_queue(plain_cluster.queue_name("dsend"))
    ep = _writer(plain_cluster, q)
    body = {"q": q.name, "p": 0, "m": [[b"once", None, None, None, None]]}
    first = _raw(plain_cluster, ep, Command.SEND, body, 7001)
    again = _raw(plain_cluster, ep, Command.SEND, body, 7001)
    assert first == again
    assert wait_for(lambda: q.stats()["visible"] == 1, 15, "one message")
    assert len(q.receive(max_messages=10, wait_time=1)) == 1


def test_a_retried_delete_change_visibility_and_purge_are_applied_once(plain_cluster: QueueCluster) -> None:
    q = plain_cluster.client.create_queue(plain_cluster.queue_name("dops"))
    ep = _writer(plain_cluster, q)
    q.send_batch([b"a", b"b"])
    msgs = q.receive(max_messages=2, wait_time=2)
    assert len(msgs) == 2
    base = _from_cache(plain_cluster, ep)

    # DELETE: the retry is answered from the cache
    d = {"q": q.name, "p": 0, "r": [msgs[0].receipt]}
    first = _raw(plain_cluster, ep, Command.DELETE, d, 8001)
    assert _raw(plain_cluster, ep, Command.DELETE, d, 8001) == first

    # CHANGE_VISIBILITY: applied once; re-applying the stale receipt would fail, the retry does not
    cv = {"q": q.name, "p": 0, "r": [[msgs[1].receipt, 0]]}
    assert _raw(plain_cluster, ep, Command.CHANGE_VISIBILITY, cv, 8002) == {"results": [None]}
    again = q.receive(max_messages=1, wait_time=2)
    assert again and again[0].receive_count == 2  # redelivered: the first receipt is stale now
    assert _raw(plain_cluster, ep, Command.CHANGE_VISIBILITY, cv, 8002) == {"results": [None]}
    assert q.receive(max_messages=1, wait_time=0) == []  # the retry did not make it visible again
    fresh = {"q": q.name, "p": 0, "r": [[msgs[1].receipt, 0]]}
    assert _raw(plain_cluster, ep, Command.CHANGE_VISIBILITY, fresh, 8003)["results"][0] is not None

    # PURGE: the retry does not purge what was sent since
    q.change_visibility(again[0].receipt, 0)
    purge = {"q": q.name, "p": 0}
    assert _raw(plain_cluster, ep, Command.PURGE_QUEUE, purge, 8004) == {"purged": 1}
    q.send_batch([b"c", b"d", b"e"])
    assert _raw(plain_cluster, ep, Command.PURGE_QUEUE, purge, 8004) == {"purged": 1}
    assert wait_for(lambda: q.stats()["visible"] == 3, 15, "the three later messages kept")
    assert _from_cache(plain_cluster, ep) - base == 3


def test_the_reply_cache_is_keyed_by_client_identity() -> None:
    d = Dispatcher()
    calls: list[str | None] = []

    def handler(req: Any) -> Any:
        calls.append(req.user)
        return {"n": len(calls)}

    d.register(Command.SEND, handler)
    frame = encode_request(Command.SEND, 42, {"q": "x"})
    d.handle("client", [b"id-a", frame], "alice")
    d.handle("client", [b"id-b", frame], "bob")  # same request id, another identity: applied
    d.handle("client", [b"id-a", frame], "alice")  # a retry: answered from the cache
    assert calls == ["alice", "bob"]
    replies = d.outbox.take()
    assert replies[0][2] == replies[2][2] != replies[1][2]


def _error(payload: bytes) -> Any:
    frame = decode(payload)
    assert frame.is_error, frame
    return from_wire(frame.body)


def test_another_request_reusing_an_id_is_refused_not_answered_from_the_cache() -> None:
    """Without CURVE every client has the identity '': a client counting its ids
    from 1 got another client's reply (its own SEND confirmed with the other's
    ids, never stored). A retry is the same request byte for byte, or the client
    library's SEND marked ``rt``."""
    d = Dispatcher()
    calls: list[Any] = []

    def handler(req: Any) -> Any:
        calls.append(req.body["b"])
        return {"n": len(calls)}

    d.register(Command.SEND, handler)
    a = encode_request(Command.SEND, 42, {"q": "x", "b": [b"A"]})
    d.handle("client", [b"id-a", a], None)
    d.handle("client", [b"id-b", encode_request(Command.SEND, 42, {"q": "y", "b": [b"B"]})], None)
    d.handle("client", [b"id-a", a], None)  # A's retry
    d.handle("client", [b"id-a", encode_request(Command.SEND, 42, {"q": "x", "b": [b"A"], "rt": True})], None)
    d.handle("client", [b"id-c", encode_request(Command.SEND, 42, {"q": "x", "b": [b"C"], "rt": True})], None)
    assert calls == [[b"A"]]
    replies = [r[2] for r in d.outbox.take()]
    assert replies[0] == replies[2] == replies[3]
    for refused in (replies[1], replies[4]):
        err = _error(refused)
        assert isinstance(err, InvalidParameter) and err.details["field"] == "request_id"
        assert "request id 42 was used by a different SEND request" in str(err)
        assert "nothing was applied" in str(err)
    assert d.counters["request_ids_reused"] == 2


def test_another_request_reusing_the_id_of_one_in_progress_is_refused_not_joined() -> None:
    d = Dispatcher()
    held: list[Any] = []

    def handler(req: Any) -> Any:
        held.append(req)
        return DEFERRED  # waiting for its commit

    d.register(Command.DELETE, handler)
    first = encode_request(Command.DELETE, 7, {"q": "x", "r": ["receipt-1"]})
    d.handle("client", [b"id-a", first], None)
    d.handle("client", [b"id-b", encode_request(Command.DELETE, 7, {"q": "x", "r": ["receipt-2"]})], None)
    d.handle("client", [b"id-a", first], None)  # a retry joins
    assert len(held) == 1 and held[0].also == [("client", b"id-a")]
    [(_, to, refused)] = d.outbox.take()
    assert to == b"id-b" and isinstance(_error(refused), InvalidParameter)
