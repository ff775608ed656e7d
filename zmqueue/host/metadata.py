"""The host's metadata cache: Consul KV + catalog, kept fresh by a blocking
query loop, handed to the data plane as plain values.

The watcher thread and the admin worker each own a ConsulClient. Results
reach the request loop through ``post()``: callables the loop runs between
iterations, so data-plane state is only touched on the loop thread. When
Consul is unreachable, the data plane keeps its last known metadata.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.controlplane.kvhealth import (
    KvProblemReporter,
    dead_letter_problems,
    fixed_setting_edits,
    keep_last_good,
    unknown_replica_edits,
    vanished_configs,
)
from zmqueue.controlplane.queue_directory import QueueDirectory, Snapshot
from zmqueue.controlplane.snapshot_feed import SnapshotFeed
from zmqueue.dataplane.topology import Metadata, PartitionInfo, PartKey, Peer
from zmqueue.errors import ConsulUnavailable
from zmqueue.host.kv_index import KvIndexWatch

log = logging.getLogger(__name__)

WATCH_WAIT_S = 2.0


def to_metadata(snap: Snapshot) -> Metadata:
    """The snapshot as the data plane needs it: configs, replicas, stream
    writers and peers' endpoints."""
    peers = {h.node: Peer(h.node, h.client_endpoint or None, h.meta.get("pub_endpoint"),
                          h.meta.get("peer_endpoint"), h.passing) for h in snap.hosts}
    writers: dict[PartKey, dict[str, str]] = {}
    for (pid, origin), rec in snap.state.stream_leaders.items():
        writers.setdefault((pid.queue, pid.partition), {})[origin] = rec.node
    parts = {(pid.queue, pid.partition): PartitionInfo(tuple(a.replicas),
                                                        writers.get((pid.queue, pid.partition), {}),
                                                        a.joining, a.leaving, a.previous, a.version)
             for pid, a in snap.state.assignments.items()}
    return Metadata(dict(snap.state.configs), parts, peers, unreadable_configs(snap),
                    dict(snap.state.deleted))


def unreadable_configs(snap: Snapshot) -> dict[str, str]:
    """Queues whose config key in ``snap`` is malformed and which it has no
    config for (no earlier good value was kept): what is wrong with each."""
    return {q: f"{p.key}: {p.reason}" for p in snap.problems
            if (q := kv.config_queue(p.key)) is not None and q not in snap.state.configs}


