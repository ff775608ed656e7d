"""A host restarted with records of a term answers catch-ups as that term, and
a reply its callback refuses never reaches the request loop.

Found by ``test_hosts_that_join_a_partition_whose_only_replica_is_down_do_not_take_it_over``
(about one run in five): the host holding the records restarted, its stream's
term started at 0, a joining replica fetched its records (of term 1) and
refused them as "newer than their sender's term", and that StaleEpoch, raised
in a forwarded request's callback, ended the joining host's process.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zmqueue.config import QueueConfig
from zmqueue.dataplane.forwarder import Forwarder
from zmqueue.dataplane.replication import Replicator, decode_chunks, stream_id
from zmqueue.dataplane.storage import StorageConfig
from zmqueue.dataplane.streamset import StreamSet
from zmqueue.dataplane.topology import Metadata, PartitionInfo
from zmqueue.errors import StaleEpoch, ZmqueueError
from zmqueue.protocol import Command

NOW = 1_000_000
KEY = ("q.fifo", 0, "fifo")
CFG = QueueConfig(name="q.fifo", fifo=True, replication_factor=3, sync_replication=True)
META = Metadata({"q.fifo": CFG}, {("q.fifo", 0): PartitionInfo(("a", "b", "c"), {}, ())})


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    c: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield c
    c.destroy(linger=0)


def opened(node: str, path: Path) -> StreamSet:
    ss = StreamSet(node, path, StorageConfig(fsync="never"))
    ss.reconcile(META, NOW)
    return ss


def replicator(ctx: zmq.Context[zmq.Socket[bytes]], ss: StreamSet) -> Replicator:
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    return Replicator(ctx, ss.node, pub, Forwarder(ctx), lambda: ss.streams, lambda n: None,
                      lambda k: None, lambda k, keep: None)


def test_a_restarted_copy_answers_a_catch_up_that_an_empty_replica_applies(
        tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    a = opened("a", tmp_path / "a")
    a.streams[KEY].store.append_batch([b"m"] * 5, NOW, 1)  # written in term 1
    a.streams[KEY].store.append_batch([b"n"] * 2, NOW, 3)  # and term 3
    a.streams[KEY].store.commit()
    a.close()
    a = opened("a", tmp_path / "a")  # restarted: not elected yet
    b = opened("b", tmp_path / "b")  # a new, empty replica
    try:
        assert a.streams[KEY].epoch == 3  # the newest term among its records
        reply = replicator(ctx, a).h_catch_up({"s": stream_id(KEY), "from": 1, "prev": [0, 0]})
        assert reply["e"] == 3 and reply["last"] == 7
        rb = replicator(ctx, b)
        assert rb.apply(b.streams[KEY], decode_chunks(reply["c"]), reply["e"])
        assert b.streams[KEY].store.last_seq == 7 and b.streams[KEY].store.last_epoch == 3
        # a sender whose records claim a newer term than its own is still refused
        with pytest.raises(StaleEpoch):
            rb.apply(b.streams[KEY], decode_chunks(reply["c"]), 2)
    finally:
        a.close()
        b.close()


def test_a_reply_its_callback_refuses_is_counted_not_raised_into_the_loop(
        ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    fw = Forwarder(ctx)
    seen: list[Any] = []

    def refuse(body: Any, err: ZmqueueError | None) -> None:
        seen.append(err)
        raise StaleEpoch("a record's epoch is newer than its sender's term")

    try:
        # nothing listens there: the request times out, and its callback refuses that
        fw.request("tcp://127.0.0.1:9", Command.CATCH_UP, {}, refuse, now_ms=0, timeout_ms=1)
        fw.poll(now_ms=10)
        assert len(seen) == 1 and fw.refused_replies == 1 and not fw.pending
    finally:
        fw.close()


class Recording:
    """Stands in for the Forwarder of a replica: keeps each request's callback."""

    curve = None

    def __init__(self) -> None:
        self.calls: list[tuple[Command, Any, Any]] = []

    def request(self, endpoint: str, command: Command, body: Any, callback: Any,
                now_ms: int, timeout_ms: int = 5000) -> None:
        self.calls.append((command, body, callback))


_leaf = st.one_of(st.none(), st.booleans(), st.integers(-3, 2**64), st.binary(max_size=40),
                  st.text(max_size=8))
_any = st.recursive(_leaf, lambda inner: st.lists(inner, max_size=4), max_leaves=12)
_num = st.one_of(st.integers(-3, 30), _any)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(reply=st.one_of(
    _any,
    st.fixed_dictionaries({}, optional={"e": _num, "c": st.one_of(st.just([]), _any), "last": _num,
                                        "resync": _any, "keep": _num}),
    # well-formed chunks of a real log, with any term claimed for them
    st.fixed_dictionaries({"e": st.integers(-1, 5), "c": st.just("real"),
                           "last": st.integers(0, 20)}),
    st.fixed_dictionaries({"b": st.lists(_any, max_size=3)})))
