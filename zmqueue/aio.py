"""The client for asyncio programs: ``client = await zmqueue.aio.connect(...)``.

Every coroutine runs one call of the blocking client (:mod:`zmqueue.client`)
on a bounded pool of threads, the way Motor long served asyncio over PyMongo:
the event loop never blocks, each pool thread has its own connections to the
hosts (ADR 0004), and up to ``threads`` calls are in flight at once (a long
poll holds its thread for its wait; more calls queue for a thread). Results,
errors and retries are exactly the blocking client's.

- Cancelling an ``await`` does not cancel the request: it finishes on its
  thread and its result is dropped (a cancelled receive's messages come back
  after their visibility timeout; a cancelled send may have been stored).
- A push subscription's handler may be a coroutine function (or return any
  awaitable): what it returns runs on the event loop, and the subscription
  counts the message handled (and deletes it, with ``auto_delete``) once
  that returns. If the loop is closed
  while the subscription runs, it stops by itself (the message in hand comes
  back after its visibility timeout) instead of failing every message, and
  unsubscribes at its hosts (else they pushed that message again after each
  visibility timeout, every push a receive, into the dead-letter queue).
- A pipeline (:meth:`AsyncQueue.pipeline`, :meth:`AsyncQueue.receive_pipeline`)
  lives on one thread of its own, since its requests in flight share that
  thread's connections.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from zmqueue.client.breaker import Guards
from zmqueue.client.client import Client
from zmqueue.client.client import connect as connect_blocking
from zmqueue.client.models import AttributeValue, Message, OutgoingMessage
from zmqueue.client.pipeline import DEFAULT_WINDOW, PendingSend, SendPipeline
from zmqueue.client.queue import Queue
from zmqueue.client.receipts import Deletable, deletables
from zmqueue.client.receiver import OnDeleted, ReceivePipeline
from zmqueue.client.redrive import RedriveReport
from zmqueue.client.subscription import Subscription, Unhandled, is_async
from zmqueue.config import QueueConfig
from zmqueue.errors import ClientClosed, ConfigError, InvalidParameter, ZmqueueError

log = logging.getLogger(__name__)
T = TypeVar("T")
DEFAULT_THREADS = 16
MAX_THREADS = 256

Handler = Callable[[Message], None] | Callable[[Message], Awaitable[None]]
_HANDLING: contextvars.ContextVar[tuple[AsyncClient, list[Subscription]] | None] = contextvars.ContextVar(
    "zmqueue_handling", default=None)
"""In a coroutine handler's task: the client whose subscription it handles a
message of, and the subscription (the list that holds it once ``subscribe``
returned, which its AsyncSubscription keeps)."""


async def connect(consul: str | Sequence[str] | None = None, *, threads: int = DEFAULT_THREADS,
                  request_timeout: float = 10.0, retries: int = 4,
                  curve_secret_file: str | None = None,
                  curve_server_keys: str | dict[str, str] | None = None,
                  guards: Guards | None = None, throttle_retries: int = 20) -> AsyncClient:
    """Connect as :func:`zmqueue.connect` does (same options), for asyncio;
    ``threads`` (1-256) bounds the calls in flight at once."""
    if type(threads) is not int or not 1 <= threads <= MAX_THREADS:
        raise ConfigError(f"connect: threads must be 1 to {MAX_THREADS}, got {threads!r}", field="threads")
    client = await asyncio.get_running_loop().run_in_executor(None, partial(
        connect_blocking, consul, request_timeout=request_timeout, retries=retries,
        curve_secret_file=curve_secret_file, curve_server_keys=curve_server_keys, guards=guards,
        throttle_retries=throttle_retries))
    return AsyncClient(client, threads)


class AsyncClient:
    """The asyncio face of a :class:`~zmqueue.client.client.Client` (``sync``)."""

    def __init__(self, client: Client, threads: int = DEFAULT_THREADS) -> None:
        self.sync = client
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="zmqueue-aio")
        self.closed = False

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on a pool thread (a blocking client call).
        A call still waiting for a thread when the client closes raises
        ClientClosed (its future is cancelled, but the caller's task was not)."""
        if self.closed:
            raise ClientClosed("this zmqueue client is closed; connect again with zmqueue.aio.connect()")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, partial(fn, *args, **kwargs))
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self.closed and (task is None or task.cancelling() == 0):
                raise ClientClosed("the zmqueue client was closed before this call got a thread; it was "
                                   "not sent: connect again with zmqueue.aio.connect()") from None
            raise

    async def create_queue(self, name: str, **settings: Any) -> AsyncQueue:
        """Create a queue; ``settings`` as :meth:`Client.create_queue`'s."""
        return AsyncQueue(self, await self.run(self.sync.create_queue, name, **settings))

    async def get_queue(self, name: str, consistent: bool = False) -> AsyncQueue:
        """The queue named ``name``; QueueNotFound if there is none
        (``consistent`` as :meth:`Client.get_queue`'s)."""
        return AsyncQueue(self, await self.run(self.sync.get_queue, name, consistent))

    async def queue_info(self, name: str, consistent: bool = False) -> dict[str, Any]:
        """The queue's GET_QUEUE answer, as :meth:`Client.queue_info`."""
        return await self.run(self.sync.queue_info, name, consistent)

    async def list_queues(self, prefix: str = "") -> list[str]:
        return await self.run(self.sync.list_queues, prefix)

    async def list_dead_letter_source_queues(self, name: str) -> list[str]:
        return await self.run(self.sync.list_dead_letter_source_queues, name)

    async def delete_queue(self, name: str) -> None:
        await self.run(self.sync.delete_queue, name)

    async def ping(self) -> list[dict[str, Any]]:
        return await self.run(self.sync.ping)

    async def close(self) -> None:
        """New calls raise ClientClosed at once; calls queued for a thread are
        cancelled, the running ones finish (each within its wait time plus
        the request timeout), then the client's sockets and subscriptions are
        closed. Called from a coroutine handler of one of this client's
        subscriptions, it returns at once and the close goes on once the
        handler returns (its message then deleted, as after any handler):
        waiting there would wait for the handler itself."""
        if self.closed:
            return
        self.closed = True
        closing = asyncio.get_running_loop().run_in_executor(None, self._close)
        handling = _HANDLING.get()
        if handling is not None and handling[0] is self:
            for sub in handling[1]:  # (ends its thread sooner; no handler is called after a close)
                sub.stopped.set()
            return
        await closing

    def _close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.sync.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncQueue:
    """The asyncio face of a :class:`~zmqueue.client.queue.Queue` (``sync``):
    the same calls, each a coroutine."""

    def __init__(self, client: AsyncClient, queue: Queue) -> None:
        self.client = client
        self.sync = queue

    @property
    def name(self) -> str:
        return self.sync.name

    @property
    def config(self) -> QueueConfig:
        return self.sync.config

    async def send(self, body: bytes | str, attributes: dict[str, AttributeValue] | None = None,
                   delay: int | None = None, group_id: str | None = None,
                   dedup_id: str | None = None) -> str:
        return await self.client.run(self.sync.send, body, attributes, delay, group_id, dedup_id)

    async def send_batch(self, items: Iterable[bytes | str | OutgoingMessage]) -> list[str]:
        # (one body alone is refused by send_batch itself, not split into its characters)
        one = isinstance(items, str | bytes | bytearray | memoryview)
        return await self.client.run(self.sync.send_batch, items if one else list(items))

    async def receive(self, max_messages: int = 1, wait_time: float = 0,
                      visibility_timeout: int | None = None) -> list[Message]:
        return await self.client.run(self.sync.receive, max_messages, wait_time, visibility_timeout)

    async def delete_and_receive(self, receipts: Iterable[Deletable], max_messages: int = 1,
                                 wait_time: float = 0, visibility_timeout: int | None = None
                                 ) -> tuple[list[ZmqueueError | None], list[Message]]:
        return await self.client.run(self.sync.delete_and_receive, deletables(receipts, "delete_and_receive"),
                                     max_messages, wait_time, visibility_timeout)

    async def delete(self, receipt: Deletable) -> None:
        await self.client.run(self.sync.delete, receipt)

    async def delete_batch(self, receipts: Iterable[Deletable]) -> list[ZmqueueError | None]:
        return await self.client.run(self.sync.delete_batch, deletables(receipts, "delete_batch"))

    async def change_visibility(self, receipt: Deletable, timeout: int) -> None:
        await self.client.run(self.sync.change_visibility, receipt, timeout)

    async def change_visibility_batch(self, receipts: Iterable[Deletable], timeout: int | Sequence[int]
                                      ) -> list[ZmqueueError | None]:
        return await self.client.run(self.sync.change_visibility_batch,
                                     deletables(receipts, "change_visibility_batch"), timeout)

    async def purge(self) -> int:
        return await self.client.run(self.sync.purge)

    async def stats(self) -> dict[str, int]:
        return await self.client.run(self.sync.stats)

    async def set_attributes(self, **settings: Any) -> QueueConfig:
        """:meth:`zmqueue.Queue.set_attributes`."""
        return await self.client.run(partial(self.sync.set_attributes, **settings))

    async def redrive(self, to: str | None = None, max_messages: int | None = None,
                      visibility_timeout: int = 60, wait_time: float = 1.0,
                      force: bool = False) -> RedriveReport:
        return await self.client.run(self.sync.redrive, to, max_messages, visibility_timeout, wait_time,
                                     force)

    def pipeline(self, window: int = DEFAULT_WINDOW,
                 max_requests: int | None = None) -> AsyncSendPipeline:
        """Pipelined sends, as :meth:`Queue.pipeline`:
        ``await pipe.send(body)`` returns a PendingSend as soon as fewer than
        ``window`` sends are unanswered; ``async with`` confirms them all."""
        if self.client.closed:
            raise ClientClosed("this zmqueue client is closed; connect again with zmqueue.aio.connect()")
        return AsyncSendPipeline(self.sync, window, max_requests)

    def receive_pipeline(self, max_messages: int = 10, wait_time: float = 1.0,
                         visibility_timeout: int | None = None, in_flight: int = 2,
                         on_deleted: OnDeleted | None = None) -> AsyncReceivePipeline:
        """Pipelined receives, as :meth:`Queue.receive_pipeline`: ``await
        pipe.receive()`` returns a batch while the next is being taken;
        ``await pipe.delete(msgs)`` rides on the next request (``on_deleted`` is
        called on the pipeline's thread); ``async with`` closes it."""
        if self.client.closed:
            raise ClientClosed("this zmqueue client is closed; connect again with zmqueue.aio.connect()")
        return AsyncReceivePipeline(self.sync.receive_pipeline(max_messages, wait_time, visibility_timeout,
                                                               in_flight, on_deleted))

    async def subscribe(self, handler: Handler, prefetch: int = 10,
                        visibility_timeout: int | None = None,
                        auto_delete: bool = True) -> AsyncSubscription:
        """Push subscription, as :meth:`Queue.subscribe`; ``handler`` is called
        on the subscription's thread, and what it returns, if awaitable (an
        ``async def`` function's or method's coroutine), runs on this event
        loop while the subscription's thread waits for it."""
        if not callable(handler):
            raise InvalidParameter(f"subscribe takes a handler to call with each message, got "
                                   f"{handler!r:.60}", field="handler")
        started: list[Subscription] = []
        loop = asyncio.get_running_loop()
        coroutine_function = is_async(handler)

        def orphaned() -> Unhandled:
            """The program's loop ended without closing this subscription (which stops on it)."""
            return Unhandled("its event loop was closed", stop=True)

        async def in_handler(awaitable: Awaitable[None]) -> None:
            _HANDLING.set((self.client, started))  # (a close from inside it does not wait for it)
            await awaitable

        def on_message(msg: Message) -> None:
            if self.client.closed:  # (closed meanwhile, by a handler say: its close goes on)
                raise Unhandled("the client was closed", stop=True)
            if coroutine_function and loop.is_closed():
                raise orphaned()
            result = handler(msg)
            if not inspect.isawaitable(result):
                return
            if loop.is_closed():
                if inspect.iscoroutine(result):
                    result.close()
                raise orphaned()
            wrapped = in_handler(result)
            try:
                done = asyncio.run_coroutine_threadsafe(wrapped, loop)
            except RuntimeError:  # closed just now
                wrapped.close()
                if inspect.iscoroutine(result):
                    result.close()
                raise orphaned() from None
            while True:
                try:
                    done.result(timeout=1.0)
                    return
                except concurrent.futures.CancelledError:  # (the loop ending cancels its tasks)
                    raise Unhandled("its handler was cancelled") from None
                except concurrent.futures.TimeoutError:
                    if loop.is_closed():
                        raise orphaned() from None

        sub = await self.client.run(self.sync.subscribe, on_message, prefetch, visibility_timeout,
                                    auto_delete)
        if coroutine_function:  # stops as soon as the loop is closed, not at the next message pushed
            sub.stop_if = lambda: "its event loop was closed" if loop.is_closed() else None
        started.append(sub)
        return AsyncSubscription(sub, started)


