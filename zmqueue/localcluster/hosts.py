"""Host processes and a whole local cluster (Consul + hosts) on 127.0.0.1."""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from pathlib import Path

from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.controlplane.discovery import HostInfo, list_hosts
from zmqueue.errors import ConfigError, ConsulUnavailable, NotConsul, StartupError
from zmqueue.localcluster.consul_agent import ConsulAgent, has_leader
from zmqueue.localcluster.proc import ManagedProcess


def exit_status(status: int) -> str:
    """A child's exit status as said to people: ``status 1``, ``status -9, SIGKILL``."""
    if status < 0:
        with contextlib.suppress(ValueError):
            return f"status {status}, {signal.Signals(-status).name}"
    return f"status {status}"


class HostProcess:
    """One ``zmqueue host`` child process, stopped by pid."""

    def __init__(self, cluster: str, node: str, data_dir: Path, consul: str,
                 log_dir: Path, extra_args: list[str] | None = None) -> None:
        self.cluster = cluster
        self.node = node
        self.data_dir = Path(data_dir)
        self.consul = consul
        self.extra_args = extra_args or []
        argv = [sys.executable, "-m", "zmqueue", "host", "--cluster", cluster, "--node", node,
                "--data-dir", str(self.data_dir), "--consul", consul, *self.extra_args]
        self.proc = ManagedProcess(argv, Path(log_dir) / f"host-{node}.log")
        self.ended_by_caller = False
        """Set by ``kill9`` and ``stop``: a host that exited without either died."""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def start(self) -> HostProcess:
        self.proc.start()
        return self

    def alive(self) -> bool:
        return self.proc.alive()

    def kill9(self) -> None:
        self.ended_by_caller = True
        self.proc.kill9()

    def freeze(self) -> None:
        self.proc.signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.proc.signal(signal.SIGCONT)

    def stop(self) -> int | None:
        if self.alive():
            self.ended_by_caller = True
        return self.proc.stop()

    def begin_stop(self) -> None:
        """SIGTERM without waiting (``stop`` then waits): a cluster asks every
        host to stop at once."""
        if self.alive():
            self.ended_by_caller = True
            self.proc.signal(signal.SIGCONT)
            self.proc.signal(signal.SIGTERM)

    def died(self) -> bool:
        """Whether the process had exited by itself (not by ``kill9``, nor by
        the ``stop`` that found it running) when it was stopped."""
        return self.proc.found_exited is not None and not self.ended_by_caller

    def ending(self) -> str:
        """How the process ended, as ``stop`` found it: already exited (killed,
        or died: its exit status, e.g. -11 = SIGSEGV), or running until then."""
        status = self.proc.found_exited
        if status is None:
            return "running until stopped"
        return f"had exited: {exit_status(status)}"

    def exited(self) -> int | None:
        """The exit status if the process has ended (reaped, so no ``<defunct>``
        stays behind), else None."""
        return None if self.proc.proc is None else self.proc.proc.poll()

    def log_tail(self, max_bytes: int = 6000) -> str:
        return self.proc.log_tail(max_bytes)


