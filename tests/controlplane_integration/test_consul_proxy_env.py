"""Consul calls go straight to the agent: an HTTP proxy in the environment
(``HTTP_PROXY``, common on build machines) does not reroute them, and
requests does not re-read the proxy settings on every call."""

from __future__ import annotations

import socket

import pytest

from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.localcluster import ConsulAgent


def test_an_http_proxy_in_the_environment_does_not_reroute_consul_calls(
        consul_agent: ConsulAgent, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # a port nothing listens on: a proxy that refuses every call
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{dead}")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    cc = ConsulClient([consul_agent.http_addr], timeout_s=2.0)
    cc.call(lambda c: c.kv.put("zmqueue-test/proxy-env", "through"))
    _, item = cc.call(lambda c: c.kv.get("zmqueue-test/proxy-env"))
    assert item is not None and item["Value"] == b"through"
