"""Dead-letter moves are cut by count and by bytes (``split_batch``): a batch
of large dead letters made a frame the DLQ's host dropped, retried for good."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zmqueue.dataplane import deadletters
from zmqueue.dataplane.deadletters import DeadLetterMover, split_batch
from zmqueue.dataplane.storage import Delivered

KEY = ("orders", 0, "node-a")


def dl(seq: int, body_bytes: int, attr_bytes: int = 0) -> Delivered:
    return Delivered(seq, seq.to_bytes(16, "big"), b"b" * body_bytes, b"a" * attr_bytes, 0, 0, 2, 0)


def seqs(batch: list[Delivered]) -> list[int]:
    return [d.seq for d in batch]


def size(batch: list[Delivered]) -> int:
    return sum(len(d.body) + len(d.attributes) for d in batch)


def test_a_batch_stops_at_the_count_or_before_the_message_that_would_pass_the_bytes() -> None:
    five = [dl(i, 10) for i in range(5)]
    assert tuple(map(seqs, split_batch(five, 2, 1000))) == ([0, 1], [2, 3, 4])
    assert tuple(map(seqs, split_batch(five, 10, 25))) == ([0, 1], [2, 3, 4])
    assert tuple(map(seqs, split_batch(five, 10, 30))) == ([0, 1, 2], [3, 4])  # exactly full: taken
    assert tuple(map(seqs, split_batch(five, 10, 1000))) == ([0, 1, 2, 3, 4], [])
    assert split_batch([], 10, 10) == ([], [])


def test_attributes_count_and_a_first_message_larger_than_the_cap_still_goes_alone() -> None:
    assert tuple(map(seqs, split_batch([dl(0, 10, 10), dl(1, 1)], 10, 20))) == ([0], [1])
    assert tuple(map(seqs, split_batch([dl(0, 50), dl(1, 1)], 10, 20))) == ([0], [1])
    assert tuple(map(seqs, split_batch([dl(0, 50)], 10, 20))) == ([0], [])


@given(sizes=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 100)), max_size=60),
       max_n=st.integers(1, 20), max_bytes=st.integers(1, 1000))
def test_batches_keep_order_drop_nothing_and_each_is_within_the_limits_or_one_message(
        sizes: list[tuple[int, int]], max_n: int, max_bytes: int) -> None:
    dead = [dl(i, b, a) for i, (b, a) in enumerate(sizes)]
    rest, batches = dead, []
    while rest:
        batch, rest = split_batch(rest, max_n, max_bytes)
        assert 1 <= len(batch) <= max_n
        assert size(batch) <= max_bytes or len(batch) == 1
        if rest:  # cut only where it had to be: the next message would not fit
            assert len(batch) == max_n or size(batch) + size(rest[:1]) > max_bytes
        batches.append(batch)
    assert [d for b in batches for d in b] == dead


def stub_mover(monkeypatch: pytest.MonkeyPatch, fail_first: bool) -> tuple[DeadLetterMover, list[list[int]]]:
    """A mover whose ``_move`` records each batch (the first one retried when ``fail_first``)."""
    svc: Any = SimpleNamespace(set=SimpleNamespace(streams={KEY: SimpleNamespace(key=KEY)}))
    m = DeadLetterMover(svc)
    moved: list[list[int]] = []

    def fake_move(s: Any, dead: list[Delivered], now: int) -> None:
        moved.append(seqs(dead))
        if fail_first and len(moved) == 1:
            m._retry(s.key, dead, now)

    monkeypatch.setattr(m, "_move", fake_move)
    monkeypatch.setattr(deadletters, "DEAD_LETTER_BATCH_BYTES_MAX", 100)
    m.pending[KEY] = [dl(i, 40) for i in range(5)]
    return m, moved


def test_the_mover_sends_one_batch_a_pass_by_bytes_and_keeps_the_rest_in_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    m, moved = stub_mover(monkeypatch, fail_first=False)
    for now in range(3):
        m.move(now)
    assert moved == [[0, 1], [2, 3], [4]]
    assert m.pending == {}


def test_a_failed_batch_is_retried_first_and_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    m, moved = stub_mover(monkeypatch, fail_first=True)
    m.move(0)
    assert seqs(m.pending[KEY]) == [0, 1, 2, 3, 4]
    m.move(1)  # (before the retry delay: nothing)
    m.move(deadletters.RETRY_MS)
    m.move(deadletters.RETRY_MS + 1)
    assert moved == [[0, 1], [0, 1], [2, 3]]
    assert seqs(m.pending[KEY]) == [4]


def test_a_move_to_a_dlq_stream_of_this_host_commits_it_early_once_it_holds_a_block(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """(Several sources moving in one pass appended to one staged block.)"""
    events: list[str] = []
    cfg = SimpleNamespace(dead_letter_queue="dlq", fifo=False)
    src = SimpleNamespace(key=KEY, queue="orders", config=cfg, open=lambda mid, body, blob: (body, blob),
                          store=SimpleNamespace(mark_dead_lettered=lambda seqs, now: events.append("mark")))
    local = SimpleNamespace(key=("dlq", 0, "node-a"), writable=True,
                            append_dead_letters=lambda items, now: events.append(f"append {len(items)}"))
    svc: Any = SimpleNamespace(
        node="node-a", dirty=set(), dlq_targets=set(),
        meta=SimpleNamespace(configs={"dlq": cfg}, partitions={("dlq", 0): SimpleNamespace()}),
        set=SimpleNamespace(streams={KEY: src, local.key: local}),
        commit_if_big=lambda s: events.append(f"commit_if_big {s.key[0]}"))
    m = DeadLetterMover(svc)
    m._move(src, [dl(0, 10), dl(1, 10)], 0)  # type: ignore[arg-type]
    assert events == ["append 2", "mark", "commit_if_big dlq"]
    assert m.moved == {"orders": 2} and local.key in svc.dlq_targets
