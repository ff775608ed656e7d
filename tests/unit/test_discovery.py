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


def test_drain_notes_count_the_partitions_left_down_to_drained() -> None:
    from zmqueue.cli.common import drain_note, stale_drains_note

    assert drain_note(3) == "draining, 3 partitions left"
    assert drain_note(1) == "draining, 1 partition left"
    assert drain_note(0) == "drained (0 partitions left)"
    assert stale_drains_note([]) is None
    note = stale_drains_note({"n9", "n10"})
    assert note is not None and note.startswith(
        "note: drain flag set for nodes not registered in Consul: n10, n9 ")


def test_the_hosts_table_shows_draining_hosts_and_leaves_the_other_rows_as_they_were() -> None:
    from rich.console import Console

    from zmqueue.cli.common import hosts_table
    from zmqueue.controlplane.discovery import HostInfo

    hosts = [HostInfo(node="h1", cluster="c1", version="1", client_endpoint="tcp://a", status="critical"),
             HostInfo(node="h2", cluster="c1", version="1", client_endpoint="tcp://b", status="passing"),
             HostInfo(node="h3", cluster="c1", version="1", client_endpoint="tcp://c", status="passing")]

    def rows(draining: dict[str, int] | None) -> dict[str, str]:
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(hosts_table(hosts, draining))
        lines = console.export_text().splitlines()
        return {h.node: next(line for line in lines if f" {h.node} " in line) for h in hosts}

    before, during = rows(None), rows({"h1": 2, "h3": 0})
    assert "critical; draining, 2 partitions left" in during["h1"]
    assert "passing; drained (0 partitions left)" in during["h3"]
    assert [cell.strip() for cell in during["h2"].split("│")] == \
        [cell.strip() for cell in before["h2"].split("│")], "a host not draining keeps its row"
    assert rows({}) == before
    narrow = Console(width=80, record=True, file=io.StringIO())  # (as when piped)
    long = [HostInfo(node=f"n{i}-5e1f0c2a", cluster="c1-5e1f0c2a", version="0.1.0",
                     client_endpoint=f"tcp://127.0.0.1:4567{i}", status="passing") for i in (1, 2)]
    narrow.print(hosts_table(long, {"n1-5e1f0c2a": 12}))
    text = narrow.export_text()
    assert all(h.client_endpoint in text for h in long), "only the health notes wrap, never an endpoint"


def test_partitions_listing_counts_the_partitions_of_existing_queues_that_list_a_node() -> None:
    from zmqueue.config import QueueConfig
    from zmqueue.controlplane import kvlayout as kv
    from zmqueue.controlplane.discovery import partitions_listing

    pa = kv.PartitionAssignment
    state = kv.ClusterState(
        configs={"q": QueueConfig(name="q", partitions=3)},
        assignments={kv.PartitionId("q", 0): pa("c1", ("a", "b")),
                     # a change in flight: b leaves, but holds its copy until it is confirmed
                     kv.PartitionId("q", 1): pa("c1", ("a", "c", "b"), joining=("c",), leaving=("b",),
                                                previous=("a", "b")),
                     kv.PartitionId("q", 2): pa("c1", ("a", "c")),
                     kv.PartitionId("gone", 0): pa("c1", ("b",))})  # (no config: a deleted queue)
    assert partitions_listing(state, ["a", "b", "d"]) == {"a": 3, "b": 2, "d": 0}
