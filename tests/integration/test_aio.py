"""The asyncio client (``zmqueue.aio``) against real hosts: the same calls
and errors as the blocking client, long polls that leave the event loop free,
coroutine handlers for push subscriptions, pipelines, and a clear error after
close."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import zmqueue
import zmqueue.aio
from tests.conftest import QueueCluster, wait_for
from tests.helpers import back_and_not_dead_lettered, take_and_delete


def addr(qcluster: QueueCluster) -> str:
    return str(qcluster.factory.agent.http_addr)


async def until(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    """Poll ``check`` on the event loop until it holds, or fail after the deadline."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.05)


async def drain(q: zmqueue.aio.AsyncQueue, n: int, timeout_s: float = 20) -> dict[str, bytes]:
    got: dict[str, bytes] = {}
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        msgs = await q.receive(max_messages=100, wait_time=1)
        got.update((m.id, m.body) for m in msgs)
        if msgs:
            assert await q.delete_batch(msgs) == [None] * len(msgs)
    return got


def test_the_async_client_sends_receives_and_raises_what_the_blocking_one_does(
        qcluster: QueueCluster) -> None:
    name = qcluster.queue_name("aio")

    async def main() -> None:
        async with await zmqueue.aio.connect(addr(qcluster)) as client:
            q = await client.create_queue(name, visibility_timeout=30, max_message_bytes=1024)
            assert q.name == name and q.config.visibility_timeout_s == 30
            assert name in await client.list_queues("aio-")
            assert await client.list_dead_letter_source_queues(name) == [], "no queue sends it dead letters"
            one = await q.send(b"one", attributes={"k": "v"})
            more = await q.send_batch([b"two", b"three"])
            msgs = await q.receive(max_messages=10, wait_time=2)
            while len(msgs) < 3:  # the batch may sit apart from the single send
                msgs += await q.receive(max_messages=10, wait_time=2)
            assert {m.id for m in msgs} == {one, *more}
            assert {m.body for m in msgs} == {b"one", b"two", b"three"}
            assert next(m for m in msgs if m.id == one).attributes == {"k": "v"}
            await q.change_visibility(msgs[0], 0)
            assert await q.change_visibility_batch(msgs[1:], [600, 600]) == [None, None]
            assert await q.delete_batch(msgs[1:]) == [None, None]
            again = await drain(q, 1)
            assert list(again) == [msgs[0].id], "the message made visible again came back"
            with pytest.raises(zmqueue.MessageTooLarge):
                await q.send(b"x" * 2048)
            with pytest.raises(zmqueue.InvalidReceipt):
                await q.delete("not-a-receipt")
            with pytest.raises(zmqueue.QueueNotFound):
                await client.get_queue(name + "-missing")
            assert (await q.stats())["total"] == 0
            cfg = await q.set_attributes(visibility_timeout=5, max_message_bytes=4096)
            assert (cfg.visibility_timeout_s, cfg.max_message_bytes) == (5, 4096) and q.config == cfg
            with pytest.raises(zmqueue.ConfigError, match="cannot set"):
                await q.set_attributes(fifo=True)
            await client.delete_queue(name)

    asyncio.run(main())


def test_long_polls_wait_on_pool_threads_while_the_event_loop_goes_on(qcluster: QueueCluster) -> None:
    name = qcluster.queue_name("aio-poll")

    async def main() -> None:
        async with await zmqueue.aio.connect(addr(qcluster), threads=8) as client:
            q = await client.create_queue(name)
            polls = [asyncio.create_task(q.receive(max_messages=1, wait_time=15)) for _ in range(4)]
            ticks = 0
            while ticks < 10:  # the loop is free while the four polls are parked
                await asyncio.sleep(0.02)
                ticks += 1
            assert not any(p.done() for p in polls), "the polls returned before any message was sent"
            sent = set(await q.send_batch([f"m{i}".encode() for i in range(4)]))
            got = [m for msgs in await asyncio.wait_for(asyncio.gather(*polls), 30) for m in msgs]
            got_ids = {m.id for m in got}
            if len(got_ids) < 4:  # one poll may have merged several: the rest are buffered
                got_ids |= set(await drain(q, 4 - len(got_ids)))
            assert got_ids == sent

    asyncio.run(main())