class _OnItsThread:
    """A blocking pipeline (``sync``) driven from asyncio on one thread of its
    own: it is not thread safe, and its requests in flight share that
    thread's connections. :meth:`close` is idempotent; a call after it raises
    ClientClosed."""

    sync: SendPipeline | ReceivePipeline
    what = "pipeline"

    def __init__(self) -> None:
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"zmqueue-aio-{self.what.replace(' ', '-')}")
        self._closed = False

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise ClientClosed(f"this {self.what} was closed; open another")
        return await asyncio.get_running_loop().run_in_executor(self._thread, partial(fn, *args))

    async def close(self) -> None:
        """Close it (idempotent); later calls raise ClientClosed."""
        if self._closed:
            return
        try:
            await self._run(self.sync.close)
        finally:
            self._closed = True
            self._thread.shutdown(wait=False)


class AsyncSendPipeline(_OnItsThread):
    """A :class:`~zmqueue.client.pipeline.SendPipeline` (``sync``) driven from asyncio."""

    sync: SendPipeline

    def __init__(self, queue: Queue, window: int, max_requests: int | None = None) -> None:
        self.sync = SendPipeline(queue, window, max_requests=max_requests)
        super().__init__()

    async def send(self, body: bytes | str, attributes: dict[str, AttributeValue] | None = None,
                   delay: int | None = None, group_id: str | None = None,
                   dedup_id: str | None = None) -> PendingSend:
        return await self._run(self.sync.send, body, attributes, delay, group_id, dedup_id)

    async def flush(self) -> list[PendingSend]:
        return await self._run(self.sync.flush)

    async def confirm_all(self) -> None:
        await self._run(self.sync.confirm_all)

    @property
    def retried(self) -> int:
        return self.sync.retried

    async def __aenter__(self) -> AsyncSendPipeline:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            if exc_type is None:
                await self.confirm_all()
        finally:
            await self.close()


