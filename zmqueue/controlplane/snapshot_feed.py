"""One watch of the KV tree, shared by the threads of a host that need it.

Every blocking query on ``zmqueue/`` makes Consul serialize the whole tree
again after each write beneath it: at 1,000 keys (200 R=3 queues) that cost
the agent about 7 ms of CPU per query per write. A host used to hold two of
them (the metadata cache's and the manager roles'); the manager roles now
take the metadata cache's snapshots from a :class:`SnapshotFeed` instead.
"""

from __future__ import annotations

import threading

from zmqueue.controlplane.queue_directory import Snapshot
from zmqueue.errors import ConsulUnavailable


class SnapshotFeed:
    """The latest snapshot a watch published, numbered, for readers that wait
    for the next one. A watch that fails says so, and a reader waiting for a
    snapshot gets :class:`ConsulUnavailable` rather than a stale one."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._snap: Snapshot | None = None
        self._failure: str | None = None
        self._seq = 0

    def put(self, snap: Snapshot) -> None:
        with self._cond:
            self._snap, self._failure = snap, None
            self._seq += 1
            self._cond.notify_all()

    def interrupt(self) -> None:
        """Wake the readers waiting in :meth:`next`, so that one whose
        ``until`` is set returns (a host's manager roles stopping did not until
        the watch's next snapshot, up to 2 s into every host's stop)."""
        with self._cond:
            self._cond.notify_all()

    def fail(self, reason: str) -> None:
        with self._cond:
            self._failure = reason
            self._seq += 1
            self._cond.notify_all()

    def next(self, after: int, timeout_s: float,
             until: threading.Event | None = None) -> tuple[int, Snapshot | None]:
        """The first snapshot published after number ``after`` (0: any), and
        its number; ``(after, None)`` when ``until`` is set meanwhile (a
        reader that stops: see :meth:`interrupt`). Raises ConsulUnavailable
        if the watch failed since, or published nothing within ``timeout_s``."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._seq > after or (until is not None and until.is_set()),
                                       timeout_s):
                raise ConsulUnavailable(f"no metadata from the watch for {timeout_s:.0f} s")
            if self._seq <= after:
                return after, None
            if self._failure is not None or self._snap is None:
                raise ConsulUnavailable(f"metadata watch failed: {self._failure}")
            return self._seq, self._snap