def test_a_coroutine_handler_runs_on_the_loop_and_its_messages_are_deleted(qcluster: QueueCluster) -> None:
    name = qcluster.queue_name("aio-push")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        handled: list[bytes] = []
        on_loop: list[bool] = []

        async def handler(m: zmqueue.Message) -> None:
            on_loop.append(asyncio.get_running_loop() is loop)
            await asyncio.sleep(0)
            if m.body == b"bad" and m.receive_count == 1:
                raise RuntimeError("fails once: comes back after its visibility timeout")
            handled.append(m.body)

        async with await zmqueue.aio.connect(addr(qcluster)) as client:
            q = await client.create_queue(name, visibility_timeout=1)
            async with await q.subscribe(handler, prefetch=5) as sub:
                await q.send_batch([f"p{i}".encode() for i in range(20)] + [b"bad"])

                async def all_handled() -> bool:
                    return len(handled) >= 21

                await until(all_handled, 30, "21 messages handled, the bad one on its second try")

                async def deleted() -> bool:
                    return (await q.stats())["total"] == 0

                await until(deleted, 20, "every handled message deleted")
                assert sub.sync.failed == 1
            assert sorted(handled) == sorted([f"p{i}".encode() for i in range(20)] + [b"bad"])
            assert on_loop and all(on_loop), "the coroutine handler ran on the test's event loop"

    asyncio.run(main())


def test_an_async_pipeline_confirms_every_send(qcluster: QueueCluster) -> None:
    name = qcluster.queue_name("aio-pipe")

    async def main() -> None:
        async with await zmqueue.aio.connect(addr(qcluster)) as client:
            q = await client.create_queue(name, partitions=2)
            async with q.pipeline(window=16) as pipe:
                pending = [await pipe.send(f"e{i}".encode()) for i in range(200)]
            assert all(p.id and p.error is None for p in pending)
            got = await drain(q, 200)
            assert set(got) == {p.id for p in pending}
            assert sorted(got.values()) == sorted(f"e{i}".encode() for i in range(200))
            fifo = await client.create_queue(name + ".fifo", fifo=True)
            with pytest.raises(zmqueue.InvalidParameter, match="max_requests=1"):
                fifo.pipeline(max_requests=4)
            async with fifo.pipeline(window=8) as fpipe:
                ordered = [await fpipe.send(f"f{i}".encode(), group_id="g", dedup_id=f"f{i}")
                           for i in range(20)]
            assert all(p.id for p in ordered)
            got_fifo: list[bytes] = []
            while len(got_fifo) < 20:
                msgs = await fifo.receive(max_messages=10, wait_time=2)
                assert msgs, f"only {len(got_fifo)} of 20 FIFO messages came"
                got_fifo += [m.body for m in msgs]
                await fifo.delete_batch(msgs)
            assert got_fifo == [f"f{i}".encode() for i in range(20)], "the group's send order"

    asyncio.run(main())


def test_an_async_receive_pipeline_drains_a_queue_and_hears_every_delete(qcluster: QueueCluster) -> None:
    name = qcluster.queue_name("aio-rpipe")
    heard: list[Any] = []

    async def main() -> None:
        async with await zmqueue.aio.connect(addr(qcluster)) as client:
            q = await client.create_queue(name, visibility_timeout=60)
            sent = await q.send_batch([f"r{i}".encode() for i in range(150)])
            seen: list[str] = []
            on_deleted = lambda items, errors: heard.extend(zip(items, errors, strict=True))  # noqa: E731
            async with q.receive_pipeline(max_messages=20, wait_time=0.5, on_deleted=on_deleted) as pipe:
                while msgs := await pipe.receive():
                    seen += [m.id for m in msgs]
                    await pipe.delete(msgs)
                assert pipe.sync.requests > 0, "requests went ahead"
            assert pipe.failed_deletes == []
            assert sorted(seen) == sorted(sent)
            assert (await q.stats())["total"] == 0

    asyncio.run(main())
    assert len(heard) == 150 and all(err is None for _, err in heard), "each delete's outcome, once"


def test_an_async_receive_pipeline_reports_a_refused_delete_and_raise_failed_raises_it(
        qcluster: QueueCluster) -> None:
    name = qcluster.queue_name("aio-rpipe-bad")

    async def main() -> None:
        async with await zmqueue.aio.connect(addr(qcluster)) as client:
            q = await client.create_queue(name, visibility_timeout=60)
            await q.send_batch([f"b{i}".encode() for i in range(30)])
            got: list[zmqueue.Message] = []
            async with q.receive_pipeline(max_messages=10, wait_time=0.5) as pipe:
                pipe.raise_failed()  # nothing failed yet: no error
                while msgs := await pipe.receive():
                    got += msgs
                    await pipe.delete(["not-a-receipt", *msgs] if len(got) == 10 else msgs)
            assert len({m.id for m in got}) == 30
            assert [(str(item), type(err)) for item, err in pipe.failed_deletes] == [
                ("not-a-receipt", zmqueue.InvalidReceipt)]
            with pytest.raises(zmqueue.InvalidReceipt) as raised:
                pipe.raise_failed()
            assert raised.value is pipe.failed_deletes[0][1]
            assert (await q.stats())["total"] == 0, "the good deletes went through"

    asyncio.run(main())


