"""delete_queue when the host that took it deleted the queue and never
answered: the retry, on another host, finds no queue.

A kill -9 between a host's Consul delete and its reply cannot be timed from a
test, so the lost reply is made deterministic instead: the client discovers
(in a Consul agent of its own) one stand-in host, a real ZeroMQ ROUTER socket
that forwards the first request to the real host h1 and drops h1's reply (h1
applied it and "died" before answering), and forwards every later request to
the real host h2 with its reply. The client, hosts, sockets and Consul agents
are all real; nothing of zmqueue is mocked. (Two real hosts: a retry to h1
itself would be answered from h1's reply cache, as it should be.)
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import consul
import pytest
import zmq

import zmqueue
from tests.conftest import HostFactory, all_passing, running_agent, wait_for
from tests.helpers import check_statuses
from zmqueue import protocol
from zmqueue.errors import QueueNotFound
from zmqueue.localcluster.hosts import HostProcess
from zmqueue.protocol import Command
from zmqueue.version import __version__


class FirstReplyLost:
    """A stand-in host: the first request goes to ``first``, whose reply is
    dropped; every later one goes to ``then`` and its reply comes back."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], first: str, then: str) -> None:
        self.router = ctx.socket(zmq.ROUTER)
        self.router.linger = 0
        self.endpoint = f"tcp://127.0.0.1:{self.router.bind_to_random_port('tcp://127.0.0.1')}"
        self.first, self.then = ctx.socket(zmq.DEALER), ctx.socket(zmq.DEALER)
        for sock, endpoint in ((self.first, first), (self.then, then)):
            sock.linger = 0
            sock.connect(endpoint)
        self.commands: list[Command] = []
        self.dropped = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="first-reply-lost", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        poller = zmq.Poller()
        for sock in (self.router, self.first, self.then):
            poller.register(sock, zmq.POLLIN)
        peer = b""
        try:
            while not self.stopping.is_set():
                for sock, _ in poller.poll(50):
                    frames = sock.recv_multipart()
                    if sock is self.router:
                        peer = frames[0]
                        self.commands.append(protocol.decode(frames[-1]).command)
                        (self.first if len(self.commands) == 1 else self.then).send_multipart(frames[1:])
                    elif sock is self.first:
                        self.dropped.set()  # applied by h1; its reply never reaches the client
                    else:
                        self.router.send_multipart([peer, *frames])
        finally:
            for sock in (self.router, self.first, self.then):
                sock.close()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)
        assert not self.thread.is_alive()


def _register(agent_addr: str, endpoint: str) -> None:
    host, _, port = agent_addr.rpartition(":")
    c = consul.Consul(host=host, port=int(port), connections_timeout=5)
    c.agent.service.register("zmqueue", service_id="zmqueue-standin", meta={
        "node": "standin", "cluster": "c", "version": __version__, "client_endpoint": endpoint})


def _client_endpoint(data_dir: Path) -> str:
    return str(json.loads((data_dir / "host.json").read_text())["client_endpoint"])


def _two_hosts(hosts: HostFactory) -> tuple[HostProcess, HostProcess]:
    h1, h2 = hosts.start("h1"), hosts.start("h2")
    wait_for(lambda: all(all_passing(check_statuses(hosts.agent, h.node)) for h in (h1, h2)), 30,
             "both hosts passing")
    return h1, h2


def _delete_through_a_lost_reply(h1: HostProcess, h2: HostProcess, tmp_path: Path, name: str) -> None:
    """``delete_queue(name)`` whose first attempt reaches h1 and whose reply is
    lost, and whose retry is answered by h2."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    proxy = FirstReplyLost(ctx, _client_endpoint(h1.data_dir), _client_endpoint(h2.data_dir))
    try:
        with running_agent(tmp_path / "consul-b") as agent_b:
            _register(agent_b.http_addr, proxy.endpoint)
            with zmqueue.connect(agent_b.http_addr, request_timeout=1.5, retries=2) as client:
                try:
                    client.delete_queue(name)
                finally:
                    assert proxy.dropped.is_set()
                    assert proxy.commands[:2] == [Command.DELETE_QUEUE, Command.DELETE_QUEUE]
    finally:
        proxy.stop()
        ctx.term()


def test_delete_queue_succeeds_when_its_first_attempt_deleted_the_queue_but_got_no_reply(
        hosts: HostFactory, tmp_path: Path) -> None:
    name = f"gone-{hosts.uid}"
    h1, h2 = _two_hosts(hosts)
    with zmqueue.connect(hosts.agent.http_addr, request_timeout=5) as admin:
        admin.create_queue(name, replication_factor=2)
    _delete_through_a_lost_reply(h1, h2, tmp_path, name)  # QueueNotFound before the fix
    with zmqueue.connect(hosts.agent.http_addr, request_timeout=5) as admin:
        assert name not in admin.list_queues()
        with pytest.raises(QueueNotFound):  # another request: the tombstone is not its own
            admin.delete_queue(name)


def test_delete_queue_of_no_queue_is_queue_not_found_also_after_an_unanswered_attempt(
        hosts: HostFactory, tmp_path: Path) -> None:
    """(A client that took any unanswered attempt as "may have deleted it"
    returned normally for a queue that never existed, whenever a dead or
    frozen host was still listed: the retry's answer is trusted only if the
    tombstone names this very request.)"""
    h1, h2 = _two_hosts(hosts)
    with pytest.raises(QueueNotFound):
        _delete_through_a_lost_reply(h1, h2, tmp_path, f"never-{hosts.uid}")
