"""The scalar paths for a few records or messages against the array paths they
shortcut: ``replay.SMALL_CHUNK`` and ``staging.SMALL`` (a replica applying a
writer's small blocks, recovery of small blocks), ``select.SCALAR_PICK``,
``select.SCALAR_TAIL`` and ``receive.SMALL`` (a receive of a few messages,
or from the last few slots). Twin writers and twin replicas are fed the same
operations, one twin with the scalar paths off; every receive hands out the
same messages and the rings and backlogs end byte for byte the same."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from zmqueue.dataplane.replication import decode_chunks, encode_chunks
from zmqueue.dataplane.storage import PartitionStore, StorageConfig, receive, replay, select, staging
from zmqueue.dataplane.storage.model import Columns
from zmqueue.errors import InvalidReceipt

NOW = 1_000_000
CONFIG = StorageConfig(ring_slots=40, arena_bytes=4096, fsync="never")  # backlogs past 40 or 4 KiB


@contextmanager
def array_paths() -> Iterator[None]:
    saved = replay.SMALL_CHUNK, select.SCALAR_PICK, select.SCALAR_TAIL, receive.SMALL, staging.SMALL
    replay.SMALL_CHUNK = select.SCALAR_PICK = select.SCALAR_TAIL = receive.SMALL = staging.SMALL = 0
    try:
        yield
    finally:
        replay.SMALL_CHUNK, select.SCALAR_PICK, select.SCALAR_TAIL, receive.SMALL, staging.SMALL = saved


def state(s: PartitionStore) -> tuple[Any, ...]:
    ring, backlog = s.ring, s.backlog
    return (ring.meta[: ring.n].tobytes(), ring.arena[: ring.top].tobytes(), ring.n, ring.top, ring.live,
            ring.live_bytes, backlog.cursor, backlog.count, backlog.bytes, sorted(backlog.gone),
            sorted(backlog.receive_counts.items()), sorted(backlog.deadlines.items()), s.last_seq,
            s.last_epoch)


def plain(got: Any) -> list[tuple[Any, ...]]:
    msgs = got.delivered() if isinstance(got, Columns) else got
    return [tuple(m) for m in msgs]


OPS = st.one_of(
    st.tuples(st.just("send"), st.integers(1, 12), st.sampled_from([0, 0, 0, 30]), st.integers(0, 60)),
    st.tuples(st.just("recv"), st.integers(1, 12), st.sampled_from([20, 100]), st.booleans(),
              st.sampled_from([None, None, 2])),
    st.tuples(st.just("dead_lettered"),),
    st.tuples(st.just("delete"), st.integers(1, 12)),
    st.tuples(st.just("release"), st.integers(0, 11)),
    st.tuples(st.just("tick"), st.integers(1, 120)),
    st.tuples(st.just("purge"),),
    st.tuples(st.just("takeover"),),
)


@settings(max_examples=120, deadline=None)
@example(ops=[("send", 1, 0, 10)] * 3 + [("recv", 1, 20, True, None), ("delete", 1),
                                          ("recv", 2, 20, False, None), ("tick", 30),
                                          ("recv", 8, 20, True, None)])
@example(ops=[("send", 12, 0, 60)] * 6 + [("recv", 5, 20, True, None), ("delete", 5),
                                           ("recv", 12, 20, True, None), ("release", 0),
                                           ("recv", 1, 20, True, None)])
@example(ops=[("send", 3, 0, 10), ("recv", 3, 20, True, 2), ("tick", 30), ("recv", 3, 20, True, 2),
              ("tick", 30), ("recv", 3, 20, True, 2), ("send", 1, 0, 5), ("recv", 1, 20, True, 2),
              ("release", 6), ("recv", 2, 20, False, 2), ("dead_lettered",), ("recv", 2, 20, True, 2)])
@example(ops=[("send", 3, 0, 10), ("recv", 10, 20, True, None), ("send", 1, 0, 10),
              ("recv", 10, 20, False, None), ("send", 2, 30, 10), ("recv", 12, 20, True, None),
              ("tick", 30), ("recv", 10, 20, True, None)])  # receives of 10 over the last slots
@given(ops=st.lists(OPS, min_size=1, max_size=40))
def test_scalar_paths_leave_what_the_array_paths_leave(ops: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        names = ("writer", "writer_array", "replica", "replica_array")
        w, wa, r, ra = (PartitionStore.open(Path(d) / n, CONFIG, now_ms=NOW) for n in names)
        try:
            now, held, ids, published = NOW, [], 0, 0
            dead_letters: list[int] = []
            for op in ops:
                if op[0] == "send":
                    _, n, delay, size = op
                    mids = b"".join((ids + i).to_bytes(16, "big") for i in range(n))
                    bodies = [bytes([65 + (ids + i) % 26]) * size for i in range(n)]
                    ids += n
                    w.append_batch(bodies, now, message_ids=mids, delay_ms=delay)
                    with array_paths():
                        wa.append_batch(bodies, now, message_ids=mids, delay_ms=delay)
                elif op[0] == "recv":
                    _, k, vis, cols, max_rc = op
                    take = PartitionStore.receive_columns if cols else PartitionStore.receive
                    got, dead = take(w, k, now, vis, max_receive_count=max_rc)
                    with array_paths():
                        want, want_dead = take(wa, k, now, vis, max_receive_count=max_rc)
                    assert plain(got) == plain(want) and dead == want_dead
                    held += [(m[0], m[6]) for m in plain(got)]
                    dead_letters += [m.seq for m in dead]
                elif op[0] == "dead_lettered":  # moved to a dead-letter queue: removed here
                    w.mark_dead_lettered(dead_letters, now)
                    with array_paths():
                        wa.mark_dead_lettered(dead_letters, now)
                    dead_letters = []
                elif op[0] == "delete":
                    gone, held = held[: op[1]], held[op[1]:]
                    out = w.delete_many(gone, now)
                    with array_paths():
                        assert [type(e) for e in wa.delete_many(gone, now)] == [type(e) for e in out]
                elif op[0] == "release" and op[1] < len(held):
                    seq, count = held.pop(op[1])
                    outcomes: list[int | str] = []
                    for s, paths in ((w, nullcontext()), (wa, array_paths())):
                        with paths:
                            try:
                                outcomes.append(s.change_visibility(seq, count, 0, now))
                            except InvalidReceipt as exc:  # its deadline passed and it was received again
                                outcomes.append(str(exc))
                    assert outcomes[0] == outcomes[1]
                elif op[0] == "tick":
                    now += op[1]
                elif op[0] == "purge":
                    w.purge(now)
                    with array_paths():
                        wa.purge(now)
                    held, dead_letters = [], []
                elif op[0] == "takeover":  # a new writer's record of its epoch: no message
                    for s, paths in ((w, nullcontext()), (wa, array_paths())):
                        with paths:
                            s.epoch += 1
                            assert s.mark_epoch(now) == s.last_seq and s.last_epoch == s.epoch
                w.commit()
                with array_paths():
                    wa.commit()
                assert state(w) == state(wa)
                # a replica applies what the writer published (one block per op)
                if w.last_seq > published:
                    wire = encode_chunks(w.read_chunks(published + 1, 2000))
                    published = w.last_seq
                    for table, heap in decode_chunks(wire):
                        r.apply_chunk(table, heap)
                    with array_paths():
                        for table, heap in decode_chunks(wire):
                            ra.apply_chunk(table, heap)
                    r.commit()
                    ra.commit()
                assert state(r) == state(ra)
                assert (r.last_seq, r.last_epoch) == (w.last_seq, w.last_epoch)
            # and a restart recovers the same (small blocks replay on the scalar path)
            for s in (r, ra):
                s.close()
            r = PartitionStore.open(Path(d) / "replica", CONFIG, now_ms=now)
            with array_paths():
                ra = PartitionStore.open(Path(d) / "replica_array", CONFIG, now_ms=now)
            assert state(r) == state(ra)
        finally:
            for s in (w, wa, r, ra):
                s.close()
