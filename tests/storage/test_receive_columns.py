"""receive_columns against receive, on twin stores: the same messages, the same
values, columns only when every message is plain."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from zmqueue.dataplane.storage import Columns, NewMessage, PartitionStore, StorageConfig

NOW = 1_000
CONFIG = StorageConfig(ring_slots=8, arena_bytes=1 << 12, fsync="never")  # a backlog past 8


@settings(max_examples=80, deadline=None)
@example(sends=[(b"m", b"")] * 20, takes=[(2, True), (12, False)])  # one receive, two takes
@example(sends=[(b"m", b"")] * 8 + [(b"a", b"attrs")] * 8, takes=[(2, True), (12, False)])  # columns + rows
@given(
    sends=st.lists(st.tuples(st.binary(max_size=40), st.sampled_from([b"", b"", b"", b"attrs"])),
                   min_size=1, max_size=30),
    takes=st.lists(st.tuples(st.integers(1, 12), st.booleans()), min_size=1, max_size=8),
)
def test_receive_columns_hands_out_what_receive_does(sends: list[tuple[bytes, bytes]],
                                                     takes: list[tuple[int, bool]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        stores = [PartitionStore.open(Path(d) / name, CONFIG, now_ms=NOW) for name in ("rows", "cols")]
        try:
            for i, (body, attrs) in enumerate(sends):
                for s in stores:
                    s.append([NewMessage(i.to_bytes(16, "big"), body, attrs)], NOW)
                    s.commit()
            now = NOW
            for k, delete in takes:
                want, want_dead = stores[0].receive(k, now, 5_000)
                got, got_dead = stores[1].receive_columns(k, now, 5_000)
                if isinstance(got, Columns):
                    assert want and all(not m.attributes for m in want)
                    got = got.delivered()
                assert got == want and got_dead == want_dead
                if delete:  # free ring room: the next receive pages in
                    for s in stores:
                        s.delete_many([(m.seq, m.receive_count) for m in want], now)
                now += 1
        finally:
            for s in stores:
                s.close()
