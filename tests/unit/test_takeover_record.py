"""The takeover record (RecordType.EPOCH): a host that becomes the writer of
a stream whose log holds records of an older term appends one record of its
own epoch before it acknowledges anything (docs/REPLICATION.md, "Takeover
record"). Pure logic over a real store on disk (``StreamSet`` in a tmp dir),
with the few service parts ``Handover`` reads as plain values."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from zmqueue.config import QueueConfig
from zmqueue.dataplane.dispatch import DEFERRED, Request
from zmqueue.dataplane.handover import Handover
from zmqueue.dataplane.service import QueueService
from zmqueue.dataplane.storage import PartitionStore, RecordType, StorageConfig
from zmqueue.dataplane.stream import PendingAck, Role, Stream
from zmqueue.dataplane.streamset import StreamSet
from zmqueue.dataplane.topology import Metadata, PartitionInfo

NOW = 1_000_000
KEY = ("q.fifo", 0, "fifo")


class Svc:
    """What ``Handover`` reads of a QueueService when a recovery ends."""

    def __init__(self, streams: StreamSet) -> None:
        self.node, self.set = "h1", streams
        self.dirty: set[tuple[str, int, str]] = set()
        self.replicator = SimpleNamespace(catching_up=set())

    def touch(self, part: Any) -> None:
        pass

    def redispatch(self, req: Any) -> None:
        pass


@pytest.fixture
def streams(tmp_path: Path) -> Iterator[StreamSet]:
    ss = StreamSet("h1", tmp_path / "data", StorageConfig(fsync="never"))
    meta = Metadata(configs={"q.fifo": QueueConfig(name="q.fifo", fifo=True)},
                    partitions={("q.fifo", 0): PartitionInfo(("h1", "h2", "h3"), {})})
    ss.reconcile(meta, NOW)
    yield ss
    ss.close()


def elected(streams: StreamSet, epoch: int) -> tuple[Handover, Svc, Stream]:
    """``KEY`` elected here at ``epoch`` and its recovery over (no peer to ask)."""
    svc = Svc(streams)
    handover = Handover(cast(QueueService, svc))
    st = streams.streams[KEY]
    st.role, st.epoch = Role.RECOVERING, epoch
    handover.recovering[KEY] = (time.monotonic() - 1, set())
    handover.tick(NOW)
    assert st.role is Role.WRITER
    return handover, svc, st


def older_term_messages(st: Stream, n: int, epoch: int) -> None:
    st.store.append_batch([b"m%d" % i for i in range(n)], NOW, epoch)
    st.store.commit()


def test_a_writer_taking_over_a_log_of_an_older_term_appends_one_record_of_its_epoch(
        streams: StreamSet) -> None:
    st = streams.streams[KEY]
    older_term_messages(st, 3, epoch=1)
    _, svc, st = elected(streams, epoch=4)
    assert (st.store.last_seq, st.store.last_epoch) == (4, 4)
    assert svc.dirty == {KEY}  # committed and published by this pass's flush
    st.store.commit()
    [rec] = st.store.read_records(4, 10)
    assert rec.type == RecordType.EPOCH and rec.epoch == 4
    # no message: a restart recovers the position, and the three older messages are all
    # there is to receive
    directory = cast(PartitionStore, st.store).directory
    st.store.close()
    reopened = PartitionStore.open(directory, StorageConfig(fsync="never"), now_ms=NOW)
    try:
        assert (reopened.last_seq, reopened.last_epoch, reopened.stats(NOW)["total"]) == (4, 4, 3)
        got, _ = reopened.receive(10, NOW, 30_000)
        assert [m.seq for m in got] == [1, 2, 3]
    finally:
        reopened.close()


def test_an_empty_log_gets_no_takeover_record(streams: StreamSet) -> None:
    _, svc, st = elected(streams, epoch=2)
    assert (st.store.last_seq, svc.dirty) == (0, set())


def test_no_ack_is_released_before_the_log_holds_a_record_of_this_term(streams: StreamSet) -> None:
    """A takeover record lost with a failed commit (a full disk): a FIFO send
    answered from the dedup window must not be acknowledged on the older
    records alone; the record is appended again at the next tick."""
    st = streams.streams[KEY]
    older_term_messages(st, 2, epoch=1)
    st.role, st.epoch = Role.WRITER, 3  # the writer, its takeover record gone with a commit
    st.store.epoch = 3
    replies: list[Any] = []
    req = SimpleNamespace(reply=replies.append, committed=False)
    st.acks.append(PendingAck(st.store.last_seq, cast(Request, req), "ok"))
    release = QueueService._release
    st.replicas = ("h1",)  # R=1: the writer's own copy is the quorum
    svc = cast(QueueService, SimpleNamespace(opened={KEY}, opening=set()))  # (its mark is in Consul)
    release(svc, st)
    assert replies == [], "acknowledged on records of an older term only"
    handover = Handover(cast(QueueService, Svc(streams)))
    handover.unmarked.add(KEY)
    handover.tick(NOW)
    assert (st.store.last_seq, st.store.last_epoch, handover.unmarked) == (3, 3, set())
    release(svc, st)
    assert replies == ["ok"]


def marking_service(streams: StreamSet) -> Any:
    """The parts of a QueueService that a stream's opened mark involves."""
    svc = SimpleNamespace(opened=set(), opening=set(), opening_asked=False, set=streams, marked_replies={},
                          _not_opened=QueueService._not_opened)
    svc._ask_open = lambda key: QueueService._ask_open(cast(QueueService, svc), key)
    return svc


