"""DELETE_QUEUE leaves no key of the queue behind in Consul.

(A host acts on candidacies a moment old: after DELETE_QUEUE had deleted the
queue's writer locks and positions, a host that had not heard of it yet
took the lock again, or published its position, and so created the key
again, for good: 20-65 % of deletes under load left 1-6 keys under
``zmqueue/leaders/<q>/`` and ``zmqueue-positions/<q>/``.) Every such write
now goes in a transaction fenced by the queue's tombstone
(``controlplane/kvguard.py``); the external manager's sweep
(``controlplane/kvsweep.py``) is only a backstop, and must have found
nothing to do here. Real hosts, real Consul.
"""

from __future__ import annotations

import time
import uuid

import consul

import zmqueue
from tests.conftest import HostFactory, wait_for
from tests.controlplane_integration.conftest import kv_client
from tests.controlplane_integration.test_managers import start_cluster
from zmqueue.config import QueueConfig
from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.controlplane.leadership import Leadership
from zmqueue.controlplane.queue_directory import QueueDirectory
from zmqueue.controlplane.writer_election import Candidacy
from zmqueue.localcluster import ConsulAgent

QUEUES = 18
"""Queues created and deleted (R=3, two partitions: six streams on each of three hosts)."""
SWEPT = "left behind under"
"""What the external manager's sweep logs for each queue it cleans up after."""


def keys_of(c: consul.Consul, names: list[str]) -> list[str]:
    """Every key under ``zmqueue/leaders/`` or ``zmqueue-positions/`` of a queue in ``names``."""
    found = []
    for prefix, at in (("zmqueue/leaders/", 2), ("zmqueue-positions/", 1)):
        _, keys = c.kv.get(prefix, keys=True)
        found += [k for k in keys or [] if k.split("/")[at] in names]
    return sorted(found)


