"""What a host tells the requests waiting on a stream it stops keeping
(``QueueService._closed``): QUEUE_NOT_FOUND when the queue was deleted,
NOT_LEADER when its replica moved to another host (a drain); both used to be
told the queue was deleted. Pure logic: the service parts it reads as plain
values, the real ``Waiters`` and ``Pusher``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from zmqueue.config import QueueConfig
from zmqueue.dataplane.pushing import Pusher
from zmqueue.dataplane.service import QueueService
from zmqueue.dataplane.stream import PendingAck
from zmqueue.dataplane.waiting import Waiters
from zmqueue.errors import NotLeader, QueueNotFound, ZmqueueError

KEY = ("q", 0, "h1")


class Req:
    def __init__(self, rid: int) -> None:
        self.identity, self.frame = b"c1", SimpleNamespace(request_id=rid)
        self.failed: list[ZmqueueError] = []

    def fail(self, exc: ZmqueueError) -> None:
        self.failed.append(exc)


def service(configs: dict[str, QueueConfig]) -> tuple[Any, Req, Req]:
    poll, send = Req(1), Req(2)
    waiters = Waiters()
    waiters.park(("q", 0), cast(Any, poll), 1, None, 10**12)
    svc = SimpleNamespace(meta=SimpleNamespace(configs=configs), waiters=waiters, pusher=Pusher(),
                          new_acks={KEY: [PendingAck(0, cast(Any, send), None)]},
                          set=SimpleNamespace(led_streams=lambda part: []), opened={KEY}, opening={KEY},
                          marked_replies={})
    return svc, poll, send


@pytest.mark.parametrize(("configs", "expected"), [
    ({}, QueueNotFound),
    ({"q": QueueConfig(name="q")}, NotLeader),
], ids=["deleted", "moved"])
def test_requests_waiting_on_a_closed_stream_hear_whether_the_queue_is_gone(
        configs: dict[str, QueueConfig], expected: type[ZmqueueError]) -> None:
    svc, poll, send = service(configs)
    QueueService._closed(svc, KEY)
    assert [type(e) for e in poll.failed] == [expected] and [type(e) for e in send.failed] == [expected]
    assert svc.waiters.total == 0 and KEY not in svc.new_acks
    assert KEY not in svc.opened | svc.opening  # (a later stream of that key is marked again)
    if expected is NotLeader:
        assert "moved" in str(poll.failed[0]) and "retry" in str(poll.failed[0])
