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
