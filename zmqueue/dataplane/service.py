"""The queue service: the data-plane handlers for messages, on one host.

It serves the partitions the control plane assigns to this host (it is told
through :meth:`QueueService.apply_metadata`; it never reads Consul). A
request for a partition another host serves gets NotLeader naming that
host; a request for a queue this host has not heard of is parked while the
host refreshes its metadata, then served or refused with QueueNotFound.

Group commit: handlers append to stores; :meth:`flush` commits every store
touched in this loop iteration, and only then are the replies sent.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zmqueue.config import QueueConfig
from zmqueue.dataplane import fields as F
from zmqueue.dataplane.dispatch import DEFERRED, Dispatcher, Request
from zmqueue.dataplane.forwarder import Forwarder
from zmqueue.dataplane.partition import PartitionRuntime
from zmqueue.dataplane.pushing import Pusher
from zmqueue.dataplane.storage import Delivered, PartitionStore, StorageConfig
from zmqueue.errors import (
    InvalidParameter,
    NotLeader,
    QueueNotFound,
    Unavailable,
    ZmqueueError,
    to_wire,
)
from zmqueue.protocol import Command, Receipt

log = logging.getLogger(__name__)

PartKey = tuple[str, int]
MAX_BATCH = 1000
MAX_WAIT_MS = 20_000
PARK_TIMEOUT_MS = 3000
HOUSEKEEPING_MS = 1000


@dataclass(frozen=True)
class Route:
    owner: str
    endpoint: str | None


@dataclass(frozen=True)
class Metadata:
    """What the control plane tells the data plane (plain values only)."""

    configs: dict[str, QueueConfig] = field(default_factory=dict)
    routes: dict[PartKey, Route] = field(default_factory=dict)


@dataclass
class Parked:
    request: Request
    deadline_ms: int


def storage_config(cfg: QueueConfig, defaults: StorageConfig) -> StorageConfig:
    from dataclasses import replace

    return replace(defaults, fsync=cfg.fsync, retention_ms=cfg.retention_s * 1000,
                   max_messages=cfg.max_messages, fifo=cfg.fifo)


class QueueService:
    def __init__(self, node: str, data_dir: Path, forwarder: Forwarder,
                 request_refresh: Callable[[], None],
                 storage_defaults: StorageConfig | None = None) -> None:
        self.node = node
        self.data_dir = data_dir / "queues"
        self.forwarder = forwarder
        self.request_refresh = request_refresh
        self.storage_defaults = storage_defaults or StorageConfig()
        self.meta = Metadata()
        self.parts: dict[PartKey, PartitionRuntime] = {}
        self.parked: list[Parked] = []
        self.dirty: set[PartKey] = set()
        self.acks: dict[PartKey, list[tuple[Request, Any]]] = {}
        self.pusher = Pusher()
        self.next_housekeeping_ms = 0
        self.pending_dead: dict[PartKey, list[Delivered]] = {}

    def register(self, d: Dispatcher) -> None:
        self.pusher.outbox = d.outbox
        for cmd, fn in ((Command.SEND, self.h_send), (Command.RECEIVE, self.h_receive),
                        (Command.DELETE, self.h_delete),
                        (Command.CHANGE_VISIBILITY, self.h_change_visibility),
                        (Command.PURGE_QUEUE, self.h_purge), (Command.QUEUE_STATS, self.h_stats),
                        (Command.SUBSCRIBE, self.h_subscribe), (Command.CREDIT, self.h_credit),
                        (Command.UNSUBSCRIBE, self.h_unsubscribe)):
            d.register(cmd, self._guard(fn))

    # --- metadata -----------------------------------------------------------
    def apply_metadata(self, meta: Metadata, now_ms: int, allow_removals: bool = True) -> None:
        """Serve what ``meta`` assigns to this node.

        With ``allow_removals`` False (the control plane's state went back in
        time, e.g. a Consul agent that lost its data), queues missing from
        ``meta`` are kept and served as before: data is only ever removed
        after a queue deletion seen in a newer state.
        """
        if not allow_removals:
            meta = Metadata({**self.meta.configs, **meta.configs}, {**self.meta.routes, **meta.routes})
        self.meta = meta
        want = {k for k, r in meta.routes.items() if r.owner == self.node and k[0] in meta.configs}
        for key in list(self.parts):
            if key not in want:
                self._close_partition(key, remove=key[0] not in meta.configs)
        for key in want:
            rt = self.parts.get(key)
            if rt is None:
                self._open_partition(key, meta.configs[key[0]], now_ms)
            else:
                rt.config = meta.configs[key[0]]
        parked, self.parked = self.parked, []
        for p in parked:
            self._redispatch(p.request)

    def metadata_unavailable(self) -> None:
        parked, self.parked = self.parked, []
        for p in parked:
            p.request.fail(Unavailable("queue metadata is unavailable (Consul unreachable); retry"))

    def _open_partition(self, key: PartKey, cfg: QueueConfig, now_ms: int) -> None:
        path = self.data_dir / key[0] / str(key[1])
        store = PartitionStore.open(path, storage_config(cfg, self.storage_defaults), now_ms=now_ms)
        rep = store.recovery_report
        log.info("opened %s/%d: %s", key[0], key[1], rep)
        self.parts[key] = PartitionRuntime(key[0], key[1], cfg, store)

    def _close_partition(self, key: PartKey, remove: bool) -> None:
        rt = self.parts.pop(key)
        self.pusher.drop_partition(rt)
        for w in rt.waiters:
            w.request.fail(QueueNotFound(f"queue {key[0]!r} was deleted"))
        rt.store.close()
        if remove:
            shutil.rmtree(self.data_dir / key[0] / str(key[1]), ignore_errors=True)
            log.info("queue %s deleted: removed partition %d", key[0], key[1])

    # --- request plumbing ----------------------------------------------------
    def _guard(self, fn: Callable[[Request, dict[str, Any], int], Any]) -> Callable[[Request], Any]:
        def handler(req: Request) -> Any:
            from zmqueue.dataplane.dispatch import now_ms

            body = F.body_map(req.body)
            return fn(req, body, now_ms())
        handler.__name__ = fn.__name__
        return handler

    def _redispatch(self, req: Request) -> None:
        from zmqueue.dataplane.dispatch import now_ms

        handler = {Command.SEND: self.h_send, Command.RECEIVE: self.h_receive,
                   Command.DELETE: self.h_delete, Command.CHANGE_VISIBILITY: self.h_change_visibility,
                   Command.PURGE_QUEUE: self.h_purge, Command.QUEUE_STATS: self.h_stats,
                   Command.SUBSCRIBE: self.h_subscribe}[req.frame.command]
        req.answered = False
        try:
            result = handler(req, F.body_map(req.body), now_ms())
        except ZmqueueError as exc:
            req.fail(exc)
            return
        if result is not DEFERRED:
            req.reply(result)

    def partition(self, req: Request, queue: str, p: int, now_ms: int) -> PartitionRuntime | None:
        """The local partition, or None after parking the request (unknown queue)."""
        rt = self.parts.get((queue, p))
        if rt is not None:
            return rt
        cfg = self.meta.configs.get(queue)
        if cfg is not None:
            if not 0 <= p < cfg.partitions:
                raise InvalidParameter(f"queue {queue!r} has partitions 0..{cfg.partitions - 1}",
                                       field="partition")
            route = self.meta.routes.get((queue, p))
            if route is not None:
                raise NotLeader(f"partition {p} of {queue!r} is served by {route.owner}",
                                leader=route.owner, endpoint=route.endpoint)
        if getattr(req, "_parked_once", False):
            raise QueueNotFound(f"queue {queue!r} does not exist; create it first", queue=queue)
        req._parked_once = True  # type: ignore[attr-defined]
        self.parked.append(Parked(req, now_ms + PARK_TIMEOUT_MS))
        self.request_refresh()
        return None

    def _part_of(self, req: Request, body: dict[str, Any], now_ms: int) -> PartitionRuntime | None:
        queue = F.get_queue(body)
        p = F.get_int(body, "p", 0, 63, default=0, name="partition")
        return self.partition(req, queue, p, now_ms)

    def _after_commit(self, rt: PartitionRuntime, req: Request, result: Any) -> Any:
        """Reply ``result`` once this iteration's commit of ``rt`` succeeded."""
        key = (rt.queue, rt.partition)
        self.dirty.add(key)
        self.acks.setdefault(key, []).append((req, result))
        return DEFERRED

    # --- handlers --------------------------------------------------------------
    def h_send(self, req: Request, body: dict[str, Any], now_ms: int) -> Any:
        rt = self._part_of(req, body, now_ms)
        if rt is None:
            return DEFERRED
        if body.get("dl") is not None:
            items = F.get_list(body, "dl", MAX_BATCH)
            rt.append_dead_letters([(bytes.fromhex(i[0]), i[1], i[2], i[3], i[4]) for i in items],
                                   now_ms)
            return self._after_commit(rt, req, {"n": len(items)})
        ids = rt.send(F.get_list(body, "m", MAX_BATCH, name="messages"), now_ms)
        return self._after_commit(rt, req, {"ids": ids})

    def h_receive(self, req: Request, body: dict[str, Any], now_ms: int) -> Any:
        rt = self._part_of(req, body, now_ms)
        if rt is None:
            return DEFERRED
        max_n = F.get_int(body, "max", 1, MAX_BATCH, default=1, name="max_messages")
        wait_ms = F.get_int(body, "wait_ms", 0, MAX_WAIT_MS, default=0, name="wait_time")
        vis_s = F.get_opt_int(body, "vis_s", 0, 43200, name="visibility_timeout")
        vis_ms = rt.visibility_ms(vis_s)
        msgs = self._take(rt, max_n, vis_ms, now_ms)
        if msgs or wait_ms == 0:
            return {"m": msgs}
        from zmqueue.dataplane.partition import Waiter

        rt.waiters.append(Waiter(req, max_n, vis_ms, now_ms + wait_ms))
        return DEFERRED

    def _take(self, rt: PartitionRuntime, max_n: int, vis_ms: int, now_ms: int) -> list[list[Any]]:
        msgs, dead = rt.receive(max_n, vis_ms, now_ms)
        if msgs or dead:
            self.dirty.add((rt.queue, rt.partition))
        if dead:
            self.pending_dead.setdefault((rt.queue, rt.partition), []).extend(dead)
        return msgs

    def _receipts(self, body: dict[str, Any], key: str) -> list[Any]:
        return F.get_list(body, key, MAX_BATCH, name="receipts")

    def h_delete(self, req: Request, body: dict[str, Any], now_ms: int) -> Any:
        items = self._receipts(body, "r")
        first = Receipt.decode(items[0])
        rt = self.partition(req, first.queue, first.partition, now_ms)
        if rt is None:
            return DEFERRED
        results: list[Any] = []
        for text in items:
            try:
                rt.delete(Receipt.decode(text), now_ms)
                results.append(None)
            except ZmqueueError as exc:
                results.append(to_wire(exc))
        return self._after_commit(rt, req, {"results": results})

    def h_change_visibility(self, req: Request, body: dict[str, Any], now_ms: int) -> Any:
        items = self._receipts(body, "r")
        if not all(isinstance(i, list) and len(i) == 2 for i in items):
            raise InvalidParameter("change_visibility items must be [receipt, timeout_s]")
        first = Receipt.decode(items[0][0])
        rt = self.partition(req, first.queue, first.partition, now_ms)
        if rt is None:
            return DEFERRED
        results: list[Any] = []
        for text, timeout_s in items:
            try:
                if not isinstance(timeout_s, int) or not 0 <= timeout_s <= 43200:
                    raise InvalidParameter("visibility timeout must be 0-43200 seconds",
                                           field="visibility_timeout")
                rt.change_visibility(Receipt.decode(text), timeout_s, now_ms)
                results.append(None)
            except ZmqueueError as exc:
                results.append(to_wire(exc))
        return self._after_commit(rt, req, {"results": results})

    def h_purge(self, req: Request, body: dict[str, Any], now_ms: int) -> Any:
        rt = self._part_of(req, body, now_ms)
        if rt is None:
            return DEFERRED
        n = rt.store.purge(now_ms)
        return self._after_commit(rt, req, {"purged": n})

    def h_stats(self, req: Request, body: dict[str, Any], now_ms: int) -> Any:
        rt = self._part_of(req, body, now_ms)
        if rt is None:
            return DEFERRED
        stats = dict(rt.store.stats(now_ms))
        stats["waiters"] = len(rt.waiters)
        stats["subscribers"] = len(rt.subscribers)
        return stats

    def h_subscribe(self, req: Request, body: dict[str, Any], now_ms: int) -> Any:
        rt = self._part_of(req, body, now_ms)
        if rt is None:
            return DEFERRED
        prefetch = F.get_int(body, "prefetch", 1, 1000, default=10)
        vis_s = F.get_opt_int(body, "vis_s", 0, 43200, name="visibility_timeout")
        sub_id = self.pusher.subscribe(rt, req.identity, prefetch, rt.visibility_ms(vis_s))
        return {"sub": sub_id}

    def h_credit(self, req: Request, body: dict[str, Any], now_ms: int) -> Any:
        sub = F.get_int(body, "sub", 0, 2**62, name="subscription")
        n = F.get_int(body, "n", 1, 1000, name="credit")
        return {"credit": self.pusher.add_credit(sub, req.identity, n)}

    def h_unsubscribe(self, req: Request, body: dict[str, Any], now_ms: int) -> Any:
        sub = F.get_int(body, "sub", 0, 2**62, name="subscription")
        self.pusher.unsubscribe(sub, req.identity)
        return {}

    # --- loop hooks -----------------------------------------------------------
    def tick(self, now_ms: int) -> int | None:
        self.forwarder.poll(now_ms)
        if self.parked and self.parked[0].deadline_ms <= now_ms:
            self.metadata_unavailable()
        wake: int | None = None
        for key, rt in self.parts.items():
            if rt.waiters:
                self._serve_waiters(rt, now_ms)
            if rt.subscribers:
                self.pusher.push(rt, now_ms, self._take)
            if rt.waiters or rt.subscribers:
                nxt = rt.store.next_wakeup_ms(now_ms)
                if nxt is not None:
                    wake = nxt - now_ms if wake is None else min(wake, nxt - now_ms)
            if self.pending_dead.get(key):
                self._move_dead(rt, now_ms)
        if now_ms >= self.next_housekeeping_ms:
            self.next_housekeeping_ms = now_ms + HOUSEKEEPING_MS
            for key, rt in self.parts.items():
                if rt.store.expire(now_ms):
                    self.dirty.add(key)
                rt.store.compact()
        return wake

    def _serve_waiters(self, rt: PartitionRuntime, now_ms: int) -> None:
        while rt.waiters:
            w = rt.waiters[0]
            if w.request.answered:
                rt.waiters.popleft()
                continue
            if rt.store.has_visible(now_ms):
                msgs = self._take(rt, w.max_messages, w.visibility_ms, now_ms)
                if msgs:
                    rt.waiters.popleft()
                    w.request.reply({"m": msgs})
                    continue
            break
        for w in list(rt.waiters):
            if w.deadline_ms <= now_ms:
                rt.waiters.remove(w)
                w.request.reply({"m": []})

    def _move_dead(self, rt: PartitionRuntime, now_ms: int) -> None:
        """Copy dead letters to the DLQ, then drop them from the source."""
        key = (rt.queue, rt.partition)
        dead = self.pending_dead.pop(key)
        dlq = rt.config.dead_letter_queue
        dlq_cfg = self.meta.configs.get(dlq or "")
        if dlq is None or dlq_cfg is None:
            log.warning("dead-letter queue %r of %s is unknown; keeping %d messages", dlq,
                        rt.queue, len(dead))
            self.pending_dead[key] = dead
            self.request_refresh()
            return
        items = [(d.message_id, d.body, d.attributes, d.receive_count, rt.queue) for d in dead]
        target = (dlq, 0)
        local = self.parts.get(target)
        if local is not None:
            local.append_dead_letters(items, now_ms)
            rt.store.mark_dead_lettered([d.seq for d in dead], now_ms)
            self.dirty.update({key, target})
            return
        route = self.meta.routes.get(target)
        if route is None or route.endpoint is None:
            self.pending_dead[key] = dead
            return
        wire = [[m.hex(), b, blob, rc, src] for m, b, blob, rc, src in items]

        def done(result: Any, err: ZmqueueError | None) -> None:
            from zmqueue.dataplane.dispatch import now_ms as now

            if err is not None or key not in self.parts:
                log.warning("moving %d dead letters to %s failed: %s", len(dead), dlq, err)
                self.pending_dead.setdefault(key, []).extend(dead)
                return
            self.parts[key].store.mark_dead_lettered([d.seq for d in dead], now())
            self.dirty.add(key)

        self.forwarder.request(route.endpoint, Command.SEND, {"q": dlq, "p": 0, "dl": wire}, done,
                               now_ms)

    def flush(self) -> None:
        for key in self.dirty:
            rt = self.parts.get(key)
            acks = self.acks.pop(key, [])
            try:
                if rt is not None:
                    rt.store.commit()
            except ZmqueueError as exc:
                log.warning("commit of %s/%d failed: %s", key[0], key[1], exc)
                for req, _ in acks:
                    req.fail(exc)
                continue
            for req, result in acks:
                req.reply(result)
        self.dirty.clear()

    def close(self) -> None:
        for key in list(self.parts):
            self._close_partition(key, remove=False)
        self.forwarder.close()
