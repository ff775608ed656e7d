"""``sync_quorum="all"``: a synchronous write waits for every voting replica,
so an acknowledged send survives the loss of any R - 1 of them, disks
included (the DESIGN's promise for synchronous mode; the default majority
quorum survives the loss of a minority). With the majority quorum the
survivor of two losses waits for one of them to come back
(``test_majority_down.py``); here it takes over alone and delivers every
acknowledged send, refuses writes while the others are down, and stays
the writer when they come back with empty disks (the writer's published
floor, ``kvlayout.stream_acked_key``, keeps a disk-less voter from leading)
until they have caught up and writes go on."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import pytest

import zmqueue
from tests.conftest import HostFactory, wait_for
from tests.helpers import consul_for
from tests.replication.test_failover import by_node, drain_in_order, three_hosts, writer_of
from zmqueue.localcluster import ConsulAgent

QUEUE = "every.fifo"


@pytest.fixture
def client(consul_agent: ConsulAgent) -> Iterator[zmqueue.Client]:
    with zmqueue.connect(consul_agent.http_addr, request_timeout=2, retries=8) as c:
        yield c


def _floor(agent: ConsulAgent) -> int:
    _, item = consul_for(agent).kv.get(f"zmqueue-positions/{QUEUE}/0/fifo/~acked")
    return int(json.loads(item["Value"])["seq"]) if item else 0


def _refusal(agent: ConsulAgent) -> str | None:
    """The error of one send without retries (None: it was acknowledged)."""
    with zmqueue.connect(agent.http_addr, request_timeout=2, retries=0) as c:
        try:
            c.get_queue(QUEUE).send(b"refused?", group_id="g", dedup_id="after")
        except zmqueue.ZmqueueError as exc:
            return f"{type(exc).__name__}: {exc}"
    return None


def test_with_sync_quorum_all_acknowledged_sends_survive_losing_two_of_three_replicas_and_their_disks(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    hs = three_hosts(hosts, consul_agent)
    q = client.create_queue(QUEUE, fifo=True, replication_factor=3, sync_replication=True,
                            sync_quorum="all")
    assert q.config.sync_quorum == "all"
    for i in range(5):
        q.send(f"m{i}".encode(), group_id="g", dedup_id=f"d{i}")
    node, _ = wait_for(lambda: writer_of(consul_agent, QUEUE, "fifo"), 10, "a writer")
    wait_for(lambda: _floor(consul_agent) >= 5, 10, "the writer's published floor")
    writer = by_node(hs, node)
    other, survivor = [h for h in hs if h is not writer]
    writer.kill9()
    other.kill9()  # right after the acks: every acknowledged send is on all three copies
    for gone in (writer, other):
        shutil.rmtree(gone.data_dir)  # and these two disks are lost
    wait_for(lambda: (w := writer_of(consul_agent, QUEUE, "fifo")) and w[0] == survivor.node, 30,
             "the survivor elected alone")
    got: dict[bytes, None] = {}  # (in order of first delivery; not deleted: a delete is a write)
    wait_for(lambda: got.update(dict.fromkeys(m.body for m in q.receive(
        max_messages=10, wait_time=1, visibility_timeout=1))) or len(got) >= 5,
             30, "every acknowledged send delivered by the survivor")
    assert list(got) == [f"m{i}".encode() for i in range(5)]
    # a write needs every voter: refused while two are down, saying what it needs
    said = wait_for(lambda: (e := _refusal(consul_agent)) and "down" in e and e, 30, "a refused send")
    assert said.startswith("Unavailable") and "all 3 voting replicas" in said, said
    # both come back without their data: the survivor keeps writing, they catch up
    writer, other = hosts.restart(writer), hosts.restart(other)
    wait_for(lambda: _refusal(consul_agent) is None, 90, "a send acknowledged by all three again")
    assert writer_of(consul_agent, QUEUE, "fifo")[0] == survivor.node  # type: ignore[index]
    assert drain_in_order(q, 6, 30) == [f"m{i}".encode() for i in range(5)] + [b"refused?"]


def test_a_voter_back_without_its_disk_does_not_lead_while_the_voters_that_hold_the_records_are_down(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    """Any voter may take over a ``sync_quorum="all"`` stream alone, but not
    one that lost what it acknowledged: it holds less than the floor the
    writer published, says so, and the stream waits for a voter that holds it."""
    hs = three_hosts(hosts, consul_agent)
    q = client.create_queue(QUEUE, fifo=True, replication_factor=3, sync_replication=True,
                            sync_quorum="all")
    for i in range(5):
        q.send(f"m{i}".encode(), group_id="g", dedup_id=f"d{i}")
    wait_for(lambda: _floor(consul_agent) >= 5, 10, "the writer's published floor")
    lost, *keep = hs
    for h in hs:
        h.kill9()
    shutil.rmtree(lost.data_dir)
    lost = hosts.restart(lost)  # alone, and empty
    wait_for(lambda: "will not lead the stream" in lost.log_tail(50_000), 30, "its note that it may not lead")
    note = next(ln for ln in lost.log_tail(50_000).splitlines() if "will not lead the stream" in ln)
    assert f"{QUEUE}/0/fifo" in note and "holds records up to seq 0" in note, note
    assert writer_of(consul_agent, QUEUE, "fifo") is None, "the disk-less voter was elected"
    back = hosts.restart(keep[0])
    wait_for(lambda: (w := writer_of(consul_agent, QUEUE, "fifo")) and w[0] == back.node, 30,
             "the voter that holds the records elected")
    got: dict[bytes, None] = {}
    wait_for(lambda: got.update(dict.fromkeys(m.body for m in q.receive(
        max_messages=10, wait_time=1, visibility_timeout=1))) or len(got) >= 5, 30, "every send delivered")
    assert list(got) == [f"m{i}".encode() for i in range(5)]
