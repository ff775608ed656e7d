"""A secured cluster for the front-door tests: CURVE keys generated and
registered in Consul KV, hosts started with --curve-secret and --key-dir,
clients per identity, a TCP relay that records what crosses the wire."""

from __future__ import annotations

import json
import socket
import threading
import urllib.request
from pathlib import Path
from typing import Any

import zmqueue
from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses
from zmqueue.controlplane import keyring
from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.localcluster import ConsulAgent, HostProcess
from zmqueue.security import atrest, curve


class SecureCluster:
    def __init__(self, agent: ConsulAgent, base: Path, n_hosts: int = 2,
                 clients: tuple[str, ...] = ("alice", "bob")) -> None:
        self.factory = HostFactory(agent, base)
        self.agent = agent
        self.keys = base / "keys"
        self.key_dir = base / "atrest-keys"
        self.n_hosts = n_hosts
        self.client_names = clients
        self.clients: dict[str, Any] = {}
        self.consul = ConsulClient([agent.http_addr], timeout_s=3.0)

    def register(self, name: str, role: str) -> Path:
        pub, sec = curve.generate(self.keys, name)
        keyring.register_key(self.consul, keyring.GLOBAL, name, curve.load_public(pub).decode(), role)
        return sec

    def start(self) -> SecureCluster:
        for name in self.client_names:  # before the hosts start: they load keys at start-up
            self.register(name, "client")
        for i in range(self.n_hosts):
            node = f"h{i + 1}-{self.factory.uid}"
            sec = self.register(node, "host")
            self.factory.start(f"h{i + 1}", extra_args=[
                "--curve-secret", str(sec), "--key-dir", str(self.key_dir), "--usage-flush-ms", "300"])
        for h in self.factory.hosts:
            wait_for(lambda: all_passing(check_statuses(self.agent, h.node)), 20,  # noqa: B023
                     f"{h.node} passing")
        for name in self.client_names:
            self.clients[name] = self.connect(name)
        return self

    def connect(self, name: str, **kw: Any) -> Any:
        sec = self.keys / f"{name}.key_secret"
        if not sec.exists():
            sec = self.register(name, "client")
        return zmqueue.connect(self.agent.http_addr, request_timeout=5,
                               curve_secret_file=str(sec), **kw)

    def data_key(self, queue: str) -> None:
        atrest.add_key(self.key_dir, queue)

    @property
    def hosts(self) -> list[HostProcess]:
        return self.factory.hosts

    def stop(self) -> None:
        for c in self.clients.values():
            c.close()
        self.factory.stop_all()


def host_info(h: HostProcess) -> dict[str, Any]:
    return dict(json.loads((h.data_dir / "host.json").read_text()))


def scrape(h: HostProcess) -> str:
    with urllib.request.urlopen(host_info(h)["http_endpoint"] + "/metrics", timeout=5) as r:
        return str(r.read().decode())


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text (0 if absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        if key == (f"{name}{{{want}}}" if want else name):
            return float(value)
    return 0.0


class Relay:
    """A TCP relay on 127.0.0.1 that records every byte both ways."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.captured = bytearray()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        self.server.settimeout(0.2)
        while not self.stopping.is_set():
            try:
                a, _ = self.server.accept()
            except (TimeoutError, OSError):
                continue
            b = socket.create_connection(self.target, timeout=5)
            self.socks += [a, b]
            for src, dst in ((a, b), (b, a)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(0.2)
        while not self.stopping.is_set():
            try:
                data = src.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            with self.lock:
                self.captured += data
            try:
                dst.sendall(data)
            except OSError:
                return

    def stop(self) -> None:
        self.stopping.set()
        for s in [self.server, *self.socks]:
            s.close()
