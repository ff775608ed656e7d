"""Fixtures for control-plane integration tests: KV access and waits on
manager locks and assignments (real Consul from tests/conftest.py)."""

from __future__ import annotations

import json
from typing import Any

import consul

from tests.helpers import check_statuses
from zmqueue.localcluster import ConsulAgent


def kv_client(addr: str) -> consul.Consul:
    host, _, port = addr.rpartition(":")
    return consul.Consul(host=host, port=int(port), connections_timeout=5)


def kv_get(addr: str, key: str) -> dict[str, Any] | None:
    _, item = kv_client(addr).kv.get(key)
    return dict(item) if item else None


def lock_holder(addr: str, key: str) -> str | None:
    """Node holding the manager lock at ``key`` (None when free)."""
    item = kv_get(addr, key)
    if not item or not item.get("Session") or not item.get("Value"):
        return None
    return str(json.loads(item["Value"])["node"])


def assignment(addr: str, queue: str, p: int = 0) -> dict[str, Any] | None:
    item = kv_get(addr, f"zmqueue/queues/{queue}/partitions/{p}")
    return json.loads(item["Value"]) if item and item.get("Value") else None


def all_passing(agent: ConsulAgent, node: str) -> bool:
    st = check_statuses(agent, node)
    return bool(st) and all(s == "passing" for s in st.values())
