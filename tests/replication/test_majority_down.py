"""A stream whose writer and another voter die right after an
acknowledgement waits for one of them rather than elect the survivor
without the record.

Before the thirty-seventh session a candidate read the positions its peers
had last published (every 0.5 s): two of three hosts killed within that
time after a sync send left the survivor seeing positions that lacked the
record, as far along as its own; it was elected, and when the others came
back they cut the record to follow its log (an acknowledged message lost).
Now only positions published after the lock's release count, and with the
candidate they must meet every ack quorum (2 of 3 voters)
(``writer_election.heard_enough``)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import zmqueue
from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses, consul_for
from tests.replication.test_failover import by_node, drain_in_order, three_hosts, writer_of
from zmqueue.localcluster import ConsulAgent

QUEUE = "majority.fifo"


@pytest.fixture
def client(consul_agent: ConsulAgent) -> Iterator[zmqueue.Client]:
    with zmqueue.connect(consul_agent.http_addr, request_timeout=2, retries=8) as c:
        yield c


def test_the_survivor_of_two_kills_right_after_an_ack_waits_and_the_record_survives(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    hs = three_hosts(hosts, consul_agent)
    q = client.create_queue(QUEUE, fifo=True, replication_factor=3, sync_replication=True)
    for i in range(5):
        q.send(f"m{i}".encode(), group_id="g", dedup_id=f"d{i}")
    node, _ = wait_for(lambda: writer_of(consul_agent, QUEUE, "fifo"), 10, "a writer")
    writer = by_node(hs, node)
    other, survivor = [h for h in hs if h is not writer]
    survivor.freeze()  # it misses the next record; the writer and `other` acknowledge it
    q.send(b"acked", group_id="g", dedup_id="acked")
    writer.kill9()
    other.kill9()  # both within a few ms of the ack: neither published a position holding it
    survivor.kill9()  # (still frozen: what its socket buffers held of the record goes too)
    survivor = hosts.restart(survivor)
    wait_for(lambda: all_passing(check_statuses(consul_agent, survivor.node)), 60, "the survivor passing")
    # the writer's session goes with its checks (3 s TTL): the lock is free, and stays so
    # while two of the three voters are down; after 5 s the survivor says why
    wait_for(lambda: writer_of(consul_agent, QUEUE, "fifo") is None, 15, "the dead writer's lock released")
    wait_for(lambda: ("has had no writer" in survivor.log_tail(20_000)
                      or writer_of(consul_agent, QUEUE, "fifo")), 30, "the survivor's note that it waits")
    assert writer_of(consul_agent, QUEUE, "fifo") is None, "the survivor was elected alone"
    note = next(ln for ln in survivor.log_tail(20_000).splitlines() if "has had no writer" in ln)
    assert f"{QUEUE}/0/fifo" in note and f"['{survivor.node}']" in note, note
    other = hosts.restart(other)
    elected = wait_for(lambda: writer_of(consul_agent, QUEUE, "fifo"), 30, "a writer once two are up")
    assert elected[0] == other.node, "the voter holding the record leads"
    got = drain_in_order(q, 6, 30)
    assert got == [f"m{i}".encode() for i in range(5)] + [b"acked"], "nothing acknowledged lost"


def _positions(agent: ConsulAgent, queue: str) -> dict[str, int]:
    _, items = consul_for(agent).kv.get(f"zmqueue-positions/{queue}/0/fifo/", recurse=True)
    return {it["Key"].rsplit("/", 1)[1]: int(json.loads(it["Value"])["seq"]) for it in items or []}


def test_an_operator_who_lost_two_disks_for_good_sets_the_replicas_by_hand_and_the_survivor_leads(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    """OPERATOR_GUIDE, "When a cluster loses quorum": with two of three hosts gone
    for good the stream waits; the operator sets the partition's replicas to the
    survivor in Consul KV, and it is elected and serves what it holds."""
    name = "lost.fifo"
    hs = three_hosts(hosts, consul_agent)
    q = client.create_queue(name, fifo=True, replication_factor=3, sync_replication=True)
    for i in range(5):
        q.send(f"m{i}".encode(), group_id="g", dedup_id=f"d{i}")
    wait_for(lambda: len(p := _positions(consul_agent, name)) == 3 and min(p.values()) >= 5, 15,
             "every copy holding the five")
    node, _ = wait_for(lambda: writer_of(consul_agent, name, "fifo"), 10, "a writer")
    writer = by_node(hs, node)
    other, survivor = [h for h in hs if h is not writer]
    writer.kill9()
    other.kill9()  # both gone for good
    wait_for(lambda: writer_of(consul_agent, name, "fifo") is None, 15, "the dead writer's lock released")
    # the managers count a failing host as healthy for a 3 s grace (and would take it back
    # into the set meanwhile); the survivor, the only host left, holds the manager roles
    wait_for(lambda: any("hosts counted as failed" in ln and writer.node in ln and other.node in ln
                         for ln in survivor.log_tail(100_000).splitlines()), 30,
             "the managers counting both as failed")
    kv = consul_for(consul_agent)
    key = f"zmqueue/queues/{name}/partitions/0"
    _, item = kv.kv.get(key)
    a = json.loads(item["Value"])
    kv.kv.put(key, json.dumps({**a, "replicas": [survivor.node], "joining": [], "leaving": [],
                               "previous": [], "version": a["version"] + 1}))
    wait_for(lambda: (w := writer_of(consul_agent, name, "fifo")) and w[0] == survivor.node, 30,
             "the survivor elected once it is the only voter")
    q.send(b"after", group_id="g", dedup_id="after")  # a set of one takes sends on its one copy
    assert drain_in_order(q, 6, 30) == [f"m{i}".encode() for i in range(5)] + [b"after"]