class AsyncReceivePipeline(_OnItsThread):
    """A :class:`~zmqueue.client.receiver.ReceivePipeline` (``sync``) driven from asyncio."""

    sync: ReceivePipeline
    what = "receive pipeline"

    def __init__(self, pipe: ReceivePipeline) -> None:
        self.sync = pipe
        super().__init__()

    async def receive(self) -> list[Message]:
        return await self._run(self.sync.receive)

    async def delete(self, receipts: Iterable[Deletable]) -> None:
        """Queue these deletes for the next request (on the pipeline's thread:
        after a receive still running there)."""
        await self._run(self.sync.delete, deletables(receipts, "AsyncReceivePipeline.delete"))

    @property
    def failed_deletes(self) -> list[tuple[Deletable, ZmqueueError]]:
        return self.sync.failed_deletes

    def raise_failed(self) -> None:
        """Raise the error of the first delete in :attr:`failed_deletes`, if
        any (no I/O: the outcomes are already recorded)."""
        self.sync.raise_failed()

    async def __aenter__(self) -> AsyncReceivePipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncSubscription:
    """A running :class:`~zmqueue.client.subscription.Subscription` (``sync``,
    with its counters)."""

    def __init__(self, sub: Subscription, started: list[Subscription] | None = None) -> None:
        self.sync = sub
        self._started = started

    async def close(self) -> None:
        """Stop it (it unsubscribes at its hosts at once); waits (off the
        event loop) for a handler in progress, except when called from that
        handler: it then returns at once, and the subscription's thread ends
        once the handler returns."""
        closing = asyncio.get_running_loop().run_in_executor(None, self.sync.close)
        handling = _HANDLING.get()
        if self._started is not None and handling is not None and handling[1] is self._started:
            self.sync.stopped.set()
            return
        await closing

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["AsyncClient", "AsyncQueue", "AsyncReceivePipeline", "AsyncSendPipeline", "AsyncSubscription",
           "connect"]
