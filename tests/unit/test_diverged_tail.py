"""A replica whose copy is longer than its new writer's log, with an older
term's records past where the two part, is counted toward no acknowledgement
of the new term: it reports no position to the new writer until it holds a
record of that term, and it cuts the tail as soon as the writer's first
frame (or heartbeat) shows it.

Before: a frame wholly within the replica's log was skipped as a duplicate
(its epochs were compared only at the replica's last seq, which lay past
it), a heartbeat whose last seq was below the replica's started nothing,
and the replica reported its last seq under the new term. The new writer
counted it as holding its records up to there, so a synchronous write was
acknowledged by the writer and a copy that held another record at its seq
(lost if the writer failed next). Recovery fetches and then cuts such a
tail when the replica answers the new writer's probe; this is the case it
does not: a replica that is not passing at the takeover, or whose answer
takes over a second.

Real stores and the real replication and recovery code; the hosts' peer
requests and frames are handed from one to another by the test (no
sockets), as in tests/unit/test_vote_fence.py."""

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
from zmqueue.dataplane.replication import REPORT_EVERY_MS, Replicator, encode_chunks, stream_id
from zmqueue.dataplane.service import QueueService
from zmqueue.dataplane.storage import StorageConfig
from zmqueue.dataplane.stream import Role
from zmqueue.dataplane.streamset import StreamSet
from zmqueue.dataplane.topology import Metadata, PartitionInfo, Peer
from zmqueue.protocol import Command

NOW = 1_000_000
KEY = ("q", 0, "h1")
NODES = ("h1", "h2", "h3")
OLD, NEW = 1, 2
"""h1's term (it wrote seq 1..8 and is down now) and h2's, the new writer's."""
# a synchronous queue; at h2's takeover neither h1 (down) nor h3 (restarting) is passing
CFG = QueueConfig(name="q", replication_factor=3, sync_replication=True)
META = Metadata({"q": CFG}, {("q", 0): PartitionInfo(NODES, {"h1": "h2"})},
                {n: Peer(n, None, None, f"tcp://127.0.0.1:{9200 + i}", n == "h2")
                 for i, n in enumerate(NODES)})
NODE_AT = {META.peer_endpoint(n): n for n in NODES}


