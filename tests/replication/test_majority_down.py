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
(``leadership.heard_enough``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import zmqueue
from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses
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