class LocalCluster:
    """A Consul dev agent (unless an address is given) and C clusters of H hosts."""

    def __init__(self, work_dir: Path, hosts: int = 3, clusters: int = 1,
                 consul: str | None = None, host_args: list[str] | None = None,
                 secure: bool = False) -> None:
        if hosts < 1 or clusters < 1:
            raise ConfigError(f"a local cluster needs at least 1 cluster of 1 host, got {clusters} "
                              f"cluster(s) of {hosts} host(s)", field="hosts")
        self.work_dir = Path(work_dir)
        self.n_hosts = hosts
        self.n_clusters = clusters
        self.host_args = host_args or []
        self.agent: ConsulAgent | None = None
        self.consul_addr = consul
        self.hosts: list[HostProcess] = []
        self._exit_seen: set[str] = set()  # (nodes newly_exited named)
        self.secure = secure
        """Run secured (docs/SECURITY.md): CURVE keys for every host and a
        client ``admin`` generated in ``<work dir>/keys`` and registered in
        Consul KV; encrypted queues find their keys in ``<work dir>/atrest``."""

    @property
    def keys_dir(self) -> Path:
        return self.work_dir / "keys"

    @property
    def client_secret_file(self) -> Path | None:
        """The ``admin`` client's key pair (``zmqueue.connect(curve_secret_file=...)``)."""
        return self.keys_dir / "admin.key_secret" if self.secure else None

    def _register(self, name: str, role: str) -> Path:
        from zmqueue.controlplane import keyring
        from zmqueue.security import curve

        secret = self.keys_dir / f"{name}.key_secret"
        if not secret.exists():
            curve.generate(self.keys_dir, name)
        keyring.register_key(self.consul_client(), keyring.GLOBAL, name,
                             curve.load_public(secret).decode(), role)
        return secret

    @property
    def ui_url(self) -> str:
        return f"http://{self.consul_addr}/ui/"

    def start(self, timeout_s: float = 30.0) -> LocalCluster:
        if any(h.alive() for h in self.hosts):
            raise StartupError("this LocalCluster is started already (its hosts would be started "
                               "twice): stop() it first")
        self.hosts = []  # (stopped ones: started again from their data directories)
        self._exit_seen = set()
        try:
            if self.consul_addr is None:
                self.agent = ConsulAgent(self.work_dir / "consul").start()
                self.consul_addr = self.agent.http_addr
            elif not has_leader(self.consul_addr):
                self._check_is_consul()
                raise StartupError(f"no Consul answers at {self.consul_addr}; start one or omit "
                                   "--consul to let zmqueue start a dev agent")
            if self.secure:
                self._register("admin", "client")
            for c in range(self.n_clusters):
                for h in range(self.n_hosts):
                    self.add_host(f"c{c + 1}", f"c{c + 1}-h{h + 1}")
            self.wait_passing(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def add_host(self, cluster: str, node: str) -> HostProcess:
        assert self.consul_addr is not None
        args = list(self.host_args)
        if self.secure:
            args += ["--curve-secret", str(self._register(node, "host")),
                     "--key-dir", str(self.work_dir / "atrest")]
        hp = HostProcess(cluster, node, self.work_dir / "data" / node, self.consul_addr,
                         self.work_dir / "logs", args)
        self.hosts.append(hp.start())
        return hp

    def host(self, node: str) -> HostProcess:
        return next(h for h in self.hosts if h.node == node)

    def restart_host(self, node: str) -> HostProcess:
        """Start a host that was stopped or killed again, from its data directory."""
        old = self.host(node)
        if old.alive():
            raise StartupError(f"host {node} is still running (pid {old.pid}); stop it first")
        self.hosts.remove(old)
        self._exit_seen.discard(node)
        return self.add_host(old.cluster, node)

    def _check_is_consul(self) -> None:
        """StartupError when another HTTP server answers at ``--consul``."""
        try:
            list_hosts(self.consul_client())
        except NotConsul as exc:
            raise StartupError(str(exc)) from None
        except ConsulUnavailable:
            pass

    def consul_client(self) -> ConsulClient:
        assert self.consul_addr is not None
        return ConsulClient([self.consul_addr], timeout_s=2.0)

    def status(self) -> list[HostInfo]:
        return list_hosts(self.consul_client())

    def wait_passing(self, timeout_s: float = 30.0, nodes: list[str] | None = None) -> None:
        want = set(nodes or [h.node for h in self.hosts if h.alive()])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for h in self.hosts:
                if h.node in want and not h.alive():
                    raise StartupError(f"host {h.node} exited during start-up:\n{h.log_tail()}")
            passing = {i.node for i in self.status() if i.passing}
            if want <= passing:
                return
            time.sleep(0.1)
        raise StartupError(f"hosts {sorted(want)} not passing in Consul after {timeout_s} s")

    def newly_exited(self) -> list[tuple[HostProcess, int]]:
        """Hosts that have exited since the last call, with their exit status
        (each reaped and named once): ``zmqueue up`` says so, and does not
        start them again."""
        out = []
        for h in self.hosts:
            status = None if h.node in self._exit_seen else h.exited()
            if status is not None:
                self._exit_seen.add(h.node)
                out.append((h, status))
        return out

    def stop(self) -> None:
        """Every host asked to stop at once, then each waited for (up to 10 s
        before SIGKILL): one after another, slow clean stops on a loaded
        machine added up."""
        for h in self.hosts:
            h.begin_stop()
        for h in self.hosts:
            h.stop()
        if self.agent is not None:
            self.agent.stop()

    def __enter__(self) -> LocalCluster:
        """Starts the cluster, unless ``start()`` already did (``with
        LocalCluster(...).start() as lc``: the block then owns it and stops
        it at the end; raising here leaked every process it had started)."""
        if any(h.alive() for h in self.hosts):
            return self
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
