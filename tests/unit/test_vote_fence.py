"""A replica that answered a new writer's recovery probe (its vote) takes no
more records of the term before, so the writer of that term cannot count it
toward an acknowledgement the new writer lacks.

Found by ``test_a_writer_cut_off_from_consul_acknowledges_no_async_write_the_new_writer_lacks``
(1 of 15,751 acknowledged messages lost, once): the writer cut off from
Consul still serves for the outage grace and acknowledges once a majority
holds a record (itself and one replica). A new writer, elected meanwhile,
asks the replicas' positions before it writes (``Handover``) and fetches
what they hold beyond its copy. The probe carried no term, so a replica
that had answered it still applied the old writer's next record and
reported it to the old writer (its metadata still named it): a majority,
so acknowledged; the new writer had settled at the answer without it, wrote
its takeover record at that seq, and the replica's copy was cut as diverged.
As a Raft vote carries the candidate's term, the probe now carries the new
writer's epoch, and the replica's term moves up to it before it answers.

Real stores and the real replication and recovery code; the hosts' peer
requests are handed from one to another by the test (no sockets)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import zmq

from tests.unit.peer_harness import Forwarder, Svc, zmq_context
from tests.unit.test_restart_epoch import replicator
from zmqueue import protocol
from zmqueue.config import QueueConfig
from zmqueue.dataplane.handover import Handover
from zmqueue.dataplane.replication import Replicator, stream_id
from zmqueue.dataplane.service import QueueService
from zmqueue.dataplane.storage import StorageConfig
from zmqueue.dataplane.stream import Role
from zmqueue.dataplane.streamset import StreamSet
from zmqueue.dataplane.topology import Metadata, PartitionInfo, Peer
from zmqueue.protocol import Command

NOW = 1_000_000
KEY = ("q.fifo", 0, "fifo")
NODES = ("h1", "h2", "h3")
OLD, NEW = 1, 2
"""The cut-off writer's term (h1) and the new writer's (h2)."""
# an asynchronous FIFO queue; h1 is cut off from Consul: not passing
CFG = QueueConfig(name="q.fifo", fifo=True, replication_factor=3, sync_replication=False)
META = Metadata({"q.fifo": CFG}, {("q.fifo", 0): PartitionInfo(NODES, {})},
                {n: Peer(n, None, None, f"tcp://127.0.0.1:{9100 + i}", n != "h1")
                 for i, n in enumerate(NODES)})
NODE_AT = {META.peer_endpoint(n): n for n in NODES}


class Cluster:
    """h1 writes the stream at term OLD (cut off from Consul: its writes need a
    majority), h2 and h3 follow it; all three hold the same five records."""

    def __init__(self, base: Path, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
        self.hosts: dict[str, StreamSet] = {}
        self.reps: dict[str, Replicator] = {}
        self.fws: dict[str, Forwarder] = {}
        for node in NODES:
            ss = StreamSet(node, base / node, StorageConfig(fsync="never"))
            ss.reconcile(META, NOW)
            for i in range(5):
                ss.streams[KEY].store.append_batch([f"m{i}".encode()], NOW, OLD,
                                                   message_ids=(i + 1).to_bytes(16, "big"))
                ss.streams[KEY].store.commit()
            ss.streams[KEY].epoch = OLD
            rep = replicator(ctx, ss)
            self.fws[node] = Forwarder()
            rep.forwarder = cast(Any, self.fws[node])
            rep.peer_endpoint = META.peer_endpoint
            rep.writer_of = {KEY: "h1"}  # (the replicas' metadata still names h1)
            self.hosts[node], self.reps[node] = ss, rep
        old = self.stream("h1")
        old.role, old.unconfirmed, old.lease_until = Role.WRITER, True, float("inf")
        for node in ("h2", "h3"):  # (both reported the five records before h1 was cut off)
            self.reps["h1"].note_position({"s": stream_id(KEY), "node": node, "e": OLD, "seq": 5})
        self.published: list[bytes] = []
        self.reps["h1"]._send_pub = lambda topic, payload: self.published.append(payload)  # type: ignore[method-assign]

    def stream(self, node: str) -> Any:
        return self.hosts[node].streams[KEY]

    def old_writer_appends(self, body: bytes) -> None:
        """h1 stores a send and publishes it (``Replicator.publish``), h3 gets the frame."""
        st = self.stream("h1")
        st.store.append_batch([body], NOW, OLD, message_ids=(st.store.last_seq + 1).to_bytes(16, "big"))
        st.store.commit()
        self.reps["h1"].publish(st)
        for payload in self.published:
            frame = protocol.decode(payload, protocol.PEER_MAX_FRAME_BYTES)
            self.reps["h3"]._on_pub(frame.command, frame.body, NOW)
        self.published.clear()

    def h3_commits_and_reports(self) -> None:
        """h3's group commit, then its position reports, delivered to the hosts they name."""
        self.stream("h3").store.commit()
        self.reps["h3"].report_positions(NOW, {KEY})
        for ep, command, body, _ in self.fws["h3"].take():
            rep = self.reps[NODE_AT[ep]]
            if command == Command.POSITION:
                rep.note_position(body)
            elif command == Command.POSITIONS:
                rep.h_positions(body)

    def close(self) -> None:
        for ss in self.hosts.values():
            ss.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with zmq_context() as ctx:
        c = Cluster(tmp_path, ctx)
        try:
            yield c
        finally:
            c.close()