def test_cancelled_polls_leave_the_client_working_and_close_is_clear(qcluster: QueueCluster) -> None:
    name = qcluster.queue_name("aio-close")

    async def main() -> None:
        with pytest.raises(zmqueue.ConfigError, match="threads"):
            await zmqueue.aio.connect(addr(qcluster), threads=0)
        client = await zmqueue.aio.connect(addr(qcluster), threads=2)
        q = await client.create_queue(name, visibility_timeout=1)
        poll = asyncio.create_task(q.receive(wait_time=1))
        await asyncio.sleep(0.05)
        poll.cancel()
        with pytest.raises(asyncio.CancelledError):
            await poll
        # the cancelled poll may still take this one on its thread: then it
        # comes back after its visibility timeout
        mid = await q.send(b"after the cancel")
        assert list(await drain(q, 1)) == [mid]
        await client.close()
        await client.close()  # twice is fine
        with pytest.raises(zmqueue.ClientClosed, match="closed"):
            await q.send(b"too late")
        with pytest.raises(zmqueue.ClientClosed):
            q.pipeline()

    asyncio.run(main())


def test_a_subscription_whose_event_loop_ended_stops_instead_of_failing_every_message(
        qcluster: QueueCluster) -> None:
    name = qcluster.queue_name("aio-orphan")
    left: dict[str, Any] = {}

    async def main() -> None:  # ends without closing its client or subscription
        client = await zmqueue.aio.connect(addr(qcluster))
        q = await client.create_queue(name, visibility_timeout=1, dead_letter_queue=name + "-dlq",
                                      max_receive_count=2)

        async def handler(m: zmqueue.Message) -> None:
            raise AssertionError("never called: the loop is gone when messages come")

        left["client"], left["sub"] = client, await q.subscribe(handler, prefetch=1)

    asyncio.run(main())
    sub = left["sub"].sync
    try:
        # it stops as the loop is closed, not at the next message pushed, and unsubscribes
        wait_for(lambda: not sub.thread.is_alive(), 20, "the subscription stopped by itself")
        assert sub.stopped.is_set() and sub.conns == {}
        q = qcluster.client.get_queue(name)
        mid = q.send(b"after the loop ended")
        assert sub.handled == 0 and sub.failed == 0  # (never handed to the handler)
        # never pushed to it: neither failed nor dead-lettered
        [m] = wait_for(lambda: q.receive(wait_time=1), 20, "the message in its queue")
        assert m.id == mid and m.receive_count == 1
        q.delete(m)
    finally:
        left["client"].sync.close()


def test_a_subscription_stopped_by_its_ended_event_loop_unsubscribes_and_its_message_is_not_dead_lettered(
        qcluster: QueueCluster) -> None:
    """The program returns with a coroutine handler in hand and its
    subscription open. (The subscription stopped, but its hosts kept it for
    30 s and pushed the message again to the dead connection after each
    visibility timeout, every push a receive: it ended in the dead-letter
    queue without a handler seeing it again.)"""
    name = qcluster.queue_name("aio-orphan-dlq")
    left: dict[str, Any] = {}

    async def main() -> None:
        client = await zmqueue.aio.connect(addr(qcluster))
        q = await client.create_queue(name, visibility_timeout=2, dead_letter_queue=name + "-dlq",
                                      max_receive_count=3)
        started = asyncio.Event()

        async def handler(m: zmqueue.Message) -> None:
            started.set()
            await asyncio.sleep(60)

        left["client"], left["sub"] = client, await q.subscribe(handler)
        left["id"] = await q.send(b"in hand")
        await asyncio.wait_for(started.wait(), 10)

    asyncio.run(main())
    sub = left["sub"].sync
    try:
        wait_for(lambda: not sub.thread.is_alive(), 20, "the subscription stopped by itself")
        assert sub.stopped.is_set() and sub.conns == {}
        assert sub.handled == 0 and sub.failed == 1  # (its handler cancelled as the loop ended)
        q = qcluster.client.get_queue(name)
        m = back_and_not_dead_lettered(q, qcluster.client.get_queue(name + "-dlq"), 2)
        # pushed once, to the handler that was cancelled: not again after the loop was closed
        assert m.id == left["id"] and m.receive_count == 2
        q.delete(m)
    finally:
        left["client"].sync.close()


