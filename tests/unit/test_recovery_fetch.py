"""A new writer's recovery fetches from the peer furthest ahead, also when
that peer answers while a catch-up from another is in flight.

With R = 5 a record is acknowledged once three of the five hold it, so a
new writer that lacks it may find it on only some of its four peers. The
writer asks every passing peer's position and fetches what a peer holds
beyond its own copy, one catch-up per stream at a time; until the
thirty-sixth session a peer that answered while the catch-up from another
was in flight was never fetched from, and the writer settled at the
first peer's position. Real stores, the real replication code; the peer
requests are answered by the peers' own handlers (``h_position``,
``h_catch_up``) through a forwarder that keeps each request's callback."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import zmq

from tests.unit.peer_harness import Forwarder, Svc
from tests.unit.test_restart_epoch import replicator
from zmqueue.config import QueueConfig
from zmqueue.dataplane.handover import Handover
from zmqueue.dataplane.service import QueueService
from zmqueue.dataplane.storage import StorageConfig
from zmqueue.dataplane.stream import Role
from zmqueue.dataplane.streamset import StreamSet
from zmqueue.dataplane.topology import Metadata, PartitionInfo, Peer
from zmqueue.protocol import Command

NOW = 1_000_000
KEY = ("q.fifo", 0, "fifo")
NODES = ("h1", "h2", "h3", "h4", "h5")
META = Metadata({"q.fifo": QueueConfig(name="q.fifo", fifo=True, replication_factor=5)},
                {("q.fifo", 0): PartitionInfo(NODES, {})},
                {n: Peer(n, None, None, f"tcp://127.0.0.1:{9000 + i}", True) for i, n in enumerate(NODES)})


def copies(base: Path, lengths: dict[str, int]) -> dict[str, StreamSet]:
    """Each host's copy of the stream: the first ``n`` of the same 9 records."""
    out = {}
    for node, n in lengths.items():
        ss = StreamSet(node, base / node, StorageConfig(fsync="never"))
        ss.reconcile(META, NOW)
        store = ss.streams[KEY].store
        for i in range(n):  # (one commit each: a block per record, as a writer's sends)
            store.append_batch([f"m{i}".encode()], NOW, 1, message_ids=(i + 1).to_bytes(16, "big"))
            store.commit()
        ss.streams[KEY].epoch = 1  # (the term of the writer that wrote them)
        out[node] = ss
    return out


def test_a_new_writer_fetches_from_the_furthest_peer_that_answered_during_another_catch_up(
        tmp_path: Path) -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    hosts = copies(tmp_path, {"h1": 5, "h2": 7, "h3": 9, "h4": 5, "h5": 5})
    node_at = {META.peer_endpoint(n): n for n in NODES}
    peer = {n: replicator(ctx, hosts[n]) for n in NODES[1:]}  # each peer's request handlers
    try:
        fw = Forwarder()
        rep = replicator(ctx, hosts["h1"])
        rep.forwarder = cast(Any, fw)
        rep.peer_endpoint = META.peer_endpoint
        handover = Handover(cast(QueueService, Svc("h1", hosts["h1"], fw, rep, META)))
        handover.on_elected(KEY, 2)
        st = hosts["h1"].streams[KEY]
        assert st.role is Role.RECOVERING
        asked = {node_at[ep]: (body, done) for ep, command, body, done in fw.take()
                 if command == Command.POSITION}
        assert sorted(asked) == ["h2", "h3", "h4", "h5"]
        for node in ("h2", "h3", "h4", "h5"):  # h2 (7 records) answers first, then h3 (9)
            body, done = asked[node]
            done(peer[node].h_position(body), None)
        # the catch-up from h2 is the one in flight; h3's answer came meanwhile
        [(ep, command, body, done)] = fw.take()
        assert (node_at[ep], command, body["from"]) == ("h2", Command.CATCH_UP, 6)
        done(peer["h2"].h_catch_up(body), None)
        st.store.commit()
        assert st.store.last_seq == 7
        handover.tick(NOW)  # every peer heard from, no catch-up in flight: h3 is still ahead
        assert st.role is Role.RECOVERING, "settled at the first peer's position"
        [(ep, command, body, done)] = fw.take()
        assert (node_at[ep], command, body["from"]) == ("h3", Command.CATCH_UP, 8)
        done(peer["h3"].h_catch_up(body), None)
        handover.tick(NOW)
        assert (st.role, fw.take()) == (Role.WRITER, [])
        # every record of the furthest copy, then the takeover record of its epoch
        assert (st.store.last_seq, st.store.last_epoch) == (10, 2)
        st.store.commit()
        assert [r.body for r in st.store.read_records(1, 9)] == [f"m{i}".encode() for i in range(9)]
    finally:
        for ss in hosts.values():
            ss.close()
        ctx.destroy(linger=0)