def recover(c: Cluster, record_before_vote: bool, record_after_vote: bool) -> None:
    """h2 is elected at term NEW while h1 still writes; h3 answers h2's probe,
    and h1's sixth record reaches h3 before or after that answer."""
    h2 = c.stream("h2")
    handover = Handover(cast(QueueService, Svc("h2", c.hosts["h2"], c.fws["h2"], c.reps["h2"], META)))
    handover.on_elected(KEY, NEW)
    asked = {NODE_AT[ep]: (body, done) for ep, command, body, done in c.fws["h2"].take()
             if command == Command.POSITION}
    assert sorted(asked) == ["h3"]  # (h1 is not passing)
    if record_before_vote:
        c.old_writer_appends(b"before the vote")
        c.h3_commits_and_reports()
    body, done = asked["h3"]
    done(c.reps["h3"].h_position(body), None)  # h3's vote
    if record_after_vote:
        c.old_writer_appends(b"after the vote")
        c.h3_commits_and_reports()
    for ep, command, body, done in c.fws["h2"].take():  # what h2 fetches from h3
        assert (NODE_AT[ep], command) == ("h3", Command.CATCH_UP)
        done(c.reps["h3"].h_catch_up(body), None)
    h2.store.commit()
    handover.tick(NOW)
    assert h2.role is Role.WRITER and h2.store.last_epoch == NEW  # (its takeover record)
    h2.store.commit()


def acknowledged_but_missing(c: Cluster) -> list[int]:
    """The seqs h1 counts as held by a majority (so it acknowledges them) that
    h2, the new writer, does not hold as h1 wrote them."""
    old, new = c.stream("h1"), c.stream("h2")
    done = old.replicated_seq()
    theirs = {r.seq: (r.epoch, r.body) for r in new.store.read_records(1, done)}
    return [r.seq for r in old.store.read_records(1, done) if theirs.get(r.seq) != (r.epoch, r.body)]


def test_a_replica_that_answered_a_new_writers_probe_acknowledges_no_older_record(cluster: Cluster) -> None:
    recover(cluster, record_before_vote=False, record_after_vote=True)
    assert cluster.stream("h1").replicated_seq() == 5, "h3's report acknowledged h1's sixth record"
    assert acknowledged_but_missing(cluster) == []
    h3 = cluster.stream("h3")
    assert (h3.epoch, h3.store.last_seq) == (NEW, 5)  # it refused the older term's record
    assert cluster.reps["h3"].counters["stale_refused"] == 1


def test_what_a_replica_acknowledged_before_its_vote_the_new_writer_fetches(cluster: Cluster) -> None:
    recover(cluster, record_before_vote=True, record_after_vote=False)
    assert cluster.stream("h1").replicated_seq() == 6  # h1 and h3: a majority
    assert acknowledged_but_missing(cluster) == []
    assert [r.body for r in cluster.stream("h2").store.read_records(6, 1)] == [b"before the vote"]


def test_a_probe_moves_only_a_replicas_term_and_only_up(cluster: Cluster) -> None:
    body = {"s": stream_id(KEY), "node": "h2", "e": -1, "seq": -1}
    h3, h1 = cluster.stream("h3"), cluster.stream("h1")
    cluster.reps["h3"].h_position(body)  # a probe of a host older than this rule: no term
    assert h3.epoch == OLD
    cluster.reps["h3"].h_position({**body, "term": 7})
    assert h3.epoch == 7
    cluster.reps["h3"].h_position({**body, "term": 4})  # a stale probe
    assert h3.epoch == 7
    cluster.reps["h1"].h_position({**body, "term": 7})  # a writer's term moves only by an election
    assert (h1.role, h1.epoch) == (Role.WRITER, OLD)
