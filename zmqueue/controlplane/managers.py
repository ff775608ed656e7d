"""Manager roles held by an ordinary host: the external cluster manager (one
per system) and the internal cluster manager of the host's cluster.

Every host runs one :class:`ManagerRoles` thread with its own ConsulClient.
Each round it

1. keeps its Consul session alive (tied to its checks, see ``roles.py``);
2. tries to take each role lock that is free (``kv.put(acquire=session)``);
3. takes the next snapshot of the ``zmqueue/`` tree and of the service
   catalog from the host's metadata watch (a :class:`SnapshotFeed`: the
   watch's blocking query returns on any change and at least every 2 s),
   and judges host health with a grace period;
4. for each role it holds, plans with the pure modules (``assignment.py``
   via ``external_manager.py``, ``placement.py`` via ``internal_manager.py``)
   and writes each changed assignment in a transaction that checks the
   manager lock is still held by its session and does a check-and-set on the
   assignment's ModifyIndex. A holder that lost the role, or a plan made on a
   stale read, writes nothing; the next round re-reads and re-plans.
   A new partition's assignment is also written only while the queue's
   config key is as the plan read it (a queue deleted meanwhile gets no
   partition key back);
5. as the external manager, every ``kvsweep.SWEEP_EVERY_S``, removes the
   lock and position keys of deleted queues that something left behind
   (:mod:`kvsweep`).
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import consul

from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.consul_client import AgentHome, ConsulClient
from zmqueue.controlplane.external_manager import plan_external
from zmqueue.controlplane.fleetview import AssignmentWrite, HealthGrace
from zmqueue.controlplane.internal_manager import (
    StreamConfirmations,
    StreamPositions,
    has_records,
    plan_internal,
)
from zmqueue.controlplane.kvsweep import (
    LEADERS_PREFIX,
    SWEEP_EVERY_S,
    SWEEP_QUEUES_MAX,
    leftovers,
    listed_queues,
    sweep_ops,
)
from zmqueue.controlplane.queue_directory import Snapshot
from zmqueue.controlplane.roles import Session, try_acquire
from zmqueue.controlplane.snapshot_feed import SnapshotFeed
from zmqueue.errors import ConsulUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")

FEED_TIMEOUT_S = 10.0
"""A round waits this long for the watch's next snapshot (it publishes one at
least every ``metadata.WATCH_WAIT_S`` = 2 s while Consul answers); past it,
the round counts as Consul unreachable."""


@dataclass(frozen=True)
class RolesConfig:
    node: str
    cluster: str
    service_id: str
    consul: tuple[str, ...]
    timeout_s: float = 2.0
    failover_grace_s: float = 3.0


def txn_ops(w: AssignmentWrite, lock_key: str, sid: str) -> list[dict[str, Any]]:
    """check-session on the manager lock, check-index on the queue's config
    (when the write names one), then CAS the assignment."""
    value = base64.b64encode(kv.encode_assignment(w.assignment)).decode()
    config = ([{"KV": {"Verb": "check-index", "Key": w.config_key, "Index": w.config_index}}]
              if w.config_key and w.config_index > 0 else [])
    return [{"KV": {"Verb": "check-session", "Key": lock_key, "Session": sid}}, *config,
            {"KV": {"Verb": "cas", "Key": w.key, "Value": value, "Index": w.index}}]


class ManagerRoles(threading.Thread):
    def __init__(self, cfg: RolesConfig, feed: SnapshotFeed, home: AgentHome | None = None) -> None:
        super().__init__(name="manager-roles", daemon=True)
        self.cfg = cfg
        self.client = ConsulClient(cfg.consul, cfg.timeout_s)
        self.feed = feed
        self._seq = 0
        self.session = Session(self.client, cfg.node, cfg.service_id, home)
        self.grace = HealthGrace(cfg.failover_grace_s)
        self.locks = {"external": kv.external_manager_key(),
                      "cluster": kv.cluster_manager_key(cfg.cluster)}
        self.held: set[str] = set()
        self.stopped = threading.Event()
        self._snap: Snapshot | None = None
        self._notes: set[str] = set()
        self._holds: set[kv.PartitionId] = set()
        """Partitions found holding records while their cluster is short of
        quorum (read once per such episode: records do not go away)."""
        self._failed: set[str] = set()
        self._listings: dict[kv.PartitionId, list[dict[str, Any]]] = {}
        """Positions listings read this round (one read per partition)."""
        self._sweep_at = 0.0
        """When the external manager next looks for keys of deleted queues."""

    def run(self) -> None:
        failures = 0
        while not self.stopped.is_set():
            try:
                self._round()
                failures = 0
            except ConsulUnavailable as exc:
                failures += 1
                if failures in (1, 10) or failures % 60 == 0:
                    log.warning("manager roles: Consul unreachable (%d): %s", failures, exc)
                self._snap = None
                self.stopped.wait(min(2.0, 0.2 * failures))
            except Exception:  # a bug: log it, keep the host up, try again
                log.exception("manager round failed")
                self._snap = None
                self.stopped.wait(1.0)
        self._release()

    def _round(self) -> None:
        sid = self.session.ensure()
        if sid is None:
            self._set_held(set())
            self.stopped.wait(0.5)
            return
        prev = self._snap
        for key in self.locks.values():
            if prev is None or key not in prev.sessions:
                try_acquire(self.client, key, sid, self.cfg.node)
        # (the watch already kept the last good value of each malformed key)
        self._seq, got = self.feed.next(self._seq, FEED_TIMEOUT_S, self.stopped)
        if got is None:
            return  # stopping
        self._snap = snap = got
        self._listings.clear()
        self._set_held({role for role, key in self.locks.items() if snap.sessions.get(key) == sid})
        healthy = self.grace.view(snap, time.monotonic())
        self._log_failed(snap, healthy)
        if "external" in self.held:
            writes, notes = plan_external(snap, healthy, self._holding)
            self._report(notes)
            self._write(writes, self.locks["external"], sid)
            self._sweep(snap, sid)
        if "cluster" in self.held:
            self._write(plan_internal(snap, self.cfg.cluster, healthy, self._positions,
                                      self._confirmations, self._unserved),
                        self.locks["cluster"], sid)

    def _holding(self, pids: list[kv.PartitionId]) -> frozenset[kv.PartitionId]:
        """Which of ``pids`` hold records: a stream of theirs reported a
        position past 0 or is marked opened (``zmqueue-positions/<queue>/<p>/``;
        positions are up to 0.5 s old, but a writer acknowledges a stream's
        first records only once its mark is there). A partition whose
        positions cannot be read counts as holding: it stays."""
        if not pids:
            self._holds.clear()
            return frozenset()
        for pid in pids:
            if pid not in self._holds and self._holds_records(pid):
                self._holds.add(pid)
        return frozenset(pid for pid in pids if pid in self._holds)

    def _holds_records(self, pid: kv.PartitionId) -> bool:
        pos = self._positions(pid)
        if pos is None or has_records(pos):
            return True
        opened = self._of_partition(pid, kv.decode_stream_opened)
        return opened is None or any(v for by_node in opened.values() for v in by_node.values())

    def _listing(self, pid: kv.PartitionId) -> list[dict[str, Any]] | None:
        """``zmqueue-positions/<queue>/<p>/`` as listed once this round; None if
        Consul did not answer."""
        if pid not in self._listings:
            prefix = f"{kv.POSITIONS_PREFIX}{pid.queue}/{pid.partition}/"
            try:
                _, items = self.client.call(lambda c: c.kv.get(prefix, recurse=True))
            except (ConsulUnavailable, consul.ConsulException) as exc:
                log.info("positions of %s/%d not read (%s): every replica counts as needed, "
                         "a change in flight stays so", pid.queue, pid.partition, exc)
                return None
            self._listings[pid] = list(items or [])
        return self._listings[pid]

    def _positions(self, pid: kv.PartitionId) -> StreamPositions | None:
        """Every stream position of ``pid`` in ``zmqueue-positions/``
        (origin -> node -> position); None if Consul did not answer."""
        return self._of_partition(pid, kv.decode_stream_positions)

    def _unserved(self, pid: kv.PartitionId) -> set[str]:
        """The nodes that marked ``pid``'s queue unserved (``kvlayout.unserved_key``;
        none when Consul did not answer: the positions are not known either)."""
        return kv.decode_unserved(self._listing(pid) or []).get((pid.queue, pid.partition), set())

    def _confirmations(self, pid: kv.PartitionId) -> StreamConfirmations | None:
        """Every stream's writers' confirmations of ``pid`` (origin -> node ->
        version); None if Consul did not answer."""
        return self._of_partition(pid, kv.decode_stream_confirmed)

    def _of_partition(self, pid: kv.PartitionId,
                      decode: Callable[[list[dict[str, Any]]], Mapping[tuple[str, int, str], T]]
                      ) -> dict[str, T] | None:
        """``decode`` of the partition's positions listing, by stream origin."""
        items = self._listing(pid)
        if items is None:
            return None
        return {origin: v for (q, p, origin), v in decode(items).items()
                if (q, p) == (pid.queue, pid.partition)}

    def _set_held(self, held: set[str]) -> None:
        for role in sorted(held - self.held):
            log.info("%s now holds the %s manager role (%s)", self.cfg.node, role, self.locks[role])
        for role in sorted(self.held - held):
            log.info("%s no longer holds the %s manager role", self.cfg.node, role)
        self.held = held

    def _write(self, writes: list[AssignmentWrite], lock_key: str, sid: str) -> None:
        for w in writes:
            ops = txn_ops(w, lock_key, sid)
            try:
                self.client.call(lambda c: c.txn.put(ops))  # noqa: B023
            except consul.ConsulException as exc:
                log.info("assignment %s not written (lost the race or the role): %s", w.key, exc)
                self._snap = None  # re-read at once
                return
            log.info("%s: %s (version %d)", w.key, w.reason, w.assignment.version)

    def _sweep(self, snap: Snapshot, sid: str) -> None:
        """Remove the lock and position trees of deleted queues left behind
        (:mod:`kvsweep`), at most SWEEP_QUEUES_MAX a pass, every SWEEP_EVERY_S."""
        now = time.monotonic()
        if now < self._sweep_at:
            return
        self._sweep_at = now + SWEEP_EVERY_S
        found = {prefix: listed_queues(self._folders(prefix), prefix)
                 for prefix in (LEADERS_PREFIX, kv.POSITIONS_PREFIX)}
        queues = leftovers(snap.state, snap.problems, set().union(*found.values()))
        for q in queues[:SWEEP_QUEUES_MAX]:
            ops = sweep_ops(q, snap.state.modify_index[kv.deleted_key(q)], self.locks["external"], sid)
            try:
                self.client.call(lambda c: c.txn.put(ops))  # noqa: B023
            except consul.ConsulException as exc:  # (created again, deleted again, or the role lost)
                log.info("keys of deleted queue %s not swept: %s", q, exc)
                continue
            where = " and ".join(f"{p}{q}/" for p, names in found.items() if q in names)
            log.info("removed the keys deleted queue %s left behind under %s", q, where)
        if len(queues) > SWEEP_QUEUES_MAX:
            log.info("%d more deleted queues left keys behind: swept in the next passes",
                     len(queues) - SWEEP_QUEUES_MAX)

    def _folders(self, prefix: str) -> list[str]:
        """The keys and folders directly under ``prefix`` (one per queue)."""
        _, keys = self.client.call(lambda c: c.kv.get(prefix, keys=True, separator="/"))
        return list(keys or [])

    def _log_failed(self, snap: Snapshot, healthy: dict[str, bool]) -> None:
        failed = {h.node: h.status for h in snap.hosts if not healthy.get(h.node)}
        if set(failed) != self._failed:
            log.info("hosts counted as failed: %s", failed or "none")
        self._failed = set(failed)

    def _report(self, notes: list[str]) -> None:
        for n in notes:
            if n not in self._notes:
                log.warning("external manager: %s", n)
        self._notes = set(notes)

    def _release(self) -> None:
        try:
            self.session.destroy()
        except (ConsulUnavailable, consul.ConsulException) as exc:
            log.info("could not destroy the session (it expires by itself): %s", exc)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread; it destroys the session, which frees its locks."""
        self.stopped.set()
        self.feed.interrupt()
        if self.is_alive():
            self.join(timeout_s)
