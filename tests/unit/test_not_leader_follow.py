"""How often ``Queue.call`` follows NOT_LEADER hints (pure routing logic: the
client's transport is a plain object answering by a script).

(QA: two hosts that each named the other as a stream's writer, neither
writing it, bounced one stats call and one purge call between them for the
whole request timeout: 52,008 and 59,137 requests.)"""

from __future__ import annotations

import time
from typing import Any

import pytest

from zmqueue.client import retry
from zmqueue.client.queue import Queue
from zmqueue.errors import NotLeader
from zmqueue.protocol import Command


class BouncingClient:
    """``a`` and ``b`` each answer NOT_LEADER naming the other, until ``answer_after``
    requests were made (then the next one is answered)."""

    retries = 3

    def __init__(self, timeout_ms: int, answer_after: int | None = None) -> None:
        self.request_timeout_ms = timeout_ms
        self.answer_after = answer_after
        self.asked: list[str] = []

    def connection(self, endpoint: str) -> BouncingClient:
        return self

    def next_request_id(self) -> int:
        return 1

    def request(self, endpoint: str, command: Command, body: dict[str, Any], rid: int,
                extra_timeout_ms: int) -> Any:
        self.asked.append(endpoint)
        if self.answer_after is not None and len(self.asked) > self.answer_after:
            return {"at": endpoint}
        other = "b" if endpoint == "a" else "a"
        raise NotLeader(f"written by {other}; retry there", leader=f"n-{other}", endpoint=other)


def queue_with(client: BouncingClient) -> Queue:
    q = Queue.__new__(Queue)
    q.client = client  # type: ignore[assignment]
    q.name = "orders"
    q.refresh = lambda force=False: None  # type: ignore[method-assign]
    q._follow = lambda p, origin, exc: exc.details.get("endpoint")  # type: ignore[method-assign]
    return q


def test_two_hosts_naming_each_other_are_followed_with_back_off_until_the_deadline() -> None:
    client = BouncingClient(timeout_ms=1000)
    started = time.monotonic()
    with pytest.raises(NotLeader):
        queue_with(client).call(0, Command.QUEUE_STATS, {}, lambda: ["a", "b"], "c")
    took = time.monotonic() - started
    assert 1.0 <= took < 2.5
    # 50 ms doubling up to 0.5 s after the first free follows: a handful, not thousands
    assert len(client.asked) <= 12, len(client.asked)
    assert client.asked[:4] == ["a", "b", "a", "b"]  # each hint is still followed


def test_a_hint_is_followed_at_once_the_first_times(monkeypatch: pytest.MonkeyPatch) -> None:
    client = BouncingClient(timeout_ms=5000, answer_after=retry.FOLLOWS_FREE)
    # the back-off's waits themselves are recorded: a bound on the call's wall time
    # (40 ms, under the first 50 ms back-off) could fail on a loaded machine
    slept: list[float] = []
    sleep = time.sleep

    def recorded(seconds: float) -> None:
        slept.append(seconds)
        sleep(seconds)

    monkeypatch.setattr(time, "sleep", recorded)
    assert queue_with(client).call(0, Command.QUEUE_STATS, {}, lambda: ["a", "b"], "c") == {"at": "a"}
    assert slept == [], "no back-off before the first follows"
    assert client.asked == ["a", "b", "a"]