class MetadataCache:
    def __init__(self, addresses: tuple[str, ...], timeout_s: float,
                 apply: Callable[[Snapshot, bool], None], unavailable: Callable[[], None]) -> None:
        self.addresses = addresses
        self.timeout_s = timeout_s
        self.apply = apply
        self.unavailable = unavailable
        self.posted: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.stopped = threading.Event()
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="consul-admin")
        self.worker_dir: QueueDirectory | None = None
        self.watcher = threading.Thread(target=self._watch, name="consul-watch", daemon=True)
        self.last: Snapshot | None = None
        self.service_id: str | None = None
        """The host's service id: bad KV values are reported in its ``kv:`` check."""
        self.index_watch = KvIndexWatch()
        self._index_lock = threading.Lock()
        self._last_fingerprint: tuple[object, ...] | None = None
        self._last_forward = True
        self.problems_reported: set[str] = set()
        self._refresh_pending = threading.Event()
        self._pending: tuple[Snapshot, bool] | None = None
        """The newest snapshot (and whether it moved forward) not yet applied."""
        self._pending_lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.feed = SnapshotFeed()
        """Every snapshot read, for the host's other readers of the tree (its
        manager roles), so the host holds one blocking query, not two."""

    def start(self) -> None:
        self.watcher.start()

    def post(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the request loop, which wakes at once (not at its next
        poll timeout, up to 50 ms later: a writer's election, a deferred admin
        reply and new metadata all come this way)."""
        self.posted.put(fn)
        with contextlib.suppress(BlockingIOError):  # the pipe is full: the loop wakes anyway
            os.write(self._wake_w, b"\x01")

    @property
    def wake_fd(self) -> int:
        """Readable when something was posted: the loop polls it."""
        return self._wake_r

    def drain_wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # empty
            while os.read(self._wake_r, 4096):
                pass

    def run_posted(self) -> None:
        # empty() first: get_nowait() on an empty queue raises queue.Empty, twice
        # per loop pass (this thread is the queue's only consumer)
        posted = self.posted
        while not posted.empty():
            posted.get_nowait()()

    @staticmethod
    def _fingerprint(snap: Snapshot) -> tuple[object, ...]:
        """What the data plane acts on; replica positions (rewritten every
        half second while traffic flows) and manager leases are left out."""
        st = snap.state
        hosts = tuple((h.node, h.status, tuple(sorted(h.meta.items()))) for h in snap.hosts)
        return (st.configs, st.assignments, st.stream_leaders, st.leaders, hosts,
                getattr(st, "policies", None), getattr(st, "keys", None))

    def _publish(self, snap: Snapshot, always: bool = True) -> None:
        """Hand ``snap`` to the request loop; a watcher wake-up that changed
        nothing the data plane uses is not handed over (it would cost the
        loop a reconcile for every position write)."""
        self.feed.put(snap)
        fingerprint = self._fingerprint(snap)
        with self._index_lock:  # (the watcher and the admin worker both publish)
            forward, note, level = self.index_watch.observe(snap.index)
        if note is not None:
            log.log(level, "%s", note)
        # (unchanged and as far forward as the last one applied: applying it would change nothing)
        if not always and fingerprint == self._last_fingerprint and forward == self._last_forward:
            self.last = snap
            return
        self._last_fingerprint, self._last_forward = fingerprint, forward
        for p in snap.problems:
            if p.key not in self.problems_reported:
                self.problems_reported.add(p.key)
                log.warning("bad value in Consul KV at %s: %s (%s)", p.key, p.reason,
                            "ignored" if p.keep else "applied as it is")
        self.last = snap
        with self._pending_lock:
            # only the newest snapshot is applied: a loop that fell behind (a
            # burst of queue creations on a host with hundreds of queues)
            # would otherwise reconcile every stream once per stale snapshot
            posted, self._pending = self._pending is not None, (snap, forward)
        if not posted:
            self.post(self._apply_pending)

    def _apply_pending(self) -> None:
        """On the loop: apply the newest snapshot published since the last."""
        with self._pending_lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            self.apply(*pending)

    def directory(self) -> QueueDirectory:
        """The admin worker's directory (call only on the worker thread)."""
        if self.worker_dir is None:
            self.worker_dir = QueueDirectory(ConsulClient(self.addresses, self.timeout_s))
        return self.worker_dir

    def refresh(self) -> None:
        """Ask for a consistent read now (read-through on a cache miss)."""
        if self._refresh_pending.is_set():
            return
        self._refresh_pending.set()

        def work() -> None:
            self._refresh_pending.clear()
            try:
                self._publish(self.last_good(self.directory().snapshot()))
            except ConsulUnavailable as exc:
                log.warning("metadata refresh failed: %s", exc)
                self.post(self.unavailable)

        self.worker.submit(work)

    def _watch(self) -> None:
        d = QueueDirectory(ConsulClient(self.addresses, self.timeout_s + WATCH_WAIT_S))
        index: int | None = None
        prev: Snapshot | None = None
        failures = 0
        reporter = KvProblemReporter(d.client, self.service_id) if self.service_id else None
        while not self.stopped.is_set():
            try:
                snap = d.snapshot(index, WATCH_WAIT_S, prev) if index else d.snapshot()
            except ConsulUnavailable as exc:
                failures += 1
                self.feed.fail(str(exc))
                if failures in (1, 10) or failures % 60 == 0:
                    log.warning("metadata watch failed (%d in a row): %s", failures, exc)
                index = None
                self.stopped.wait(min(2.0, 0.2 * failures))
                continue
            failures = 0
            index = snap.index if snap.index > 0 else None
            prev = snap
            good = self.last_good(snap)
            if reporter is not None:
                reporter.report(good.problems, unreadable_configs(good))
            self._publish(good, always=False)

    def last_good(self, snap: Snapshot) -> Snapshot:
        """``snap`` with the last good value of each malformed key kept (a
        queue config edited to change a fixed setting counts as malformed, and
        so do an assignment edited to name hosts its cluster does not have
        and a config edited to name a dead-letter queue it cannot use):
        what this host serves, and so what a read-through ``GET_QUEUE``
        reports. Any thread (``last`` is read once)."""
        prev = self.last
        if prev is None:
            return snap
        problems = (snap.problems + fixed_setting_edits(prev.state, snap.state)
                    + unknown_replica_edits(prev.state, snap.state, snap.hosts))
        problems += vanished_configs(prev.state, snap.state, problems)
        state = keep_last_good(prev.state, snap.state, problems)
        # (on the configs kept: a dead-letter queue whose config is bad JSON still exists)
        dead = dead_letter_problems(prev.state, state)
        if dead:
            problems += dead
            state = keep_last_good(prev.state, state, dead)
        if not problems:
            return snap
        return Snapshot(snap.index, state, problems, snap.hosts, snap.sessions)

    def stop(self) -> None:
        self.stopped.set()
        self.worker.shutdown(wait=False, cancel_futures=True)
        # the wake pipe stays open: a thread may still post, and a closed
        # descriptor's number could be reused by a file it would then write to
