"""A host that dies (kill -9) or freezes (SIGSTOP) while requests wait on
it: its client connections drop (at once, or after 3 s of missed heartbeats),
and the requests fail over instead of waiting out a long request timeout
(60 s here, so waiting for it would fail these tests). The host is frozen
first, so the requests are surely in flight to it when it dies."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

import zmqueue
from tests.conftest import HostFactory, wait_for
from tests.integration.test_pipeline import drain_until
from tests.replication.test_failover import three_hosts
from tests.replication.test_subscription_follow import one_host
from zmqueue.client.transport import Connection
from zmqueue.localcluster import ConsulAgent, HostProcess
from zmqueue.protocol import Command

T = TypeVar("T")
LONG_TIMEOUT_S = 60
"""The clients' request timeout: a test that waited for it would fail."""
FAILOVER_DEADLINE_S = 30
"""How long a test lets a call take across the kill (refused reconnects and
a routes refresh, on a loaded CI machine)."""


@pytest.fixture
def patient_client(consul_agent: ConsulAgent) -> Iterator[zmqueue.Client]:
    with zmqueue.connect(consul_agent.http_addr, request_timeout=LONG_TIMEOUT_S, retries=8) as c:
        yield c


def in_thread(call: Callable[[], T]) -> tuple[threading.Thread, list[T | BaseException]]:
    """Run ``call`` on a thread; its result or exception lands in the list."""
    outcome: list[T | BaseException] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, outcome


def taker_of(q: zmqueue.Queue, hs: list[HostProcess]) -> HostProcess:
    """The host partition 0's sends go to first."""
    ep = q.routes.for_send(0)[0]
    return next(h for h in hs if h.node in {n for n, e in q.routes.part(0).endpoints.items() if e == ep})


def finished(t: threading.Thread, outcome: list[T | BaseException]) -> T:
    t.join(timeout=FAILOVER_DEADLINE_S)
    assert not t.is_alive(), f"still waiting {FAILOVER_DEADLINE_S} s after its host died or froze"
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def test_a_request_waiting_on_a_killed_host_fails_with_connection_lost(
        hosts: HostFactory, consul_agent: ConsulAgent, patient_client: zmqueue.Client) -> None:
    h = one_host(hosts, consul_agent)
    ep = next(i.client_endpoint for i in patient_client.hosts(refresh=True) if i.node == h.node)
    conn = Connection(patient_client.ctx, ep)
    try:
        assert conn.request(Command.PING, None, 10_000)["pong"] is True
        h.freeze()
        t, outcome = in_thread(lambda: conn.request(Command.PING, None, LONG_TIMEOUT_S * 1000))
        assert outcome == [] and t.is_alive()
        h.kill9()
        with pytest.raises(zmqueue.ConnectionLost, match="dropped"):
            finished(t, outcome)
    finally:
        conn.close()


def test_a_send_in_flight_to_a_killed_host_is_retried_on_another_replica(
        hosts: HostFactory, consul_agent: ConsulAgent, patient_client: zmqueue.Client) -> None:
    hs = three_hosts(hosts, consul_agent)
    q = patient_client.create_queue("dying", replication_factor=3, sync_replication=True)
    before = q.send(b"before")
    taker = taker_of(q, hs)
    taker.freeze()
    t, outcome = in_thread(lambda: q.send(b"across the kill"))
    taker.kill9()
    mid = finished(t, outcome)
    got = drain_until(q, {before, mid}, timeout_s=40)
    assert {before, mid} <= set(got), "both acknowledged sends are there"
    assert sorted(set(got.values())) == [b"across the kill", b"before"]


def test_a_pipeline_retries_its_sends_in_flight_to_a_killed_host_at_once(
        hosts: HostFactory, consul_agent: ConsulAgent, patient_client: zmqueue.Client) -> None:
    hs = three_hosts(hosts, consul_agent)
    q = patient_client.create_queue("dying-piped", replication_factor=3, sync_replication=True)
    taker = taker_of(q, hs)
    taker.freeze()
    pipe = q.pipeline(window=16, max_requests=16)  # (one request per message: none coalesced)
    pending = [pipe.send(f"m{i}".encode()) for i in range(16)]  # all in flight to the frozen host
    assert not any(p.done for p in pending)
    t, outcome = in_thread(pipe.flush)
    taker.kill9()
    failed = finished(t, outcome)
    assert failed == [], [str(p.error) for p in failed]
    assert pipe.retried == 16, "every send in flight to the dead host was sent again"
    ids = {p.id for p in pending if p.id}
    assert len(ids) == 16
    got = drain_until(q, ids, timeout_s=40)
    assert ids <= set(got), f"lost {len(ids - set(got))} confirmed messages"


def test_a_send_waiting_on_a_frozen_host_fails_over_when_its_heartbeats_stop(
        hosts: HostFactory, consul_agent: ConsulAgent, patient_client: zmqueue.Client) -> None:
    hs = three_hosts(hosts, consul_agent)
    q = patient_client.create_queue("frozen", replication_factor=3, sync_replication=True)
    taker = taker_of(q, hs)
    warm, go = threading.Event(), threading.Event()

    def two_sends() -> tuple[str, str]:
        first = q.send(b"before the freeze")  # this thread's connection to the taker is up
        warm.set()
        go.wait(30)
        return first, q.send(b"past the frozen host")

    t, outcome = in_thread(two_sends)
    try:
        assert warm.wait(30), "the first send was not acknowledged"
        taker.freeze()  # alive, connections open, answering nothing (not even ZMTP PINGs)
        go.set()
        first, second = finished(t, outcome)
        ids = {first, second}
        got = drain_until(q, ids, timeout_s=40)
        assert ids <= set(got), "both acknowledged sends are there"
    finally:
        go.set()
        taker.thaw()


def test_flush_sends_the_waiting_sends_beside_a_request_still_in_flight(
        hosts: HostFactory, consul_agent: ConsulAgent, patient_client: zmqueue.Client) -> None:
    """A pipeline of a one-partition queue keeps one SEND in flight and holds
    the sends made meanwhile; flush sends them at once (nothing more will
    join them), beside the unanswered request, not one round trip after it.
    The host is frozen so that the first request cannot be answered."""
    h = one_host(hosts, consul_agent)
    q = patient_client.create_queue("flush-beside")
    q.send(b"warm")  # routes and the connection are up
    pipe = q.pipeline(window=32)
    h.freeze()
    try:
        first = pipe.send(b"first")  # in flight, unanswered while the host is stopped
        held = [pipe.send(b"m%d" % i) for i in range(10)]
        assert pipe.requests == 1, "the sends made while a request is in flight wait"
        t, outcome = in_thread(pipe.flush)
        wait_for(lambda: pipe.requests == 2, 10, "flush sending the held sends while the first is unanswered")
    finally:
        h.thaw()
    failed = finished(t, outcome)
    assert failed == [], [str(p.error) for p in failed]
    ids = {p.id for p in [first, *held] if p.id}
    assert len(ids) == 11, "each send confirmed with its own id"
    got = drain_until(q, ids, timeout_s=20)
    assert ids <= set(got)
