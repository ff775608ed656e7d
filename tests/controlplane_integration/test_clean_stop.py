"""A host's clean stop leaves it deregistered, whatever its heartbeat thread
was doing. (A beat under way when the host stopped reached Consul after the
deregistration: its TTL pass found no check, the registrar took that for a
Consul that forgot the service and registered it again, and the stopped
host stayed in the catalog, critical, for the 30 minutes of
``DeregisterCriticalServiceAfter``.) Real Consul, the real registrar and
heartbeat thread, in process."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import TypeVar

import consul

from tests.helpers import consul_for
from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.controlplane.registry import Heartbeat, Registrar, Registration
from zmqueue.localcluster import ConsulAgent

T = TypeVar("T")


class HeldClient(ConsulClient):
    """Once ``hold`` is set, its next call waits for ``release`` before it
    goes to Consul: a request under way, not arrived yet."""

    def __init__(self, address: str) -> None:
        super().__init__([address], 2.0, agent_local=True)
        self.hold = threading.Event()
        self.held = threading.Event()
        self.release = threading.Event()

    def call(self, fn: Callable[[consul.Consul], T]) -> T:
        if self.hold.is_set() and not self.held.is_set():
            self.held.set()
            assert self.release.wait(10)
        return super().call(fn)


def test_a_beat_under_way_when_the_host_stops_does_not_register_it_again(consul_agent: ConsulAgent) -> None:
    addr = consul_agent.http_addr
    node = f"stop-{uuid.uuid4().hex[:8]}"
    reg = Registration(cluster="c", node=node, version="test", address="127.0.0.1", client_port=1)
    main = Registrar(ConsulClient([addr], 2.0, agent_local=True), reg)
    main.register()
    beats = HeldClient(addr)
    heartbeat = Heartbeat(Registrar(beats, reg), 50, lambda: True)
    heartbeat.start()
    try:
        try:
            beats.hold.set()
            assert beats.held.wait(10), "a beat under way"
            heartbeat.stop()  # what Host.close does: the heartbeat stopped, then the deregistration
            main.deregister()
            assert reg.service_id not in consul_for(consul_agent).agent.services()
        finally:
            beats.release.set()
            heartbeat.join(10)
        assert not heartbeat.is_alive()
        assert reg.service_id not in consul_for(consul_agent).agent.services(), \
            "the stopped host's last beat registered it again"
    finally:  # (the worker's later tests share the agent)
        consul_for(consul_agent).agent.service.deregister(reg.service_id)
