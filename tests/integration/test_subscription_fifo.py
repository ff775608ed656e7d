"""Push subscriptions to FIFO queues keep each group's order when the handler
raises: the group's later messages the subscription already holds are not
handed out (nor deleted) but come back behind the failed one, while other
groups go on. Real hosts and a real Consul; the blocking and asyncio clients."""

from __future__ import annotations

import asyncio
import time

import zmqueue
import zmqueue.aio
from tests.conftest import QueueCluster, wait_for
from zmqueue import OutgoingMessage

VISIBILITY_S = 2
"""The failed message (and the held ones) come back after this; the other
group has this long to be handled meanwhile."""


def send_two_groups(q: zmqueue.Queue) -> None:
    """g0 h0 g1 h1 ... g9 h9: with prefetch 5, g3 and g4 are pushed together."""
    items = [OutgoingMessage(f"{g}{i}".encode(), group_id=g, dedup_id=f"{g}{i}")
             for i in range(10) for g in ("g", "h")]
    for at in range(0, len(items), 10):
        q.send_batch(items[at:at + 10])


class Handling:
    """Records what the handler got; raises once, on g3."""

    def __init__(self) -> None:
        self.handled: list[str] = []
        self.failed_once = False

    def __call__(self, m: zmqueue.Message) -> None:
        body = m.body.decode()
        if body == "g3" and not self.failed_once:
            self.failed_once = True
            raise RuntimeError("transient failure")
        self.handled.append(body)

    def check(self) -> None:
        for g in ("g", "h"):
            assert [b for b in self.handled if b[0] == g] == [f"{g}{i}" for i in range(10)], self.handled
        # the other group was not held up: all of it before g3 came back
        assert self.handled.index("h9") < self.handled.index("g3"), self.handled


def test_a_fifo_subscription_holds_back_a_failed_messages_group_and_keeps_its_order(
        qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("fsub") + ".fifo", fifo=True,
                                     visibility_timeout=VISIBILITY_S)
    send_two_groups(q)
    handling = Handling()
    with q.subscribe(handling, prefetch=5) as sub:
        wait_for(lambda: len(handling.handled) >= 20, 20, "every message handled")
        wait_for(lambda: q.stats()["total"] == 0, 10, "every handled message deleted")
        handling.check()
        assert sub.failed == 1
        assert sub.held_back >= 1  # g4, pushed with g3


def test_an_asyncio_fifo_subscription_holds_back_a_failed_messages_group_too(qcluster: QueueCluster) -> None:
    name = qcluster.queue_name("afsub") + ".fifo"
    handling = Handling()

    async def handler(m: zmqueue.Message) -> None:
        await asyncio.sleep(0)
        handling(m)

    async def main() -> None:
        async with await zmqueue.aio.connect(str(qcluster.factory.agent.http_addr)) as client:
            q = await client.create_queue(name, fifo=True, visibility_timeout=VISIBILITY_S)
            await client.run(send_two_groups, q.sync)
            async with await q.subscribe(handler, prefetch=5) as sub:
                deadline = time.monotonic() + 20
                while len(handling.handled) < 20 or (await q.stats())["total"] != 0:
                    assert time.monotonic() < deadline, f"not all handled and deleted: {handling.handled}"
                    await asyncio.sleep(0.05)
                handling.check()
                assert sub.sync.failed == 1 and sub.sync.held_back >= 1

    asyncio.run(main())
