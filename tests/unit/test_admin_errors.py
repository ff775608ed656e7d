"""Errors of the admin requests, which run on the metadata cache's worker
thread: answered, and logged and counted as the dispatcher does (plain
objects stand in for the cache and Consul)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from zmqueue.dataplane.dispatch import Dispatcher
from zmqueue.errors import ErrorCode, QueueNotFound, from_wire
from zmqueue.host.admin import AdminHandlers
from zmqueue.protocol import Command, decode, encode_request


class Worker:
    def submit(self, fn: Callable[[], None]) -> None:
        fn()


class Cache:
    """Runs the work at once; what it posts to the loop, when the test says."""

    def __init__(self, directory: Any) -> None:
        self.worker = Worker()
        self.posted: list[Callable[[], None]] = []
        self._directory = directory

    def directory(self) -> Any:
        return self._directory

    def post(self, fn: Callable[[], None]) -> None:
        self.posted.append(fn)

    def refresh(self) -> None:
        pass


class Directory:
    def delete(self, name: str, token: str | None = None) -> bool:
        raise RuntimeError("a bug")

    def update(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        raise QueueNotFound(f"queue {name!r} does not exist; create it first", queue=name)


def _serve(command: Command, body: Any) -> tuple[Dispatcher, Any]:
    d = Dispatcher()
    cache = Cache(Directory())
    AdminHandlers(cache).register(d)  # type: ignore[arg-type]
    d.handle("client", [b"c1", encode_request(command, 5, body)])
    assert d.outbox.take() == [], "answered later, on the loop"
    for fn in cache.posted:
        fn()
    (_, _, payload), = d.outbox.take()
    return d, from_wire(decode(payload).body)


def test_a_bug_on_the_admin_worker_is_answered_internal_logged_and_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="zmqueue.host.admin")
    d, err = _serve(Command.DELETE_QUEUE, {"name": "orders"})
    assert err.code == ErrorCode.INTERNAL and "handling DELETE_QUEUE: RuntimeError('a bug')" in str(err)
    assert d.counters["internal_errors"] == 1
    [record] = caplog.records
    assert record.exc_info is not None and "DELETE_QUEUE" in record.getMessage()


def test_an_error_on_the_admin_worker_is_answered_and_counted_not_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    d, err = _serve(Command.SET_QUEUE_ATTRIBUTES, {"name": "orders", "changes": {"delay_s": 1}})
    assert isinstance(err, QueueNotFound)
    assert d.counters["errors"] == 1 and d.counters["internal_errors"] == 0
    assert not caplog.records
