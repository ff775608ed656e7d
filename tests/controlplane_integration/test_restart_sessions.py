"""A host killed and restarted at once does not wait for the Consul sessions
of its earlier run to time out: it destroys them and takes its locks back."""

from __future__ import annotations

import time

import zmqueue
from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses, consul_for
from zmqueue.localcluster import ConsulAgent


def sessions_of(agent: ConsulAgent, node: str) -> set[str]:
    _, sessions = consul_for(agent).session.list()
    return {str(s["ID"]) for s in sessions or [] if s.get("Name") == f"zmqueue-{node}"}


def test_a_restarted_host_destroys_its_earlier_sessions_and_writes_again_at_once(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    h = hosts.start("h1")
    wait_for(lambda: all_passing(check_statuses(consul_agent, h.node)), 60, "h1 passing")
    with zmqueue.connect(consul_agent.http_addr, request_timeout=2, retries=20) as client:
        q = client.create_queue("again")
        q.send(b"before")
        old = wait_for(lambda: len(s := sessions_of(consul_agent, h.node)) >= 2 and s, 15,
                       "the writer and manager sessions of the first run")
        h.kill9()
        started = time.monotonic()
        h2 = hosts.restart(h)
        # the earlier run's sessions are gone long before their 10 s TTL runs out
        # (and its checks pass again under the new process, so Consul would not
        # invalidate them): the new process destroyed them. (Consul ends a
        # session at twice its TTL after the last renewal, every 3.3 s: at least
        # 16 s after the kill. The bounds leave the restarted process, which
        # starts, registers and is elected, 12 s on a loaded machine.)
        wait_for(lambda: not (old & sessions_of(consul_agent, h2.node)), 12,
                 "the earlier run's sessions destroyed")
        q.send(b"after")  # retried until the restarted host writes the stream again
        assert time.monotonic() - started < 12
        got: set[bytes] = set()
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            for m in q.receive(max_messages=10, wait_time=1):
                got.add(m.body)
                q.delete(m.receipt)
        assert got == {b"before", b"after"}
