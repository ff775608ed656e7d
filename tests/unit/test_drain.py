"""How much one request-loop pass reads from a socket: every queued request,
except that after a big one (a batch send) it reads on only sends (they
share its commit) and keeps the first other request for the next pass, so
the batch's commit and reply do not wait for the work queued behind it."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import cast

import pytest
import zmq

from zmqueue.dataplane.dispatch import Dispatcher
from zmqueue.dataplane.server import BIG_REQUEST_BYTES, LoopHooks, RequestLoop, Sockets
from zmqueue.protocol import Command, encode_request


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


def frame(command: Command, size: int) -> bytes:
    data = encode_request(command, 1, {"pad": b"x" * size})
    assert (len(data) >= BIG_REQUEST_BYTES) == (size >= BIG_REQUEST_BYTES)
    return data


def test_after_a_batch_send_a_pass_reads_on_only_sends(
        pair: tuple[zmq.Socket[bytes], zmq.Socket[bytes]]) -> None:
    router, dealer = pair
    receive, delete = frame(Command.RECEIVE, 50), frame(Command.DELETE, 50)
    send, batch = frame(Command.SEND, 100), frame(Command.SEND, BIG_REQUEST_BYTES)
    dispatcher = Counting()
    loop = loop_over(router, dispatcher)
    frames = [receive, send, batch, send, batch, delete, send, receive, batch, receive]
    for f in frames:
        dealer.send(f)
    passes: list[list[bytes]] = []
    while len(dispatcher.seen) < len(frames) and len(passes) < 10:
        before = len(dispatcher.seen)
        loop._take_kept()
        loop._drain(router)
        passes.append(dispatcher.seen[before:])
    assert dispatcher.seen == frames  # every request, in order
    # a pass reads everything up to its first batch send, then only sends:
    # the delete after the second batch waits for the next pass, which starts
    # with it and reads on until the next non-send after a batch
    assert passes == [frames[:5], frames[5:9], frames[9:]]
