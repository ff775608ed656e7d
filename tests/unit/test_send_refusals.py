"""Where ``Queue.call`` sends a SEND next after a host refused it (pure
routing logic: the client's transport is a plain object answering by a script)."""

from __future__ import annotations

from typing import Any

import pytest

from zmqueue.client.queue import Queue
from zmqueue.errors import DiskFull, NotLeader
from zmqueue.protocol import Command


class ScriptedClient:
    """Answers each request from ``script[endpoint]`` in turn; records the endpoints asked."""

    retries = 3
    request_timeout_ms = 300

    def __init__(self, script: dict[str, list[Any]]) -> None:
        self.script = script
        self.asked: list[str] = []

    def connection(self, endpoint: str) -> ScriptedClient:
        return self

    def next_request_id(self) -> int:
        return 1

    def request(self, endpoint: str, command: Command, body: dict[str, Any], rid: int,
                extra_timeout_ms: int) -> Any:
        self.asked.append(endpoint)
        answer = self.script[endpoint].pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def queue_with(client: ScriptedClient) -> Queue:
    q = Queue.__new__(Queue)
    q.client = client  # type: ignore[assignment]
    q.name = "orders"
    q.refresh = lambda force=False: None  # type: ignore[method-assign]
    q._follow = lambda p, origin, exc: exc.details.get("endpoint")  # type: ignore[method-assign]
    return q


def full(endpoint: str) -> DiskFull:
    return DiskFull(f"{endpoint}: disk below the reserve", path="/data", stored=False)


def test_a_not_leader_naming_a_host_that_refused_for_its_disk_is_not_followed_back_there() -> None:
    # a refuses (disk), b answers NOT_LEADER naming a, c has room: the send lands on c at
    # the third request, not after going back to a (which would refuse again)
    client = ScriptedClient({
        "a": [full("a"), full("a")],
        "b": [NotLeader("written by a", leader="n-a", endpoint="a")],
        "c": [{"ok": True}],
    })
    q = queue_with(client)
    assert q.call(0, Command.SEND, {}, lambda: ["a", "b", "c"]) == {"ok": True}
    assert client.asked == ["a", "b", "c"]


def test_a_send_every_host_refuses_for_its_disk_raises_disk_full() -> None:
    client = ScriptedClient({"a": [full("a")], "b": [full("b")]})
    q = queue_with(client)
    with pytest.raises(DiskFull):
        q.call(0, Command.SEND, {}, lambda: ["a", "b"])
    assert client.asked == ["a", "b"]
