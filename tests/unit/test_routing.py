"""The client's routes (pure logic): a refresh that names no writer for a
stream keeps the last writer known while it is a healthy replica."""

from __future__ import annotations

from typing import Any

from zmqueue.client.routing import FIFO_ORIGIN, Routes

EP = {"a": "tcp://127.0.0.1:1", "b": "tcp://127.0.0.1:2", "c": "tcp://127.0.0.1:3"}


def info(writers: dict[str, str], healthy: tuple[str, ...] = ("a", "b", "c"),
         replicas: tuple[str, ...] = ("a", "b", "c")) -> dict[str, Any]:
    return {"partitions": [{"partition": 0, "replicas": list(replicas), "writers": writers,
                            "endpoints": {n: EP[n] for n in replicas if n in healthy}}]}


def test_a_refresh_read_mid_election_keeps_the_last_known_writer() -> None:
    r = Routes(fifo=True)
    r.apply(info({FIFO_ORIGIN: "b"}))
    assert r.for_receive(0) == [EP["b"]]
    r.apply(info({}))  # a host's cache a moment behind the election
    assert r.for_receive(0) == [EP["b"]]
    assert r.for_send(0)[0] == EP["b"]


def test_a_refresh_naming_a_writer_wins() -> None:
    r = Routes(fifo=True)
    r.apply(info({FIFO_ORIGIN: "b"}))
    r.apply(info({FIFO_ORIGIN: "c"}))
    assert r.for_receive(0) == [EP["c"]]


def test_a_writer_no_longer_healthy_or_no_longer_a_replica_is_forgotten() -> None:
    r = Routes(fifo=True)
    r.apply(info({FIFO_ORIGIN: "b"}))
    r.apply(info({}, healthy=("a", "c")))  # b's checks went critical
    assert r.part(0).writers == {}
    assert r.for_receive(0) == [EP["a"]]  # a replica, which names the writer once there is one
    r.apply(info({FIFO_ORIGIN: "b"}))
    r.apply(info({}, replicas=("a", "c")))  # b was replaced
    assert r.part(0).writers == {}


def test_standard_streams_keep_their_writers_one_by_one() -> None:
    r = Routes(fifo=False)
    r.apply(info({"a": "a", "b": "b", "c": "a"}))  # a took over c's stream
    r.apply(info({"a": "a", "b": "b"}))  # c's stream being handed back
    assert r.part(0).writers == {"a": "a", "b": "b", "c": "a"}
    r.apply(info({"a": "a", "b": "b", "c": "c"}))
    assert r.part(0).writers == {"a": "a", "b": "b", "c": "c"}
