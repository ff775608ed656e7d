"""Start and stop a real Consul agent (or a 3-server cluster) on free ports.

The binary is Consul 1.8.7 from Debian 11's archive, installed by
``ops/consul/install.sh`` into ``~/.cache/zmqueue``. :func:`find_consul_binary`
looks, in order, at ``ZMQUEUE_CONSUL_BIN``, that cache, and ``PATH``.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from zmqueue.config import from_env
from zmqueue.errors import ConsulUnavailable
from zmqueue.localcluster.ports import free_ports
from zmqueue.localcluster.proc import ManagedProcess

INSTALL_HINT = "run `bash ops/consul/install.sh` (or `make install`) to install Consul 1.8.7"


def find_consul_binary() -> str:
    env = from_env()
    candidates: list[str] = []
    if env["consul_bin"]:
        candidates.append(env["consul_bin"])
    candidates.append(str(Path(env["cache_dir"]) / "consul-1.8.7" / "usr" / "bin" / "consul"))
    on_path = shutil.which("consul")
    if on_path:
        candidates.append(on_path)
    for c in candidates:
        if Path(c).is_file():
            return c
    raise FileNotFoundError(f"the consul binary was not found; {INSTALL_HINT}")


def http_get_json(addr: str, path: str, timeout_s: float = 1.0) -> object:
    with urllib.request.urlopen(f"http://{addr}{path}", timeout=timeout_s) as resp:
        return json.loads(resp.read() or b"null")


def has_leader(addr: str) -> bool:
    try:
        leader = http_get_json(addr, "/v1/status/leader")
    except (OSError, urllib.error.URLError, ValueError):
        return False
    return isinstance(leader, str) and bool(leader)


def wait_for_leader(addr: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if has_leader(addr):
            return
        time.sleep(0.05)
    raise ConsulUnavailable(f"Consul at {addr} has no leader after {timeout_s:.0f} s", address=addr)


@dataclass(frozen=True)
class AgentPorts:
    http: int
    dns: int
    serf_lan: int
    serf_wan: int
    server: int
    grpc: int

    @classmethod
    def free(cls) -> AgentPorts:
        return cls(*free_ports(6))

    def flags(self) -> list[str]:
        return [
            f"-http-port={self.http}", f"-dns-port={self.dns}",
            f"-serf-lan-port={self.serf_lan}", f"-serf-wan-port={self.serf_wan}",
            f"-server-port={self.server}", f"-grpc-port={self.grpc}",
        ]


class ConsulAgent:
    """One ``consul agent -dev -ui`` on 127.0.0.1 and free ports."""

    def __init__(self, work_dir: Path, *, ports: AgentPorts | None = None, binary: str | None = None,
                 node: str = "zmqueue-dev", extra_args: list[str] | None = None) -> None:
        self.work_dir = Path(work_dir)
        self._own_ports = ports is None
        self.ports = ports or AgentPorts.free()
        self.binary = binary or find_consul_binary()
        self.node = node
        self.extra_args = extra_args
        self._proc: ManagedProcess | None = None

    @property
    def http_addr(self) -> str:
        return f"127.0.0.1:{self.ports.http}"

    @property
    def ui_url(self) -> str:
        return f"http://{self.http_addr}/ui/"

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def argv(self) -> list[str]:
        if self.extra_args is not None:
            return [self.binary, "agent", *self.extra_args, *self.ports.flags()]
        return [
            self.binary, "agent", "-dev", "-ui", "-bind=127.0.0.1", "-client=127.0.0.1",
            f"-node={self.node}", "-log-level=warn", *self.ports.flags(),
        ]

    def start(self, timeout_s: float = 30.0, wait: bool = True) -> ConsulAgent:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):
            self._proc = ManagedProcess(self.argv(), self.work_dir / f"consul-{self.node}.log")
            self._proc.start()
            if not wait:
                return self
            try:
                self.wait_ready(timeout_s)
                return self
            except ConsulUnavailable:
                lost_race = "address already in use" in self.log_tail()
                if not (lost_race and self._own_ports and attempt < 2):
                    raise
                self.stop()  # another process took a port between our check and its bind
                self.ports = AgentPorts.free()
        return self

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and not self._proc.alive():
                raise ConsulUnavailable(
                    f"consul agent exited early; log:\n{self.log_tail()}", address=self.http_addr)
            if has_leader(self.http_addr):
                return
            time.sleep(0.05)
        raise ConsulUnavailable(f"consul agent at {self.http_addr} has no leader after {timeout_s} s",
                                address=self.http_addr)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.alive()

    def kill9(self) -> None:
        if self._proc is not None:
            self._proc.kill9()

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.stop(timeout_s=10)

    def log_tail(self, max_bytes: int = 6000) -> str:
        return self._proc.log_tail(max_bytes) if self._proc else ""

    def __enter__(self) -> ConsulAgent:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ConsulCluster:
    """Three Consul servers on 127.0.0.1 with distinct ports (see
    ops/consul/cluster/ for the equivalent hand-written configs)."""

    def __init__(self, work_dir: Path, size: int = 3, binary: str | None = None) -> None:
        self.work_dir = Path(work_dir)
        self.ports = [AgentPorts.free() for _ in range(size)]
        binary = binary or find_consul_binary()
        joins = [f"-retry-join=127.0.0.1:{p.serf_lan}" for p in self.ports]
        self.agents = []
        for i, ports in enumerate(self.ports):
            args = [
                "-server", f"-bootstrap-expect={size}", "-ui", "-bind=127.0.0.1",
                "-client=127.0.0.1", f"-node=consul-{i}",
                f"-data-dir={self.work_dir / f'consul-{i}-data'}", "-log-level=warn",
                *[j for k, j in enumerate(joins) if k != i],
            ]
            self.agents.append(ConsulAgent(self.work_dir, ports=ports, binary=binary,
                                           node=f"consul-{i}", extra_args=args))

    @property
    def http_addrs(self) -> list[str]:
        return [a.http_addr for a in self.agents]

    def start(self, timeout_s: float = 60.0) -> ConsulCluster:
        for a in self.agents:
            a.start(wait=False)
        for a in self.agents:
            a.wait_ready(timeout_s)
        return self

    def stop(self) -> None:
        for a in self.agents:
            a.stop()
