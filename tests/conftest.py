"""The test harness: a real Consul agent per pytest-xdist worker, and real
host processes started and stopped by pid.

Every test gets its own cluster names (``uid``) so tests sharing a worker's
agent never see each other; teardown deregisters every zmqueue service and
wipes the ``zmqueue/`` KV prefix. A failing test prints the log tails of the
processes it started.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest

from zmqueue.localcluster import ConsulAgent, HostProcess, find_consul_binary
from zmqueue.localcluster.consul_agent import INSTALL_HINT


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{rep.when}", rep)


def _failed(request: pytest.FixtureRequest) -> bool:
    rep = getattr(request.node, "rep_call", None)
    return rep is None or rep.failed


@contextlib.contextmanager
def running_agent(work_dir: Path) -> Iterator[ConsulAgent]:
    """A real Consul dev agent on free ports, stopped by pid afterwards; a
    missing binary fails the test with the install command (never skips)."""
    try:
        binary = find_consul_binary()
    except FileNotFoundError:
        pytest.fail(f"Consul is not installed: {INSTALL_HINT}", pytrace=False)
    agent = ConsulAgent(work_dir, binary=binary)
    agent.start()
    try:
        yield agent
    finally:
        agent.stop()


@pytest.fixture(scope="session")
def consul_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsulAgent]:
    with running_agent(tmp_path_factory.mktemp("consul")) as agent:
        yield agent


def wait_for(cond: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.05) -> Any:
    """Poll ``cond`` until it returns something truthy, or fail after the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


class HostFactory:
    """Starts host processes for one test; stops them all by pid at teardown."""

    def __init__(self, agent: ConsulAgent, base: Path) -> None:
        self.agent = agent
        self.base = base
        self.uid = uuid.uuid4().hex[:8]
        self.hosts: list[HostProcess] = []

    def cluster_name(self, name: str = "c1") -> str:
        return f"{name}-{self.uid}"

    def start(self, node: str, cluster: str = "c1", extra_args: list[str] | None = None,
              data_dir: Path | None = None, consul: str | None = None) -> HostProcess:
        """``consul``: the address the host uses (default: the agent's)."""
        hp = HostProcess(self.cluster_name(cluster), f"{node}-{self.uid}",
                         data_dir or self.base / "data" / node, consul or self.agent.http_addr,
                         self.base / "logs", extra_args)
        self.hosts.append(hp.start())
        return hp

    def restart(self, old: HostProcess) -> HostProcess:
        hp = HostProcess(old.cluster, old.node, old.data_dir, old.consul, self.base / "logs",
                         old.extra_args)
        self.hosts.append(hp.start())
        return hp

    def stop_all(self) -> None:
        for h in self.hosts:
            h.stop()

    def check_none_died(self) -> None:
        """Fail if a host exited by itself during the test (a crash: a host
        must survive anything a test sends it; kills and stops are the test's)."""
        dead = [h for h in self.hosts if h.died()]
        if dead:
            pytest.fail("hosts died during the test (a host must never crash): " + ", ".join(
                f"{h.node} ({h.ending()}): {h.log_tail(1500)}" for h in dead), pytrace=False)

    def logs(self) -> str:
        """Every host's log tail, headed by its pid and how it ended (a host
        that died during the test shows its exit status, e.g. -11 = SIGSEGV)."""
        return "\n".join(f"----- {h.node} (pid {h.proc.proc.pid if h.proc.proc else '-'}, "
                         f"{h.ending()}) -----\n{h.log_tail()}" for h in self.hosts)


def _wipe_consul(agent: ConsulAgent) -> None:
    import consul

    host, _, port = agent.http_addr.rpartition(":")
    c = consul.Consul(host=host, port=int(port), connections_timeout=5)
    for sid, svc in c.agent.services().items():
        if svc.get("Service") == "zmqueue":
            c.agent.service.deregister(sid)
    c.kv.delete("zmqueue/", recurse=True)
    c.kv.delete("zmqueue-positions/", recurse=True)


@pytest.fixture
def hosts(consul_agent: ConsulAgent, tmp_path: Path,
          request: pytest.FixtureRequest) -> Iterator[HostFactory]:
    factory = HostFactory(consul_agent, tmp_path)
    try:
        yield factory
    finally:
        factory.stop_all()
        if _failed(request):
            print(factory.logs())
        _wipe_consul(consul_agent)
    factory.check_none_died()


def all_passing(statuses: dict[str, str]) -> bool:
    return bool(statuses) and all(s == "passing" for s in statuses.values())


class QueueCluster:
    """A small cluster of real hosts shared by one test module, and a client."""

    def __init__(self, agent: ConsulAgent, base: Path, n_hosts: int) -> None:
        self.factory = HostFactory(agent, base)
        self.n_hosts = n_hosts
        self.client: Any = None

    def start(self) -> QueueCluster:
        import zmqueue
        from tests.helpers import check_statuses

        for i in range(self.n_hosts):
            self.factory.start(f"h{i + 1}")
        agent = self.factory.agent
        for h in self.factory.hosts:
            node = h.node
            wait_for(lambda: all_passing(check_statuses(agent, node)), 60, f"{node} passing")  # noqa: B023
        self.client = zmqueue.connect(self.factory.agent.http_addr, request_timeout=10)
        return self

    def queue_name(self, base: str = "q") -> str:
        return f"{base}-{uuid.uuid4().hex[:10]}"

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
        self.factory.stop_all()


class Cluster(Protocol):
    factory: HostFactory

    def start(self) -> Any: ...

    def stop(self) -> None: ...


C = TypeVar("C", bound=Cluster)


@contextlib.contextmanager
def started(cluster: C) -> Iterator[C]:
    """``cluster`` started for a module's tests; its hosts' logs printed if
    anything fails, and every process stopped by pid at the end."""
    try:
        cluster.start()
        yield cluster
    except BaseException:
        print(cluster.factory.logs())
        raise
    finally:
        cluster.stop()
    cluster.factory.check_none_died()


@pytest.fixture(scope="module")
def qcluster(consul_agent: ConsulAgent, tmp_path_factory: pytest.TempPathFactory) -> Iterator[QueueCluster]:
    """Two hosts and a client, shared by the tests of one module."""
    try:
        with started(QueueCluster(consul_agent, tmp_path_factory.mktemp("qcluster"), 2)) as qc:
            yield qc
    finally:
        _wipe_consul(consul_agent)
