"""How much one request-loop pass reads from a socket: every queued request,
except that a big one (a batch send) ends the pass's reading, so its commit
and reply do not wait behind the requests queued after it."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import cast

import pytest
import zmq

from zmqueue.dataplane.dispatch import Dispatcher
from zmqueue.dataplane.server import BIG_REQUEST_BYTES, LoopHooks, RequestLoop, Sockets


class Counting:
    """Stands in for the Dispatcher: notes the last frame of each request."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []

    def handle(self, name: str, frames: list[bytes], user: str | None = None) -> None:
        self.seen.append(frames[-1])


@pytest.fixture
def pair() -> Iterator[tuple[zmq.Socket[bytes], zmq.Socket[bytes]]]:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    router.bind("inproc://drain")  # (inproc: a sent message is queued at once)
    dealer.connect("inproc://drain")
    yield router, dealer
    router.close(linger=0)
    dealer.close(linger=0)
    ctx.term()


def loop_over(router: zmq.Socket[bytes], dispatcher: Counting) -> RequestLoop:
    sockets = SimpleNamespace(by_name={"client": router}, secure=False)
    return RequestLoop(cast(Sockets, sockets), cast(Dispatcher, dispatcher), cast(LoopHooks, None))


def test_a_pass_reads_every_small_request_but_stops_after_a_big_one(
        pair: tuple[zmq.Socket[bytes], zmq.Socket[bytes]]) -> None:
    router, dealer = pair
    small, big = b"s" * 100, b"b" * BIG_REQUEST_BYTES
    dispatcher = Counting()
    loop = loop_over(router, dispatcher)
    frames = [small, small, big, small, big]
    for f in frames:
        dealer.send(f)
    passes: list[int] = []
    while len(dispatcher.seen) < len(frames) and len(passes) < 10:
        before = len(dispatcher.seen)
        loop._drain(router)
        passes.append(len(dispatcher.seen) - before)
    assert dispatcher.seen == frames
    assert passes == [3, 2]  # each pass ends at a big request; small ones are read on
