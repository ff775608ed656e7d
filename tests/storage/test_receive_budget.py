"""A receive's bytes budget (``max_bytes``, with ``spent_bytes`` already in the
reply): the store takes in flight the longest prefix of the messages it would
hand out whose bodies and attributes fit, at least one when the reply holds
nothing yet, and leaves the others visible with their receive counts as they
were (a host caps each reply this way, ``protocol.REPLY_MESSAGE_BYTES_MAX``:
a reply above the frame limit was dropped by the client's socket after its
messages had been taken in flight)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from zmqueue.dataplane.storage import Columns, PartitionStore, StorageConfig

NOW = 1_000
VIS_MS = 60_000


@pytest.fixture(params=[False, True], ids=["standard", "fifo"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PartitionStore]:
    s = PartitionStore.open(tmp_path / "p", StorageConfig(fsync="never", fifo=request.param), now_ms=NOW)
    yield s
    s.close()


def send(s: PartitionStore, sizes: list[int], attr: int = 0, group: int | None = None) -> None:
    """Messages of these body sizes; on a FIFO queue each in a group of its
    own unless ``group`` names one for all."""
    bodies = [bytes([65 + i % 26]) * n for i, n in enumerate(sizes)]
    groups = None
    if s.config.fifo:
        n = len(sizes)
        groups = np.full(n, group, np.uint64) if group else np.arange(1, n + 1, dtype=np.uint64)
    s.append_batch(bodies, NOW, attributes=[b"a" * attr] * len(sizes) if attr else None, group_hashes=groups)
    s.commit()


def seqs(got: object) -> list[int]:
    return got.seqs if isinstance(got, Columns) else [d.seq for d in got]  # type: ignore[attr-defined]


@pytest.mark.parametrize("columns", [False, True], ids=["delivered", "columns"])
def test_a_receive_takes_exactly_the_prefix_that_fits_and_leaves_the_rest_visible(
        store: PartitionStore, columns: bool) -> None:
    send(store, [400, 300, 200, 100, 50])
    receive = store.receive_columns if columns else store.receive
    got, _ = receive(10, NOW, VIS_MS, max_bytes=900)  # 400 + 300 + 200 = 900: the fourth does not fit
    assert seqs(got) == [1, 2, 3]
    stats = store.stats(NOW)
    assert (stats["in_flight"], stats["visible"]) == (3, 2)
    rest, _ = store.receive(10, NOW, VIS_MS)
    assert [(d.seq, d.receive_count) for d in rest] == [(4, 1), (5, 1)], "taken once, by this receive"


def test_attributes_count_against_the_budget(store: PartitionStore) -> None:
    send(store, [100, 100, 100], attr=60)  # 160 bytes each
    got, _ = store.receive(10, NOW, VIS_MS, max_bytes=400)
    assert [d.seq for d in got] == [1, 2]


def test_one_message_larger_than_the_budget_is_still_handed_out_alone(store: PartitionStore) -> None:
    send(store, [5000, 10, 10])
    got, _ = store.receive(10, NOW, VIS_MS, max_bytes=1000)
    assert [(d.seq, len(d.body)) for d in got] == [(1, 5000)]
    assert store.stats(NOW)["in_flight"] == 1


def test_a_reply_already_holding_bytes_takes_nothing_that_does_not_fit(store: PartitionStore) -> None:
    send(store, [500, 10])
    got, _ = store.receive(10, NOW, VIS_MS, max_bytes=1000, spent_bytes=600)
    assert got == [] and store.stats(NOW)["in_flight"] == 0
    got, _ = store.receive(10, NOW, VIS_MS, max_bytes=1000, spent_bytes=495)  # 995, then 1,005
    assert [d.seq for d in got] == [1]


def test_a_budget_above_what_is_picked_changes_nothing(store: PartitionStore) -> None:
    send(store, [100] * 50)
    got, _ = store.receive(30, NOW, VIS_MS, max_bytes=32 << 20)
    assert [d.seq for d in got] == list(range(1, 31))


def test_messages_left_by_a_cut_between_messages_in_flight_are_found_by_the_next_receive(
        tmp_path: Path) -> None:
    """The scan hint goes back to the first message left (not past it: the
    next receive would skip it until a visibility deadline passed)."""
    s = PartitionStore.open(tmp_path / "p", StorageConfig(fsync="never"), now_ms=NOW)
    try:
        send(s, [100] * 20)
        held, _ = s.receive(5, NOW, VIS_MS)  # in flight before the ones the cut leaves
        got, _ = s.receive(10, NOW, VIS_MS, max_bytes=250)
        assert [d.seq for d in got] == [6, 7]
        for _ in range(3):
            more, _ = s.receive(3, NOW, VIS_MS, max_bytes=250)
            got += more
        assert [d.seq for d in got] == list(range(6, 14))
        assert {d.receive_count for d in held + got} == {1}
    finally:
        s.close()


def test_a_fifo_group_cut_by_the_budget_goes_on_in_order_once_its_messages_are_deleted(
        tmp_path: Path) -> None:
    s = PartitionStore.open(tmp_path / "p", StorageConfig(fsync="never", fifo=True), now_ms=NOW)
    try:
        send(s, [300] * 6, group=7)
        got, _ = s.receive(10, NOW, VIS_MS, max_bytes=700)
        assert [d.seq for d in got] == [1, 2]
        assert s.receive(10, NOW, VIS_MS)[0] == [], "the group waits for its messages in flight"
        s.delete_many([(d.seq, d.receive_count) for d in got], NOW)
        got, _ = s.receive(10, NOW, VIS_MS, max_bytes=700)
        assert [(d.seq, d.receive_count) for d in got] == [(3, 1), (4, 1)]
    finally:
        s.close()


def test_dead_letters_picked_with_the_messages_go_whatever_the_budget(tmp_path: Path) -> None:
    s = PartitionStore.open(tmp_path / "p", StorageConfig(fsync="never"), now_ms=NOW)
    try:
        send(s, [100, 100, 100, 100])
        first, _ = s.receive(2, NOW, 10)  # seqs 1, 2 received once: dead at max_receive_count 1
        assert [d.seq for d in first] == [1, 2]
        got, dead = s.receive(10, NOW + 20, VIS_MS, max_receive_count=1, max_bytes=150)
        assert [d.seq for d in dead] == [1, 2] and [d.seq for d in got] == [3]
        assert s.stats(NOW + 20)["visible"] == 1
    finally:
        s.close()
