"""The order in which a standard queue's receive sweep asks its hosts (pure logic)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from zmqueue.client.queue import Queue
from zmqueue.client.receiving import SHUFFLE_EVERY, receive_targets

NODES = ["h1", "h2", "h3"]


def _queue() -> Queue:
    info: dict[str, Any] = {
        "config": {"name": "q"},
        "partitions": [{"partition": 0, "replicas": NODES,
                        "endpoints": {n: f"tcp://127.0.0.1:{7000 + i}" for i, n in enumerate(NODES)},
                        "writers": {n: n for n in NODES}}],
    }
    return Queue(client=None, info=info)  # type: ignore[arg-type]  # no request is made


def test_without_a_productive_host_every_host_comes_first_sometimes() -> None:
    q = _queue()
    firsts = Counter(receive_targets(q)[0][1] for _ in range(300))
    assert set(firsts) == {f"tcp://127.0.0.1:{7000 + i}" for i in range(3)}


def test_the_host_that_last_had_messages_is_asked_first_but_not_always() -> None:
    q = _queue()
    lucky = (0, "tcp://127.0.0.1:7001")
    q._lucky = lucky
    orders = [receive_targets(q) for _ in range(SHUFFLE_EVERY * 40)]
    assert all(sorted(o) == sorted(orders[0]) for o in orders)  # every host, each once
    first = Counter(o[0] == lucky for o in orders)
    # at least 7 of every 8 sweeps start with it; the shuffled 1 in 8 lets the
    # other hosts come first (their messages are found even if it never runs dry)
    assert first[True] >= len(orders) * (SHUFFLE_EVERY - 1) // SHUFFLE_EVERY
    assert first[False] > 0


def test_a_productive_host_that_left_the_routes_is_not_asked() -> None:
    q = _queue()
    q._lucky = (0, "tcp://127.0.0.1:7999")
    for _ in range(20):
        assert (0, "tcp://127.0.0.1:7999") not in receive_targets(q)
