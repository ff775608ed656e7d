"""Replication and failover with real hosts: acknowledged sends survive the
loss of a writer, FIFO writers change with a higher epoch within 5 s, and a
stale writer's writes are refused."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

import zmqueue
from tests.conftest import HostFactory, all_passing, wait_for
from tests.helpers import check_statuses, consul_for
from zmqueue.client.transport import Connection
from zmqueue.localcluster import ConsulAgent, HostProcess
from zmqueue.protocol import Command


def three_hosts(hosts: HostFactory, agent: ConsulAgent) -> list[HostProcess]:
    hs = [hosts.start(f"h{i}") for i in (1, 2, 3)]
    for h in hs:
        node = h.node
        wait_for(lambda: all_passing(check_statuses(agent, node)), 60, f"{node} passing")  # noqa: B023
    return hs


@pytest.fixture
def client(consul_agent: ConsulAgent) -> Iterator[zmqueue.Client]:
    with zmqueue.connect(consul_agent.http_addr, request_timeout=2, retries=8) as c:
        yield c


def writer_of(agent: ConsulAgent, queue: str, origin: str) -> tuple[str, int] | None:
    _, item = consul_for(agent).kv.get(f"zmqueue/leaders/{queue}/0/{origin}")
    if not item or not item.get("Session"):
        return None
    return str(json.loads(item["Value"])["node"]), int(item["LockIndex"])


def by_node(hs: list[HostProcess], node: str) -> HostProcess:
    return next(h for h in hs if h.node == node)


def drain(q: zmqueue.Queue, expect: int, timeout_s: float = 30) -> dict[str, bytes]:
    got: dict[str, bytes] = {}
    deadline = time.monotonic() + timeout_s
    while len(got) < expect and time.monotonic() < deadline:
        msgs = q.receive(max_messages=100, wait_time=1)
        for m in msgs:
            got[m.id] = m.body
        if msgs:
            q.delete_batch([m.receipt for m in msgs])
    return got


def test_sync_replicated_standard_sends_survive_the_loss_of_the_host_that_took_them(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    hs = three_hosts(hosts, consul_agent)
    q = client.create_queue("std", replication_factor=3, sync_replication=True)
    home = q.routes.for_send(0)[0]
    ids = []
    for i in range(10):
        ids += q.send_batch([f"m{i}-{j}".encode() for j in range(20)])
    taker = next(h for h in hs if h.node in {n for n, ep in q.routes.part(0).endpoints.items() if ep == home})
    taker.kill9()
    got = drain(q, len(ids))
    assert set(ids) <= set(got), f"lost {len(set(ids) - set(got))} acknowledged messages"


def test_killing_a_fifo_writer_elects_a_caught_up_replica_with_a_higher_epoch_within_5_s(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    hs = three_hosts(hosts, consul_agent)
    q = client.create_queue("orders.fifo", fifo=True, replication_factor=3)
    sent = [q.send(f"{i}".encode(), group_id="g", dedup_id=f"d{i}") for i in range(30)]
    node, epoch = wait_for(lambda: writer_of(consul_agent, "orders.fifo", "fifo"), 10, "a writer")
    killed_at = time.monotonic()
    by_node(hs, node).kill9()
    new = wait_for(lambda: (w := writer_of(consul_agent, "orders.fifo", "fifo")) and w[0] != node and w,
                   10, "a new writer")
    elected_s = time.monotonic() - killed_at
    assert new[1] > epoch
    assert elected_s <= 5.0, f"a new writer took {elected_s:.1f} s"
    # the first successful send after the kill
    wait_for(lambda: _try_send(q, b"after", "after"), 15, "a send accepted by the new writer")
    failover_s = time.monotonic() - killed_at
    assert failover_s < 10, failover_s
    got = drain_in_order(q, 31, 20)
    assert got == [f"{i}".encode() for i in range(30)] + [b"after"], "order kept, nothing lost or doubled"
    assert len(set(sent)) == 30


def drain_in_order(q: zmqueue.Queue, expect: int, timeout_s: float) -> list[bytes]:
    """Bodies in delivery order (each deleted after receipt), until ``expect``."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expect and time.monotonic() < deadline:
        msgs = q.receive(max_messages=10, wait_time=1)
        got += [m.body for m in msgs]
        if msgs:
            q.delete_batch([m.receipt for m in msgs])
    return got


