"""The synchronous client: ``zmqueue.connect()`` and queue administration.

The client finds hosts through Consul (read only), keeps one DEALER
connection per host, times out every request, and retries idempotently: a
retry reuses the request id, so a host that already applied the request
answers from its reply cache instead of applying it twice. It is safe to
share one client between threads: each thread gets its own connections.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import random
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import zmq

from zmqueue.client.breaker import Guards
from zmqueue.client.queue import Queue
from zmqueue.client.retry import RetryBudget
from zmqueue.client.transport import CLOSED, LINK_CHECK_MS, Connection
from zmqueue.config import QueueConfig, check_consul_addresses, from_env, parse_consul_addresses
from zmqueue.controlplane.consul_client import ConsulClient
from zmqueue.controlplane.discovery import HostInfo, list_hosts
from zmqueue.errors import (
    ClientClosed,
    ConfigError,
    ConnectionLost,
    ConsulUnavailable,
    NotLeader,
    QueueNotFound,
    RequestTimeout,
    Throttled,
    Unavailable,
    ZmqueueError,
)
from zmqueue.protocol import Command
from zmqueue.security.curve import CurveKeys, check_key

T = TypeVar("T")
log = logging.getLogger(__name__)

_FORKS = [0]
"""How many forks made this process (a client compares it with the count at
its creation: ZeroMQ sockets do not survive ``fork``)."""
os.register_at_fork(after_in_child=lambda: _FORKS.__setitem__(0, _FORKS[0] + 1))

HOSTS_TTL_S = 2.0
MAX_THROTTLE_WAIT_S = 5.0
REAP_S = 60.0
"""How long a client closed while other threads hold its sockets waits for them."""
OWN_CHANGE_S = 5.0
"""How long this client reads a queue it deleted or changed from Consul, not
from a host's metadata cache (which follows Consul a moment behind)."""


def connect(consul: str | Sequence[str] | None = None, *, request_timeout: float = 10.0,
            retries: int = 4, curve_secret_file: str | None = None,
            curve_server_keys: str | dict[str, str] | None = None,
            guards: Guards | None = None, throttle_retries: int = 20) -> Client:
    """Connect to a zmqueue system through Consul.

    ``consul``: one ``HOST:PORT`` (or a comma-separated list, or a sequence;
    the client fails over between them). Default: ``$CONSUL_HTTP_ADDR``, else
    ``127.0.0.1:8500``. ``request_timeout`` (seconds) bounds every request
    (a long poll adds its wait time); ``retries`` is how many times a request
    is retried on another attempt after a timeout or a routing change.

    Security (docs/SECURITY.md): ``curve_secret_file`` (this client's
    ``.key_secret``, registered with ``zmqueue keys register``) turns on
    CURVE; hosts' public keys come from their Consul service meta, or from
    ``curve_server_keys`` (one z85 key for every host, or endpoint -> key).
    ``guards``: circuit breakers and bulkheads per host (defaults in
    :mod:`zmqueue.client.breaker`). A Throttled reply is retried after its
    ``retry_after_ms``, at most ``throttle_retries`` times.
    """
    if consul is None:
        addrs = from_env()["consul"]
    elif isinstance(consul, str):
        addrs = parse_consul_addresses(consul)
    else:
        addrs = tuple(a.strip().removeprefix("http://") if isinstance(a, str) else a for a in consul)
    check_consul_addresses(addrs)
    if not request_timeout > 0 or retries < 0 or throttle_retries < 0:
        raise ConfigError(f"connect: request_timeout must be > 0 s (got {request_timeout}), retries and "
                          f"throttle_retries >= 0 (got {retries}, {throttle_retries})", field="connect")
    curve = CurveKeys.from_file(curve_secret_file) if curve_secret_file else None
    if curve is not None and isinstance(curve_server_keys, str):
        curve.pin(default=check_key(curve_server_keys))
    elif curve is not None and isinstance(curve_server_keys, dict):
        curve.pin({ep: check_key(k) for ep, k in curve_server_keys.items()})
    client = Client(tuple(addrs), request_timeout, retries)
    client.curve, client.guards, client.throttle_retries = curve, guards or Guards(), throttle_retries
    return client


