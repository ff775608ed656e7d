"""A receive that no host answers raises instead of returning ``[]``.

``[]`` means the queue is empty: the hosts answered. When none did (the
only host of the queue killed, the client's own circuit breaker or bulkhead
refusing every try), the receive retries for the request timeout, as every
request does, and then raises the last failure (an ``Unavailable``), so a
consumer can tell "empty" from "down". Nothing is lost: once the host is
back the messages are received."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import zmqueue
from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses
from zmqueue.client.breaker import BulkheadFull, CircuitOpen, Guards
from zmqueue.client.receiving import receive_targets
from zmqueue.localcluster import ConsulAgent, HostProcess

TIMEOUT_S = 2.0
"""The client's request timeout: how long a receive no host answers keeps trying."""
RAISE_WITHIN_S = 15.0
"""A receive no host answers raises within this (its retries, a routes refresh, a loaded machine)."""


def start_passing(hosts: HostFactory, agent: ConsulAgent, old: HostProcess | None = None) -> HostProcess:
    h = hosts.restart(old) if old is not None else hosts.start("h1")
    wait_for(lambda: all_passing(check_statuses(agent, h.node)), 60, f"{h.node} passing")
    return h


@pytest.fixture
def client(consul_agent: ConsulAgent) -> Iterator[zmqueue.Client]:
    with zmqueue.connect(consul_agent.http_addr, request_timeout=TIMEOUT_S) as c:
        yield c


def raises_unavailable(q: zmqueue.Queue, wait_time: float) -> zmqueue.Unavailable:
    started = time.monotonic()
    with pytest.raises(zmqueue.Unavailable) as exc:
        q.receive(max_messages=10, wait_time=wait_time)
    took = time.monotonic() - started
    assert took < RAISE_WITHIN_S, f"receive(wait_time={wait_time}) raised only after {took:.1f} s"
    assert wait_time <= took, f"receive(wait_time={wait_time}) gave up after {took:.2f} s, before its wait"
    return exc.value


def test_a_receive_from_a_queue_whose_only_host_was_killed_raises_and_loses_nothing(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    h = start_passing(hosts, consul_agent)
    q = client.create_queue("lonely", replication_factor=1, fsync="always")
    ids = set(q.send_batch([f"m{i}".encode() for i in range(5)]))
    h.kill9()

    for wait_time in (0, 1):
        err = raises_unavailable(q, wait_time)
        assert "'lonely'" in str(err) and "retry" in str(err), str(err)
    with q.receive_pipeline(max_messages=10, wait_time=0) as pipe, pytest.raises(zmqueue.Unavailable):
        pipe.receive()  # (the pipeline's batches are the plain receive's)

    start_passing(hosts, consul_agent, old=h)
    got: dict[str, bytes] = {}

    def all_back() -> bool:
        try:
            msgs = q.receive(max_messages=10, wait_time=1)
        except zmqueue.Unavailable:  # (the routes catching up with the restarted host)
            return False
        got.update((m.id, m.body) for m in msgs)
        if msgs:
            q.delete_batch(msgs)
        return ids <= got.keys()

    wait_for(all_back, 30, "the 5 messages received after the restart")
    assert sorted(got.values()) == [f"m{i}".encode() for i in range(5)]
    # now the queue is merely empty: the host answers, and a receive returns [] after its wait
    assert q.receive(wait_time=0) == []
    started = time.monotonic()
    assert q.receive(wait_time=1) == []
    assert time.monotonic() - started >= 0.9, "a long poll on a reachable queue waits its time"


def test_a_receive_the_clients_guards_refuse_raises_their_error(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    """The host is up and holds a message, but this client's circuit breaker
    for it is open, or its bulkhead full: the receive raises CircuitOpen or
    BulkheadFull, as a send does, rather than an empty answer."""
    start_passing(hosts, consul_agent)
    guards = Guards(failure_threshold=1, reset_timeout_s=600, max_concurrent=1, wait_s=0.1)
    with zmqueue.connect(consul_agent.http_addr, request_timeout=TIMEOUT_S, guards=guards) as c:
        q = c.create_queue("guarded")
        mid = q.send(b"kept")
        [(_, ep)] = receive_targets(q)
        breaker, bulkhead = guards.for_endpoint(ep)

        breaker.failure()  # open
        for wait_time in (0, 1):
            with pytest.raises(CircuitOpen):
                q.receive(wait_time=wait_time)
        breaker.success()  # closed again

        bulkhead.acquire()  # its one slot taken
        try:
            with pytest.raises(BulkheadFull):
                q.receive(wait_time=0)
        finally:
            bulkhead.release()

        assert [m.id for m in q.receive(wait_time=5)] == [mid]
