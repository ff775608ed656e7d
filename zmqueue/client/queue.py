"""A handle on one queue: send, receive, delete, visibility, purge, stats,
subscribe. Requests go to the hosts that write each partition's streams
(:mod:`zmqueue.client.routing`); routing follows NotLeader replies and is
refreshed after timeouts. Every retry reuses its request id, so a host that
already applied a request answers from its reply cache. How a receive finds
its messages is :mod:`zmqueue.client.receiving`; batches of receipts (deletes,
visibility changes) are :mod:`zmqueue.client.receipts`."""

from __future__ import annotations

import contextlib
import itertools
import random
import re
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from zmqueue.client import receiving
from zmqueue.client.leftovers import Leftovers
from zmqueue.client.models import AttributeValue, Message, OutgoingMessage, StreamRef, batch_wire
from zmqueue.client.pipeline import DEFAULT_WINDOW, PendingSend, SendPipeline
from zmqueue.client.receipts import Deletable, batch, by_stream, deletables
from zmqueue.client.retry import RetryBudget, may_be_stored, reported
from zmqueue.client.routing import FIFO_ORIGIN, REFRESH_MIN_S, Routes
from zmqueue.client.transport import CLOSED
from zmqueue.config import MAX_VISIBILITY_S, MUTABLE_SETTINGS, QueueConfig
from zmqueue.errors import (
    ClientClosed,
    ConfigError,
    DiskFull,
    InvalidParameter,
    NotLeader,
    ProtocolError,
    QueueNotFound,
    Unavailable,
    WrongPartition,
    ZmqueueError,
)
from zmqueue.protocol import (
    MAX_BATCH,
    RETRY_MARK,
    Command,
    ReceiptEncoder,
    group_partition,
    refused_plain_bodies,
    sent_ids,
)

if TYPE_CHECKING:
    from zmqueue.client.client import Client
    from zmqueue.client.receiver import OnDeleted, ReceivePipeline
    from zmqueue.client.redrive import RedriveReport
    from zmqueue.client.subscription import Subscription

T = TypeVar("T")

_BYTES_ONLY = {bytes}
"""``set(map(type, items)) == _BYTES_ONLY``: a batch of plain bodies, tested in C
(a generator of isinstance calls costs ~0.1 us per item)."""
REFRESH_TIMEOUT_MS = 1000
FOLLOW_ASK = 2
"""Known hosts a send's config re-read asks at most (:meth:`Queue.follow_config`)."""
CONFIG_MAX_AGE_S = 2.0
"""A send re-reads the queue (one GET_QUEUE) when its config was read longer
ago than this: a handle that only sends follows a change of partitions (a
KV edit, the queue deleted and created again) within a couple of seconds."""
ROUTES_MAX_AGE_S = 2.0
"""A receive re-reads the routes (one GET_QUEUE) when they are older than this:
a stream's writer can change without this client seeing an error (a dead
host's stream handed back when it returns), and a receive asks only the hosts
it knows to write a stream."""


def _purged_partly(exc: ZmqueueError, name: str, p: int, origin: str,
                   done: list[tuple[int, str, int]]) -> ZmqueueError:
    """``exc``, the error of stream ``origin`` of partition ``p`` in a purge
    of queue ``name``, saying which streams were purged before it (``done``:
    partition, origin, messages removed): the purge stops there, and a
    caller who reads only the error must not believe nothing was removed."""
    purged = sum(n for _, _, n in done)
    streams = [f"{q}/{o}" for q, o, _ in done]
    return type(exc)(f"{exc.message} [purge of {name!r} stopped at partition {p} stream {origin}: "
                     f"{purged} message(s) were purged before it, from stream(s) {', '.join(streams)}; "
                     "the rest were not purged: purge again]",
                     **{**exc.details, "purged": purged, "purged_streams": streams})


def _incarnation(info: dict[str, Any]) -> int | None:
    """The queue incarnation a queue-info map names (``inc``; None from a host
    that names none)."""
    inc = info.get("inc")
    return inc if type(inc) is int and inc > 0 else None


Targets = Callable[[], list[str]]

