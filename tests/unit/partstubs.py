"""Plain stand-ins for what ``Waiters`` and ``Pusher`` read of a
QueueService (pure-logic unit tests only: one partition, one led stream)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from zmqueue.dataplane.dispatch import Outbox, Request
from zmqueue.dataplane.pushing import Pusher
from zmqueue.dataplane.waiting import Waiters
from zmqueue.protocol import Command, Flags, Frame

PART = ("q", 0)


@dataclass
class Store:
    available: int = 0
    wake: int | None = None

    def has_visible(self, now: int) -> bool:
        return self.available > 0

    def next_wakeup_ms(self, now: int) -> int | None:
        return self.wake if self.wake is not None and self.wake > now else None


@dataclass
class Svc:
    """What ``Waiters.serve`` reads of a QueueService: one led stream, the
    streams the pass changed (``dirty``: every request that stages a record
    marks its stream), the version of the set of streams."""

    store: Store = field(default_factory=Store)
    handed: int = 0
    dirty: set[tuple[str, int, str]] = field(default_factory=set)

    def __post_init__(self) -> None:
        stream = SimpleNamespace(store=self.store)
        self.set = SimpleNamespace(led_streams=lambda part: [stream], version=1)

    def change(self) -> None:
        self.dirty.add((*PART, "o"))

    def flush(self, watched: Waiters | Pusher) -> None:
        """The service's commit: the pass's changed streams to the watch."""
        watched.watch.note_changed(self.dirty)
        self.dirty.clear()

    def take(self, streams: list[Any], max_n: int, vis_s: int | None, now: int, cols: bool) -> dict[str, Any]:
        k = min(max_n, self.store.available)
        self.store.available -= k
        if k:
            self.change()
        got = list(range(self.handed, self.handed + k))
        self.handed += k
        return {"m": got}


def request(rid: int) -> Request:
    return Request("client", b"c%d" % rid, Frame(Command.RECEIVE, Flags.NONE, rid, {}), Outbox())
