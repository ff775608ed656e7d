"""The contract between the load generator and a system under test.

A backend is named by ``"module:Class"`` so that spawned producer and
consumer processes can import it. In the parent, :meth:`Backend.setup`
creates the queue (or stream) and returns a picklable ``target`` dict; each
child builds its own producer or consumer from it.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from zmqueue.bench.config import BenchConfig

Target = dict[str, Any]


class Producer(Protocol):
    def send(self, bodies: list[bytes]) -> None:
        """Send ``bodies`` and return once every one is confirmed (durable
        as far as the system promises); raise if any is not."""

    def close(self) -> None: ...


class Consumer(Protocol):
    def receive(self, max_n: int, wait_s: float) -> list[tuple[bytes, Any]]:
        """Up to ``max_n`` (body, ack token) pairs, waiting up to ``wait_s``."""

    def ack(self, tokens: list[Any]) -> None:
        """Delete / acknowledge the received messages (confirmed)."""

    def close(self) -> None: ...


class Backend(Protocol):
    name: str
    notes: str
    """What the system promises when it confirms (shown beside its numbers)."""

    def setup(self, cfg: BenchConfig) -> Target: ...

    def teardown(self, target: Target) -> None: ...

    @staticmethod
    def producer(target: Target, cfg: BenchConfig, index: int) -> Producer: ...

    @staticmethod
    def consumer(target: Target, cfg: BenchConfig, index: int) -> Consumer: ...


def load_backend_class(spec: str) -> Any:
    """The class named by ``"package.module:Class"``."""
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)
