"""The asyncio client offers every call of the blocking one, with the same
parameters (USER_GUIDE § asyncio). (``queue_info`` was missing.)"""

from __future__ import annotations

import inspect
from typing import Any

from zmqueue.aio import AsyncClient, AsyncQueue
from zmqueue.client.client import Client
from zmqueue.client.queue import Queue

PLUMBING = {
    Client: {"any_host", "changed", "check_open", "closing", "connection", "curve_for",
             "dedicated_connection", "drop_connection", "forget_connection", "hosts", "request",
             "retry_throttled", "track", "untrack"},
    Queue: {"by_stream", "call", "follow_config", "messages_of", "misrouted", "next_partition",
            "partition_for", "partition_of", "refresh"},
}
"""Public-named methods the library's own parts call, not the documented API."""
NOT_ON_THE_LOOP = {("pipeline", "on_done")}
"""A callback the blocking client calls on its thread (documented as left out)."""
FORWARDED = {"create_queue"}
"""Calls whose keyword settings the async client passes on as ``**settings``."""


def _public(cls: type) -> dict[str, Any]:
    return {n: v for n, v in inspect.getmembers(cls)
            if not n.startswith("_") and (callable(v) or isinstance(v, property))}


def test_every_call_of_the_blocking_client_is_a_coroutine_of_the_async_one_with_its_parameters() -> None:
    for sync, aio in ((Client, AsyncClient), (Queue, AsyncQueue)):
        mine, theirs = _public(sync), _public(aio)
        assert set(mine) - set(theirs) - PLUMBING[sync] == set(), f"{aio.__name__} lacks them"
        for name in set(mine) - PLUMBING[sync]:
            if not callable(mine[name]) or isinstance(mine[name], property) or name in FORWARDED:
                continue
            want = [p for p in inspect.signature(mine[name]).parameters if (name, p) not in NOT_ON_THE_LOOP]
            assert list(inspect.signature(theirs[name]).parameters) == want, f"{aio.__name__}.{name}"
