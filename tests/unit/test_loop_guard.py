"""A ZmqueueError that escapes a request-loop pass is logged and counted, and
the loop goes on: a host exited on one (a peer's catch-up reply its callback
refused) until the thirty-first session."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
import zmq

from zmqueue.dataplane.dispatch import Dispatcher, Outbox
from zmqueue.dataplane.server import LoopHooks, RequestLoop, Sockets
from zmqueue.errors import StaleEpoch


class Hooks:
    """Stands in for the host's hooks: the first tick raises, every pass is noted."""

    def __init__(self) -> None:
        self.ticks = 0
        self.flushes = 0

    def tick(self, now_ms: int, ready: Any = None) -> int | None:
        self.ticks += 1
        if self.ticks == 1:
            raise StaleEpoch("a record's epoch is newer than its sender's term")
        return 0

    def flush(self) -> None:
        self.flushes += 1

    def wake_sockets(self) -> list[Any]:
        return []


@pytest.fixture
def router() -> Iterator[zmq.Socket[bytes]]:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.bind("inproc://guard")
    yield sock
    sock.close(linger=0)
    ctx.term()


def test_a_pass_that_raises_is_counted_and_the_next_one_runs(router: zmq.Socket[bytes]) -> None:
    hooks = Hooks()
    dispatcher = SimpleNamespace(outbox=Outbox(), counters={"pass_errors": 0})
    loop = RequestLoop(cast(Sockets, SimpleNamespace(by_name={"client": router}, secure=False)),
                       cast(Dispatcher, dispatcher), cast(LoopHooks, hooks))
    loop.run_guarded()  # the tick raises: no flush this pass
    assert dispatcher.counters["pass_errors"] == 1 and (hooks.ticks, hooks.flushes) == (1, 0)
    loop.run_guarded()
    assert dispatcher.counters["pass_errors"] == 1 and (hooks.ticks, hooks.flushes) == (2, 1)
    with pytest.raises(StaleEpoch):  # (run_once itself still raises: the guard is run_guarded's)
        hooks.ticks = 0
        loop.run_once()


class FailingHooks(Hooks):
    """A tick that raises ``exc`` on its first pass."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__()
        self.exc = exc

    def tick(self, now_ms: int, ready: Any = None) -> int | None:
        self.ticks += 1
        if self.ticks == 1:
            raise self.exc
        return 0


def _loop(router: zmq.Socket[bytes], hooks: Hooks) -> tuple[RequestLoop, Any]:
    dispatcher = SimpleNamespace(outbox=Outbox(), counters={"pass_errors": 0})
    return RequestLoop(cast(Sockets, SimpleNamespace(by_name={"client": router}, secure=False)),
                       cast(Dispatcher, dispatcher), cast(LoopHooks, hooks)), dispatcher


def test_an_os_error_that_escapes_a_pass_is_counted_and_the_host_goes_on(router: zmq.Socket[bytes]) -> None:
    """A full disk or a stray file must not end the host (the stores name
    theirs as ZmqueueErrors; this is the last line of defence)."""
    hooks = FailingHooks(NotADirectoryError(20, "Not a directory", "/data/queues/q/0/h1"))
    loop, dispatcher = _loop(router, hooks)
    loop.run_guarded()
    loop.run_guarded()
    assert dispatcher.counters["pass_errors"] == 1 and (hooks.ticks, hooks.flushes) == (2, 1)


def test_a_bug_still_ends_the_loop(router: zmq.Socket[bytes]) -> None:
    loop, _ = _loop(router, FailingHooks(KeyError("a bug")))
    with pytest.raises(KeyError):
        loop.run_guarded()
