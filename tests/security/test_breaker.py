"""Client resilience with real sockets: the circuit breaker opens on a host
that stops answering, probes it later and closes; the bulkhead bounds the
requests in flight to one host; a request whose connection drops (or is
refused) fails at once with ConnectionLost instead of waiting out its timeout."""

from __future__ import annotations

import socket
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
from zmqueue.client.receiving import long_poll
from zmqueue.client.transport import Connection, LinkWatch
from zmqueue.errors import ConnectionLost, RequestTimeout
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
        with pytest.raises(CircuitOpen) as exc:  # (sent, it would wait 5.2 s for the silent peer)
            client.request(peer.endpoint, Command.PING, None, extra_timeout_ms=5000)
        assert time.monotonic() - started < 1.0 and peer.seen == seen  # failed fast, nothing sent
        assert 0 < exc.value.details["retry_after_ms"] <= 500
        peer.answering.set()
        time.sleep(0.55)  # (the breaker's reset timeout: its own clock, nothing to poll)
        # (answered requests get 5 s more than the 0.2 s the failures waited: a loaded
        # machine may take longer than 0.2 s to answer, and a timed-out probe opens again)
        assert client.request(peer.endpoint, Command.PING, None, extra_timeout_ms=5000) == {"pong": True}
        breaker, _ = client.guards.for_endpoint(peer.endpoint)
        assert breaker.transitions == ["open", "half_open", "closed"]
        assert client.request(peer.endpoint, Command.PING, None, extra_timeout_ms=5000) == {"pong": True}
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

    def slow() -> None:  # (holds its slot for 3 s: the silent peer never answers)
        try:
            client.request(peer.endpoint, Command.PING, None, extra_timeout_ms=2000)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=slow) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        wait_for(lambda: peer.seen == 2, 10, "both slow requests in flight (each holds a slot)")
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
            assert long_poll(q, [(0, peer.endpoint)], body, 50) == ([], True)
        breaker, _ = client.guards.for_endpoint(peer.endpoint)
        assert breaker.state == breaker.OPEN and breaker.failures == 2
        wait_for(lambda: peer.seen == 2, 10, "both long polls reached the peer")
        started = time.monotonic()  # (sent, this one would wait 5 s on the silent peer)
        assert long_poll(q, [(0, peer.endpoint)], body, 5000) == ([], True)
        assert time.monotonic() - started < 1.0 and peer.seen == 2  # skipped: nothing sent
    finally:
        client.close()


def _request_in_thread(conn: Connection, timeout_ms: int) -> tuple[threading.Thread, list[object]]:
    """``conn.request(PING)`` on a thread of its own; its outcome lands in the list."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(conn.request(Command.PING, None, timeout_ms))
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, outcome


def test_a_request_whose_peer_closes_its_socket_fails_at_once_with_connection_lost() -> None:
    peer = SilentablePeer()  # takes the request, never answers, then goes away
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    conn = Connection(ctx, peer.endpoint)
    try:
        t, outcome = _request_in_thread(conn, 60_000)
        wait_for(lambda: peer.seen == 1, 10, "the peer took the request")
        peer.close()  # its TCP connection closes, as a killed host's does
        t.join(timeout=20)
        assert not t.is_alive(), "the request waited on after its peer's socket closed"
        assert isinstance(outcome[0], ConnectionLost), outcome
        assert isinstance(outcome[0], RequestTimeout), "retried like a timeout"
        assert outcome[0].details["endpoint"] == peer.endpoint
        assert "the connection dropped" in outcome[0].message
        assert outcome[0].details["reason"].startswith("the connection dropped")
        # nothing listens there now: the next request fails at a refused reconnect
        t, outcome = _request_in_thread(conn, 60_000)
        t.join(timeout=20)
        assert not t.is_alive() and isinstance(outcome[0], ConnectionLost), outcome
    finally:
        conn.close()
        ctx.term()


def test_a_request_to_an_address_where_nothing_listens_fails_with_connection_lost() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # a free port: connects are refused
    client = Client(("127.0.0.1:1",), request_timeout=60)
    try:
        errors: list[BaseException] = []

        def run() -> None:
            try:
                client.request(f"tcp://127.0.0.1:{port}", Command.PING, None)
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(timeout=20)
        assert not t.is_alive(), "a refused connect waited for the 60 s request timeout"
        assert isinstance(errors[0], ConnectionLost), errors
        assert "nothing accepts connections there" in errors[0].message
        breaker, _ = client.guards.for_endpoint(f"tcp://127.0.0.1:{port}")
        assert breaker.failures == 1, "a lost connection counts against the host's circuit"
    finally:
        client.close()


def test_a_reply_that_came_before_the_connection_dropped_is_still_returned() -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    conn = Connection(ctx, f"tcp://127.0.0.1:{port}")
    try:
        t, outcome = _request_in_thread(conn, 60_000)
        assert router.poll(10_000), "the request arrived"
        ident, data = router.recv_multipart()
        f = protocol.decode(data)
        router.send_multipart([ident, protocol.encode_reply(f.command, f.request_id, {"pong": True})])
        router.close(linger=1000)  # the reply goes out, then the connection drops
        t.join(timeout=20)
        assert outcome == [{"pong": True}]
    finally:
        conn.close()
        ctx.term()


def test_a_link_watch_reports_the_dropped_link_and_forgets_a_removed_connection() -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    up, down = ctx.socket(zmq.ROUTER), ctx.socket(zmq.ROUTER)
    up_port, down_port = up.bind_to_random_port("tcp://127.0.0.1"), down.bind_to_random_port("tcp://127.0.0.1")
    stays = Connection(ctx, f"tcp://127.0.0.1:{up_port}")
    goes = Connection(ctx, f"tcp://127.0.0.1:{down_port}")
    watch = LinkWatch()
    try:
        for conn in (stays, goes):
            watch.add(conn)
            watch.add(conn)  # a no-op the second time
            conn.send(Command.PING, None, conn.next_request_id())
        assert stays in watch and goes in watch
        assert up.poll(10_000) and down.poll(10_000), "both links are up"
        ident, data = up.recv_multipart()
        f = protocol.decode(data)
        up.send_multipart([ident, protocol.encode_reply(f.command, f.request_id, {"pong": True})])
        down.close(linger=0)
        readable: set[Connection] = set()
        dropped: list[Connection] = []
        deadline = time.monotonic() + 20
        while not dropped and time.monotonic() < deadline:
            r, d = watch.poll(100)
            readable.update(r)
            dropped.extend(d)
        assert dropped == [goes], "the closed peer's link, and only it"
        assert stays in readable or stays.sock.poll(10_000), "the reply on the other link is readable"
        # nothing listens there now (refused reconnects count as drops): once removed,
        # the connection is not reported again
        watch.remove(goes)
        watch.remove(goes)  # a no-op the second time
        assert goes not in watch
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            assert goes not in watch.poll(100)[1]
        watch.clear()
        assert stays not in watch
    finally:
        stays.close()
        goes.close()
        up.close(linger=0)
        ctx.term()