def test_any_peer_reply_to_a_catch_up_or_positions_request_is_applied_or_refused(
        tmp_path_factory: pytest.TempPathFactory, reply: Any) -> None:
    """Whatever a peer answers, the callbacks either act on it or refuse it
    with a ZmqueueError (which the Forwarder counts); any other exception
    would end the host."""
    base = tmp_path_factory.mktemp("reply")
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    a, b = opened("a", base / "a"), opened("b", base / "b")
    try:
        a.streams[KEY].store.append_batch([b"m"] * 7, NOW, 2)
        a.streams[KEY].store.commit()
        if isinstance(reply, dict) and reply.get("c") == "real":
            reply = {**reply, "c": replicator(ctx, a).h_catch_up(
                {"s": stream_id(KEY), "from": 1, "prev": [0, 0]})["c"]}
        fw = Recording()
        pub = ctx.socket(zmq.PUB)
        pub.setsockopt(zmq.LINGER, 0)
        rb = Replicator(ctx, "b", pub, cast(Forwarder, fw), lambda: b.streams,
                        lambda n: "tcp://127.0.0.1:9", lambda k: None, lambda k, keep: None)
        rb.catch_up(b.streams[KEY], NOW, source="a")
        rb.report_positions(NOW, set())  # (no writer known: nothing to report)
        callbacks = [cb for _, _, cb in fw.calls] + [rb._on_positions_reply([KEY])]
        for cb in callbacks:
            with contextlib.suppress(ZmqueueError):  # refused: counted by the Forwarder
                cb(reply, None)
        assert b.streams[KEY].store.last_seq in (0, 7)  # nothing, or the real log whole
    finally:
        a.close()
        b.close()
        ctx.destroy(linger=0)


def test_an_empty_replica_takes_a_published_block_past_seq_1_as_a_gap_not_as_its_first_record(
        tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    """Found by test_draining_all_of_a_partitions_hosts_at_once_keeps_its_messages (up to
    two runs in five) once a new writer publishes a takeover record at once: a replica
    that had just joined, empty, took that block (seq 61) as its first record, skipped the
    60 messages before it, and counted as caught up; elected writer later, it had none of
    them to deliver. A published block past seq 1 is a gap for an empty copy: it catches
    up from the start (a catch-up reply may still start past seq 1: the writer's first
    retained record after compaction)."""
    a = opened("a", tmp_path / "a")
    b = opened("b", tmp_path / "b")  # a replica that just joined, empty
    try:
        wa = a.streams[KEY]
        wa.store.append_batch([b"m"] * 60, NOW, 1)
        wa.store.commit()
        wa.epoch = wa.store.epoch = 2
        wa.store.mark_epoch(NOW)  # a new writer's takeover record, published at once
        wa.store.commit()
        block = {"s": stream_id(KEY), "e": 2, "prev": [1, 60],
                 "c": replicator(ctx, a).h_catch_up({"s": stream_id(KEY), "from": 61, "prev": [1, 60]})["c"]}
        rb = replicator(ctx, b)
        rb.forwarder = cast(Any, Recording())
        rb.writer_of[KEY] = "a"
        rb.peer_endpoint = lambda node: "tcp://127.0.0.1:9"
        rb._on_pub(Command.REPLICATE, block, NOW)
        wb = b.streams[KEY]
        assert wb.store.last_seq == 0, "an empty copy took a block from the middle of the log"
        assert rb.counters["gaps"] == 1
        [(command, body, done)] = [(c, bd, cb) for c, bd, cb in rb.forwarder.calls]  # type: ignore[attr-defined]
        assert command == Command.CATCH_UP and body["from"] == 1
        done(replicator(ctx, a).h_catch_up(body), None)  # the catch-up brings all 61 records
        assert (wb.store.last_seq, wb.store.last_epoch, wb.store.stats(NOW)["total"]) == (61, 2, 60)
    finally:
        a.close()
        b.close()


def test_frames_of_an_older_term_are_refused_counted_and_logged_once_a_minute(
        tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]], caplog: pytest.LogCaptureFixture) -> None:
    """(A writer whose epoch went back, its lock key having started again at 1,
    was refused by every replica with nothing in any log: only a counter rose.)"""
    b = opened("b", tmp_path / "b")
    try:
        b.streams[KEY].epoch = 5
        rb = replicator(ctx, b)
        caplog.set_level(logging.WARNING, logger="zmqueue.dataplane.replication")
        for _ in range(3):
            assert rb._replica_in(KEY, 1) is None
        assert rb.counters["stale_refused"] == 3
        warned = [r.getMessage() for r in caplog.records if "refusing frames of term 1" in r.getMessage()]
        assert len(warned) == 1 and "this copy is at term 5" in warned[0]
        assert rb._replica_in(KEY, 5) is b.streams[KEY]
    finally:
        b.close()
