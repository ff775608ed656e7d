"""A replica whose copy diverged from its writer's log keeps what the two share.

Found by the replica-set model (``tests/controlplane/test_replica_set_sim.py``,
``RESYNC_WIPED_ACKNOWLEDGED``) once replicas there could receive the writer's
latest block alone: a former writer that came back with a record of its old
term that no majority had held dropped its whole copy to resync, the
acknowledged records before that record included, and while it fetched them
again the new writer died; elected with an empty copy, it had none of them.
Now the writer answers a diverged catch-up with how much of the copy it holds
(``keep``, :func:`zmqueue.dataplane.replication.keep_after_divergence`) and
the replica cuts only the rest (``StreamSet.truncate``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
import zmq
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_restart_epoch import KEY, NOW, Recording, opened, replicator
from zmqueue.dataplane.replication import keep_after_divergence, stream_id
from zmqueue.dataplane.resends import request_tag, tagged_ids
from zmqueue.dataplane.stream import Role
from zmqueue.dataplane.streamset import StreamSet
from zmqueue.errors import NotLeader
from zmqueue.protocol import Command

CUT = request_tag("", 99)
"""The tag of the request whose record the former writer's copy loses."""


def cut_until_shared(copy: list[int], log: list[int], first_seq: int = 1) -> list[int]:
    """What the catch-up loop does: cut while the copy's last record is not the log's."""
    copy = list(copy)
    while copy and (len(copy) > len(log) or log[len(copy) - 1] != copy[-1]):
        def epoch_at(seq: int) -> int | None:
            return log[seq - 1] if first_seq <= seq <= len(log) else None
        keep = keep_after_divergence(copy[-1], len(copy), len(log), first_seq, epoch_at)
        assert keep < len(copy), "a cut that keeps the whole copy would loop"
        copy = copy[:keep]
    return copy


@st.composite
def diverged(draw: st.DrawFn) -> tuple[list[int], list[int], int]:
    """(the writer's log, a copy, how many records they share) as lists of epochs:
    the copy follows the log for ``shared`` records, then holds records of terms the
    log does not have at those seqs (a record of the same term at the same seq would
    be the same record), epochs never decreasing along either."""
    steps = draw(st.lists(st.integers(0, 2), min_size=0, max_size=40))
    log, epoch = [], 1
    for s in steps:
        epoch += s
        log.append(epoch)
    shared = draw(st.integers(0, len(log)))
    copy = log[:shared]
    epoch = copy[-1] if copy else 1
    for seq in range(shared + 1, shared + draw(st.integers(1, 12)) + 1):
        epoch += draw(st.integers(0, 2))
        if seq <= len(log) and log[seq - 1] == epoch:
            epoch += 1  # not the writer's record at that seq
            if seq < len(log) and log[seq] == epoch:
                break  # (the next one could not be told apart either: stop the tail here)
        copy.append(epoch)
    return log, copy, shared


@given(diverged())
def test_a_diverged_copy_is_cut_back_to_exactly_what_it_shares_with_the_writer(
        case: tuple[list[int], list[int], int]) -> None:
    log, copy, shared = case
    assert cut_until_shared(copy, log) == log[:shared]


def test_the_model_schedule_a_former_writer_keeps_its_acknowledged_records() -> None:
    # the writer's log: 5 records of term 1, its takeover record (term 2), one more send;
    # the former writer's copy: the same 5 and a sixth of term 1 that no majority held
    assert keep_after_divergence(1, 6, 7, 1, [None, 1, 1, 1, 1, 1, 2, 2].__getitem__) == 5
    # a copy longer than the writer's log, of an older term: cut below where it is ahead
    assert keep_after_divergence(1, 9, 4, 1, [None, 1, 1, 2, 2].__getitem__) == 2
    # the writer's first retained record (compaction) is already of a later term: all go
    assert keep_after_divergence(1, 6, 8, 4, [None, None, None, None, 3, 3, 3, 3, 3].__getitem__) == 0
    # a copy that ends below the writer's first retained record cannot be compared: all go
    assert keep_after_divergence(1, 3, 8, 5, lambda seq: 1) == 0


