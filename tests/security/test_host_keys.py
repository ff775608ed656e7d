"""A host's own CURVE key must be registered as that host before it starts,
and stay so while it runs (real host processes and a real Consul).

Found by QA in the forty-sixth session: a host started with a key nobody had
registered passed its checks, logged nothing, was placed as a replica and
elected writer, while every other host refused its connections (its replica
copies stayed empty). It now refuses to start, saying which command
registers the key; and a host whose key is revoked or replaced while it runs
fails its health check, saying why, until the key is registered again."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses
from tests.security.harness import host_info
from zmqueue.controlplane import keyring
from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.localcluster import ConsulAgent, HostProcess
from zmqueue.security import curve


def refused_start(factory: HostFactory, node: str, secret: Path) -> str:
    """Start ``zmqueue host`` with ``secret``; its log once it exited (status 1)."""
    hp = HostProcess(factory.cluster_name(), node, factory.base / "data" / node,
                     factory.agent.http_addr, factory.base / "logs", ["--curve-secret", str(secret)])
    hp.start()
    try:
        status = hp.proc.proc.wait(timeout=60) if hp.proc.proc is not None else None
    finally:
        hp.stop()
    assert status == 1, f"the host did not refuse to start (status {status}): {hp.log_tail()}"
    return hp.log_tail()


def health(hp: HostProcess) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(host_info(hp)["http_endpoint"] + "/health", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_host_whose_key_is_not_registered_as_its_own_does_not_start(
        hosts: HostFactory, consul_agent: ConsulAgent, tmp_path: Path) -> None:
    consul = ConsulClient([consul_agent.http_addr], timeout_s=3.0)
    node = f"h4-{hosts.uid}"
    pub, sec = curve.generate(tmp_path / "keys", node)
    public = curve.load_public(pub).decode()

    log = refused_start(hosts, node, sec)  # never registered
    assert f"zmqueue host: error: this host's CURVE public key {public}" in log
    assert f"is not registered for cluster {hosts.cluster_name()} as host {node!r}" in log
    assert f"zmqueue keys register --public {pub} --role host --name {node}" in log
    assert "Traceback" not in log
    assert check_statuses(consul_agent, node) == {}  # never registered in Consul either

    keyring.register_key(consul, keyring.GLOBAL, f"not-{node}", public, "host")  # under another name
    log = refused_start(hosts, node, sec)
    assert f"is registered as host 'not-{node}', not as host {node!r}" in log
    assert f"zmqueue keys revoke --name not-{node}" in log
    keyring.revoke_key(consul, keyring.GLOBAL, f"not-{node}")

    _, other = curve.generate(tmp_path / "other", node)  # its name holds another key
    keyring.register_key(consul, keyring.GLOBAL, node, public, "host")
    log = refused_start(hosts, node, other)
    assert f"(the key registered as {node!r} is another one: registering this one replaces it)" in log

    h = hosts.start("h4", extra_args=["--curve-secret", str(sec)])  # registered as itself: starts
    wait_for(lambda: all_passing(check_statuses(consul_agent, h.node)), 60, "h4 passing")


def test_a_host_whose_key_is_revoked_while_it_runs_fails_its_checks_until_it_is_back(
        hosts: HostFactory, consul_agent: ConsulAgent, tmp_path: Path) -> None:
    consul = ConsulClient([consul_agent.http_addr], timeout_s=3.0)
    node = f"h5-{hosts.uid}"
    pub, sec = curve.generate(tmp_path, node)
    public = curve.load_public(pub).decode()
    keyring.register_key(consul, keyring.GLOBAL, node, public, "host")
    h = hosts.start("h5", extra_args=["--curve-secret", str(sec)])
    wait_for(lambda: all_passing(check_statuses(consul_agent, h.node)), 60, "h5 passing")
    assert health(h) == (200, "ok\n")

    keyring.revoke_key(consul, keyring.GLOBAL, node)
    _, text = wait_for(lambda: (r := health(h))[0] == 503 and r, 15, "h5's /health failing")
    assert f"is not registered for cluster {hosts.cluster_name()} as host {node!r}" in text
    wait_for(lambda: "critical" in check_statuses(consul_agent, h.node).values(), 30, "h5's checks failing")
    assert "until then this host fails its health check" in h.log_tail()

    keyring.register_key(consul, keyring.GLOBAL, node, public, "host")
    wait_for(lambda: all_passing(check_statuses(consul_agent, h.node)), 60, "h5 passing again")
    assert health(h) == (200, "ok\n")
