"""A host's health from its Consul checks: advisory checks (``kv:``,
``disk:``) are reported apart and never make a host unhealthy."""

from __future__ import annotations

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
