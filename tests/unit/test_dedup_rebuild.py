"""A FIFO stream reads its dedup window back from its log by time: every
message of the last 5 minutes, however many records came after it. Until
the forty-fifth session ``Stream.rebuild_dedup`` read only the last 200,000
records (receives and deletes included), so a partition that took more than
that within 5 minutes forgot the older dedup ids when its host restarted.
And a replica whose copy its writer's compaction left behind gets the window
back with the records it fetches again."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, cast

import pytest
import zmq

from tests.unit.test_divergence import resync
from tests.unit.test_restart_epoch import KEY, Recording, opened, replicator
from zmqueue.dataplane.stream import Role

WINDOW_MS = 5 * 60 * 1000
"""The FIFO dedup window the docs promise (SQS's 5 minutes)."""


def _item(body: bytes, dedup: str | None) -> list[object]:
    return [body, {}, None, "g", dedup]


def test_a_restarted_stream_dedups_ids_older_than_200_000_records_but_within_the_window(
        tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    ss = opened("a", tmp_path)
    try:
        st = ss.streams[KEY]
        [stale] = st.send([_item(b"stale", "stale")], now - WINDOW_MS - 1000)
        [first] = st.send([_item(b"first", "first")], now - 60_000)
        st.store.commit()
        for _ in range(7):  # 210,000 later records of no dedup id
            st.store.append_batch([b"x"] * 30_000, now - 30_000, 0, group_hashes=[1] * 30_000)
            st.store.commit()
        [last] = st.send([_item(b"last", "last")], now - 1000)
        st.store.commit()
        assert st.store.last_seq > 200_002
    finally:
        ss.close()

    ss = opened("a", tmp_path)  # the host restarted
    try:
        st = ss.streams[KEY]
        assert set(st.dedup.entries) == {"first", "last"}, "the stale id is out of the window"
        assert st.send([_item(b"first", "first")], now) == [first]
        assert st.send([_item(b"last", "last")], now) == [last]
        assert st.send([_item(b"stale", "stale")], now) != [stale], "older than 5 minutes: stored"
    finally:
        ss.close()


def test_a_copy_the_writer_compacted_past_is_fetched_again_with_its_dedup_ids(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A replica's copy that ends before its writer's first retained record
    (it was down while the writer's compaction removed older segments) is
    dropped and fetched again from there: the records it fetches bring back
    the dedup ids of the window (``Stream.note_table`` on each applied chunk),
    and its log holds them for its next restart. The log says it was the
    writer's compaction, not a divergence (it said "diverged from its writer
    at seq 1" before)."""
    now = int(time.time() * 1000)
    old = now - WINDOW_MS - 120_000
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    a, b = opened("a", tmp_path / "a"), opened("b", tmp_path / "b")
    try:
        wa, wb = a.streams[KEY], b.streams[KEY]
        wa.role, wa.epoch, wa.store.epoch = Role.WRITER, 1, 1
        wa.send([_item(b"old", "k-old")], old)
        [got], _ = wa.store.receive(1, old + 100, 30_000)
        wa.store.delete(got.seq, got.receive_count, old + 200)  # consumed
        wa.store.commit()
        ra, rb = replicator(ctx, a), replicator(ctx, b)
        assert rb.apply(wb, wa.store.read_chunks(1, 100), 1)  # b held this much, then went down
        wb.store.commit()
        wa.store.mark_epoch(old + 1000)  # (a roll: a takeover, or the idle stream's)
        wa.store.commit()
        ids = {f"k{i}": wa.send([_item(f"m{i}".encode(), f"k{i}")], now - 10_000)[0] for i in range(5)}
        wa.store.commit()
        wa.store.expire(now)
        assert wa.store.compact() == 1, "the old segment is out of the window"
        assert wa.store.first_seq > wb.store.last_seq

        rb.forwarder = cast(Any, Recording())
        rb.writer_of[KEY] = "a"
        rb.peer_endpoint = lambda node: "tcp://127.0.0.1:9"
        rb.on_resync = lambda key, keep: resync(b, rb, key, keep)
        rb.catch_up(wb, now)
        calls = rb.forwarder.calls  # type: ignore[attr-defined]
        _, body, done = calls[0]
        reply = ra.h_catch_up(body)
        assert reply == {"resync": True, "e": 1, "keep": 0, "first": wa.store.first_seq}
        with caplog.at_level(logging.WARNING):
            done(reply, None)
        said = " ".join(r.getMessage() for r in caplog.records)
        assert "no longer holds" in said and f"starts at seq {wa.store.first_seq}" in said, said
        assert "diverged" not in said
        assert rb.counters["resync_compacted"] == 1
        _, body, done = calls[1]  # the catch-up of the emptied copy
        done(ra.h_catch_up(body), None)
        wb = b.streams[KEY]
        wb.store.commit()
        assert wb.store.last_seq == wa.store.last_seq
        assert {k: v.hex() for k, (v, _) in wb.dedup.entries.items()} == ids
    finally:
        a.close()
        b.close()
        ctx.destroy(linger=0)

    b = opened("b", tmp_path / "b")  # b restarts: its log holds the window
    try:
        assert {k: v.hex() for k, (v, _) in b.streams[KEY].dedup.entries.items()} == ids
    finally:
        b.close()
