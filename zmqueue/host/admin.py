"""Queue administration requests (create, get, list, delete, set attributes).

They change or read Consul KV, so they run on the metadata cache's worker
thread; the request loop never blocks on Consul. The reply is posted back to
the loop. A successful create or delete also refreshes this host's metadata,
so the data plane knows the queue before the client's next request.

``GET_QUEUE`` of a queue the metadata cache knows is answered from the cache
at once, on the loop: clients ask it every 50 ms while a new queue's writers
are elected, and again whenever their routes go stale, and a consistent read
of the whole KV tree grows with the number of queues. The cache follows
Consul with a blocking query, so its writers lag a lock change by
milliseconds, and a client that follows a stale route is answered
``NOT_LEADER`` and asks again. A queue the cache does not know (created a
moment ago through another host), or one with a writer the cache has no
healthy endpoint for, is read from Consul, consistently; so is any queue
when the request asks ``consistent`` (a delete made a moment ago through
another host shows at once).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from zmqueue.config import QueueConfig
from zmqueue.controlplane.queue_directory import QueueDirectory
from zmqueue.dataplane import fields as F
from zmqueue.dataplane.dispatch import DEFERRED, Dispatcher, Request
from zmqueue.dataplane.topology import config_unreadable
from zmqueue.errors import ConfigError, InternalError, InvalidParameter, ZmqueueError
from zmqueue.host.metadata import MetadataCache, unreadable_configs
from zmqueue.protocol import Command

log = logging.getLogger(__name__)


class AdminHandlers:
    def __init__(self, cache: MetadataCache) -> None:
        self.cache = cache
        self.counters: Counter[str] = Counter()
        """The dispatcher's, once registered: errors of the deferred requests count there."""
        self._read_through = self._deferred(self._get)

    def _fail(self, req: Request, exc: ZmqueueError, counter: str) -> None:
        """Answer ``req`` with ``exc`` and count it (on the loop: the counters are the dispatcher's)."""
        self.counters[counter] += 1
        req.fail(exc)

    def register(self, d: Dispatcher) -> None:
        self.counters = d.counters
        d.register(Command.CREATE_QUEUE, self._deferred(self._create))
        d.register(Command.GET_QUEUE, self._get_cached)
        d.register(Command.LIST_QUEUES, self._deferred(self._list))
        d.register(Command.DELETE_QUEUE, self._deferred(self._delete))
        d.register(Command.SET_QUEUE_ATTRIBUTES, self._deferred(self._update))

    def _deferred(self, fn: Callable[[QueueDirectory, dict[str, Any]], Any]) -> Callable[[Request], Any]:
        def handler(req: Request) -> Any:
            body = F.body_map(req.body)

            def work() -> None:
                try:
                    result = fn(self.cache.directory(), body)
                except ZmqueueError as exc:
                    err = exc  # (``exc`` is unbound when the except clause ends)
                    self.cache.post(lambda: self._fail(req, err, "errors"))
                    return
                except Exception as exc:  # a bug: answer, log, count, keep serving (as the dispatcher)
                    log.exception("admin worker: %s failed", req.frame.command.name)
                    bug = InternalError(f"internal error handling {req.frame.command.name}: {exc!r:.200}")
                    self.cache.post(lambda: self._fail(req, bug, "internal_errors"))
                    return
                self.cache.post(lambda: req.reply(result))

            self.cache.worker.submit(work)
            return DEFERRED
        return handler

    def _create(self, d: QueueDirectory, body: dict[str, Any]) -> Any:
        raw = body.get("config")
        if not isinstance(raw, dict):  # (missing, or not a map: the error named QueueConfig's arguments)
            raise ConfigError("config must be a map of queue settings (see PROTOCOL.md CREATE_QUEUE)",
                              field="config")
        cfg = QueueConfig.from_dict(raw)
        info = d.create(cfg)
        self.cache.refresh()
        return {"queue": info}

    def _update(self, d: QueueDirectory, body: dict[str, Any]) -> Any:
        changes = body.get("changes")
        info = d.update(F.get_queue(body, "name"), changes if isinstance(changes, dict) else {})
        self.cache.refresh()
        return {"queue": info}

    def _get_cached(self, req: Request) -> Any:
        snap = self.cache.last
        body = F.body_map(req.body)
        name = F.get_queue(body, "name")
        consistent = body.get("consistent", False)
        if not isinstance(consistent, bool):
            raise InvalidParameter("consistent must be true or false", field="consistent")
        if snap is not None and name in snap.state.configs and not consistent:
            info = snap.queue_info(name)
            # a writer without an endpoint: the cache's view of host health
            # (read every 2 s) may be stale, say just after a host restarted
            if all(w in part["endpoints"] for part in info["partitions"]
                   for w in part["writers"].values()):
                return {"queue": info}
        return self._read_through(req)

    def _get(self, d: QueueDirectory, body: dict[str, Any]) -> Any:
        # as served: a refused KV edit (bad JSON, a fixed setting) is not shown
        name = F.get_queue(body, "name")
        snap = self.cache.last_good(d.snapshot())
        bad = unreadable_configs(snap).get(name)
        if bad is not None:
            raise config_unreadable(name, bad)
        return {"queue": snap.queue_info(name)}

    def _list(self, d: QueueDirectory, body: dict[str, Any]) -> Any:
        prefix = body.get("prefix") or ""
        if not isinstance(prefix, str) or len(prefix) > 80:
            raise InvalidParameter("prefix must be a string of at most 80 characters", field="prefix")
        # as served: a queue whose config is bad in KV runs on with its last good one
        state = self.cache.last_good(d.snapshot()).state
        return {"queues": sorted(n for n in state.configs if n.startswith(prefix))}

    def _delete(self, d: QueueDirectory, body: dict[str, Any]) -> Any:
        token = body.get("token")
        if token is not None and (not isinstance(token, str) or not 0 < len(token) <= 64):
            raise InvalidParameter("token must be a string of 1 to 64 characters", field="token")
        existed = d.delete(F.get_queue(body, "name"), token)
        self.cache.refresh()
        return {"deleted": existed}