def _try_send(q: zmqueue.Queue, body: bytes, dedup: str) -> bool:
    try:
        q.send(body, group_id="g", dedup_id=dedup)
        return True
    except zmqueue.ZmqueueError:
        return False


def test_a_frozen_fifo_writer_is_replaced_and_its_writes_are_refused_after_it_thaws(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    hs = three_hosts(hosts, consul_agent)
    q = client.create_queue("frozen.fifo", fifo=True, replication_factor=3)
    q.send(b"before", group_id="g", dedup_id="b")
    node, _epoch = wait_for(lambda: writer_of(consul_agent, "frozen.fifo", "fifo"), 10, "a writer")
    old = by_node(hs, node)
    old_endpoint = q.routes.part(0).endpoints[node]
    old.freeze()
    try:
        wait_for(lambda: (w := writer_of(consul_agent, "frozen.fifo", "fifo")) and w[0] != node,
                 15, "a new writer while the old one is frozen")
        wait_for(lambda: _try_send(q, b"during", "d"), 15, "a send to the new writer")
    finally:
        old.thaw()
    conn = client.connection(old_endpoint)
    body = {"q": "frozen.fifo", "p": 0, "m": [[b"stale", None, None, "g", "s"]]}
    with pytest.raises((zmqueue.NotLeader, zmqueue.Unavailable)):
        conn.request(Command.SEND, body, 3000)
    assert drain_in_order(q, 2, 15) == [b"before", b"during"]
    assert old.alive()


def replica_set(agent: ConsulAgent, queue: str) -> list[str]:
    _, item = consul_for(agent).kv.get(f"zmqueue/queues/{queue}/partitions/0")
    return list(json.loads(item["Value"])["replicas"]) if item else []


def test_a_replica_lost_for_good_is_replaced_and_the_new_one_catches_up(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    hs = three_hosts(hosts, consul_agent)
    q = client.create_queue("rerep", replication_factor=3, sync_replication=True)
    ids = []
    for i in range(5):
        ids += q.send_batch([f"r{i}-{j}".encode() for j in range(20)])
    spare = hosts.start("h4")
    wait_for(lambda: all_passing(check_statuses(consul_agent, spare.node)), 60, "h4 passing")
    before = replica_set(consul_agent, "rerep")
    assert spare.node not in before
    lost = by_node(hs, before[-1])
    lost.kill9()
    # (the lost host leaves once the writer confirmed the change: a joint set in between)
    after = wait_for(lambda: (r := replica_set(consul_agent, "rerep")) and spare.node in r
                     and lost.node not in r and r, 30,
                     "the manager to put the spare host in the replica set in place of the lost one")
    assert len(after) == 3
    # the new replica holds a copy of every stream with every message. Its
    # endpoint is listed once the answering host's cache sees it healthy
    # (host health is re-read every 2 s; the manager that placed it may be
    # another host, a moment ahead)
    endpoint = wait_for(lambda: client.queue_info("rerep")["partitions"][0]["endpoints"].get(spare.node),
                        10, "the new replica's endpoint listed")
    conn = client.connection(endpoint)
    wait_for(lambda: conn.request(Command.QUEUE_STATS, {"q": "rerep", "p": 0}, 3000)["total"] == len(ids),
             30, "the new replica to catch up")
    got = drain(q, len(ids))
    assert set(ids) <= set(got)


def test_a_new_fifo_writer_keeps_the_deletes_receive_counts_and_deadlines_replicated_one_at_a_time(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    """Consumer state crosses a failover: one send, receive and delete per
    request (one-record blocks, the replicas' scalar path). Deleted messages
    never come back; messages in flight stay hidden until their deadline,
    their receipts still delete them, and those left come back with their
    receive count carried on."""
    hs = three_hosts(hosts, consul_agent)
    vis_s = 12
    q = client.create_queue("state.fifo", fifo=True, replication_factor=3, visibility_timeout=vis_s)
    for i in range(6):  # one group each: every message is receivable on its own
        q.send(f"m{i}".encode(), group_id=f"g{i}", dedup_id=f"d{i}")
    held = []
    for _ in range(4):
        [m] = q.receive(max_messages=1, wait_time=2)
        held.append(m)
    received_at = time.monotonic()
    assert sorted(m.body for m in held) == [b"m0", b"m1", b"m2", b"m3"]
    assert all(m.receive_count == 1 for m in held)
    deleted, in_flight = held[:2], held[2:]
    for m in deleted:  # quorum-acked: every earlier record (the receives too) is on a replica
        assert q.delete_batch([m.receipt]) == [None]
    node, epoch = wait_for(lambda: writer_of(consul_agent, "state.fifo", "fifo"), 10, "a writer")
    by_node(hs, node).kill9()
    wait_for(lambda: (w := writer_of(consul_agent, "state.fifo", "fifo")) and w[0] != node and w[1] > epoch,
             15, "a new writer")
    visible = drain_in_order(q, 2, 8)
    assert time.monotonic() < received_at + vis_s, "the failover outlasted the visibility timeout"
    assert sorted(visible) == [b"m4", b"m5"], "only the never-received messages are visible"
    # a receipt taken before the failover still deletes (its delivery is in flight on the new writer)
    kept, returning = in_flight
    assert q.delete_batch([kept.receipt]) == [None]
    in_flight = [returning]
    again: list[zmqueue.Message] = []
    deadline = time.monotonic() + vis_s + 15
    while len(again) < 1 and time.monotonic() < deadline:
        msgs = q.receive(max_messages=10, wait_time=1)
        if msgs:  # not before their deadline (received_at is taken after the receives)
            assert time.monotonic() >= received_at + vis_s - 1, f"{[m.body for m in msgs]} came back early"
        again += msgs
    assert [m.body for m in again] == [returning.body], "deleted ones stay gone"
    assert all(m.receive_count == 2 for m in again), [m.receive_count for m in again]
    q.delete_batch([m.receipt for m in again])
    assert q.receive(max_messages=10, wait_time=1) == []


def _request_or_none(conn: Connection, body: dict[str, Any], rid: int) -> Any:
    """A SEND with request id ``rid`` on ``conn``; None on a retryable refusal
    (a writer settling just after the queue's creation says NOT_LEADER)."""
    try:
        return conn.request(Command.SEND, body, 3000, request_id=rid)
    except (zmqueue.NotLeader, zmqueue.Unavailable):
        return None


def test_a_send_retried_at_another_host_after_its_writer_died_is_answered_not_stored_again(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    """The writer stored and replicated a send, then died before the client
    saw the reply; the client's retry (same request id) at another replica is
    answered with the ids the first host gave, and nothing is stored twice."""
    hs = three_hosts(hosts, consul_agent)
    q = client.create_queue("resend", replication_factor=3, sync_replication=True)
    eps = wait_for(lambda: len(e := q.routes.part(0).endpoints) == 3 and e, 10, "3 endpoints listed")
    first_node, *others = sorted(eps)
    body = {"q": "resend", "p": 0, "m": [[f"r{i}".encode(), None, None, None, None] for i in range(5)]}
    first_conn = client.connection(eps[first_node])
    rid = first_conn.next_request_id()
    first = wait_for(lambda: _request_or_none(first_conn, body, rid), 10, "the first host to take the send")
    for node in others:
        conn = client.connection(eps[node])
        wait_for(lambda: conn.request(Command.QUEUE_STATS, {"q": "resend", "p": 0}, 3000)["total"] == 5,  # noqa: B023
                 10, f"{node} to apply the send as a replica")
    by_node(hs, first_node).kill9()
    # the client's own retry path: the dead host's endpoint fails, another answers
    again = q.call(0, Command.SEND, body, partial(q.routes.for_send, 0), request_id=rid)
    assert again == first, "the retry is answered with the first host's ids"
    got = drain(q, 5)
    assert sorted(got) == sorted(first["ids"])
    assert sorted(got.values()) == [f"r{i}".encode() for i in range(5)]
    assert q.receive(max_messages=10, wait_time=1) == [], "nothing was stored twice"
    survivor = client.connection(eps[others[0]])
    fresh = survivor.request(Command.SEND, body, 3000, request_id=survivor.next_request_id())
    assert set(fresh["ids"]).isdisjoint(first["ids"]), "a new request is stored anew"
    # another client (no CURVE: the same identity '') reusing the id with other messages is
    # no retry: refused where the retry's reply is cached, stored anew elsewhere (each got
    # the first host's ids: its messages were confirmed and never stored)
    other = {"q": "resend", "p": 0, "m": [[f"o{i}".encode(), None, None, None, None] for i in range(5)]}
    stored_anew = []
    for node in others:
        try:
            reply = client.connection(eps[node]).request(Command.SEND, other, 3000, request_id=rid)
        except zmqueue.InvalidParameter as exc:
            assert "was used by a different SEND request" in str(exc)
        else:
            assert set(reply["ids"]).isdisjoint(first["ids"]), f"{node} answered with the first ids"
            stored_anew += reply["ids"]
    assert stored_anew, "the host that did not answer the retry stored the other client's send"
    got = drain(q, 5 + len(stored_anew))
    assert sorted(b for b in got.values() if b.startswith(b"o")) == sorted(
        [f"o{i}".encode() for i in range(5)] * (len(stored_anew) // 5))


def test_a_host_restarted_after_kill_9_answers_a_retry_of_a_send_it_stored_before(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    """The retry reaches the restarted host itself: it noted its streams'
    recent sends when it reopened them from disk."""
    hs = three_hosts(hosts, consul_agent)
    q = client.create_queue("reopen", replication_factor=3, sync_replication=True)
    eps = wait_for(lambda: len(e := q.routes.part(0).endpoints) == 3 and e, 10, "3 endpoints listed")
    node = sorted(eps)[0]
    body = {"q": "reopen", "p": 0, "m": [[f"o{i}".encode(), None, None, None, None] for i in range(4)]}
    conn = client.connection(eps[node])
    rid = conn.next_request_id()
    first = wait_for(lambda: _request_or_none(conn, body, rid), 10, "the host to take the send")
    old = by_node(hs, node)
    old.kill9()
    new = hosts.restart(old)
    wait_for(lambda: all_passing(check_statuses(consul_agent, node)), 60, f"{node} passing again")

    def at_restarted() -> Any:
        # its endpoint (new ports) is listed once the answering host's cache sees it
        endpoint = client.queue_info("reopen")["partitions"][0]["endpoints"].get(node)
        return endpoint and _request_or_none(client.connection(endpoint), body, rid)

    again = wait_for(at_restarted, 30, "the restarted host to answer")
    assert again == first, "answered from the restarted host's own log"
    assert new.alive()
    got = drain(q, 4)
    assert sorted(got) == sorted(first["ids"])
    assert q.receive(max_messages=10, wait_time=1) == [], "nothing was stored twice"


def test_a_fifo_send_without_dedup_id_retried_after_its_writer_died_is_stored_once(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    """No dedup id, no content-based dedup: the new writer (a caught-up
    replica) recognises the retried request by its tag and keeps the order."""
    hs = three_hosts(hosts, consul_agent)
    q = client.create_queue("resend.fifo", fifo=True, replication_factor=3, sync_replication=True)
    q.send(b"before", group_id="g")
    node, _ = wait_for(lambda: writer_of(consul_agent, "resend.fifo", "fifo"), 10, "a writer")
    conn = client.connection(q.routes.part(0).endpoints[node])
    rid = conn.next_request_id()
    body = {"q": "resend.fifo", "p": 0, "m": [[f"f{i}".encode(), None, None, "g", None] for i in range(3)]}
    first = wait_for(lambda: _request_or_none(conn, body, rid), 10, "the writer to take the send")
    by_node(hs, node).kill9()

    def retry() -> Any:
        try:
            return q.call(0, Command.SEND, body, partial(q.routes.for_send, 0), "fifo", request_id=rid)
        except zmqueue.ZmqueueError:
            return None  # no writer yet (errors are not cached: the retry is applied afresh)

    again = wait_for(retry, 20, "the retried send answered by the new writer")
    assert again == first
    assert drain_in_order(q, 4, 20) == [b"before", b"f0", b"f1", b"f2"]
    assert q.receive(max_messages=10, wait_time=1) == [], "nothing was stored twice"


Writer = tuple[str, int]
"""(node, epoch) of a stream's writer."""


def _kill_the_fifo_writer(hosts: HostFactory, agent: ConsulAgent, client: zmqueue.Client, name: str,
                          n: int) -> tuple[list[HostProcess], zmqueue.Queue, Writer, Writer]:
    """Three hosts, FIFO queue ``name`` (R=3) holding messages "0".."n-1", its
    writer killed (-9): (hosts, queue, the old writer and epoch, the new)."""
    hs = three_hosts(hosts, agent)
    q = client.create_queue(name, fifo=True, replication_factor=3)
    for i in range(n):
        q.send(f"{i}".encode(), group_id="g", dedup_id=f"d{i}")
    old = wait_for(lambda: writer_of(agent, name, "fifo"), 10, "a writer")
    by_node(hs, old[0]).kill9()
    new = wait_for(lambda: (w := writer_of(agent, name, "fifo")) and w[0] != old[0] and w, 10, "a new writer")
    return hs, q, old, new


def _resyncs(agent: ConsulAgent, node: str, event: str = "resyncs") -> float:
    """The host's count of resyncs (a copy that diverged from its writer's log), or
    of another replication ``event`` (its /metrics)."""
    import urllib.request

    from zmqueue.controlplane.consul_client import ConsulClient
    from zmqueue.controlplane.discovery import list_hosts

    [info] = [i for i in list_hosts(ConsulClient([agent.http_addr], 5)) if i.node == node]
    with urllib.request.urlopen(info.meta["http_endpoint"] + "/metrics", timeout=5) as r:
        lines = r.read().decode().splitlines()
    name = f'zmqueue_replication_events_total{{event="{event}"}}'
    found = [line for line in lines if line.startswith(name)]
    return float(found[0].split()[-1]) if found else 0.0


def test_a_new_writer_s_first_records_extend_the_replicas_copies_without_a_resync(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    """A replica that opened the stream empty, applied the writer's records
    and then became the writer published its first block with the epoch it
    had at open (0) as the epoch of its previous record: every replica took
    that for a diverged log and dropped its copy to fetch it again. Harmless
    while the new writer stays; when it is drained or dies right after, the
    records of the stream were on no replica any more (seen in
    test_draining_all_of_a_partitions_hosts_at_once_keeps_its_messages)."""
    hs, q, (node, _), new = _kill_the_fifo_writer(hosts, consul_agent, client, "resync.fifo", 10)
    wait_for(lambda: _try_send(q, b"after", "after"), 15, "a send accepted by the new writer")
    assert drain_in_order(q, 11, 20) == [f"{i}".encode() for i in range(10)] + [b"after"]
    others = [h.node for h in hs if h.node not in (node, new[0])]
    assert [_resyncs(consul_agent, n) for n in [new[0], *others]] == [0.0, 0.0], \
        "a replica dropped its copy of the stream after the writer changed"


def _positions(agent: ConsulAgent, queue: str, origin: str) -> dict[str, tuple[int, int]]:
    """Each replica's published (epoch of its last record, seq) of a stream."""
    _, items = consul_for(agent).kv.get(f"zmqueue-positions/{queue}/0/{origin}/", recurse=True)
    out = {}
    for it in items or []:
        pos = json.loads(it["Value"])
        out[it["Key"].rsplit("/", 1)[1]] = (int(pos["epoch"]), int(pos["seq"]))
    return out


def test_a_new_writer_appends_a_record_of_its_epoch_that_its_replicas_hold_before_any_send(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    """A host that takes over a stream whose log is not empty appends a record
    of its own epoch (RecordType.EPOCH, no message), and the replicas copy it:
    positions compare by the epoch of the last record, and without it a log
    whose last records were of an older term compared as behind a copy
    holding another writer's later records, though some of its own had been
    acknowledged since (docs/REPLICATION.md, "Takeover record")."""
    hs, q, (node, epoch), (new_node, new_epoch) = _kill_the_fifo_writer(
        hosts, consul_agent, client, "term.fifo", 5)
    assert new_epoch > epoch
    survivors = [h.node for h in hs if h.node != node]

    def both_at_the_new_epoch() -> dict[str, tuple[int, int]] | None:
        pos = _positions(consul_agent, "term.fifo", "fifo")
        return pos if all(pos.get(n, (0, 0))[0] == new_epoch for n in survivors) else None

    pos = wait_for(both_at_the_new_epoch, 15, f"{survivors} at epoch {new_epoch}, no send made")
    # the takeover record took the seq after the 5 messages, on the new writer and on the
    # other survivor alike
    other = next(n for n in survivors if n != new_node)
    assert pos[new_node] == pos[other] == (new_epoch, 6), pos
    # and the messages are all there, in order, for the next consumer
    assert drain_in_order(q, 5, 20) == [f"{i}".encode() for i in range(5)]


def test_a_former_writer_whose_copy_diverged_keeps_what_it_shares_with_the_new_writer(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    """A FIFO writer stores a send after both of its replicas died (no ack) and
    is killed; the replicas come back and one takes over (its takeover record
    takes seq 6). The former writer comes back with that send, of its old term,
    at seq 6: its copy diverged, and it cuts only that record (the writer
    answers ``keep: 5``), not the five acknowledged ones before it, which it
    dropped with the rest until the thirty-sixth session: had the new writer
    died while it fetched them again, it could have been elected without them
    (docs/REPLICATION.md, "Gaps, heartbeats, catch-up and resync")."""
    name = "cut.fifo"
    hs = three_hosts(hosts, consul_agent)
    q = client.create_queue(name, fifo=True, replication_factor=3)
    for i in range(5):
        q.send(f"{i}".encode(), group_id="g", dedup_id=f"d{i}")
    node, epoch = wait_for(lambda: writer_of(consul_agent, name, "fifo"), 10, "a writer")
    old, others = by_node(hs, node), [h for h in hs if h.node != node]
    for h in others:
        h.kill9()
    conn = client.connection(q.routes.part(0).endpoints[node])
    body = {"q": name, "p": 0, "m": [[b"never acknowledged", None, None, "g", "x"]]}
    with pytest.raises(zmqueue.ZmqueueError):  # (within 3 s of their last report: stored, no ack)
        conn.request(Command.SEND, body, 1000, request_id=conn.next_request_id())
    wait_for(lambda: _positions(consul_agent, name, "fifo").get(node) == (epoch, 6), 10,
             "the writer's position past the send no replica saw")
    old.kill9()
    for h in others:
        hosts.restart(h)
    _, new_epoch = wait_for(
        lambda: (w := writer_of(consul_agent, name, "fifo")) and w[0] != node and w, 30, "a new writer")
    wait_for(lambda: _try_send(q, b"after", "after"), 15, "a send accepted by the new writer")
    hosts.restart(old)
    wait_for(lambda: _positions(consul_agent, name, "fifo").get(node) == (new_epoch, 7), 30,
             f"{node} holding the new writer's 7 records")
    assert _resyncs(consul_agent, node) == 1.0
    assert _resyncs(consul_agent, node, "resync_kept") == 5.0, "the shared records were dropped too"
    assert drain_in_order(q, 6, 20) == [f"{i}".encode() for i in range(5)] + [b"after"]


def test_a_replica_restarted_behind_large_blocks_catches_up(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client) -> None:
    """(A catch-up reply carried up to 2000 records whatever their size: with
    messages of 1 MiB it passed the 64 MiB frame limit, the replica refused it
    and asked again for ever; and every large send arriving in one loop pass
    went into one block, published as one frame past that limit.) Replies and
    replication frames now carry about 8 MiB of blocks, and a host commits a
    stream early past 8 MiB staged."""
    hs = three_hosts(hosts, consul_agent)
    q = client.create_queue("bigblocks", replication_factor=3, sync_replication=True,
                            max_message_bytes=1 << 20)
    eps = wait_for(lambda: len(e := q.routes.part(0).endpoints) == 3 and e, 10, "3 endpoints listed")
    home = q.routes.part(0).home
    away = by_node(hs, next(n for n in sorted(eps) if n != home))
    away.kill9()
    size = (1 << 20) - 1024
    for i in range(3):  # 3 batches of 30 MiB (2 of 3 replicas acknowledge each)
        q.send_batch([bytes([65 + i]) * size] * 30)
    new = hosts.restart(away)
    wait_for(lambda: all_passing(check_statuses(consul_agent, away.node)), 60, f"{away.node} passing again")

    def held_there() -> int:
        endpoint = client.queue_info("bigblocks")["partitions"][0]["endpoints"].get(away.node)
        if not endpoint:
            return -1
        try:
            return int(client.connection(endpoint).request(Command.QUEUE_STATS, {"q": "bigblocks", "p": 0},
                                                           3000)["total"])
        except zmqueue.RequestTimeout:  # (a host's cache may name the killed process's port a moment)
            return -1

    wait_for(lambda: held_there() == 90, 60, f"{away.node} to catch up with the 90 messages")
    assert new.alive()


@pytest.mark.parametrize("what", ["purge", "stats"])
def test_purge_and_stats_right_after_a_writer_is_killed_follow_it_to_the_new_one(
        hosts: HostFactory, consul_agent: ConsulAgent, client: zmqueue.Client, what: str) -> None:
    """(Each went to the hosts the handle knew as writers, retried on the
    same host: right after a kill -9 of the FIFO writer they failed with
    ConnectionLost after ~10 s, while a new writer was elected in ~1 s.)
    Each stream is asked for its own (``o``), and followed through the
    failover like a delete."""
    hs = three_hosts(hosts, consul_agent)
    q = client.create_queue("purged.fifo", fifo=True, replication_factor=3)
    q.send_batch([zmqueue.OutgoingMessage(f"{i}".encode(), group_id=f"g{i % 3}", dedup_id=f"d{i}")
                  for i in range(30)])
    node, _ = wait_for(lambda: writer_of(consul_agent, "purged.fifo", "fifo"), 10, "a writer")
    assert q.stats()["total"] == 30  # (the handle knows the writer about to die)
    by_node(hs, node).kill9()
    if what == "purge":
        assert q.purge() == 30
        assert q.receive(max_messages=10, wait_time=1) == []
    else:
        assert q.stats()["total"] == 30
    assert writer_of(consul_agent, "purged.fifo", "fifo") not in (None, (node, _))