def test_deleted_queues_leave_no_lock_or_position_key_and_their_names_work_again(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    addr = consul_agent.http_addr
    started = start_cluster(hosts, consul_agent, 3)
    c = kv_client(addr)
    names = [f"gone-{hosts.uid}-{i}" for i in range(QUEUES)]
    with zmqueue.connect(addr, request_timeout=10) as client:
        for n in names:
            q = client.create_queue(n, replication_factor=3, partitions=2)
            q.send_batch([f"{n}-{i}".encode() for i in range(4)])
            client.delete_queue(n)
        left: list[str] = []

        def none_left() -> bool:
            left[:] = keys_of(c, names)
            return not left

        try:
            wait_for(none_left, 20, "no lock or position key of the deleted queues")
            time.sleep(2.0)  # (several leadership cycles: a late write would show now)
            assert none_left()
        except AssertionError:
            raise AssertionError(f"{len(left)} keys of {QUEUES} deleted queues left: {left[:12]}") from None
        logs = "".join(h.proc.log_path.read_text(errors="replace") for h in started)
        assert SWEPT not in logs, "the sweep removed keys the deletion's fence should have kept out"

        # a name deleted is a name free: created again, it elects writers and serves at once
        again = client.create_queue(names[0], replication_factor=3, partitions=2)
        again.send_batch([b"a", b"b", b"c"])
        got: list[bytes] = []

        def received_all() -> bool:
            got.extend(m.body for m in again.receive(max_messages=10, wait_time=1))
            return len(got) >= 3

        wait_for(received_all, 15, "the messages of the queue created again")
        assert sorted(got) == [b"a", b"b", b"c"]
        assert keys_of(c, [names[0]]), "the queue created again has its locks and positions"
        client.delete_queue(names[0])
        wait_for(lambda: not keys_of(c, [names[0]]), 20, "no key left after the second deletion")


def test_the_external_manager_sweeps_keys_a_deleted_queue_left_and_only_those(
        hosts: HostFactory, consul_agent: ConsulAgent) -> None:
    """Keys of a deleted queue written anyway (here by hand, as a host of an
    earlier version would have) are removed within a sweep period or two;
    a live queue's, a queue's whose config alone is missing (deleted by
    hand: its hosts keep serving it) and a name never deleted (no
    tombstone) keep theirs."""
    addr = consul_agent.http_addr
    started = start_cluster(hosts, consul_agent, 2)
    c = kv_client(addr)
    gone, live, vanished, stray = (f"{base}-{hosts.uid}" for base in ("gone", "live", "vanished", "stray"))
    with zmqueue.connect(addr, request_timeout=10) as client:
        client.create_queue(gone, replication_factor=2)
        client.delete_queue(gone)
        client.create_queue(live, replication_factor=2)
        client.create_queue(vanished, replication_factor=2)
        client.delete_queue(vanished)
        q = client.create_queue(vanished, replication_factor=2)  # a tombstone, and a queue of that name again
        q.send(b"kept")
        wait_for(lambda: keys_of(c, [live, vanished]), 10, "the live queues' locks and positions")
    c.kv.delete(f"zmqueue/queues/{vanished}/config")
    leftovers = [f"zmqueue/leaders/{gone}/0/n1", f"zmqueue-positions/{gone}/0/n1/n1",
                 f"zmqueue-positions/{gone}/0/n1/~acked", f"zmqueue/leaders/{stray}/0/n1",
                 f"zmqueue-positions/{stray}/0/n1/n1"]
    for key in leftovers:
        assert c.kv.put(key, b'{"epoch":0,"seq":3}')
    kept = {n: keys_of(c, [n]) for n in (live, vanished, stray)}
    assert all(kept.values()), kept
    wait_for(lambda: not keys_of(c, [gone]), 30, "the deleted queue's keys swept")
    for n, before in kept.items():
        assert set(before) <= set(keys_of(c, [n])), f"{n}: keys swept that were not a deleted queue's"
    logs = "".join(h.proc.log_path.read_text(errors="replace") for h in started)
    assert f"removed the keys deleted queue {gone} {SWEPT}" in logs
    assert f"deleted queue {live} " not in logs and f"deleted queue {vanished} " not in logs


def test_a_writer_lock_or_position_sent_after_the_deletion_creates_no_key(consul_agent: ConsulAgent) -> None:
    """The fence itself, against real Consul: a host whose guard was read
    while the queue lived (its candidacies not updated yet) tries to take
    the lock and publish its position after DELETE_QUEUE; Consul refuses
    both, and the thread learns the queue is gone. The same host's writes
    for a queue not deleted go through in the same transactions."""
    addr = consul_agent.http_addr
    c = kv_client(addr)
    node = f"fence-{uuid.uuid4().hex[:8]}"
    gone, live = f"gone-{node}", f"live-{node}"
    directory = QueueDirectory(ConsulClient((addr,), 5.0))
    for name in (gone, live):
        assert c.kv.put(kv.queue_config_key(name), kv.encode_queue_config(QueueConfig(name=name)), cas=0)
    inc = {name: c.kv.get(kv.queue_config_key(name))[1]["CreateIndex"] for name in (gone, live)}
    lead = Leadership((addr,), 5.0, node, [], {"node": node}, lambda ev: None)
    streams = {name: (name, 0, node) for name in (gone, live)}
    cands = {s: Candidacy((node,), node, incarnation=inc[s[0]]) for s in streams.values()}
    fence = lead._fence(cands, 1, {})
    assert set(fence) == set(streams.values())  # both alive: their guards read
    directory.delete(gone)  # (tombstone, then the queue's keys)
    sid = lead._ensure_session()
    try:
        assert lead._acquire(streams[gone], sid, cands[streams[gone]], fence[streams[gone]])
        assert lead._acquire(streams[live], sid, cands[streams[live]], fence[streams[live]])
        assert streams[gone] not in lead.held and lead.held[streams[live]] == 1
        lead._publish_positions({s: (1, 5) for s in streams.values()}, fence, urgent=True)
        assert keys_of(c, [gone]) == [], "a key of the deleted queue was created again"
        assert keys_of(c, [live]) == [f"zmqueue-positions/{live}/0/{node}/{node}",
                                      f"zmqueue/leaders/{live}/0/{node}"]
        fence = lead._fence(cands, 1, {})  # (a guard that failed is read again)
        assert set(fence) == {streams[live]} and lead.guards.of(gone, inc[gone]) == "gone"
    finally:
        lead._release_all()
        directory.delete(live)