def test_an_async_callable_object_or_partial_handler_is_awaited_before_its_message_is_deleted(
        qcluster: QueueCluster) -> None:
    """(An object with an ``async def __call__`` was called on the
    subscription's thread, its coroutine never awaited, and its message
    deleted as handled.)"""
    name = qcluster.queue_name("aio-callable")

    class Handler:
        def __init__(self) -> None:
            self.bodies: list[bytes] = []

        async def __call__(self, m: zmqueue.Message) -> None:
            await asyncio.sleep(0)
            self.bodies.append(m.body)

    async def main() -> None:
        handler = Handler()
        async with await zmqueue.aio.connect(addr(qcluster)) as client:
            q = await client.create_queue(name, visibility_timeout=30)
            async with await q.subscribe(handler) as sub:
                await q.send_batch([b"a", b"b", b"c"])

                async def handled() -> bool:
                    return len(handler.bodies) == 3 and (await q.stats())["total"] == 0

                await until(handled, 20, "the three messages handled by the coroutine, then deleted")
            assert sorted(handler.bodies) == [b"a", b"b", b"c"] and sub.sync.failed == 0

    asyncio.run(main())


def test_the_blocking_subscribe_refuses_a_coroutine_handler_and_never_deletes_unawaited_messages(
        qcluster: QueueCluster) -> None:
    q = qcluster.client.create_queue(qcluster.queue_name("sync-coro"), visibility_timeout=1)

    async def handler(m: zmqueue.Message) -> None:
        raise AssertionError("never awaited")

    with pytest.raises(zmqueue.InvalidParameter, match=r"coroutine function.*zmqueue\.aio"):
        q.subscribe(handler)
    # a plain function that returns a coroutine: found when it returns, the message not deleted
    with q.subscribe(lambda m: handler(m), prefetch=1) as sub:
        q.send(b"kept")
        wait_for(lambda: sub.failed >= 1, 20, "the handler's coroutine counted as a failure")
        assert sub.handled == 0
    assert q.stats()["total"] == 1, "the message was not deleted"


def test_closing_the_client_fails_queued_calls_with_client_closed_not_a_cancellation(
        qcluster: QueueCluster) -> None:
    """(A call waiting for a pool thread when the client closed raised
    CancelledError, which asyncio.run took for its own task's.)"""
    name = qcluster.queue_name("aio-queued")

    async def main() -> None:
        client = await zmqueue.aio.connect(addr(qcluster), threads=1)
        q = await client.create_queue(name)
        poll = asyncio.create_task(q.receive(wait_time=2))  # holds the one thread
        await asyncio.sleep(0.1)
        queued = asyncio.create_task(q.send(b"queued behind the poll"))
        await asyncio.sleep(0.1)
        await client.close()
        with pytest.raises(zmqueue.ClientClosed, match="before this call got a thread"):
            await queued
        assert await poll == []
        with pytest.raises(zmqueue.ConfigError, match="threads"):
            await zmqueue.aio.connect(addr(qcluster), threads="4")  # type: ignore[arg-type]

    asyncio.run(main())


def test_async_pipelines_close_twice_and_refuse_calls_after_close(qcluster: QueueCluster) -> None:
    name = qcluster.queue_name("aio-close-pipes")

    async def main() -> None:
        async with await zmqueue.aio.connect(addr(qcluster)) as client:
            q = await client.create_queue(name)
            async with q.pipeline() as pipe:
                await pipe.send(b"x")
            await pipe.close()  # (was RuntimeError: cannot schedule new futures after shutdown)
            with pytest.raises(zmqueue.ClientClosed, match="pipeline was closed"):
                await pipe.send(b"y")
            with pytest.raises(zmqueue.InvalidParameter, match="list of messages"):
                await q.send_batch("abc")  # (was three messages: a, b and c)
            rp = q.receive_pipeline(max_messages=10, wait_time=1)
            [m] = await rp.receive()
            for call in (rp.delete, q.delete_batch):
                with pytest.raises(zmqueue.InvalidParameter, match="got one str"):
                    await call(m.receipt)  # (was one malformed receipt per character)
            await rp.delete([m])
            await rp.close()
            await rp.close()
            with pytest.raises(zmqueue.ClientClosed, match="receive pipeline was closed"):
                await rp.receive()
            assert rp.failed_deletes == []

            async def empty() -> bool:
                return (await q.stats())["total"] == 0

            await until(empty, 10, "the delete sent at close")

    asyncio.run(main())


