"""A queue that vanishes from Consul KV without a DELETE_QUEUE keeps its data.

(Deleting a queue's config key by hand, or a Consul agent restarted without
its state, looked to every host like DELETE_QUEUE: each removed the queue's
streams, acknowledged messages included; putting the config back gave an
empty queue.) DELETE_QUEUE writes a tombstone naming the queue's
incarnation; hosts remove data only for such a deletion.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import zmqueue
from tests.conftest import QueueCluster, wait_for
from tests.helpers import consul_for, segments_hold
from tests.replication.test_failover import drain_in_order
from zmqueue.controlplane import kvlayout as kv


def _stream_dirs(qc: QueueCluster, name: str) -> list[Any]:
    return [d for h in qc.factory.hosts for d in (h.data_dir / "queues" / name).glob("*/*")]


def _sends_work(q: zmqueue.Queue, body: bytes) -> bool:
    try:
        q.send(body)
        return True
    except zmqueue.ZmqueueError:
        return False


def test_a_config_key_deleted_by_hand_keeps_the_queue_and_its_messages(qcluster: QueueCluster) -> None:
    c = qcluster.client
    name = qcluster.queue_name("vanish")
    q = c.create_queue(name, replication_factor=2)
    q.send_batch([f"m{i}".encode() for i in range(20)])
    api = consul_for(qcluster.factory.agent)
    key = kv.queue_config_key(name)
    _, item = api.kv.get(key)
    api.kv.delete(key)
    # the hosts keep the last good config: still served (a kv warning says why)
    wait_for(lambda: any("missing while the queue's partitions remain" in (chk.get("Output") or "")
                         for chk in api.agent.checks().values()), 20, "the kv warning")
    assert wait_for(lambda: _sends_work(q, b"during"), 10, "a send while the config key is missing")
    api.kv.put(key, item["Value"])
    got = drain_in_order(q, 21, 20)
    assert sorted(got) == sorted([f"m{i}".encode() for i in range(20)] + [b"during"])


def test_a_queue_tree_lost_from_kv_keeps_its_data_until_a_delete_queue(qcluster: QueueCluster) -> None:
    """Consul's state lost looks like this: every key of the queue gone at once."""
    c = qcluster.client
    name = qcluster.queue_name("lost")
    q = c.create_queue(name, replication_factor=2, visibility_timeout=5)
    q.send_batch([f"m{i}".encode() for i in range(20)])
    before = _stream_dirs(qcluster, name)
    assert before
    api = consul_for(qcluster.factory.agent)
    api.kv.delete(f"{kv.PREFIX}queues/{name}/", recurse=True)
    wait_for(lambda: name not in c.list_queues(), 10, "the queue gone from the hosts' view")
    assert all(d.exists() for d in before), "a queue gone without DELETE_QUEUE keeps its data"
    again = c.create_queue(name, replication_factor=2, visibility_timeout=5)  # the operator recreates it
    got = drain_in_order(again, 20, 20)
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(20))
    again.send(b"last")
    c.delete_queue(name)  # an explicit deletion removes the data on every host
    wait_for(lambda: not _stream_dirs(qcluster, name), 20, "the streams removed after DELETE_QUEUE")
    fresh = c.create_queue(name, replication_factor=2)
    assert fresh.receive(max_messages=10, wait_time=1) == []


def _stored_anywhere(qc: QueueCluster, name: str, marker: bytes) -> bool:
    return segments_hold(_stream_dirs(qc, name), marker)


def test_a_queue_created_again_before_a_host_saw_it_gone_serves_none_of_the_deleted_messages(
        qcluster: QueueCluster) -> None:
    """(CREATE_QUEUE writes the config, then the partitions. A host that saw the
    new config before the new partitions, and the old queue gone only then,
    closed the deleted queue's streams keeping their data, opened them again
    from disk once the new partitions came, and served the deleted messages
    in the new queue.) The deletion and the new config land here in one
    Consul transaction, so every host sees them at once."""
    c = qcluster.client
    api = consul_for(qcluster.factory.agent)
    settings: dict[str, Any] = dict(partitions=4, replication_factor=2, visibility_timeout=60)
    name = qcluster.queue_name("again")
    key = kv.queue_config_key(name)
    for round_ in range(3):  # (a host may also see the new partitions in the same snapshot: that case held)
        q = c.create_queue(name, **settings)
        q.send_batch([b"deleted-%d" % i for i in range(20)])
        assert q.receive(max_messages=1, wait_time=1)
        assert _stored_anywhere(qcluster, name, b"deleted-")
        _, item = api.kv.get(key)
        tomb = kv.encode_tombstone(item["CreateIndex"], int(time.time() * 1000))
        ops: list[dict[str, Any]] = [{"KV": {"Verb": "set", "Key": kv.deleted_key(name),
                                             "Value": base64.b64encode(tomb).decode()}}]
        ops += [{"KV": {"Verb": "delete-tree", "Key": f"{prefix}{name}/"}}
                for prefix in (f"{kv.PREFIX}queues/", f"{kv.PREFIX}leaders/", f"{kv.PREFIX}positions/",
                               kv.POSITIONS_PREFIX)]
        ops.append({"KV": {"Verb": "set", "Key": key, "Value": base64.b64encode(item["Value"]).decode()}})
        api.txn.put(ops)
        assert api.kv.get(key)[1]["CreateIndex"] != item["CreateIndex"]
        wait_for(lambda: not _stored_anywhere(qcluster, name, b"deleted-"), 10,
                 f"round {round_}: the deleted queue's messages removed on every host")
        again = c.create_queue(name, **settings)  # (its partitions: written by now, or now)
        again.send(b"new")
        fresh = zmqueue.connect(qcluster.factory.agent.http_addr, request_timeout=10)
        try:
            got = drain_in_order(fresh.get_queue(name), 1, 15)
            got += drain_in_order(fresh.get_queue(name), 1, 1)  # (anything else visible)
        finally:
            fresh.close()
        assert got == [b"new"], f"round {round_}: {got}"
