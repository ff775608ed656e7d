"""Read-only discovery of hosts from Consul's catalog and health checks, and
of the drain flags operators set on them in KV."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.controlplane.registry import SERVICE_NAME


@dataclass(frozen=True)
class HostInfo:
    node: str
    cluster: str
    version: str
    client_endpoint: str
    status: str
    """Worst status of the host's health checks (heartbeat, HTTP probe, the
    agent's serfHealth): ``passing`` | ``warning`` | ``critical``."""
    meta: dict[str, str] = field(default_factory=dict)
    kv_status: str = "passing"
    """Status of the ``kv:`` check: ``warning`` while the host sees bad values
    in Consul KV. It says nothing about the host's own health, so it is kept
    out of :attr:`status`."""
    disk_status: str = "passing"
    """Status of the ``disk:`` check: ``warning`` while the host's data disk
    is below its reserve (it refuses new messages, serves the rest). Kept out
    of :attr:`status` too: consumers must go on reaching the host to drain."""

    @property
    def passing(self) -> bool:
        return self.status == "passing"


_RANK = {"passing": 0, "warning": 1, "critical": 2}


KV_CHECK_PREFIX = "kv:"
"""Check ids starting with this report bad KV values, not host health."""
DISK_CHECK_PREFIX = "disk:"
"""Check ids starting with this report a data disk below the reserve, not host health."""
ADVISORY_CHECK_PREFIXES = (KV_CHECK_PREFIX, DISK_CHECK_PREFIX)
"""Advisory checks (zmqueue.controlplane.advisory): never part of a host's health."""


def _worst(checks: list[dict[str, Any]], service_id: str, advisory: str | None = None) -> str:
    """The worst status of the host's health checks, or (``advisory``, a
    prefix) of its advisory checks with that prefix."""
    worst = "passing"
    for chk in checks:
        if chk.get("ServiceID") not in (service_id, "") and chk.get("CheckID") != "serfHealth":
            continue
        check_id = str(chk.get("CheckID", ""))
        if advisory is not None:
            if not check_id.startswith(advisory):
                continue
        elif check_id.startswith(ADVISORY_CHECK_PREFIXES):
            continue
        status = str(chk.get("Status", "critical"))
        if _RANK.get(status, 2) > _RANK[worst]:
            worst = status if status in _RANK else "critical"
    return worst


def list_hosts(client: ConsulClient, cluster: str | None = None) -> list[HostInfo]:
    """Every registered zmqueue host with its worst check status.

    A host registered on two Consul agents (it failed over from a dead one) is
    listed once, with its healthiest registration."""
    _, entries = client.call(lambda c: c.health.service(SERVICE_NAME))
    best: dict[str, HostInfo] = {}
    for entry in entries:
        svc = entry.get("Service") or {}
        meta = {str(k): str(v) for k, v in (svc.get("Meta") or {}).items()}
        info = HostInfo(
            node=meta.get("node", svc.get("ID", "?")), cluster=meta.get("cluster", "?"),
            version=meta.get("version", "?"), client_endpoint=meta.get("client_endpoint", ""),
            status=_worst(entry.get("Checks") or [], str(svc.get("ID", ""))), meta=meta,
            kv_status=_worst(entry.get("Checks") or [], str(svc.get("ID", "")), KV_CHECK_PREFIX),
            disk_status=_worst(entry.get("Checks") or [], str(svc.get("ID", "")), DISK_CHECK_PREFIX),
        )
        if cluster is not None and info.cluster != cluster:
            continue
        old = best.get(info.node)
        if old is None or _RANK.get(info.status, 2) < _RANK.get(old.status, 2):
            best[info.node] = info
    return sorted(best.values(), key=lambda h: (h.cluster, h.node))


def drain_flags(client: ConsulClient) -> dict[str, bool]:
    """node -> its drain flag (``zmqueue/hosts/<node>/drain``), for every node
    that has one, registered or not: one recursive read of ``zmqueue/hosts/``.
    A malformed flag is left out (the hosts keep its last good value and
    report it in their ``kv:`` check)."""
    _, items = client.call(lambda c: c.kv.get(f"{kv.PREFIX}hosts/", recurse=True))
    return kv.parse_tree(items)[0].drains


def partitions_listing(state: kv.ClusterState, nodes: Iterable[str]) -> dict[str, int]:
    """node -> how many partitions of existing queues still list it among their
    replicas (a leaving replica of a change in flight included: it holds its
    copy until the change is confirmed), for each of ``nodes``."""
    counts = dict.fromkeys(nodes, 0)
    for pid, a in state.assignments.items():
        if pid.queue not in state.configs:
            continue  # (a queue being deleted: no manager moves its partitions)
        for node in a.replicas:
            if node in counts:
                counts[node] += 1
    return counts
