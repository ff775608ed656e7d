"""Client resilience with real sockets: the circuit breaker opens on a host
that stops answering, probes it later and closes; the bulkhead bounds the
requests in flight to one host."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import zmq

from tests.conftest import wait_for
from zmqueue import protocol
from zmqueue.client.breaker import BulkheadFull, CircuitOpen, Guards
from zmqueue.client.client import Client
from zmqueue.client.queue import Queue
from zmqueue.errors import RequestTimeout
from zmqueue.protocol import Command


class SilentablePeer:
    """A real ZeroMQ ROUTER peer on loopback that answers PING only while
    ``answering`` is set: a host that goes silent (frozen, overloaded) and
    comes back, without freezing a whole host process."""

    def __init__(self) -> None:
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.answering = threading.Event()
        self.stopping = threading.Event()
        self.seen = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def _run(self) -> None:
        while not self.stopping.is_set():
            if not self.sock.poll(50):
                continue
            ident, data = self.sock.recv_multipart()
            self.seen += 1
            if self.answering.is_set():
                f = protocol.decode(data)
                self.sock.send_multipart([ident, protocol.encode_reply(f.command, f.request_id,
                                                                       {"pong": True})])

    def close(self) -> None:
        self.stopping.set()
        self.thread.join()
        self.sock.close(0)
        self.ctx.term()


@pytest.fixture
def peer() -> Iterator[SilentablePeer]:
    h = SilentablePeer()
    yield h
    h.close()


def test_the_circuit_breaker_opens_on_a_failing_host_and_closes_after_a_probe(peer: SilentablePeer) -> None:
    client = Client(("127.0.0.1:1",), request_timeout=0.2)
    client.guards = Guards(failure_threshold=3, reset_timeout_s=0.5)
    try:
        for _ in range(3):
            with pytest.raises(RequestTimeout):
                client.request(peer.endpoint, Command.PING, None)
        seen = peer.seen
        started = time.monotonic()
        with pytest.raises(CircuitOpen) as exc:
            client.request(peer.endpoint, Command.PING, None)
        assert time.monotonic() - started < 0.05 and peer.seen == seen  # failed fast, nothing sent
        assert 0 < exc.value.details["retry_after_ms"] <= 500
        peer.answering.set()
        time.sleep(0.55)
        assert client.request(peer.endpoint, Command.PING, None) == {"pong": True}  # the probe
        breaker, _ = client.guards.for_endpoint(peer.endpoint)
        assert breaker.transitions == ["open", "half_open", "closed"]
        assert client.request(peer.endpoint, Command.PING, None) == {"pong": True}
    finally:
        client.close()


def test_a_failed_probe_opens_the_circuit_again(peer: SilentablePeer) -> None:
    client = Client(("127.0.0.1:1",), request_timeout=0.1)
    client.guards = Guards(failure_threshold=1, reset_timeout_s=0.2)
    try:
        with pytest.raises(RequestTimeout):
            client.request(peer.endpoint, Command.PING, None)
        time.sleep(0.25)
        with pytest.raises(RequestTimeout):
            client.request(peer.endpoint, Command.PING, None)  # the probe fails
        with pytest.raises(CircuitOpen):
            client.request(peer.endpoint, Command.PING, None)
        breaker, _ = client.guards.for_endpoint(peer.endpoint)
        assert breaker.transitions == ["open", "half_open", "open"]
    finally:
        client.close()


def test_the_bulkhead_bounds_requests_in_flight_to_one_host(peer: SilentablePeer) -> None:
    other = SilentablePeer()
    other.answering.set()
    client = Client(("127.0.0.1:1",), request_timeout=1.0)
    client.guards = Guards(failure_threshold=100, max_concurrent=2, wait_s=0.1)
    errors: list[BaseException] = []

    def slow() -> None:
        try:
            client.request(peer.endpoint, Command.PING, None)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=slow) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        time.sleep(0.2)
        with pytest.raises(BulkheadFull):
            client.request(peer.endpoint, Command.PING, None)
        # the slow host does not hold up requests to another one
        assert client.request(other.endpoint, Command.PING, None) == {"pong": True}
        for t in threads:
            t.join()
        assert all(isinstance(e, RequestTimeout) for e in errors) and len(errors) == 2
    finally:
        client.close()
        other.close()


def test_long_polls_go_through_the_circuit_breaker(peer: SilentablePeer) -> None:
    """A long poll parked on a silent host counts as that host's failure; once
    its circuit is open, long polls skip it (nothing sent, no wait)."""
    client = Client(("127.0.0.1:1",), request_timeout=0.1)
    client.guards = Guards(failure_threshold=2, reset_timeout_s=30)
    q = Queue(client, {"config": {"name": "lp"}, "partitions": [
        {"partition": 0, "replicas": ["n1"], "endpoints": {"n1": peer.endpoint}, "writers": {"n1": "n1"}}]})
    body = {"q": "lp", "max": 1}
    try:
        for _ in range(2):
            assert q._long_poll([(0, peer.endpoint)], body, 50) == ([], True)
        breaker, _ = client.guards.for_endpoint(peer.endpoint)
        assert breaker.state == breaker.OPEN and breaker.failures == 2
        wait_for(lambda: peer.seen == 2, 5, "both long polls reached the peer")
        started = time.monotonic()
        assert q._long_poll([(0, peer.endpoint)], body, 50) == ([], True)
        assert time.monotonic() - started < 0.05 and peer.seen == 2  # skipped: nothing sent
    finally:
        client.close()
