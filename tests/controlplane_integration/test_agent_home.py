"""A host's sessions are created on the Consul agent that holds its
registration. Its threads fail over on their own when an agent dies, so they
can land on different agents; a session tied to the host's checks is refused
everywhere else ("Missing check ... registration"), which once left a host
unable to elect any writer for good. Real Consul (two servers), the real
registrar and leadership thread, in process."""

from __future__ import annotations

import queue
import uuid
from collections.abc import Iterator

import consul
import pytest

from tests.conftest import wait_for
from tests.controlplane_integration.conftest import kv_client
from zmqueue.controlplane.consul_client import AgentHome, ConsulClient, server_gone
from zmqueue.controlplane.leadership import Leadership
from zmqueue.controlplane.registry import SERVICE_NAME, Registrar, Registration
from zmqueue.controlplane.writer_election import Candidacy, Elected, Event
from zmqueue.localcluster import ConsulCluster
from zmqueue.localcluster.consul_agent import has_leader


@pytest.mark.parametrize(("answer", "gone"), [
    ("500 rpc error making call: Missing check 'service:zmqueue-t1' registration", False),
    ("500 rpc error making call: Check 'service:zmqueue-t1' is in critical state", False),
    ('500 invalid session "f320319b"', False),
    ("500 No cluster leader", True),
    ("500 rpc error making call: No cluster leader", True),
    ("500 rpc error making call: EOF", True),
    ("404 not found", False),
])
def test_a_refusal_is_not_taken_for_a_lost_server(answer: str, gone: bool) -> None:
    assert server_gone(consul.ConsulException(answer)) is gone


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """Two Consul servers (one cluster): their agents' HTTP addresses."""
    cluster = ConsulCluster(tmp_path_factory.mktemp("consul"), size=2)
    try:
        cluster.start()
        a, b = cluster.http_addrs
        wait_for(lambda: has_leader(a) and has_leader(b), 30, "a Consul server leader")
        yield a, b
    finally:
        cluster.stop()


def registration(node: str) -> Registration:
    return Registration(cluster="home", node=node, version="test", address="127.0.0.1",
                        client_port=1, check_ttl_ms=600_000)


def test_the_writer_session_is_created_where_the_host_is_registered(
        two_servers: tuple[str, str]) -> None:
    a, b = two_servers
    node = f"home-{uuid.uuid4().hex[:8]}"
    stream = (f"q-{node}", 0, node)
    events: queue.Queue[Event] = queue.Queue()
    home = AgentHome()
    reg = registration(node)
    # registered on the second agent, as after a failover from the first
    Registrar(ConsulClient([b], 2.0, agent_local=True), reg, home).register()
    assert home.address == b
    # the leadership thread's own client tries the first agent first
    lead = Leadership((a, b), 2.0, node, [reg.check_id], {"node": node}, events.put, home)
    lead.update({stream: Candidacy((node,), node)}, {stream: (0, 0)})
    lead.start()
    try:
        def elected() -> bool:
            while not events.empty():
                if isinstance(ev := events.get_nowait(), Elected) and ev.stream == stream:
                    return True
            return False

        wait_for(elected, 15, "the stream's writer elected")
        sid = lead.session
        assert sid is not None
        _, info = kv_client(a).session.info(sid)
        assert info is not None and info["Node"] == "consul-1", info
    finally:
        lead.stop()
        lead.join(10)
    assert not lead.is_alive()


def test_a_host_registered_again_elsewhere_leaves_the_agent_it_used_before(
        two_servers: tuple[str, str]) -> None:
    """A heartbeat that failed over from an agent that still runs (it was only
    slow) deregisters the service there: no critical copy left in the catalog."""
    a, b = two_servers
    reg = registration(f"home-{uuid.uuid4().hex[:8]}")
    home = AgentHome()
    Registrar(ConsulClient([a], 2.0, agent_local=True), reg, home).register()
    assert reg.service_id in kv_client(a).agent.services()
    Registrar(ConsulClient([b], 2.0, agent_local=True), reg, home).register()
    assert home.address == b
    assert reg.service_id in kv_client(b).agent.services()
    assert reg.service_id not in kv_client(a).agent.services()

    def catalog_nodes() -> set[str]:
        _, entries = kv_client(b).catalog.service(SERVICE_NAME)
        return {e["Node"] for e in entries if e["ServiceID"] == reg.service_id}

    wait_for(lambda: catalog_nodes() == {"consul-1"}, 10, "one registration in the catalog")
