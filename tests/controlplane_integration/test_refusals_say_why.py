"""A stream nobody can write now: the refusal a client ends with says why.
Real hosts and a real Consul agent; the Consul outage is TCP forwarders
between the hosts (and the client) and the agent that the test cuts, and the
hosts run with a 2 s outage grace (``--outage-grace-ms``) instead of 60 s."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import zmqueue
from tests.conftest import HostFactory, wait_for
from tests.controlplane_integration.conftest import all_passing, lock_holder
from tests.helpers import Cuttable
from zmqueue.controlplane.writer_election import lock_key
from zmqueue.localcluster import ConsulAgent
from zmqueue.protocol import FIFO_ORIGIN


@pytest.fixture
def forwarders(consul_agent: ConsulAgent) -> Iterator[list[Cuttable]]:
    made = [Cuttable(consul_agent.http_addr) for _ in range(4)]  # three hosts and the client
    try:
        yield made
    finally:
        for f in made:
            f.close()


def refusal(q: zmqueue.Queue, fifo: bool = False) -> zmqueue.ZmqueueError | None:
    """The error a send ends with, or None if it went through."""
    try:
        q.send(b"x", group_id="g" if fifo else None)
    except zmqueue.ZmqueueError as exc:
        return exc
    return None


def test_hosts_that_lost_consul_past_the_grace_say_so_instead_of_naming_each_other(
        forwarders: list[Cuttable], hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    """(Each send waited out the request timeout going between hosts that each
    named another as the writer, and failed with that NotLeader.)"""
    # (forwarders first: torn down after the hosts, which deregister through them)
    started = [hosts.start(f"n{i + 1}", consul=f.addr, extra_args=["--outage-grace-ms", "2000"])
               for i, f in enumerate(forwarders[:3])]
    for h in started:
        wait_for(lambda: all_passing(consul_agent, h.node), 60, f"{h.node} passing")  # noqa: B023
    client = zmqueue.connect(forwarders[3].addr, request_timeout=3)
    try:
        q = client.create_queue(f"lost-{hosts.uid}", replication_factor=3)
        q.send(b"before")
        for f in forwarders:
            f.cut()
        err = wait_for(lambda: refusal(q), 30, "a send refused once the grace is over")
        assert type(err) is zmqueue.Unavailable, repr(err)
        assert "this host lost Consul" in str(err) and "writers stop after 2 s without it" in str(err)
        assert "restore Consul" in str(err)
        for f in forwarders:
            f.heal()
        for h in started:
            wait_for(lambda: all_passing(consul_agent, h.node), 60, f"{h.node} passing again")  # noqa: B023
        wait_for(lambda: refusal(q) is None, 30, "sends taken again once Consul is back")
    finally:
        for f in forwarders:
            f.heal()
        client.close()


def test_a_fifo_stream_without_a_majority_says_its_election_waits_for_one(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    """(The client was told "written by no host yet (election in progress)"
    while the host's log said the election waits for a majority.)"""
    addr = consul_agent.http_addr
    started = [hosts.start(f"n{i + 1}") for i in range(3)]
    for h in started:
        wait_for(lambda: all_passing(consul_agent, h.node), 60, f"{h.node} passing")  # noqa: B023
    client = zmqueue.connect(addr, request_timeout=3)
    try:
        q = client.create_queue(f"maj-{hosts.uid}.fifo", fifo=True, replication_factor=3)
        q.send(b"before", group_id="g")
        writer = wait_for(lambda: lock_holder(addr, lock_key((q.name, 0, FIFO_ORIGIN))), 10, "the writer")
        killed = [writer, next(h.node for h in started if h.node != writer)]
        for h in started:
            if h.node in killed:
                h.kill9()

        def says_why() -> zmqueue.ZmqueueError | None:
            err = refusal(q, fifo=True)
            return err if err is not None and "only 1 of 3 are up" in str(err) else None

        err = wait_for(says_why, 30, "a refusal saying the election waits for a majority")
        assert type(err) is zmqueue.NotLeader, repr(err)
        assert "has no writer: its election waits for a majority of its voting replicas (2 of 3)" in str(err)
        assert f"(down: {', '.join(sorted(killed))})" in str(err)
    finally:
        client.close()