def test_no_ack_is_released_before_the_stream_is_opened_in_consul(streams: StreamSet) -> None:
    """A stream's first acknowledgements wait until this host's position of
    it in Consul is marked opened (the leadership thread's Opened): until
    then the stream is asked for, once, and nothing is answered."""
    st = streams.streams[KEY]
    older_term_messages(st, 1, epoch=1)  # (a first send of this writer's term)
    st.role, st.epoch, st.replicas = Role.WRITER, 1, ("h1",)
    replies: list[Any] = []
    st.acks.append(PendingAck(st.store.last_seq, cast(Request, SimpleNamespace(
        reply=replies.append, committed=False)), "ok"))
    svc = marking_service(streams)
    svc._release = lambda s: QueueService._release(cast(QueueService, svc), s)
    QueueService._release(cast(QueueService, svc), st)
    assert (replies, svc.opening, svc.opening_asked) == ([], {KEY}, True)
    svc.opening_asked = False
    QueueService._release(cast(QueueService, svc), st)
    assert (replies, svc.opening_asked) == ([], False), "asked again"
    QueueService.on_opened(cast(QueueService, svc), KEY)
    assert (replies, svc.opened, svc.opening) == (["ok"], {KEY}, set())


def test_a_lease_extended_through_a_consul_outage_marks_the_writer_unconfirmed(streams: StreamSet) -> None:
    st = streams.streams[KEY]
    st.role = Role.WRITER
    svc = SimpleNamespace(set=streams, touch=lambda part: None)
    QueueService.on_confirmed(cast(QueueService, svc), frozenset({KEY}), time.monotonic(), by_consul=False)
    assert st.unconfirmed and st.writable
    QueueService.on_confirmed(cast(QueueService, svc), frozenset({KEY}), time.monotonic())
    assert not st.unconfirmed


def test_a_retried_send_found_in_a_copy_is_answered_once_the_stream_is_opened(streams: StreamSet) -> None:
    """A retry answered from this host's copy of a dead writer's stream
    acknowledges the send: like a writer's first acks, it waits until this
    host's position of that stream is in Consul (Opened), or fails after the
    ack timeout saying the send is stored."""
    svc = marking_service(streams)
    service = cast(QueueService, svc)
    replies: list[Any] = []
    failed: list[Exception] = []

    def request() -> Request:
        return cast(Request, SimpleNamespace(reply=replies.append, fail=failed.append, committed=False))

    first = request()
    assert QueueService._answer_when_opened(service, first, KEY, "found") is DEFERRED
    assert (svc.opening, svc.opening_asked, replies) == ({KEY}, True, [])
    QueueService.on_opened(service, KEY)
    assert replies == ["found"] and first.committed and not svc.marked_replies
    assert QueueService._answer_when_opened(service, request(), KEY, "again") == "again"  # opened
    other = ("q.fifo", 0, "gone")  # a stream this host does not keep: as before, at once
    assert QueueService._answer_when_opened(service, request(), other, "kept") == "kept"
    svc.opened.clear()
    assert QueueService._answer_when_opened(service, request(), KEY, "late") is DEFERRED
    QueueService._expire_marked(service, time.monotonic() + 1)  # past its deadline
    assert len(failed) == 1 and "stored here" in str(failed[0]) and not svc.marked_replies
