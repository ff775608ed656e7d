"""Small helpers shared by integration tests."""

from __future__ import annotations

from typing import Any

import consul

from zmqueue.localcluster import ConsulAgent


def consul_for(agent: ConsulAgent) -> consul.Consul:
    host, _, port = agent.http_addr.rpartition(":")
    return consul.Consul(host=host, port=int(port), connections_timeout=5)


def service_entry(agent: ConsulAgent, node: str) -> dict[str, Any] | None:
    _, entries = consul_for(agent).health.service("zmqueue")
    for e in entries:
        if e["Service"]["ID"] == f"zmqueue-{node}":
            return dict(e)
    return None


def check_statuses(agent: ConsulAgent, node: str) -> dict[str, str]:
    entry = service_entry(agent, node)
    if entry is None:
        return {}
    return {c["CheckID"]: c["Status"] for c in entry["Checks"] if c.get("ServiceID")}
