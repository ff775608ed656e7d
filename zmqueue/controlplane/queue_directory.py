"""Queues in Consul KV: create (idempotent), get, list, delete, and snapshots.

Writes are check-and-set: a queue's config is created with ``cas=0`` (only if
absent), so two racing creates agree on one config; partition assignments
likewise. A create that finds the same config is a no-op; a different config
is QueueAlreadyExists naming the differing settings. Partitions go to
clusters by :func:`assignment.assign_queue` and to hosts by
:func:`placement.place`; every replica keeps every stream of the partition
and the writers are elected (:mod:`zmqueue.controlplane.leadership`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from zmqueue.config import MUTABLE_SETTINGS, QueueConfig, validate_queue_name
from zmqueue.controlplane import kvlayout as kv
from zmqueue.controlplane.assignment import ClusterInfo, Fleet, assign_queue
from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.controlplane.discovery import HostInfo, list_hosts
from zmqueue.controlplane.placement import Host, place
from zmqueue.errors import ConfigError, InvalidParameter, QueueAlreadyExists, QueueNotFound, Unavailable

log = logging.getLogger(__name__)
UPDATE_TRIES = 5
"""Check-and-set attempts of one settings update before it gives up (Unavailable)."""


@dataclass(frozen=True)
class Snapshot:
    index: int
    state: kv.ClusterState
    problems: list[kv.Malformed]
    hosts: list[HostInfo]
    sessions: dict[str, str] = field(default_factory=dict)
    """Lock key -> the session holding it (only held locks)."""

    def endpoint_of(self, node: str) -> str | None:
        for h in self.hosts:
            if h.node == node and h.passing:
                return h.client_endpoint
        return None

    def queue_info(self, name: str) -> dict[str, Any]:
        cfg = self.state.configs.get(name)
        if cfg is None:
            raise QueueNotFound(f"queue {name!r} does not exist; create it first", queue=name)
        writers_of: dict[int, dict[str, str]] = {}
        for (q, origin), rec in self.state.stream_leaders.items():
            if q.queue == name:
                writers_of.setdefault(q.partition, {})[origin] = rec.node
        passing = {h.node for h in self.hosts if h.passing}
        parts = []
        for p in range(cfg.partitions):
            pid = kv.PartitionId(name, p)
            a = self.state.assignments.get(pid)
            replicas = list(a.replicas) if a else []
            writers = writers_of.get(p, {})
            parts.append({"partition": p, "cluster": a.cluster if a else None,
                          "replicas": replicas, "joining": list(a.joining) if a else [],
                          # a change of the voters being confirmed (docs/REPLICATION.md)
                          "leaving": list(a.leaving) if a else [],
                          "previous_voters": list(a.previous) if a else [],
                          "writers": writers,
                          "endpoints": {n: ep for n in replicas if (ep := self.endpoint_of(n))},
                          # replicas whose host is not passing (critical, or gone from the catalog)
                          "down": sorted(n for n in replicas if n not in passing)})
        info: dict[str, Any] = {"config": cfg.to_dict(), "partitions": parts}
        if cfg.incarnation:  # (0: not read from KV yet)
            info["inc"] = cfg.incarnation
        return info


_USER_NAMES = {field: kw for kw, field in MUTABLE_SETTINGS.items()}
"""Config fields named otherwise by ``create_queue`` and the CLI (``visibility_timeout_s``:
``visibility_timeout``); the others are named alike."""


def config_diff(a: QueueConfig, b: QueueConfig) -> list[str]:
    """The settings that differ, named as ``create_queue`` (and the CLI's
    options) take them, not as the config stores them."""
    da, db = a.to_dict(), b.to_dict()
    return sorted(_USER_NAMES.get(k, k) for k in {*da, *db} if da.get(k) != db.get(k))


class QueueDirectory:
    """Queue administration and snapshots of the KV tree; one per thread (its
    decode memo is not thread safe)."""

    def __init__(self, client: ConsulClient) -> None:
        self.client = client
        self.memo = kv.DecodeMemo()

    def snapshot(self, index: int | None = None, wait_s: float | None = None,
                 prev: Snapshot | None = None) -> Snapshot:
        """A consistent read of the tree (``index`` None), or a blocking query
        that returns once the tree moved past ``index`` or ``wait_s`` passed.

        ``prev``: the snapshot read at ``index``. When the query returns with
        the same index (the wait ran out, nothing under the prefix changed),
        its parsed state is kept and only the hosts are read again (health is
        not in KV): parsing the whole tree every wait costs a host with
        hundreds of queues more CPU than anything else it does when idle."""
        def get(c: Any) -> Any:
            if index is None:
                return c.kv.get(kv.PREFIX, recurse=True, consistency="consistent")
            return c.kv.get(kv.PREFIX, recurse=True, index=index, wait=f"{wait_s or 1:.0f}s")

        idx, items = self.client.call(get)
        if prev is not None and index is not None and prev.index == index == int(idx):
            return Snapshot(index, prev.state, prev.problems, list_hosts(self.client), prev.sessions)
        state, problems = kv.parse_tree(items, self.memo)
        sessions = {str(i["Key"]): str(i["Session"]) for i in items or []
                    if isinstance(i, dict) and i.get("Session") and i.get("Key")}
        return Snapshot(int(idx), state, problems, list_hosts(self.client), sessions)

    def create(self, cfg: QueueConfig) -> dict[str, Any]:
        cfg = cfg.validate()
        kv.encode_queue_config(cfg)  # refuses what KV cannot store before a DLQ is made
        self._ensure_dlq(cfg)
        self._create_one(cfg)
        return self.snapshot().queue_info(cfg.name)

    def _ensure_dlq(self, cfg: QueueConfig) -> None:
        """Create the dead-letter queue ``cfg`` names, if any and missing (same
        type and encryption, at least 14 days' retention; an existing one is
        kept as it is). A dead-letter queue of the other type is refused
        (ConfigError): a FIFO queue's dead letters keep their groups, a
        standard queue's have none; so is an unencrypted one for an encrypted
        queue (its dead letters would be stored in plaintext)."""
        if cfg.dead_letter_queue is None:
            return
        name, kind = cfg.dead_letter_queue, "FIFO" if cfg.fifo else "standard"
        if name.endswith(".fifo") and not cfg.fifo:
            raise ConfigError(f"dead-letter queue {name!r} would be a FIFO queue (its name ends in "
                              f"'.fifo'); the dead-letter queue of standard queue {cfg.name!r} must be "
                              "a standard queue: name one without '.fifo'", field="dead_letter_queue")
        key = kv.queue_config_key(name)
        _, item = self.client.call(lambda c: c.kv.get(key))
        existing = kv.decode_queue_config(key, item.get("Value")) if item else None
        if isinstance(existing, QueueConfig) and existing.fifo != cfg.fifo:
            raise ConfigError(f"queue {name!r} is a {'FIFO' if existing.fifo else 'standard'} queue; "
                              f"the dead-letter queue of {kind} queue {cfg.name!r} must be a {kind} "
                              "queue too (as in SQS): name another one", field="dead_letter_queue")
        if isinstance(existing, QueueConfig) and cfg.encrypted and not existing.encrypted:
            raise ConfigError(f"dead-letter queue {name!r} is not encrypted: the dead letters of encrypted "
                              f"queue {cfg.name!r} would be stored there in plaintext; name an encrypted "
                              "queue, or a new one (created encrypted)", field="dead_letter_queue")
        dlq = QueueConfig(name, fifo=cfg.fifo, retention_s=max(cfg.retention_s, 14 * 86400), fsync=cfg.fsync,
                          encrypted=cfg.encrypted)
        self._create_one(dlq, exists_ok_any=True)

    def _create_one(self, cfg: QueueConfig, exists_ok_any: bool = False) -> None:
        key = kv.queue_config_key(cfg.name)
        created = self.client.call(lambda c: c.kv.put(key, kv.encode_queue_config(cfg), cas=0))
        snap = self.snapshot()
        existing = snap.state.configs.get(cfg.name)
        if not created and existing is not None and not exists_ok_any and not existing.same_settings(cfg):
            diff = config_diff(existing, cfg)
            raise QueueAlreadyExists(
                f"queue {cfg.name!r} exists with different settings ({', '.join(diff)}); "
                "delete it first or use the same settings", queue=cfg.name, differs=diff)
        self._assign(existing or cfg, snap)

    def _assign(self, cfg: QueueConfig, snap: Snapshot) -> None:
        drains = snap.state.drains
        passing = [h for h in snap.hosts if h.passing]
        clusters: dict[str, int] = {}
        # a cluster whose hosts are all drained takes nothing new (as the external
        # manager counts them), unless every host is drained
        for h in [h for h in passing if not drains.get(h.node, False)] or passing:
            clusters[h.cluster] = clusters.get(h.cluster, 0) + 1
        fleet = Fleet(
            clusters={c: ClusterInfo(c, n) for c, n in clusters.items()},
            assignments={pid: a.cluster for pid, a in snap.state.assignments.items()},
        )
        r = cfg.replication_factor
        chosen = assign_queue(cfg.name, cfg.partitions, min(r, max(clusters.values(), default=1)), fleet)
        for pid, cluster in chosen.items():
            if pid in snap.state.assignments:
                continue
            members = [Host(h.node, h.meta.get("zone", ""), True, drains.get(h.node, False))
                       for h in passing if h.cluster == cluster]
            replicas = place(pid, members, r)
            a = kv.PartitionAssignment(cluster, replicas, 1)
            self._put_new(kv.partition_key(pid), kv.encode_assignment(a))
            log.info("queue %s partition %d -> cluster %s replicas %s", pid.queue, pid.partition,
                     cluster, replicas)

    def _put_cas(self, key: str, value: bytes, index: int) -> bool:
        return bool(self.client.call(lambda c: c.kv.put(key, value, cas=index)))

    def _put_new(self, key: str, value: bytes) -> bool:
        """Create ``key`` only if absent (check-and-set with index 0)."""
        return self._put_cas(key, value, 0)

    def _delete_tree(self, prefix: str) -> None:
        self.client.call(lambda c: c.kv.delete(prefix, recurse=True))

    def update(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Change settings of an existing queue (``QueueConfig.updated``), by a
        check-and-set on its config key, so a concurrent edit (another client,
        an operator in the Consul UI) is not overwritten: re-read and re-applied,
        a few times. A newly named dead-letter queue is created (as by create)."""
        key = kv.queue_config_key(validate_queue_name(name))
        for _ in range(UPDATE_TRIES):
            _, item = self.client.call(lambda c: c.kv.get(key))
            if not item:
                raise QueueNotFound(f"queue {name!r} does not exist; create it first", queue=name)
            current = kv.decode_queue_config(key, item.get("Value"))
            if isinstance(current, kv.Malformed):
                raise InvalidParameter(f"queue {name!r} has a bad config in Consul KV ({current.reason}); "
                                       f"fix {key} first", field="config")
            cfg = current.updated(changes)
            if cfg.dead_letter_queue != current.dead_letter_queue:
                self._ensure_dlq(cfg)
            if self._put_cas(key, kv.encode_queue_config(cfg), item["ModifyIndex"]):
                return self.snapshot().queue_info(name)
        raise Unavailable(f"the config of {name!r} kept changing during this update; retry", queue=name)

    def get(self, name: str) -> dict[str, Any]:
        return self.snapshot().queue_info(validate_queue_name(name))

    def list(self, prefix: str = "") -> list[str]:
        snap = self.snapshot()
        return sorted(n for n in snap.state.configs if n.startswith(prefix))

    def delete(self, name: str, token: str | None = None) -> bool:
        """Delete a queue: its tombstone first (:func:`kvlayout.deleted_key`:
        hosts remove the data of the incarnation it names, and only then),
        then its keys. True if it existed, or if the tombstone records this
        request's ``token``: an earlier attempt of the same request deleted
        it (its host failed before replying, and the retry came here)."""
        validate_queue_name(name)
        item = self.client.call(lambda c: c.kv.get(kv.queue_config_key(name)))[1]
        existed = bool(item)
        created = item.get("CreateIndex") if item else None
        if isinstance(created, int) and created > 0:
            tomb = kv.encode_tombstone(created, int(time.time() * 1000), token)
            self.client.call(lambda c: c.kv.put(kv.deleted_key(name), tomb))
        elif not existed and token is not None:
            prev = self.client.call(lambda c: c.kv.get(kv.deleted_key(name)))[1]
            existed = prev is not None and kv.tombstone_token(prev.get("Value")) == token
        for sub in (f"{kv.PREFIX}queues/{name}/", f"{kv.PREFIX}leaders/{name}/",
                    f"{kv.PREFIX}positions/{name}/", f"{kv.POSITIONS_PREFIX}{name}/"):
            self._delete_tree(sub)
        return existed
