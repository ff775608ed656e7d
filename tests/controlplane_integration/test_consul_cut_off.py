"""One host cut off from Consul while the others reach it: its writer lock
is released (its heartbeat check fails) and another host is elected, yet for
the outage grace it keeps serving as writer (it cannot tell this from a
Consul outage of every host). Its asynchronous acks used to be its own, and
the new writer's log then dropped what it acknowledged; now, while Consul
does not confirm it, an asynchronous write too needs a majority of the
replicas, and replicas that follow the new writer report nothing to it.
Real hosts, a real Consul agent, and a TCP forwarder between one host and
Consul that the test cuts."""

from __future__ import annotations

import contextlib
import time
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
    made = [Cuttable(consul_agent.http_addr) for _ in range(3)]
    try:
        yield made
    finally:
        for f in made:
            f.close()


def test_a_writer_cut_off_from_consul_acknowledges_no_async_write_the_new_writer_lacks(
        forwarders: list[Cuttable], hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    # (forwarders first: torn down after the hosts, which deregister through them)
    addr = consul_agent.http_addr
    started = [hosts.start(f"n{i + 1}", consul=f.addr) for i, f in enumerate(forwarders)]
    for h in started:
        wait_for(lambda: all_passing(consul_agent, h.node), 60, f"{h.node} passing")  # noqa: B023
    client = zmqueue.connect(addr, request_timeout=3)
    try:
        q = client.create_queue(f"cut-{hosts.uid}.fifo", fifo=True, replication_factor=3,
                                sync_replication=False, visibility_timeout=600)
        key = lock_key((q.name, 0, FIFO_ORIGIN))
        acked: set[str] = set()
        for i in range(20):
            acked.add(q.send(f"before-{i}".encode(), group_id="g", dedup_id=f"b{i}"))
        writer = wait_for(lambda: lock_holder(addr, key), 10, "the FIFO writer")
        by_node = {h.node: i for i, h in enumerate(started)}
        forwarders[by_node[writer]].cut()
        cut_at = time.monotonic()
        errors: list[zmqueue.ZmqueueError] = []
        for i in range(30_000):  # sends for 12 s across the cut (at most 30,000)
            if time.monotonic() - cut_at >= 12:
                break
            try:
                acked.add(q.send(f"during-{i}".encode(), group_id=f"g{i % 10}", dedup_id=f"d{i}"))
            except zmqueue.ZmqueueError as exc:  # refused or timed out: not acknowledged
                errors.append(exc)
        new = wait_for(lambda: (n := lock_holder(addr, key)) not in (None, writer) and n, 20,
                       "another host elected while the writer is cut off")
        assert new != writer
        forwarders[by_node[writer]].heal()
        wait_for(lambda: all_passing(consul_agent, writer), 60, f"{writer} passing again")
        got: set[str] = set()
        deadline = time.monotonic() + 90
        while not got >= acked and time.monotonic() < deadline:  # (bounded: 90 s)
            with contextlib.suppress(zmqueue.ZmqueueError):
                ms = q.receive(max_messages=10, wait_time=1)
                got.update(m.id for m in ms)
                if ms:
                    q.delete_batch([m.receipt for m in ms])
        missing = acked - got
        assert not missing, (f"{len(missing)} of {len(acked)} acknowledged messages never arrived "
                             f"(errors while cut off: {len(errors)}, e.g. {errors[:1]})")
    finally:
        client.close()