_AT = re.compile(r"message (\d+):")


def _in_batch(exc: ZmqueueError, idxs: list[int], ids: list[str]) -> ZmqueueError:
    """The error of a ``send_batch`` request that carried the batch's messages
    at ``idxs``, as the caller should see it: the message it names ("message
    N:", N in the request) named by its place in the caller's batch
    (``details["index"]`` too), and ``details["ids"]``: one entry per message
    of the batch, its id if it was stored by a request answered before this
    one failed, else None (not stored, or not known to be: this request's
    own messages are stored only if the error says so, see ``stored``)."""
    details = {**exc.details, "ids": [i or None for i in ids]}
    message = exc.message
    at = _AT.match(message)
    if at is not None and int(at.group(1)) < len(idxs):
        index = idxs[int(at.group(1))]
        message = f"message {index}:{message[at.end():]}"
        details["index"] = index
    if len(idxs) < len(ids) and any(ids):
        stored = sum(1 for i in ids if i)
        message += f" ({stored} of the batch's messages, sent to other partitions, were stored: " \
                   "details['ids'])"
    return type(exc)(message, **details)


class Queue:
    def __init__(self, client: Client, info: dict[str, Any]) -> None:
        self.client = client
        self.config = QueueConfig.from_dict(info["config"])
        self.name = self.config.name
        self.routes = Routes(self.config.fifo)
        self.routes.apply(info)
        self._rr = itertools.count(random.randrange(1 << 16))
        self.incarnation: int | None = _incarnation(info)
        """The queue's incarnation as a host last named it (None: not known)."""
        self._leftovers = Leftovers(self.config.fifo)
        """Messages a receive took beyond ``max_messages``, handed out by the next ones."""
        self._lucky: tuple[int, str] | None = None
        """The (partition, endpoint) whose sweep answer last had messages: the
        next sweep asks it first, except every SHUFFLE_EVERY-th one."""
        self._sweeps = itertools.count(1)
        self._refreshed_at = 0.0
        self._config_at = time.monotonic()
        """When the config was last read (or a send last tried to re-read it)."""
        self._streams: dict[tuple[int, str, int, int | None], StreamRef] = {}
        """The StreamRef of each (partition, origin, epoch, incarnation) received from."""
        self._reader: tuple[ReceiptEncoder | None, tuple[int, str]] = (None, (0, ""))
        """The stream of the last receipt grouped: a receipt whose constant
        part matches it byte for byte needs only its CRC checked."""

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, fifo={self.config.fifo}, partitions={self.config.partitions})"

    # --- routing ---------------------------------------------------------------
    def refresh(self, force: bool = False) -> None:
        """Re-read the queue's routes: one quick GET_QUEUE to one known host,
        at most every REFRESH_MIN_S (unless ``force``), never long (it runs inside
        retry loops that have their own deadlines; during a Consul outage it just fails)."""
        now = time.monotonic()
        if now - self._refreshed_at < REFRESH_MIN_S and not force:
            return
        self._refreshed_at = now
        known = [ep for p in range(self.config.partitions) for ep in self.routes.all_endpoints(p)]
        if self._ask_any([*dict.fromkeys(known)], 3):
            return
        # none of the known hosts answered (restarted on new ports?): ask Consul
        self.client.check_open()
        with contextlib.suppress(ZmqueueError):
            fresh = [h.client_endpoint for h in self.client.hosts(refresh=True) if h.client_endpoint]
            self._ask_any([ep for ep in fresh if ep not in known][:3])

    def _ask_any(self, endpoints: list[str], most: int | None = None, changed_only: bool = False) -> bool:
        # hosts that just failed (a timeout: the host that died, in a failover)
        # last, so a refresh does not wait out REFRESH_TIMEOUT_MS on them first
        breakers = self.client.guards.breakers
        endpoints = sorted(endpoints, key=lambda ep: (b := breakers.get(ep)) is not None and b.failures > 0)
        endpoints = endpoints[:most]
        for ep in endpoints:
            self.client.check_open()  # (ClientClosed is not a host failing to answer)
            try:
                reply = self.client.connection(ep).request(Command.GET_QUEUE, {"name": self.name},
                                                           REFRESH_TIMEOUT_MS)
            except QueueNotFound:
                self._leftovers.clear()  # (messages of a deleted queue are gone)
                return True
            except ZmqueueError:
                continue
            if changed_only and not self._differs(reply["queue"]):
                return True
            self.routes.apply(reply["queue"])
            self._take_config(reply["queue"])
            return True
        return False

    def _differs(self, info: dict[str, Any]) -> bool:
        """Whether a queue-info map names another config or incarnation than this handle's."""
        try:
            return (QueueConfig.from_dict(info["config"]) != self.config
                    or _incarnation(info) not in (None, self.incarnation))
        except (ConfigError, KeyError, TypeError):
            return False

    def _take_config(self, info: dict[str, Any]) -> None:
        """The queue's config as a host reads it now: changed by another client or
        in Consul KV (more partitions, say), or the queue deleted and created
        again under its name, the handle follows it."""
        try:
            cfg = QueueConfig.from_dict(info["config"])
        except (ConfigError, KeyError, TypeError):
            return
        self.incarnation = _incarnation(info) or self.incarnation
        self._config_at = time.monotonic()
        if cfg != self.config:
            self.config = cfg

    def call(self, p: int, command: Command, body: dict[str, Any], targets: Targets,
             origin: str | None = None, extra_timeout_ms: int = 0,
             request_id: int | None = None) -> Any:
        """One request to the right host of partition ``p``, retried idempotently
        (at least ``retries`` times, and for at least the request timeout, so a
        writer failover of a few seconds is invisible to the caller); every
        try carries ``request_id`` (default: a new one). A SEND a host
        refuses with DISK_FULL (its disk below the reserve; nothing was stored)
        goes to the partition's next host that takes sends, if any (a standard
        queue's replicas each write a stream of their own; a FIFO queue has one
        writer), and the DiskFull is raised when every one refused."""
        rid = request_id
        last: ZmqueueError | None = None
        maybe_stored: ZmqueueError | None = None
        """The first SEND attempt whose messages may have been stored (see retry.reported)."""
        hint: str | None = None
        tried = 0
        full: set[str] = set()
        """Hosts that refused this SEND with DISK_FULL."""
        retry = RetryBudget(self.client.retries + 2, self.client.request_timeout_ms / 1000)
        while retry.again():
            eps = targets()
            if full:
                eps = [e for e in eps if e not in full]
                if not eps:
                    break  # every host that takes this partition's sends is short of disk
            if hint in full:
                hint = None  # (a NOT_LEADER may name a host that just refused for its disk)
            if hint:
                eps = [hint, *[e for e in eps if e != hint]]
            if not eps:
                last = Unavailable(f"partition {p} of {self.name!r} has no reachable host now")
                self.refresh()
                retry.pause()
                continue
            endpoint = eps[tried % len(eps)] if not hint else eps[0]
            hint = None
            conn = self.client.connection(endpoint)
            rid = rid or conn.next_request_id()
            try:
                return self.client.request(endpoint, command, body, rid, extra_timeout_ms)
            except NotLeader as exc:
                last = exc
                ep = self._follow(p, origin, exc)
                hint = ep if ep != endpoint else None
                tried += 1
                if hint is None:
                    self.refresh()
                    retry.pause()
                else:
                    retry.follow()  # (at once the first times; two hosts naming each other: back off)
            except DiskFull as exc:
                if command != Command.SEND:
                    raise
                last = exc
                full.add(endpoint)
            except Unavailable as exc:
                last = exc
                if command == Command.SEND and maybe_stored is None and may_be_stored(exc):
                    maybe_stored = exc
                tried += 1
                if command == Command.SEND and RETRY_MARK not in body:
                    body = {**body, RETRY_MARK: True}  # the next host may hold what this one stored
                self.refresh()
                retry.pause()
        assert last is not None
        raise reported(last, maybe_stored)

    def _follow(self, p: int, origin: str | None, exc: NotLeader) -> str | None:
        """Take a NOT_LEADER's hint: the writer it names for stream ``origin``
        of partition ``p`` goes into the routes (a refresh may read a host's
        cache that is a moment behind); returns its endpoint, if named."""
        node, ep = exc.details.get("leader"), exc.details.get("endpoint")
        ep = ep if isinstance(ep, str) else None
        if origin is not None:
            self.routes.note_writer(p, origin, node if isinstance(node, str) else None, ep)
        return ep

    # --- send ----------------------------------------------------------------------
    def follow_config(self) -> None:
        """Re-read the queue when its config is older than CONFIG_MAX_AGE_S
        (every send calls it: a clock read, and one GET_QUEUE every 2 s).
        Never long: at most FOLLOW_ASK known hosts are asked, hosts that just
        failed last, and never Consul (:meth:`refresh` asks Consul when no
        known host answers, which during a Consul outage cost a send its
        client's Consul timeout every 2 s). No answer: tried again 2 s later.
        The routes are taken only with a changed config or incarnation (a
        host's view of them in a Consul outage could send the next send to a
        replica whose stream cannot open)."""
        now = time.monotonic()
        if now - self._config_at > CONFIG_MAX_AGE_S:
            self._config_at = now
            known = [ep for p in range(self.config.partitions) for ep in self.routes.all_endpoints(p)]
            self._ask_any([*dict.fromkeys(known)], FOLLOW_ASK, changed_only=True)

    def misrouted(self, exc: ZmqueueError) -> bool:
        """Whether a SEND was refused for its partition, by a host whose
        partition count differs from this handle's (WrongPartition: a FIFO
        group sent to another partition than its own; a partition beyond the
        queue's): nothing was stored. The config is re-read (True: it was, and
        the messages' partitions are to be worked out again)."""
        if not (isinstance(exc, WrongPartition) or (isinstance(exc, InvalidParameter)
                                                     and exc.details.get("field") == "partition")):
            return False
        self.refresh(force=True)
        return True

    def partition_for(self, msg: OutgoingMessage) -> int:
        """The partition a message goes to: its group's (FIFO), else the next in turn."""
        return self.partition_of(msg.group_id)

    def partition_of(self, group_id: str | None) -> int:
        """The partition of a message of group ``group_id`` (FIFO), else the next in turn."""
        n = self.config.partitions
        if n > 1 and self.config.fifo and group_id:
            return group_partition(group_id, n)
        return self.next_partition()

    def next_partition(self) -> int:
        """The next partition in turn (a message without a group)."""
        n = self.config.partitions
        return 0 if n == 1 else next(self._rr) % n

    def send(self, body: bytes | str, attributes: dict[str, AttributeValue] | None = None,
             delay: int | None = None, group_id: str | None = None,
             dedup_id: str | None = None) -> str:
        """Send one message; returns its id (the original id for a FIFO duplicate)."""
        if (isinstance(body, bytes) and not attributes and delay is None and group_id is None
                and dedup_id is None):
            return self.send_batch([body])[0]  # a body alone: the plain batch path
        return self.send_batch([OutgoingMessage(body, attributes, delay, group_id, dedup_id)])[0]

    def send_batch(self, items: Iterable[bytes | str | OutgoingMessage]) -> list[str]:
        """Send up to 1000 messages in one request per partition; ids in order."""
        if isinstance(items, str | bytes | bytearray | memoryview):
            raise InvalidParameter("send_batch takes a list of messages (bodies or OutgoingMessage), "
                                   f"got one {type(items).__name__}; for one message use send()",
                                   field="items")
        items = list(items)
        if not 1 <= len(items) <= MAX_BATCH:
            raise InvalidParameter(f"send_batch takes 1 to {MAX_BATCH} messages, got {len(items)}")
        self.follow_config()
        if self.config.partitions == 1 and set(map(type, items)) == _BYTES_ONLY:  # the plain fast path
            if self.client.plain_sends and not self.config.fifo:
                try:
                    return self._ids(self.call(0, Command.SEND, {"q": self.name, "p": 0, "b": items},
                                               partial(self.routes.for_send, 0)), len(items))
                except InvalidParameter as exc:
                    if not refused_plain_bodies(exc):
                        raise
                    self.client.plain_sends = False  # an older host: m lists (nothing was stored)
            wire = [[b, None, None, None, None] for b in items]
            origin = FIFO_ORIGIN if self.config.fifo else None
            reply = self.call(0, Command.SEND, {"q": self.name, "p": 0, "m": wire},
                              partial(self.routes.for_send, 0), origin)
            return self._ids(reply, len(items))
        msgs = [i if isinstance(i, OutgoingMessage) else OutgoingMessage(i) for i in items]
        # every message checked before any request is sent (what the host checks
        # against the queue's config too: a FIFO group, the body's size, the delay)
        wires = batch_wire(msgs, self.config.fifo, self.config.max_message_bytes)
        ids: list[str] = [""] * len(msgs)
        todo = list(range(len(msgs)))
        retry = RetryBudget(self.client.retries + 2, self.client.request_timeout_ms / 1000)
        while todo:
            by_part: dict[int, list[int]] = {}
            for i in todo:
                by_part.setdefault(self.partition_for(msgs[i]), []).append(i)
            todo = []
            for p, idxs in by_part.items():
                body = {"q": self.name, "p": p, "m": [wires[i] for i in idxs]}
                origin = FIFO_ORIGIN if self.config.fifo else None
                try:
                    reply = self.call(p, Command.SEND, body, partial(self.routes.for_send, p), origin)
                except (WrongPartition, InvalidParameter) as exc:
                    # (hosts may disagree for a moment while partitions are added)
                    if not (retry.again() and self.misrouted(exc)):
                        raise _in_batch(exc, idxs, ids) from exc
                    todo += idxs  # nothing of it was stored: to its partition by the config re-read
                    continue
                except ZmqueueError as exc:
                    raise _in_batch(exc, idxs, ids) from exc
                for i, mid in zip(idxs, self._ids(reply, len(idxs)), strict=True):
                    ids[i] = mid
            if todo and retry.attempt > 1:
                retry.pause()
            todo.sort()  # (in the batch's order: a group's messages stay in order)
        return ids

    @staticmethod
    def _ids(reply: Any, n: int) -> list[str]:
        ids = sent_ids(reply)
        if ids is None or len(ids) != n:
            raise ProtocolError(f"a SEND of {n} messages was answered with "
                                f"{'no' if ids is None else len(ids)} ids")
        return ids

    def pipeline(self, window: int = DEFAULT_WINDOW,
                 on_done: Callable[[PendingSend], None] | None = None,
                 max_requests: int | None = None) -> SendPipeline:
        """Pipelined sends: ``pipe.send(body)`` returns at once while fewer than
        ``window`` sends are unanswered (see :mod:`zmqueue.client.pipeline`).
        At most ``max_requests`` SEND requests are in flight (default: the
        queue's partitions; FIFO queues: 1, the only value allowed); messages
        sent meanwhile go together in the next one (each still confirmed with
        its own id), and ``flush`` sends those still waiting at once. ``with
        queue.pipeline() as pipe:`` waits for all at the end and raises the
        first failure."""
        return SendPipeline(self, window, on_done, max_requests)

    # --- receive -------------------------------------------------------------------
    def receive(self, max_messages: int = 1, wait_time: float = 0,
                visibility_timeout: int | None = None) -> list[Message]:
        """Up to ``max_messages`` (1-1000) messages. With ``wait_time`` (0-20 s)
        a long poll: returns as soon as a message is available anywhere in the
        queue, or empty after the wait. Hosts that fail are skipped while
        others answer; when none answered at all (every try, retried for the
        request timeout, failed), the last failure is raised (an Unavailable:
        RequestTimeout, CircuitOpen, ...), never ``[]``: empty means empty."""
        receiving.check_receive(max_messages, wait_time)
        return receiving.receive(self, max_messages, wait_time, visibility_timeout)

    def delete_and_receive(self, receipts: Iterable[Deletable], max_messages: int = 1, wait_time: float = 0,
                           visibility_timeout: int | None = None
                           ) -> tuple[list[ZmqueueError | None], list[Message]]:
        """Delete ``receipts`` (as :meth:`delete_batch`), then receive (as
        :meth:`receive`): a consumer loop's two steps, in one round trip when
        the host that writes the receipts' stream is the one asked first (the
        usual case: the messages came from there). Returns one outcome per
        receipt (None = deleted) and the messages. The deletes are confirmed
        (committed and, with synchronous replication, replicated) before the
        messages are returned; receipts of other streams, and deletes a host
        could not take with the receive, go as separate DELETE requests.
        ``receipts`` may hold the received Messages themselves (the quickest:
        their receipts need not be built, sent or parsed)."""
        return receiving.delete_and_receive(self, receipts, max_messages, wait_time, visibility_timeout)

    def receive_pipeline(self, max_messages: int = 10, wait_time: float = 1.0,
                         visibility_timeout: int | None = None, in_flight: int = 2,
                         on_deleted: OnDeleted | None = None) -> ReceivePipeline:
        """A consumer loop's receives with ``in_flight`` requests in flight (the
        next batch is taken while the caller handles this one) and the deletes
        riding on them; ``on_deleted(items, outcomes)`` hears each delete's
        outcome once known. See :mod:`zmqueue.client.receiver`."""
        from zmqueue.client.receiver import ReceivePipeline

        return ReceivePipeline(self, max_messages, wait_time, visibility_timeout, in_flight, on_deleted)

    def _until_known(self, find: Callable[[], list[T]], unavailable: str) -> list[T]:
        """What ``find`` returns, once it is not empty: while it is (routes
        read mid-election, a host restarting, Consul recovering) the routes
        are re-read with back-off, for as long as ``call`` retries a request;
        then Unavailable with the message ``unavailable``."""
        if found := find():  # the usual case: no budget built on the receive path
            return found
        retry = RetryBudget(0, self.client.request_timeout_ms / 1000)
        while not (found := find()):
            self.client.check_open()
            if not retry.again():
                raise Unavailable(unavailable, queue=self.name)
            if retry.attempt:
                retry.pause()
            self.refresh()
        return found

    def _give_back_kept(self) -> None:
        """Give back the messages this handle keeps (a merged long poll's
        extras, not handed out yet): visible at once, their receive counts as
        before; best effort (the client's :meth:`~Client.close` does it)."""
        self._leftovers.prune(time.monotonic(), self.incarnation)
        kept = self._leftovers.messages()
        self._leftovers.clear()
        receiving.give_back(self, kept)

    def messages_of(self, p: int, reply: dict[str, Any]) -> list[Message]:
        """The messages of a RECEIVE reply or a DELIVER push: lists (``m``),
        then column groups (``ms``, from a host that reads ``cols``)."""
        return receiving.messages_of(self, p, reply)

    # --- delete / visibility ---------------------------------------------------------
    def delete(self, receipt: Deletable) -> None:
        """Delete a received message (by receipt, or the Message); InvalidReceipt
        if the receipt is stale."""
        err = self.delete_batch([receipt])[0]
        if err is not None:
            raise err

    def delete_batch(self, receipts: Iterable[Deletable]) -> list[ZmqueueError | None]:
        """Delete up to 1000 messages, by receipt or received Message; returns
        one outcome per item (None = deleted)."""
        return batch(self, Command.DELETE, deletables(receipts, "delete_batch"), None)

    def change_visibility(self, receipt: Deletable, timeout: int) -> None:
        """Make a received message visible after ``timeout`` seconds from now (0 = now)."""
        err = self.change_visibility_batch([receipt], timeout)[0]
        if err is not None:
            raise err

    def change_visibility_batch(self, receipts: Iterable[Deletable], timeout: int | Sequence[int]
                                ) -> list[ZmqueueError | None]:
        """:meth:`change_visibility` for up to 1000 messages at once, as SQS's
        ChangeMessageVisibilityBatch: ``timeout`` for all of them, or one per
        receipt. One request per (partition, stream); one outcome per receipt,
        in order (None = changed), as :meth:`delete_batch`."""
        items = deletables(receipts, "change_visibility_batch")
        timeouts: list[Any] = (list(timeout) if isinstance(timeout, Sequence) and not isinstance(
            timeout, str | bytes) else [timeout] * len(items))  # (each checked below)
        if len(timeouts) != len(items):
            raise InvalidParameter(f"{len(timeouts)} timeouts for {len(items)} receipts: give one "
                                   "timeout, or one per receipt", field="visibility_timeout")
        for t in timeouts:
            if type(t) is not int or not 0 <= t <= MAX_VISIBILITY_S:
                raise InvalidParameter(f"visibility timeout must be 0-{MAX_VISIBILITY_S} seconds, "
                                       f"got {t!r}", field="visibility_timeout")
        return batch(self, Command.CHANGE_VISIBILITY, items, timeouts)

    def by_stream(self, receipts: Sequence[Deletable]) -> dict[tuple[int, str], list[int]]:
        """Receipt indexes by stream (partition, origin); checks count and queue
        (used by the delete calls)."""
        return by_stream(self, receipts)

    # --- whole queue -----------------------------------------------------------------
    def set_attributes(self, **settings: Any) -> QueueConfig:
        """Change settings of the queue, as SQS's SetQueueAttributes: any of
        ``visibility_timeout``, ``retention``, ``delay`` (seconds),
        ``max_message_bytes``, ``dead_letter_queue`` (created if missing; None
        to detach), ``max_receive_count``, ``content_based_dedup``, ``fsync``,
        ``max_messages``, and the rate limits. The queue's type and encryption
        never change, partitions and replication only by a KV edit
        (ConfigError). Returns the
        new config; every host applies it within a second or two. A
        concurrent edit (another client, the Consul UI) is not overwritten:
        this change is applied on top of it."""
        unknown = sorted(set(settings) - set(MUTABLE_SETTINGS))
        if unknown:
            raise ConfigError(f"cannot set {unknown}; settable: {sorted(MUTABLE_SETTINGS)}",
                              field=unknown[0])
        changes = {MUTABLE_SETTINGS[k]: v for k, v in settings.items()}
        self.config.updated(changes)  # a bad value fails here, before any request
        try:
            info = self.client.any_host(Command.SET_QUEUE_ATTRIBUTES, {"name": self.name, "changes": changes})
        finally:
            self.client.changed(self.name)
        self.config = QueueConfig.from_dict(info["queue"]["config"])
        self.incarnation = _incarnation(info["queue"]) or self.incarnation
        self.routes.apply(info["queue"])
        return self.config

    def _serving(self, p: int) -> list[str]:
        """The hosts that write partition ``p``'s streams (else its replicas);
        never an empty answer (Unavailable once waiting for one timed out)."""
        return self._until_known(lambda: self.routes.for_receive(p) or self.routes.all_endpoints(p),
                                 f"partition {p} of {self.name!r} has no reachable host now; "
                                 "retry once its hosts are up (zmqueue status)")

    def _fresh_routes(self, max_age_s: float = ROUTES_MAX_AGE_S) -> None:
        """Re-read the routes if older than ``max_age_s`` (0: now): a handle's routes
        are what it last saw (at creation, often before every replica's stream had
        its writer), and a stream a purge or stats misses is a stream skipped."""
        if max_age_s <= 0:
            self.refresh(force=True)
        elif time.monotonic() - self._refreshed_at > max_age_s:
            self.refresh()

    def _streams_of(self, p: int) -> list[str]:
        """The origins of partition ``p``'s streams: a FIFO partition's one, a
        standard partition's every replica's and every other one a writer
        is known for (a former replica's, still holding messages). Never an
        empty answer (Unavailable once waiting for one timed out)."""
        if self.config.fifo:
            return [FIFO_ORIGIN]

        def known() -> list[str]:
            r = self.routes.part(p)
            return sorted(set(r.writers) | set(r.replicas))

        return self._until_known(known, f"partition {p} of {self.name!r} has no known replica now; "
                                        "retry once its hosts are up (zmqueue status)")

    def _each_stream(self, p: int, command: Command, body: dict[str, Any]) -> list[Any]:
        """``command`` to the writer of each of partition ``p``'s streams, one
        stream a request (``o``): each is retried, and followed through a
        writer failover, on its own (a request made per host went on asking
        a host that had died, and failed the call after its retries)."""
        return [self.call(p, command, {**body, "o": origin}, partial(self.routes.for_stream, p, origin),
                          origin) for origin in self._streams_of(p)]

    def purge(self) -> int:
        """Delete every message of the queue; returns how many were removed.
        A stream that cannot be purged (no writer within the retries) raises
        its error, which says which streams were purged before it (``details``:
        ``purged``, the messages removed, and ``purged_streams``)."""
        self._fresh_routes(0)  # every stream's writer, as the hosts know them now
        done: list[tuple[int, str, int]] = []
        for p in range(self.config.partitions):
            for origin in self._streams_of(p):
                try:
                    reply = self.call(p, Command.PURGE_QUEUE, {"q": self.name, "p": p, "o": origin},
                                      partial(self.routes.for_stream, p, origin), origin)
                except ZmqueueError as exc:
                    if not done:
                        raise
                    raise _purged_partly(exc, self.name, p, origin, done) from exc
                done.append((p, origin, reply["purged"]))
        return sum(n for _, _, n in done)

    def stats(self) -> dict[str, int]:
        """Counters summed over partitions: visible, in_flight, delayed, total, ...
        (each stream counted by the host that writes it; ``waiters``, the long
        polls parked, once per host)."""
        self._fresh_routes()
        total: dict[str, int] = {}
        for p in range(self.config.partitions):
            waiters: dict[Any, int] = {}
            for reply in self._each_stream(p, Command.QUEUE_STATS, {"q": self.name, "p": p, "own": True}):
                waiters[reply.get("node", len(waiters))] = reply.get("waiters", 0)
                for k, v in reply.items():
                    if isinstance(v, int) and k != "waiters":
                        total[k] = max(total.get(k, 0), v) if k == "oldest_age_ms" else total.get(k, 0) + v
            total["waiters"] = total.get("waiters", 0) + sum(waiters.values())
        return total

    def subscribe(self, handler: Callable[[Message], None], prefetch: int = 10,
                  visibility_timeout: int | None = None, auto_delete: bool = True) -> Subscription:
        """Have hosts push messages to ``handler`` (on a background thread),
        never more than ``prefetch`` unfinished per serving host. With
        ``auto_delete`` a message is deleted when the handler returns; if it
        raises, the message becomes visible again after its visibility timeout
        (on a FIFO queue, with the later messages of its group that were pushed
        with it: they are not handed to the handler, and come back behind it)."""
        from zmqueue.client.subscription import Subscription, is_async

        if not callable(handler):
            raise InvalidParameter(f"subscribe takes a handler to call with each message, got "
                                   f"{handler!r:.60}", field="handler")
        if is_async(handler):
            raise InvalidParameter("the handler is a coroutine function: Queue.subscribe calls it on a "
                                   "thread and cannot await it; pass a plain function, or subscribe "
                                   "with zmqueue.aio (AsyncQueue.subscribe runs it on your event loop)",
                                   field="handler")
        self.client.check_open()
        if self.client.closing:
            raise ClientClosed(CLOSED)
        sub = Subscription(self, handler, prefetch, visibility_timeout, auto_delete).start()
        self.client.track(sub)
        return sub

    def redrive(self, to: str | None = None, max_messages: int | None = None,
                visibility_timeout: int = 60, wait_time: float = 1.0, force: bool = False) -> RedriveReport:
        """This queue being a dead-letter queue: move its messages back to the
        queues they came from (or all to ``to``), batch by batch, each sent
        there before it is deleted here; see :mod:`zmqueue.client.redrive`.
        InvalidParameter unless some queue names this one as its
        ``dead_letter_queue``; ``force=True`` (with ``to`` only) moves every
        message of any queue to ``to``."""
        from zmqueue.client.redrive import redrive

        return redrive(self, to, max_messages, visibility_timeout, wait_time, force)
