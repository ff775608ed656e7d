"""An operator moves a partition that holds messages to another cluster by
editing its assignment in Consul KV (OPERATOR_GUIDE, Steering).

Edited to another ``cluster`` alone, the target cluster's manager replaces
the replicas one at a time as the new ones catch up (joint changes), so the
messages move with it, through a kill -9 of an old host too. Edited to new
``replicas`` as well, none of which holds a copy, the new hosts start the
streams empty: the messages stay behind on the old hosts and are no longer
delivered. Until the forty-seventh session nothing said so (no log line;
``stats`` showed an empty queue)."""

from __future__ import annotations

import json

import zmqueue
from tests.conftest import HostFactory, wait_for
from tests.controlplane_integration.conftest import all_passing, assignment, kv_client
from tests.controlplane_integration.test_managers import _drain_all, _send_and_wait_for_positions
from zmqueue.localcluster import ConsulAgent, HostProcess


def _two_clusters(hosts: HostFactory, agent: ConsulAgent, per_cluster: int) -> dict[str, list[HostProcess]]:
    started = {hosts.cluster_name(c): [hosts.start(f"{c}{i}", cluster=c) for i in range(per_cluster)]
               for c in ("ca", "cb")}
    for hs in started.values():
        for h in hs:
            wait_for(lambda: all_passing(agent, h.node), 60, f"{h.node} passing")  # noqa: B023
    return started


def test_a_partition_moved_by_editing_only_its_cluster_keeps_its_messages(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    addr = consul_agent.http_addr
    clusters = _two_clusters(hosts, consul_agent, 2)
    with zmqueue.connect(addr, request_timeout=10) as client:
        q = client.create_queue(f"move-{hosts.uid}", replication_factor=2, visibility_timeout=600)
        ids = _send_and_wait_for_positions(addr, q, 30, fifo=False, copies=2)
        kv = kv_client(addr).kv
        key = f"zmqueue/queues/{q.name}/partitions/0"
        _, item = kv.get(key)
        old = json.loads(item["Value"])
        [target] = [c for c in clusters if c != old["cluster"]]
        assert kv.put(key, json.dumps({**old, "cluster": target}), cas=item["ModifyIndex"])
        new_nodes = {h.node for h in clusters[target]}

        def moved() -> bool:
            a = assignment(addr, q.name) or {}
            ids.add(q.send(b"during"))  # (traffic goes on while the replicas move)
            return (set(a.get("replicas", ())) == new_nodes
                    and not (a.get("joining") or a.get("leaving") or a.get("previous")))

        wait_for(moved, 60, "the replicas on the target cluster, the change confirmed", interval_s=0.2)
        clusters[old["cluster"]][0].kill9()  # (the old hosts no longer hold anything needed)
        _drain_all(q, ids, 40)
        assert q.stats()["total"] == 0


def test_a_partition_moved_to_new_replicas_says_that_its_messages_stay_behind(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    addr = consul_agent.http_addr
    clusters = _two_clusters(hosts, consul_agent, 1)
    with zmqueue.connect(addr, request_timeout=10) as client:
        q = client.create_queue(f"moven-{hosts.uid}", visibility_timeout=600)
        _send_and_wait_for_positions(addr, q, 7, fifo=False, copies=1)
        kv = kv_client(addr).kv
        key = f"zmqueue/queues/{q.name}/partitions/0"
        _, item = kv.get(key)
        old = json.loads(item["Value"])
        [target] = [c for c in clusters if c != old["cluster"]]
        [old_host], [new_host] = clusters[old["cluster"]], clusters[target]
        assert kv.put(key, json.dumps({"cluster": target, "replicas": [new_host.node],
                                       "version": old["version"] + 1}), cas=item["ModifyIndex"])
        said = wait_for(lambda: [line for line in old_host.log_tail(20000).splitlines()
                                 if "WARNING" in line and "not carried over" in line], 20,
                        "the old host's warning that the messages stay behind")
        assert f"partition {q.name}/0" in said[0] and "7 messages" in said[0], said
        assert f"[{new_host.node!r}]" in said[0], said