class Cluster:
    """h2 and h3 hold h1's records 1..5 of term OLD; h3 also holds h1's 6..8,
    which reached no other copy and were not acknowledged (h1 failed first)."""

    def __init__(self, base: Path, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
        self.hosts: dict[str, StreamSet] = {}
        self.reps: dict[str, Replicator] = {}
        self.fws: dict[str, Forwarder] = {}
        self.now = NOW
        for node, held in (("h2", 5), ("h3", 8)):
            ss = StreamSet(node, base / node, StorageConfig(fsync="never"))
            ss.reconcile(META, NOW)
            for i in range(held):
                ss.streams[KEY].store.append_batch([f"m{i + 1}".encode()], NOW, OLD)
                ss.streams[KEY].store.commit()
            ss.streams[KEY].epoch = OLD
            rep = replicator(ctx, ss)
            self.fws[node] = Forwarder()
            rep.forwarder = cast(Any, self.fws[node])
            rep.peer_endpoint = META.peer_endpoint
            rep.writer_of = {KEY: "h2"}
            rep.on_resync = self._resyncer(ss, rep)
            self.hosts[node], self.reps[node] = ss, rep
        self.frames: list[bytes] = []
        self.reps["h2"]._send_pub = lambda topic, payload: self.frames.append(payload)  # type: ignore[method-assign]

    @staticmethod
    def _resyncer(ss: StreamSet, rep: Replicator) -> Any:
        def on_resync(key: Any, keep: int) -> None:  # (QueueService._resync)
            fresh = ss.resync(key, keep, NOW)
            if fresh is not None:
                rep.catch_up(fresh, NOW)
        return on_resync

    def stream(self, node: str) -> Any:
        return self.hosts[node].streams[KEY]

    def h2_takes_over(self) -> None:
        """h2 is elected at term NEW; no peer is passing, so it probes none and
        writes its takeover record at seq 6."""
        svc = Svc("h2", self.hosts["h2"], self.fws["h2"], self.reps["h2"], META)
        handover = Handover(cast(QueueService, svc))
        handover.on_elected(KEY, NEW)
        assert not self.fws["h2"].take()  # (no passing peer to probe)
        handover.tick(NOW)
        h2 = self.stream("h2")
        assert h2.role is Role.WRITER and (h2.store.last_epoch, h2.store.last_seq) == (NEW, 6)
        h2.store.commit()

    def h2_stores(self, body: bytes) -> int:
        """A client's send, stored and committed on h2: its seq."""
        st = self.stream("h2")
        st.store.append_batch([body], NOW, NEW)
        st.store.commit()
        return int(st.store.last_seq)

    def h2_publishes(self, deliver: bool = True) -> None:
        """h2's REPLICATE frames since its last publish (and heartbeats), to h3 or lost."""
        self.reps["h2"].publish(self.stream("h2"))
        frames, self.frames = self.frames, []
        for payload in frames if deliver else []:
            frame = protocol.decode(payload, protocol.PEER_MAX_FRAME_BYTES)
            self.reps["h3"]._on_pub(frame.command, frame.body, self.now)

    def h2_heartbeats(self) -> None:
        self.reps["h2"].next_heartbeat_ms = 0
        self.reps["h2"].heartbeats(self.now)
        frames, self.frames = self.frames, []
        assert frames, "h2 beats while h3 has not reported its last seq"
        for payload in frames:
            frame = protocol.decode(payload, protocol.PEER_MAX_FRAME_BYTES)
            self.reps["h3"]._on_pub(frame.command, frame.body, self.now)

    def h3_commits_and_reports(self) -> None:
        """h3's group commit, then its reports (after the commit, and the periodic
        POSITIONS), delivered to h2; what h2 answers goes back to h3."""
        self.now += REPORT_EVERY_MS
        self.stream("h3").store.commit()
        self.reps["h3"].report_positions(self.now, {KEY})
        for ep, command, body, done in [c for c in self.fws["h3"].calls
                                        if c[1] in (Command.POSITION, Command.POSITIONS)]:
            self.fws["h3"].calls.remove((ep, command, body, done))
            assert NODE_AT[ep] == "h2"
            if command == Command.POSITION:
                self.reps["h2"].note_position(body)
            else:
                done(self.reps["h2"].h_positions(body)[0], None)

    def h3_catches_up(self) -> int:
        """Serve h3's CATCH_UP requests from h2 until it asks no more; how many."""
        served = 0
        while calls := self.fws["h3"].take():
            for ep, command, body, done in calls:
                assert (NODE_AT[ep], command) == ("h2", Command.CATCH_UP)
                done(self.reps["h2"].h_catch_up(body), None)
                served += 1
        self.stream("h3").store.commit()
        return served

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


def acknowledged_but_not_on_h3(c: Cluster) -> list[int]:
    """The seqs h2 counts as held by a majority (h2 and h3: h1 is down), so
    acknowledges, that h3 does not hold as h2 wrote them."""
    h2, h3 = c.stream("h2"), c.stream("h3")
    done = h2.replicated_seq()
    theirs = {r.seq: (r.epoch, r.body) for r in h3.store.read_records(1, done)}
    return [r.seq for r in h2.store.read_records(1, done) if theirs.get(r.seq) != (r.epoch, r.body)]


def same_log(c: Cluster) -> bool:
    h2, h3 = c.stream("h2").store, c.stream("h3").store
    return ([(r.seq, r.epoch, r.body) for r in h2.read_records(1, 100)]
            == [(r.seq, r.epoch, r.body) for r in h3.read_records(1, 100)])


def test_a_longer_diverged_copy_is_not_counted_and_is_cut_at_the_new_writers_first_frame(
        cluster: Cluster) -> None:
    cluster.h2_takes_over()
    cluster.h2_publishes()  # the takeover record (seq 6 of NEW) lies within h3's longer copy
    cluster.h3_commits_and_reports()  # (before its resync is answered)
    seq = cluster.h2_stores(b"acked")
    cluster.h2_publishes()
    cluster.h3_commits_and_reports()
    assert seq == 7
    assert acknowledged_but_not_on_h3(cluster) == [], "h2 counted h3's term-OLD records as its own"
    assert cluster.stream("h2").replicated_seq() < 7
    assert cluster.h3_catches_up() >= 2  # resync (h3 keeps seq 1..5), then the fetch of 6..7
    assert cluster.reps["h3"].counters["resyncs"] == 1
    cluster.h3_commits_and_reports()
    assert same_log(cluster)
    assert cluster.stream("h2").replicated_seq() == 7  # acknowledged now, and held by both


def test_a_heartbeat_alone_starts_the_cut_of_a_longer_diverged_copy(cluster: Cluster) -> None:
    cluster.h2_takes_over()
    cluster.h2_publishes(deliver=False)  # the takeover record's frame is lost
    cluster.h2_heartbeats()  # "term NEW, last seq 6": h3 holds more, and nothing of NEW
    cluster.h3_commits_and_reports()
    seq = cluster.h2_stores(b"acked")  # (not published yet: nothing has reached h3)
    assert acknowledged_but_not_on_h3(cluster) == [], "h2 counted h3's term-OLD records as its own"
    assert cluster.stream("h2").replicated_seq() < seq
    assert cluster.h3_catches_up() >= 2
    cluster.h3_commits_and_reports()
    assert same_log(cluster)
    assert cluster.stream("h2").replicated_seq() == seq


def test_frames_a_copy_already_holds_start_no_catch_up(cluster: Cluster) -> None:
    """The fast path: a published frame, or a catch-up's overlap, that the copy
    already holds (the same records) is skipped and asks nothing."""
    h3 = cluster.stream("h3")
    h3.store.truncate_after(5, NOW)  # (h3 as h2: seq 1..5 of OLD)
    cluster.h2_takes_over()
    cluster.h2_publishes()
    cluster.h3_commits_and_reports()
    assert same_log(cluster) and cluster.stream("h2").replicated_seq() == 6
    cluster.h2_stores(b"more")
    cluster.h2_publishes()
    h3 = cluster.stream("h3")
    h2 = cluster.stream("h2")
    rep = cluster.reps["h3"]
    for first in (1, 4, 6, 7):  # older terms', across the takeover, this term's
        chunks = h2.store.read_chunks(first, 100)
        assert rep.apply(h3, chunks, NEW, published=True)
        before = h2.store.read_records(first - 1, 1) if first > 1 else []
        prev = [before[0].epoch, before[0].seq] if before else [0, 0]
        body = {"s": stream_id(KEY), "e": NEW, "prev": prev, "c": encode_chunks(chunks)}
        rep._on_pub(Command.REPLICATE, body, cluster.now)
    assert not cluster.fws["h3"].calls and rep.counters["gaps"] == 0
    cluster.h3_commits_and_reports()
    assert same_log(cluster) and h2.replicated_seq() == 7
