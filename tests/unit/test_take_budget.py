"""One RECEIVE reply (``QueueService.take``, which long polls, receives that
carry deletes and subscription pushes go through too) holds at most
``protocol.REPLY_MESSAGE_BYTES_MAX`` bytes of messages, shared by the streams
it takes from: what one stream handed out counts against the next. Real
streams over real stores; the budget scaled down to a few messages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from zmqueue.config import QueueConfig
from zmqueue.dataplane import service, stream
from zmqueue.dataplane.service import QueueService
from zmqueue.dataplane.storage import PartitionStore, StorageConfig
from zmqueue.dataplane.stream import Stream

NOW = 1_000
BUDGET = 10_000
BODY = 3_000  # three fit in the budget, the fourth does not


@pytest.fixture
def streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Stream]]:
    monkeypatch.setattr(stream, "REPLY_MESSAGE_BYTES_MAX", BUDGET)
    monkeypatch.setattr(service, "REPLY_MESSAGE_BYTES_MAX", BUDGET)
    out = []
    for origin in ("h1", "h2"):
        store = PartitionStore.open(tmp_path / origin, StorageConfig(fsync="never"), now_ms=NOW)
        out.append(Stream(("q", 0, origin), QueueConfig(name="q"), store, ("h1", "h2")))
    yield out
    for st in out:
        st.store.close()


def send(st: Stream, n: int, size: int = BODY) -> None:
    st.store.append_batch([st.origin.encode() * (size // 2)] * n, NOW)
    st.store.commit()


def take(streams: list[Stream], max_n: int, cols: bool) -> dict[str, Any]:
    svc = SimpleNamespace(dirty=set(), dlq=SimpleNamespace(add=lambda st, dead: None))
    reply: dict[str, Any] = QueueService.take(svc, streams, max_n, None, NOW, cols)  # type: ignore[arg-type]
    return reply


def bodies(reply: dict[str, Any]) -> list[bytes]:
    return [m[1] for m in reply["m"]] + [b for g in reply.get("ms", []) for b in g[3]]


@pytest.mark.parametrize("cols", [False, True], ids=["lists", "columns"])
def test_what_the_first_stream_handed_out_counts_against_the_next(streams: list[Stream], cols: bool) -> None:
    a, b = streams
    send(a, 2)
    send(b, 3)
    reply = take(streams, 100, cols)
    assert bodies(reply) == [b"h1" * 1500] * 2 + [b"h2" * 1500], "3 x 3,000 bytes: the fourth does not fit"
    assert (a.store.stats(NOW)["visible"], b.store.stats(NOW)["visible"]) == (0, 2)
    rest = take(streams, 100, cols)
    assert bodies(rest) == [b"h2" * 1500] * 2
    assert b.store.stats(NOW)["in_flight"] == 3


def test_a_message_larger_than_the_budget_comes_alone_and_the_next_stream_is_not_asked(
        streams: list[Stream]) -> None:
    a, b = streams
    send(a, 1, 4 * BUDGET)
    send(b, 1, 10)
    reply = take(streams, 100, False)
    assert [len(body) for body in bodies(reply)] == [4 * BUDGET]
    assert b.store.stats(NOW)["visible"] == 1
