"""A handle that only sends follows its queue's partitions: it re-reads the
queue every couple of seconds, and a host refuses a FIFO send whose group
maps to another partition by the host's count (WRONG_PARTITION), which the
client answers by re-reading the queue and sending to the group's partition.
Otherwise a stale handle put every group on partition 0 while fresh handles
spread them, and consumers saw one group as two interleaved streams."""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.request

import pytest

import zmqueue
from tests.conftest import QueueCluster, wait_for
from zmqueue.client.routing import FIFO_ORIGIN
from zmqueue.protocol import Command, group_partition


def _groups_of(partition: int, partitions: int) -> list[str]:
    return [g for k in range(100) if group_partition(g := f"g{k}", partitions) == partition]


def test_a_handle_that_only_sends_follows_its_queue_created_again_with_other_settings(
        qcluster: QueueCluster) -> None:
    name = qcluster.queue_name("follow") + ".fifo"
    old = qcluster.client.create_queue(name, fifo=True, partitions=1, visibility_timeout=30)
    old.send(b"warm", group_id="g")
    with zmqueue.connect(qcluster.factory.agent.http_addr, request_timeout=10) as other:
        other.delete_queue(name)
        other.create_queue(name, fifo=True, partitions=4, visibility_timeout=5)
    t0 = time.monotonic()

    def followed() -> bool:
        old.send(b"x", group_id="g")
        return bool(old.config.partitions == 4 and old.config.visibility_timeout_s == 5)

    wait_for(followed, 6, "the sending handle to follow the new queue's settings", interval_s=0.25)
    assert time.monotonic() - t0 < 4


def test_a_handle_that_only_sends_follows_partitions_added_in_consul_kv(qcluster: QueueCluster) -> None:
    name = qcluster.queue_name("kvparts")
    q = qcluster.client.create_queue(name, partitions=1)
    q.send(b"warm")
    url = f"http://{qcluster.factory.agent.http_addr}/v1/kv/zmqueue/queues/{name}/config"
    with urllib.request.urlopen(url + "?raw", timeout=5) as r:
        cfg = json.loads(r.read())
    cfg["partitions"] = 3
    put = urllib.request.Request(url, data=json.dumps(cfg).encode(), method="PUT")
    with urllib.request.urlopen(put, timeout=5) as r:
        assert r.read().strip() == b"true"

    def followed() -> bool:
        q.send(b"x")
        return bool(q.config.partitions == 3)

    wait_for(followed, 10, "the sending handle to see 3 partitions", interval_s=0.25)


def test_a_fifo_send_to_a_partition_its_group_does_not_map_to_is_refused_and_goes_to_its_own(
        qcluster: QueueCluster) -> None:
    name = qcluster.queue_name("wrongp") + ".fifo"
    c = qcluster.client
    q = c.create_queue(name, fifo=True, partitions=4)
    g, *more = _groups_of(2, 4)

    def writer(p: int) -> str:
        ep: str = q.routes.for_stream(p, FIFO_ORIGIN)[0]
        return ep

    with pytest.raises(zmqueue.ZmqueueError) as err:
        c.request(writer(0), Command.SEND, {"q": name, "p": 0, "m": [[b"lost", None, None, g, None]]})
    assert type(err.value).__name__ == "WrongPartition"
    assert err.value.details == {"group": g, "partition": 2, "partitions": 4}

    def on_partition_2() -> list[bytes]:
        reply = c.request(writer(2), Command.RECEIVE, {"q": name, "p": 2, "max": 10, "vis_s": 0})
        return [bytes(m[1]) for m in reply["m"]]

    with zmqueue.connect(qcluster.factory.agent.http_addr, request_timeout=10) as other:
        for how, group in (("send", g), ("pipeline", more[0])):
            stale = other.get_queue(name)
            stale.config = dataclasses.replace(stale.config, partitions=1)  # as before partitions were added
            stale._config_at = time.monotonic() + 3600  # (no re-read by time: the host's refusal alone)
            if how == "send":
                stale.send(f"by-{how}".encode(), group_id=group)
            else:
                with stale.pipeline() as pipe:
                    pipe.send(f"by-{how}".encode(), group_id=group)
            assert stale.config.partitions == 4
            assert f"by-{how}".encode() in on_partition_2()
    assert c.request(writer(0), Command.QUEUE_STATS, {"q": name, "p": 0})["total"] == 0
