"""Partitions added to a queue in Consul KV while a producer and a consumer
run, then a host killed with kill -9 and restarted: every acknowledged send
is received (the new partitions take some), nothing deleted comes back, the
stats end at zero, and no host crashes (the ``hosts`` fixture fails a test
whose host exited by itself). Before the forty-seventh session only a
sending handle's following of the new count was tested."""

from __future__ import annotations

import json
import threading
import time

import pytest

import zmqueue
from tests.conftest import HostFactory, wait_for
from tests.helpers import consul_for
from tests.replication.test_failover import three_hosts
from zmqueue.localcluster import ConsulAgent
from zmqueue.protocol import Receipt

MESSAGES = 400
GROUPS = 5


def _add_partitions(agent: ConsulAgent, queue: str, n: int) -> None:
    kv = consul_for(agent).kv
    _, item = kv.get(f"zmqueue/queues/{queue}/config")
    assert kv.put(item["Key"], json.dumps({**json.loads(item["Value"]), "partitions": n}),
                  cas=item["ModifyIndex"])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fifo", [False, True], ids=["standard", "fifo"])
def test_partitions_added_under_traffic_and_a_host_killed_lose_no_acknowledged_send(
        hosts: HostFactory, consul_agent: ConsulAgent, fifo: bool) -> None:
    hs = three_hosts(hosts, consul_agent)
    name = f"grow-{hosts.uid}" + (".fifo" if fifo else "")
    acked: dict[str, int] = {}
    got: list[tuple[str, int, int]] = []  # (id, number, partition), in the order received
    deleted: set[str] = set()
    again: list[str] = []  # ids received after their delete was acknowledged
    stop = threading.Event()
    with zmqueue.connect(consul_agent.http_addr, request_timeout=10) as client:
        q = client.create_queue(name, fifo=fifo, partitions=2, replication_factor=3, visibility_timeout=10)

        def produce() -> None:
            for i in range(MESSAGES):
                group = f"g{i % GROUPS}" if fifo else None
                acked[q.send(str(i).encode(), group_id=group, dedup_id=f"m{i}" if fifo else None)] = i
                time.sleep(0.005)

        def consume() -> None:
            with zmqueue.connect(consul_agent.http_addr, request_timeout=10) as other:
                cq = other.get_queue(name)
                while not stop.is_set():
                    try:
                        msgs = cq.receive(max_messages=10, wait_time=1)
                        again.extend(m.id for m in msgs if m.id in deleted)
                        got.extend((m.id, int(m.body), Receipt.decode(m.receipt).partition) for m in msgs)
                        if msgs:
                            done = cq.delete_batch(msgs)
                            deleted.update(m.id for m, err in zip(msgs, done, strict=True) if err is None)
                    except zmqueue.ZmqueueError:  # (a host killed under the request: retried)
                        time.sleep(0.05)

        threads = [threading.Thread(target=f, daemon=True) for f in (produce, consume)]
        for t in threads:
            t.start()
        wait_for(lambda: len(acked) >= MESSAGES // 4, 60, "a quarter of the sends acknowledged")
        _add_partitions(consul_agent, name, 4)
        wait_for(lambda: len(acked) >= MESSAGES // 2, 60, "half of the sends acknowledged")
        victim = hs[1]
        victim.kill9()
        wait_for(lambda: len(acked) >= 3 * MESSAGES // 4, 60, "sends acknowledged after the kill")
        hosts.restart(victim)
        threads[0].join(60)
        assert len(acked) == MESSAGES, "the producer did not finish"
        wait_for(lambda: set(acked) <= {mid for mid, _, _ in got}, 60, "every acknowledged send received")
        stop.set()
        threads[1].join(15)
        assert not again, f"messages delivered again after their delete was acknowledged: {again[:5]}"
        assert {p for _, _, p in got} == {0, 1, 2, 3}, "the new partitions took none of the sends"
        if fifo:  # (order holds within each partition: a group moved at the change)
            for g in range(GROUPS):
                for p in range(4):
                    firsts: dict[str, int] = {}
                    for mid, num, part in got:
                        if num % GROUPS == g and part == p:
                            firsts.setdefault(mid, num)
                    nums = list(firsts.values())
                    assert nums == sorted(nums), (g, p, nums)
        wait_for(lambda: q.stats()["total"] == 0, 30, "the stats at zero once everything is deleted")
