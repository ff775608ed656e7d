"""How a request-loop pass serves what it read from a socket: every queued
request; but when sends came together with other requests, only the sends
(they share one commit, and their replies wait for no other work), the
others kept, in order, for the next pass, which handles them first."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import cast

import pytest
import zmq

from zmqueue.dataplane.dispatch import Dispatcher, Outbox
from zmqueue.dataplane.server import LoopHooks, RequestLoop, Sockets
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
    return encode_request(command, 1, {"pad": b"x" * size})


def run_passes(loop: RequestLoop, router: zmq.Socket[bytes], dispatcher: Counting,
               expected: int) -> list[list[bytes]]:
    """What each pass handled, until ``expected`` requests were (at most 10 passes)."""
    passes: list[list[bytes]] = []
    while len(dispatcher.seen) < expected and len(passes) < 10:
        before = len(dispatcher.seen)
        loop._take_kept()
        loop._drain(router)
        passes.append(dispatcher.seen[before:])
    return passes


RECEIVE, DELETE = frame(Command.RECEIVE, 50), frame(Command.DELETE, 60)
SEND, BATCH = frame(Command.SEND, 100), frame(Command.SEND, 10_000)


def test_sends_read_beside_other_requests_are_served_first(
        pair: tuple[zmq.Socket[bytes], zmq.Socket[bytes]]) -> None:
    router, dealer = pair
    receive, delete, send, batch = RECEIVE, DELETE, SEND, BATCH
    dispatcher = Counting()
    loop = loop_over(router, dispatcher)
    frames = [receive, send, batch, delete, send, receive]
    for f in frames:
        dealer.send(f)
    passes = run_passes(loop, router, dispatcher, len(frames))
    # the first pass reads all six and handles the three sends, in order; the
    # next one starts with the kept receive, delete and receive, in order
    assert passes == [[send, batch, send], [receive, delete, receive]]
    # later, a receive and a send read together: the send, then the receive
    late = frame(Command.SEND, 70)
    for f in (receive, late):
        dealer.send(f)
    assert run_passes(loop, router, dispatcher, len(frames) + 2) == [[late], [receive]]


def test_a_pass_of_sends_only_or_of_no_sends_keeps_nothing(
        pair: tuple[zmq.Socket[bytes], zmq.Socket[bytes]]) -> None:
    router, dealer = pair
    dispatcher = Counting()
    loop = loop_over(router, dispatcher)
    for group in ([SEND, BATCH, SEND], [RECEIVE, DELETE, RECEIVE]):
        for f in group:
            dealer.send(f)
        before = len(dispatcher.seen)
        loop._drain(router)
        assert dispatcher.seen[before:] == group and loop.kept == []


class NoTimers:
    """Stands in for the host's loop hooks: no timers, nothing to flush."""

    def tick(self, now_ms: int, ready: object = None) -> None:
        return None

    def flush(self) -> None:
        pass

    def wake_sockets(self) -> list[object]:
        return []


class Naming:
    """Stands in for the Dispatcher in a whole pass: notes (socket name, last
    frame) of each request; has the outbox the loop reads."""

    def __init__(self) -> None:
        self.outbox = Outbox()
        self.by: list[tuple[str, bytes]] = []

    def handle(self, name: str, frames: list[bytes], user: str | None = None) -> None:
        self.by.append((name, frames[-1]))


def test_hosts_requests_go_first_and_are_never_kept() -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    socks = {n: ctx.socket(zmq.ROUTER) for n in ("client", "peer")}
    dealers = {n: ctx.socket(zmq.DEALER) for n in socks}
    try:
        for n, s in socks.items():
            s.bind(f"inproc://pass-{n}")
            dealers[n].connect(f"inproc://pass-{n}")
        dispatcher = Naming()
        sockets = SimpleNamespace(by_name=socks, secure=False)
        loop = RequestLoop(cast(Sockets, sockets), cast(Dispatcher, dispatcher), cast(LoopHooks, NoTimers()))
        receive, send = RECEIVE, SEND
        position, dead_letter = frame(Command.POSITION, 40), frame(Command.SEND, 90)
        for f in (receive, send):
            dealers["client"].send(f)
        for f in (position, dead_letter):
            dealers["peer"].send(f)
        loop.run_once()
        # the peer socket first, and whole (a replica's position must not wait);
        # on the client socket the send, its receive kept
        assert dispatcher.by == [("peer", position), ("peer", dead_letter), ("client", send)]
        dealers["peer"].send(position)
        dealers["client"].send(receive)
        dispatcher.by.clear()
        loop.run_once()
        # positions still ahead of the kept receive, which is ahead of the new one
        assert dispatcher.by == [("peer", position), ("client", receive), ("client", receive)]
    finally:
        for s in [*socks.values(), *dealers.values()]:
            s.close(linger=0)
        ctx.term()


def test_a_send_after_a_purge_on_its_connection_waits_for_it(
        pair: tuple[zmq.Socket[bytes], zmq.Socket[bytes]]) -> None:
    """(A PURGE then a SEND, pipelined on one connection: the send was served
    first, acknowledged, then purged.) Another connection's send still goes first."""
    router, dealer = pair
    dispatcher = Counting()
    loop = loop_over(router, dispatcher)
    other = router.context.socket(zmq.DEALER)
    other.connect("inproc://drain")
    try:
        purge, delete_queue = frame(Command.PURGE_QUEUE, 10), frame(Command.DELETE_QUEUE, 20)
        mine, theirs = frame(Command.SEND, 30), frame(Command.SEND, 40)
        for sock, f in ((dealer, purge), (other, theirs), (dealer, mine), (dealer, RECEIVE),
                        (dealer, delete_queue), (dealer, SEND)):
            sock.send(f)
        # (a poll lets the ROUTER see the second pipe before the drain)
        router.poll(100)
        passes = run_passes(loop, router, dispatcher, 6)
        assert passes == [[theirs], [purge, mine, RECEIVE, delete_queue, SEND]]
    finally:
        other.close(linger=0)
