"""A receive of more messages than ``select.SCALAR_PICK`` over the ring's
last few slots (a caught-up consumer asking for 10): read one slot at a time
(``select.SCALAR_TAIL``), with the same outcome as the array scan: nothing
skipped, delayed slots found once due, the scan hint never past a slot that
can still be received."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from zmqueue.dataplane.storage import PartitionStore, StorageConfig, select

NOW = 1_000_000
CONFIG = StorageConfig(ring_slots=64, arena_bytes=1 << 16, fsync="never")


@pytest.fixture(params=["tail", "array"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PartitionStore]:
    saved = select.SCALAR_PICK, select.SCALAR_TAIL
    if request.param == "array":
        select.SCALAR_PICK = select.SCALAR_TAIL = 0
    s = PartitionStore.open(tmp_path / "p", CONFIG, now_ms=NOW)
    try:
        yield s
    finally:
        s.close()
        select.SCALAR_PICK, select.SCALAR_TAIL = saved


def seqs(store: PartitionStore, now: int, k: int = 10) -> list[int]:
    got, dead = store.receive(k, now, 60_000)
    assert dead == []
    return [d.seq for d in got]


def test_each_new_message_is_received_by_the_next_receive_of_ten(store: PartitionStore) -> None:
    first = list(store.append_batch([b"a", b"b", b"c"], NOW))
    assert seqs(store, NOW) == first
    for i in range(20):  # a caught-up consumer: one new message per receive, none skipped
        new = list(store.append_batch([b"m%d" % i], NOW))
        assert seqs(store, NOW) == new
        assert seqs(store, NOW) == []  # nothing new: an empty receive, no slot given twice
    more = list(store.append_batch([b"x"] * 12, NOW))
    assert seqs(store, NOW) == more[:10] and seqs(store, NOW) == more[10:]


def test_a_delayed_slot_in_the_tail_is_received_once_due_and_not_before(store: PartitionStore) -> None:
    [delayed] = store.append_batch([b"later"], NOW, delay_ms=500)
    assert seqs(store, NOW) == []
    [plain] = store.append_batch([b"now"], NOW + 10)
    assert seqs(store, NOW + 10) == [plain]  # past the delayed slot, not stuck behind it
    assert seqs(store, NOW + 499) == []
    assert seqs(store, NOW + 500) == [delayed]


def test_a_message_made_visible_again_behind_the_hint_is_received(store: PartitionStore) -> None:
    got = list(store.append_batch([b"a", b"b"], NOW))
    assert seqs(store, NOW) == got
    store.change_visibility(got[0], 1, 0, NOW)  # back to visible at once
    [new] = store.append_batch([b"c"], NOW)
    assert seqs(store, NOW) == [got[0], new]