def test_closing_a_subscription_from_its_own_coroutine_handler_does_not_wait_for_itself(
        qcluster: QueueCluster) -> None:
    """(It waited out the subscription thread's 5 s join: the thread waited
    for the handler, which waited for the close.)"""
    name = qcluster.queue_name("aio-self-close")

    async def main() -> None:
        async with await zmqueue.aio.connect(addr(qcluster)) as client:
            q = await client.create_queue(name)
            subs: list[zmqueue.aio.AsyncSubscription] = []
            closed = asyncio.Event()

            async def handler(m: zmqueue.Message) -> None:
                await subs[0].close()
                closed.set()

            subs.append(await q.subscribe(handler))
            await q.send(b"stop")
            await asyncio.wait_for(closed.wait(), timeout=4)  # the join alone took 5 s

            async def stopped() -> bool:
                return not subs[0].sync.thread.is_alive()

            await until(stopped, 10, "the subscription's thread ended")

    asyncio.run(main())


def test_closing_the_client_from_its_own_coroutine_handler_does_not_wait_for_itself(
        qcluster: QueueCluster) -> None:
    """(It waited out the subscription thread's 5 s join, and the message in
    hand was never deleted: the thread waited for the handler, which waited
    for the close.) The close goes on once the handler returns: its message
    is deleted as after any handler, then the client's sockets close."""
    name = qcluster.queue_name("aio-client-self-close")

    async def main() -> None:
        client = await zmqueue.aio.connect(addr(qcluster))
        q = await client.create_queue(name, visibility_timeout=30)
        closed = asyncio.Event()
        subs: list[zmqueue.aio.AsyncSubscription] = []

        seen: list[bytes] = []

        async def handler(m: zmqueue.Message) -> None:
            seen.append(m.body)
            await client.close()
            closed.set()

        await q.send_batch([b"stop", b"after"])  # (pushed together: prefetch 10)
        subs.append(await q.subscribe(handler))
        await asyncio.wait_for(closed.wait(), timeout=4)  # the join alone took 5 s

        async def released() -> bool:
            return client.sync.ctx.closed and not subs[0].sync.thread.is_alive()

        await until(released, 10, "the subscription ended and the client released its sockets")
        assert subs[0].sync.handled == 1 and len(seen) == 1, seen  # nothing handed over after the close

    asyncio.run(main())
    with zmqueue.connect(addr(qcluster)) as other:  # the handled one deleted, the other left in the queue
        q = other.get_queue(name)
        wait_for(lambda: q.stats()["total"] == 1, 10, "the handled message deleted")


def test_a_handler_cancelled_as_its_event_loop_ends_counts_once_without_a_traceback(
        qcluster: QueueCluster, caplog: pytest.LogCaptureFixture) -> None:
    """(The message in hand was logged as a handler failure with the
    CancelledError's traceback, and the next one pushed was failed as well.)"""
    name = qcluster.queue_name("aio-cancelled")
    left: dict[str, Any] = {}

    async def main() -> None:  # ends with its handler in hand, the subscription open
        client = await zmqueue.aio.connect(addr(qcluster))
        q = await client.create_queue(name, visibility_timeout=1)
        started = asyncio.Event()

        async def handler(m: zmqueue.Message) -> None:
            started.set()
            await asyncio.sleep(60)

        left["client"], left["sub"] = client, await q.subscribe(handler, prefetch=2)
        await q.send(b"a")
        await q.send(b"b")
        await asyncio.wait_for(started.wait(), 10)

    with caplog.at_level(logging.WARNING, logger="zmqueue"):
        asyncio.run(main())
        sub = left["sub"].sync
        try:
            wait_for(lambda: not sub.thread.is_alive(), 20, "the subscription stopped by itself")
            assert sub.handled == 0 and sub.failed == 1
            q = qcluster.client.get_queue(name)
            got: list[bytes] = []

            def both_back() -> bool:
                take_and_delete(q, 2, got)
                return len(got) >= 2

            wait_for(both_back, 20, "both messages back in their queue")
            assert sorted(got) == [b"a", b"b"]
        finally:
            left["client"].sync.close()
    mine = [r for r in caplog.records if r.name.startswith("zmqueue")]
    assert not [r for r in mine if r.levelno >= logging.ERROR or r.exc_info], \
        [r.getMessage() for r in mine]
    assert any("handler was cancelled" in r.getMessage() for r in mine)
