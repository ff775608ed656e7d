"""A purge that stops at a stream it cannot purge says which streams it purged
before (QA: a purge raised NOT_LEADER after removing 78 of 150 messages, and
the error did not say so)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from zmqueue.client.queue import Queue
from zmqueue.errors import NotLeader, QueueNotFound
from zmqueue.protocol import Command


def queue_with(answers: dict[tuple[int, str], Any]) -> Queue:
    q = Queue.__new__(Queue)
    q.name = "orders"
    q.config = SimpleNamespace(partitions=2)  # type: ignore[assignment]
    q._fresh_routes = lambda max_age_s=0: None  # type: ignore[method-assign]
    q._streams_of = lambda p: ["h1", "h2"]  # type: ignore[method-assign]

    def call(p: int, command: Command, body: dict[str, Any], targets: Any, origin: str | None = None) -> Any:
        answer = answers[(p, body["o"])]
        if isinstance(answer, Exception):
            raise answer
        return answer

    q.call = call  # type: ignore[assignment, method-assign]
    q.routes = SimpleNamespace(for_stream=lambda p, o: [])  # type: ignore[assignment]
    return q


def test_a_purge_that_stops_midway_says_what_it_purged() -> None:
    q = queue_with({(0, "h1"): {"purged": 40}, (0, "h2"): {"purged": 38},
                    (1, "h1"): NotLeader("'orders' partition 1 (h1) has no writer", leader=None),
                    (1, "h2"): {"purged": 1}})
    with pytest.raises(NotLeader) as info:
        q.purge()
    err = info.value
    assert "has no writer" in str(err)
    assert "stopped at partition 1 stream h1: 78 message(s) were purged before it" in str(err)
    assert err.details["purged"] == 78 and err.details["purged_streams"] == ["0/h1", "0/h2"]
    assert err.details["leader"] is None


def test_a_purge_that_fails_at_once_raises_the_error_as_it_is() -> None:
    gone = QueueNotFound("queue 'orders' does not exist", queue="orders")
    with pytest.raises(QueueNotFound) as info:
        queue_with({(0, "h1"): gone}).purge()
    assert info.value is gone


def test_a_purge_of_every_stream_returns_the_sum() -> None:
    q = queue_with({(p, o): {"purged": 5} for p in (0, 1) for o in ("h1", "h2")})
    assert q.purge() == 20
