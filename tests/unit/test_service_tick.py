"""``QueueService.tick``: the host's next poll is bounded by the sooner of
what the parked polls and the push subscribers wait for (a poll's deadline,
a message's visibility time), so neither is served late."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from zmqueue.dataplane.service import QueueService


def stub(waiters_wake: int | None, push_wake: int | None) -> Any:
    """What tick reads of a service, every subsystem idle but the two timers."""
    idle = SimpleNamespace(poll=lambda now, ready: None, tick=lambda now: None, move=lambda now: None)
    return SimpleNamespace(
        forwarder=idle, replicator=idle, handover=idle, dlq=idle, parked=[],
        waiters=SimpleNamespace(serve=lambda svc, now: waiters_wake),
        pusher=SimpleNamespace(push_all=lambda svc, now: push_wake),
        _expire_acks=lambda: None, next_housekeeping_ms=10**15, set=SimpleNamespace(failed={}))


@pytest.mark.parametrize(("waiters_wake", "push_wake", "expected"), [
    (None, None, None), (30, None, 30), (None, 20, 20), (30, 20, 20), (10, 20, 10), (0, 5, 0),
])
def test_tick_answers_the_sooner_of_the_waiters_and_the_pushers_wake(
        waiters_wake: int | None, push_wake: int | None, expected: int | None) -> None:
    svc = stub(waiters_wake, push_wake)
    assert QueueService.tick(cast(QueueService, svc), 1000, frozenset()) == expected
