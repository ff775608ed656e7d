"""A host's health from its Consul checks: advisory checks (``kv:``,
``disk:``) are reported apart and never make a host unhealthy."""

from __future__ import annotations

import io
from typing import Any

from zmqueue.controlplane.discovery import DISK_CHECK_PREFIX, KV_CHECK_PREFIX, _worst

SID = "zmqueue-h1"


def checks(**statuses: str) -> list[dict[str, Any]]:
    ids = {"ttl": f"service:{SID}", "http": f"http:{SID}", "kv": f"kv:{SID}", "disk": f"disk:{SID}"}
    return [{"CheckID": ids[k], "ServiceID": SID, "Status": v} for k, v in statuses.items()]


def test_advisory_checks_stay_out_of_health_and_are_reported_apart() -> None:
    both_warn = checks(ttl="passing", http="passing", kv="warning", disk="warning")
    assert _worst(both_warn, SID) == "passing"
    assert _worst(both_warn, SID, KV_CHECK_PREFIX) == "warning"
    assert _worst(both_warn, SID, DISK_CHECK_PREFIX) == "warning"
    disk_only = checks(ttl="passing", disk="warning")
    assert (_worst(disk_only, SID, KV_CHECK_PREFIX), _worst(disk_only, SID, DISK_CHECK_PREFIX)) == (
        "passing", "warning")
    assert _worst(checks(ttl="critical", disk="passing"), SID) == "critical"
    serf = [{"CheckID": "serfHealth", "ServiceID": "", "Status": "critical"}]
    assert _worst(checks(ttl="passing") + serf, SID) == "critical"
    other = [{"CheckID": "service:zmqueue-h2", "ServiceID": "zmqueue-h2", "Status": "critical"}]
    assert _worst(checks(ttl="passing") + other, SID) == "passing"


def test_the_hosts_table_names_a_host_s_advisory_warnings() -> None:
    from rich.console import Console

    from zmqueue.cli.common import hosts_table
    from zmqueue.controlplane.discovery import HostInfo

    hosts = [HostInfo(node="h1", cluster="c1", version="1", client_endpoint="tcp://a",
                      status="passing", disk_status="warning"),
             HostInfo(node="h2", cluster="c1", version="1", client_endpoint="tcp://b", status="passing")]
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(hosts_table(hosts))
    text = console.export_text()
    rows = {node: [line for line in text.splitlines() if f" {node} " in line] for node in ("h1", "h2")}
    assert "passing (disk below reserve)" in rows["h1"][0] and "(" not in rows["h2"][0]