def test_a_former_writer_s_copy_is_cut_after_what_it_shares_and_catches_up(
        tmp_path: Path) -> None:
    """Real stores and the replication code: the writer ``a`` holds 5 messages of
    term 1, its takeover record and a message of term 2; the former writer ``b`` the
    same 5 and one of term 1 that ``a`` lacks. ``b`` hears ``a``'s next block, asks
    for a catch-up, is told to keep 5, cuts one record and fetches two."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    a, b = opened("a", tmp_path / "a"), opened("b", tmp_path / "b")
    try:
        wa, wb = a.streams[KEY], b.streams[KEY]
        for ss in (wa, wb):
            ss.store.append_batch([f"m{i}".encode() for i in range(5)], NOW, 1)
            ss.store.commit()
        wb.store.append_batch([b"unacknowledged"], NOW, 1, message_ids=tagged_ids(CUT, 1))
        wb.store.commit()  # b's last commit as writer
        wa.epoch = wa.store.epoch = 2
        wa.role = Role.WRITER
        wa.store.mark_epoch(NOW)  # a took over: seq 6 of term 2
        wa.store.append_batch([b"after"], NOW, 2)
        wa.store.commit()

        ra = replicator(ctx, a)
        rb = replicator(ctx, b)
        rb.forwarder = cast(Any, Recording())
        rb.writer_of[KEY] = "a"
        rb.peer_endpoint = lambda node: "tcp://127.0.0.1:9"
        rb.on_resync = lambda key, keep: resync(b, rb, key, keep)
        for table, _ in wb.store.read_chunks(1, 10):  # as b would after a restart
            rb.resends.note("q.fifo", 0, table, NOW, "fifo")
        assert rb.resends.get("q.fifo", 0, CUT, 1, NOW) is not None
        block = {"s": stream_id(KEY), "e": 2, "prev": [2, 6],
                 "c": ra.h_catch_up({"s": stream_id(KEY), "from": 7, "prev": [2, 6]})["c"]}
        rb._on_pub(Command.REPLICATE, block, NOW)  # prev names b's seq 6 with another term
        assert b.streams[KEY].store.last_seq == 6, "nothing is cut before the writer answers"
        calls = rb.forwarder.calls  # type: ignore[attr-defined]
        command, body, done = calls[0]
        assert command == Command.CATCH_UP and body["prev"] == [1, 6]
        reply = ra.h_catch_up(body)
        assert reply == {"resync": True, "e": 2, "keep": 5, "first": 1}
        done(reply, None)
        wb = b.streams[KEY]  # reopened after the cut
        assert (wb.store.last_seq, wb.store.last_epoch) == (5, 1)
        assert rb.counters["resyncs"] == 1 and rb.counters["resync_kept"] == 5
        # a retry of the cut send is stored again, not answered with ids stored nowhere
        assert rb.resends.get("q.fifo", 0, CUT, 1, NOW) is None
        _, body, done = calls[1]  # the catch-up after the cut
        assert body["from"] == 6 and body["prev"] == [1, 5]
        done(ra.h_catch_up(body), None)
        wb = b.streams[KEY]
        wb.store.commit()  # (the host commits what a pass applied)
        assert [(r.seq, r.epoch, r.body) for r in wb.store.read_records(1, 100)] == \
            [(r.seq, r.epoch, r.body) for r in wa.store.read_records(1, 100)]
    finally:
        a.close()
        b.close()
        ctx.destroy(linger=0)


def resync(ss: StreamSet, rep: Any, key: Any, keep: int) -> None:
    """What the host does on a resync (``QueueService._resync``)."""
    fresh = ss.resync(key, keep, NOW)
    if fresh is not None:
        rep.catch_up(fresh, NOW)


def test_a_new_writer_told_to_resync_by_a_peer_keeps_its_log_and_its_noted_sends(
        tmp_path: Path) -> None:
    """A host RECOVERING (just elected) that asks a peer holding another term's
    tail is answered ``resync``: only a replica's copy is cut, so its log, its
    counters and the sends it noted stay as they are."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    a = opened("a", tmp_path / "a")
    try:
        wa = a.streams[KEY]
        wa.store.append_batch([b"m"], NOW, 1, message_ids=tagged_ids(CUT, 1))
        wa.store.commit()
        ra = replicator(ctx, a)
        ra.forwarder = cast(Any, Recording())
        ra.peer_endpoint = lambda node: "tcp://127.0.0.1:9"
        ra.on_resync = lambda key, keep: resync(a, ra, key, keep)
        ra.resends.note("q.fifo", 0, wa.store.read_chunks(1, 10)[0][0], NOW, "fifo")
        wa.role = Role.RECOVERING
        ra.catch_up(wa, NOW, source="b")
        [(_, _, done)] = ra.forwarder.calls  # type: ignore[attr-defined]
        done({"resync": True, "e": 2, "keep": 0}, None)
        assert a.streams[KEY] is wa and wa.store.last_seq == 1
        assert ra.counters["resyncs"] == 0 and ra.resends.get("q.fifo", 0, CUT, 1, NOW) is not None
    finally:
        a.close()
        ctx.destroy(linger=0)


def test_only_the_writer_tells_a_copy_to_cut_and_only_in_the_copy_s_term_or_later(
        tmp_path: Path) -> None:
    """A replica whose catch-up goes to a host that does not write the stream (a
    former writer back as a replica, named by a writer_of not updated yet), or
    whose answer is of an older term, keeps its copy: only the current writer's
    log says what the copy lacks. Before, such a host's resync answer cut (or
    wiped) records of a newer term that the host did not have."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    a, b = opened("a", tmp_path / "a"), opened("b", tmp_path / "b")
    try:
        wa, wb = a.streams[KEY], b.streams[KEY]
        wa.store.append_batch([b"m"] * 3, NOW, 1)  # the former writer: term 1 only
        wa.store.commit()
        wb.store.append_batch([b"m"] * 3, NOW, 1)  # b: the same, then 2 records of term 2
        wb.store.append_batch([b"n"] * 2, NOW, 2)
        wb.store.commit()
        wb.epoch = 2
        ra = replicator(ctx, a)
        rb = replicator(ctx, b)
        rb.forwarder = cast(Any, Recording())
        rb.peer_endpoint = lambda node: "tcp://127.0.0.1:9"
        rb.on_resync = lambda key, keep: resync(b, rb, key, keep)
        rb.catch_up(wb, NOW, source="a")
        [(_, body, done)] = rb.forwarder.calls  # type: ignore[attr-defined]
        assert body["prev"] == [2, 5]
        with pytest.raises(NotLeader):  # a, a replica, holds no (2, 5): it orders nothing
            ra.h_catch_up(body)
        done(None, NotLeader("not the writer"))
        # a writer of term 1 (deposed, not told yet) answers resync: older than b's term 2
        wa.role, wa.epoch = Role.WRITER, 1
        assert ra.h_catch_up(body)["resync"]
        done(ra.h_catch_up(body), None)
        assert b.streams[KEY] is wb and wb.store.last_seq == 5 and rb.counters["resyncs"] == 0
    finally:
        a.close()
        b.close()
        ctx.destroy(linger=0)