class Client:
    def __init__(self, consul: tuple[str, ...], request_timeout: float = 10.0,
                 retries: int = 4) -> None:
        self.consul_addresses = consul
        self.request_timeout_ms = int(request_timeout * 1000)
        self.retries = retries
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        # three sockets per connection (its DEALER and the two ends of its link
        # monitor): room for ~2,700 connections (threads x hosts), not ~340
        self.ctx.set(zmq.MAX_SOCKETS, 8192)
        self._lock = threading.RLock()
        self._consul = ConsulClient(consul, timeout_s=3.0)
        self._local = threading.local()
        self._all_conns: list[Connection] = []
        self._finalizer = weakref.finalize(self, _release, self.ctx, self._all_conns)
        self._finalizer.atexit = False  # (at exit pyzmq leaves contexts alone, as it should)
        self._subs: list[Any] = []
        self._handles: weakref.WeakSet[Queue] = weakref.WeakSet()
        """The Queue handles made (their kept messages are given back at :meth:`close`)."""
        self._hosts: list[HostInfo] = []
        self._hosts_at = 0.0
        self._own_changes: dict[str, float] = {}  # queue → until when its reads are consistent
        self.own_change_s = OWN_CHANGE_S
        self._unkeyed = 0
        """Passing hosts left out of ``hosts()``: no CURVE server key known for them."""
        self.closed = False
        self._closing = threading.Event()
        """Set when :meth:`close` starts: new subscriptions are refused from
        then on (the open ones are closed first, and may still delete)."""
        self._closed_ev = threading.Event()
        """Set with ``closed``: a pause before a retry ends at once."""
        self._forks = _FORKS[0]
        self.curve: CurveKeys | None = None
        self.guards = Guards()
        self.throttle_retries = 20
        self.plain_sends = True
        """Plain bodies go as SEND ``b`` (bytes alone); False once a host from
        before it refused one (``protocol.refused_plain_bodies``): ``m`` lists
        from then on."""

    # --- plumbing ------------------------------------------------------------
    def check_open(self) -> None:
        """ClientClosed if this client is closed, or was made in
        another process (ZeroMQ sockets do not survive ``fork``: a request
        there waited forever)."""
        if self.closed:
            raise ClientClosed(CLOSED)
        if _FORKS[0] != self._forks:
            raise ClientClosed("this zmqueue client was made in the parent process, before a fork; "
                               "ZeroMQ sockets do not survive fork: connect again with zmqueue.connect() "
                               "in this process")

    @property
    def closing(self) -> bool:
        """Whether :meth:`close` has started (new subscriptions are refused)."""
        return self._closing.is_set()

    def hosts(self, refresh: bool = False) -> list[HostInfo]:
        self.check_open()
        with self._lock:
            if refresh or time.monotonic() - self._hosts_at > HOSTS_TTL_S or not self._hosts:
                try:
                    self._hosts = [h for h in list_hosts(self._consul) if h.passing]
                    self._hosts_at = time.monotonic()
                    if self.curve is not None:
                        self.curve.learn({h.client_endpoint: h.meta["curve_public"].encode()
                                          for h in self._hosts if h.meta.get("curve_public")})
                        # a plaintext host cannot serve a CURVE client
                        keyed = [h for h in self._hosts if self.curve.server_key(h.client_endpoint)]
                        self._unkeyed = len(self._hosts) - len(keyed)
                        self._hosts = keyed
                except ConsulUnavailable:
                    if not self._hosts:
                        raise
            return list(self._hosts)

    def connection(self, endpoint: str) -> Connection:
        """This thread's connection to ``endpoint`` (ZeroMQ sockets are not
        thread safe, and a long poll must not hold up other threads)."""
        conns: dict[str, Connection] | None = getattr(self._local, "conns", None)
        if _FORKS[0] != self._forks:  # (a list read: no system call on every request)
            self.check_open()
        if self.closed:  # a clear error, not a ZMQError; this thread's sockets are its to close
            for c in (conns or {}).values():
                c.close_if_idle()  # (or the closing client's reaper does)
            raise ClientClosed(CLOSED)
        if conns is None:
            conns = self._local.conns = {}
            # the mark goes with the thread's local data when the thread ends
            # (the dict too, but a finalizer on the mark may hold the dict)
            mark = self._local.mark = _ThreadMark()
            weakref.finalize(mark, _thread_ended, conns, self._all_conns).atexit = False
        conn = conns.get(endpoint)
        if conn is None:
            with self._lock:
                if self.closed:
                    raise ClientClosed(CLOSED)
                conn = Connection(self.ctx, endpoint, curve=self.curve_for(endpoint))
                self._all_conns.append(conn)
            conns[endpoint] = conn
        return conn

    def dedicated_connection(self, endpoint: str) -> Connection:
        """A connection to ``endpoint`` of the caller's own, not the thread's
        shared one (no other call reads its replies: a receive pipeline's
        requests stay in flight across the thread's other calls); closed by
        :meth:`forget_connection`, or with the client."""
        self.check_open()
        with self._lock:
            if self.closed:
                raise ClientClosed(CLOSED)
            conn = Connection(self.ctx, endpoint, curve=self.curve_for(endpoint))
            self._all_conns.append(conn)
        return conn

    def forget_connection(self, conn: Connection) -> None:
        """Close a connection of :meth:`dedicated_connection`."""
        with self._lock:
            if conn in self._all_conns:
                self._all_conns.remove(conn)
        conn.close()

    def drop_connection(self, endpoint: str) -> None:
        """Close this thread's connection to ``endpoint`` (the next request opens a new one)."""
        conns: dict[str, Connection] = getattr(self._local, "conns", None) or {}
        conn = conns.pop(endpoint, None)
        if conn is not None:
            with self._lock:
                if conn in self._all_conns:
                    self._all_conns.remove(conn)
            conn.close()

    def curve_for(self, endpoint: str) -> CurveKeys | None:
        """The CURVE keys for a connection to ``endpoint`` (None without CURVE)."""
        if self.curve is not None and self.curve.server_key(endpoint) is None:
            with contextlib.suppress(ConsulUnavailable):
                self.hosts(refresh=True)
        return self.curve

    def request(self, endpoint: str, command: Command, body: Any, request_id: int | None = None,
                extra_timeout_ms: int = 0) -> Any:
        """One request through the host's circuit breaker and bulkhead; a
        Throttled reply is retried after the wait it names (same request id)."""
        if request_id is None:
            request_id = self.connection(endpoint).next_request_id()
        rid = request_id
        return self.retry_throttled(
            lambda: self._request_once(endpoint, command, body, rid, extra_timeout_ms))

    def retry_throttled(self, call: Callable[[], T], stop: threading.Event | None = None) -> T:
        """``call()``, again after each Throttled reply's ``retry_after_ms``
        (with up to 20 % jitter, at most MAX_THROTTLE_WAIT_S), at most
        ``throttle_retries`` times, and not once ``stop`` is set; ``call``
        must resend the same request id."""
        for attempt in itertools.count():
            try:
                return call()
            except Throttled as exc:
                if attempt >= self.throttle_retries or (stop is not None and stop.is_set()):
                    raise
                wait_ms = exc.details.get("retry_after_ms")
                wait_s = min(MAX_THROTTLE_WAIT_S, wait_ms / 1000 if isinstance(wait_ms, int) else 0.1)
                if self._closed_ev.wait(wait_s * random.uniform(1.0, 1.2)):
                    raise ClientClosed(CLOSED) from None
        raise AssertionError("unreachable")

    def _request_once(self, endpoint: str, command: Command, body: Any, request_id: int | None,
                      extra_timeout_ms: int) -> Any:
        breaker, bulkhead = self.guards.for_endpoint(endpoint)
        with bulkhead.slot(), breaker.guard():  # a full bulkhead says nothing about the host
            conn = self.connection(endpoint)
            if request_id is None:
                request_id = conn.next_request_id()
            try:
                return conn.request(command, body, self.request_timeout_ms + extra_timeout_ms,
                                    request_id)
            except RequestTimeout:
                if self.curve is not None:
                    # a CURVE connection refused once (e.g. a key registered after the
                    # first try) never reconnects by itself: start a fresh one
                    self.drop_connection(endpoint)
                raise

    def any_host(self, command: Command, body: Any) -> Any:
        """Send an administrative request to any healthy host, failing over, by
        the rule of ``Queue.call``: at least ``retries + 1`` attempts, and for
        at least the request timeout, with back-off after a quick failure (no
        healthy host registered: their Consul checks can flap for a moment
        under load; a lost connection: a host restarting)."""
        rid = None
        last: ZmqueueError | None = None
        retry = RetryBudget(self.retries + 1, self.request_timeout_ms / 1000)
        while retry.again():
            hosts = self.hosts(refresh=retry.attempt > 0)
            if not hosts and self._unkeyed:
                last = Unavailable(f"{self._unkeyed} healthy zmqueue host(s) are registered in Consul, but "
                                   "this client knows no CURVE public key for any of them: the keys given "
                                   "in curve_server_keys name other endpoints, or the hosts run without "
                                   "CURVE (then connect without curve_secret_file)")
                retry.pause()
                continue
            if not hosts:
                last = Unavailable("no healthy zmqueue host is registered in Consul at "
                                   f"{', '.join(self.consul_addresses)}; start one with `zmqueue up`")
                retry.pause()
                continue
            host = random.choice(hosts)
            conn = self.connection(host.client_endpoint)
            rid = rid or conn.next_request_id()
            try:
                return self.request(host.client_endpoint, command, body, rid)
            except RequestTimeout as exc:
                last = exc
                if isinstance(exc, ConnectionLost):  # failed fast: give a restarting host a moment
                    retry.pause()  # (a plain timeout has waited already)
            except (Unavailable, NotLeader) as exc:
                last = exc
                retry.pause()
        assert last is not None
        raise last

    # --- administration --------------------------------------------------------
    def create_queue(self, name: str, *, fifo: bool = False, visibility_timeout: int = 30,
                     retention: int = 4 * 86400, delay: int = 0, max_message_bytes: int = 262144,
                     dead_letter_queue: str | None = None, max_receive_count: int = 5,
                     partitions: int = 1, replication_factor: int = 1,
                     sync_replication: bool = True, content_based_dedup: bool = False,
                     fsync: str = "interval", max_messages: int | None = None,
                     encrypted: bool = False, rate_limit_per_s: float | None = None,
                     client_rate_limit_per_s: float | None = None,
                     rate_burst: int | None = None, sync_quorum: str = "majority") -> Queue:
        """Create a queue (idempotent with the same settings; QueueAlreadyExists
        with different ones). Times are in seconds. A named dead-letter queue
        that does not exist yet is created with default settings. ``encrypted``
        and the rate limits: see docs/SECURITY.md. ``sync_quorum``: which
        replicas a synchronous write waits for, ``"majority"`` or ``"all"``
        (docs/USER_GUIDE.md, Replication)."""
        cfg = QueueConfig(
            name=name, fifo=fifo, visibility_timeout_s=visibility_timeout, retention_s=retention,
            delay_s=delay, max_message_bytes=max_message_bytes, dead_letter_queue=dead_letter_queue,
            max_receive_count=max_receive_count, partitions=partitions,
            replication_factor=replication_factor, sync_replication=sync_replication,
            content_based_dedup=content_based_dedup, fsync=fsync, max_messages=max_messages,
            encrypted=encrypted, rate_limit_per_s=rate_limit_per_s,
            client_rate_limit_per_s=client_rate_limit_per_s, rate_burst=rate_burst,
            sync_quorum=sync_quorum,
        ).validate()
        info = self.any_host(Command.CREATE_QUEUE, {"config": cfg.to_dict()})["queue"]
        return self._handle(Queue(self, self._until_writable(name, info)))

    def _until_writable(self, name: str, info: dict[str, Any], timeout_s: float = 5.0) -> dict[str, Any]:
        """Wait (bounded) until every partition of a new queue has a writer, so
        the first requests do not race the election; the queue info then."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(p.get("writers") for p in info.get("partitions", [])):
                return info
            time.sleep(0.05)
            info = self.queue_info(name)
        return info

    def get_queue(self, name: str, consistent: bool = False) -> Queue:
        """The queue named ``name``; QueueNotFound if there is none. A host
        answers from its metadata cache, which follows Consul a moment behind
        (a queue deleted by another client may still be found);
        ``consistent=True`` has it read Consul instead, as this client does
        for 5 s after it deleted or changed the queue itself."""
        return self._handle(Queue(self, self.queue_info(name, consistent)))

    def _handle(self, q: Queue) -> Queue:
        with self._lock:
            self._handles.add(q)
        return q

    def queue_info(self, name: str, consistent: bool = False) -> dict[str, Any]:
        consistent = consistent or self._changed_lately(name)
        body: dict[str, Any] = {"name": name, "consistent": True} if consistent else {"name": name}
        info = self.any_host(Command.GET_QUEUE, body)["queue"]
        if not isinstance(info, dict):
            raise QueueNotFound(f"queue {name!r} does not exist", queue=name)
        return info

    def list_queues(self, prefix: str = "") -> list[str]:
        return list(self.any_host(Command.LIST_QUEUES, {"prefix": prefix})["queues"])

    def list_dead_letter_source_queues(self, name: str) -> list[str]:
        """The queues whose dead-letter queue is ``name`` (SQS's
        ListDeadLetterSourceQueues), sorted; QueueNotFound if ``name`` does
        not exist. One GET_QUEUE per queue (answered from a host's cache): an
        admin call, not one for a message path. A queue deleted meanwhile is
        skipped."""
        self.queue_info(name)
        sources = []
        for other in self.list_queues():
            try:
                cfg = self.queue_info(other)["config"]
            except QueueNotFound:
                continue
            if other != name and cfg.get("dead_letter_queue") == name:
                sources.append(other)
        return sorted(sources)

    def changed(self, name: str) -> None:
        """Note that this client deleted or changed queue ``name``: read it
        consistently for a while (read your own writes)."""
        now = time.monotonic()
        with self._lock:
            for old in [n for n, until in self._own_changes.items() if until <= now]:
                del self._own_changes[old]
            self._own_changes[name] = now + self.own_change_s

    def _changed_lately(self, name: str) -> bool:
        with self._lock:
            return self._own_changes.get(name, 0.0) > time.monotonic()

    def delete_queue(self, name: str) -> None:
        """Delete a queue and its messages; QueueNotFound if there is none.

        Every attempt carries one random token, which the host records in the
        queue's tombstone: a retry that finds no queue (the host that took an
        earlier attempt deleted it and failed before replying) finds its own
        token there and succeeds; a queue that never existed, or was deleted
        by another request, is QueueNotFound."""
        try:
            body = {"name": name, "token": secrets.token_hex(8)}  # (the same in every attempt)
            deleted = self.any_host(Command.DELETE_QUEUE, body)["deleted"]
        finally:  # (also when the reply was lost: the delete may have been made)
            self.changed(name)
        if not deleted:
            raise QueueNotFound(f"queue {name!r} does not exist", queue=name)

    def ping(self) -> list[dict[str, Any]]:
        return [self.request(h.client_endpoint, Command.PING, None) for h in self.hosts(True)]

    # --- lifecycle -------------------------------------------------------------
    def track(self, subscription: Any) -> None:
        """Close this subscription when the client closes (at once, and
        ClientClosed, if it is closing: its sockets would keep the ZeroMQ
        context from being released)."""
        with self._lock:
            if not self._closing.is_set():  # (set before closed, never cleared)
                self._subs.append(subscription)
                return
        subscription.close()
        raise ClientClosed(CLOSED)

    def untrack(self, subscription: Any) -> None:
        """Forget a closed subscription (:meth:`Subscription.close` calls it:
        a long-lived client kept every closed one, and what it held, until it
        closed). Idempotent; nothing to do when it is not tracked (closed
        twice, or by :meth:`close`, which took the list)."""
        with self._lock, contextlib.suppress(ValueError):
            self._subs.remove(subscription)

    def close(self) -> None:
        with self._lock:
            self._closing.set()
            subs, self._subs = self._subs, []
        for s in subs:
            s.close()
        if not self.closed:
            with self._lock:
                handles = list(self._handles)
            for q in handles:  # (nobody saw them: not left in flight, their receive counts spent)
                q._give_back_kept()
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._closed_ev.set()
            self._finalizer.detach()
            self._consul.close()  # (its keep-alive socket to the agent)
            conns = self._all_conns[:]  # (the list stays: ended threads' finalizers hold it)
            self._all_conns.clear()
        busy = [c for c in conns if not c.close_if_idle()]
        for c in busy:  # in a socket call on another thread: that thread closes it
            c.closing = True
        if not busy:
            self.ctx.term()
            return
        threading.Thread(target=self._reap, args=(busy,), name="zmqueue-client-close",
                         daemon=True).start()

    def _reap(self, conns: list[Connection]) -> None:
        """Wait for the threads using ``conns`` to close them (a thread waiting
        on a socket sees the mark within ``LINK_CHECK_MS``), closing any whose
        thread left its socket call without seeing it, then release the ZeroMQ
        context. Bounded by ``REAP_S``."""
        deadline = time.monotonic() + REAP_S
        while time.monotonic() < deadline:
            conns = [c for c in conns if not c.close_if_idle()]
            if not conns:
                self.ctx.term()
                return
            time.sleep(LINK_CHECK_MS / 1000)
        log.debug("zmqueue client closed with %d sockets still held by live threads", len(conns))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _ThreadMark:
    """Kept in a thread's local data beside its connections: collected when
    the thread ends, and its finalizer closes them."""

    __slots__ = ("__weakref__",)


def _thread_ended(conns: dict[str, Connection], all_conns: list[Connection]) -> None:
    """Close the connections of a thread that ended (nothing else can use
    them: a thread's connections are its own), so a client used from
    short-lived threads holds sockets for the live ones only. (Not under the
    client's lock, which a Consul lookup may hold for seconds: only this
    thread's connections are removed here, and a list's remove is atomic.)"""
    for c in conns.values():
        with contextlib.suppress(ValueError):  # (gone: the client was closed meanwhile)
            all_conns.remove(c)
        with contextlib.suppress(Exception):
            c.close()
    conns.clear()


def _release(ctx: zmq.Context[zmq.Socket[bytes]], conns: list[Connection]) -> None:
    """Release what a client collected without :meth:`Client.close` held: its
    sockets, then its ZeroMQ context, on a thread of its own. (Left to pyzmq,
    a client in a reference cycle hung the collecting thread for good: the
    context's ``__del__`` ran after the weak references to its sockets were
    cleared, so it closed none of them and ``term()`` waited for them.) The
    thread holds the context until ``term()`` returns, once every socket of
    it is closed, also those collected with the client."""
    def run() -> None:
        for c in list(conns):
            with contextlib.suppress(Exception):
                c.close()
        with contextlib.suppress(Exception):
            ctx.term()

    threading.Thread(target=run, name="zmqueue-client-release", daemon=True).start()
